"""The PR diff shows every change: a changed secret input is said, counted and explained, never
printed; and `diff --base REV` ends cleanly whatever the tree at REV holds.

The secret inputs are walked from `SECRET_CAPABLE` (every key that may be a secret), each changed
as a user would (a new ciphertext from `pulumi config set --secret`), and diffed offline.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from gpu_stack.config import SECRET_CAPABLE
from gpu_stack.config.stack_files import SECRET_PLACEHOLDER_PREFIX, read_stack
from gpu_stack.offline import diff
from gpu_stack.offline.runner import run_program

from ..config.test_hostile_input import CANARY_CIPHERTEXT, cli, project, stack_yaml
from ..helpers import committed_project_copy, dev_config, git, set_path

KUBECONFIG_PATH = "/home/ci/.kube/config"
# What each secret-capable key reaches: (resource name, input path) of one of them.
REACHES = {
    "kubernetes.context": ("k8s", "context"),
    "kubernetes.kubeconfig": ("k8s", "kubeconfig"),
    "ssh.user": ("node-prep-gpu-dev-1", "connection.user"),
    "ssh.port": ("node-prep-gpu-dev-1", "connection.port"),
    "ssh.privateKey": ("node-prep-gpu-dev-1", "connection.privateKey"),
    "nodes[*].address": ("node-prep-gpu-dev-1", "connection.host"),
    "nodes[*].user": ("node-prep-gpu-dev-1", "connection.user"),
    "nodes[*].port": ("node-prep-gpu-dev-1", "connection.port"),
    "nodes[*].hostKey": ("node-prep-gpu-dev-1", "connection.hostKey"),
    "operator.repositoryCredentials.username": ("gpu-operator-release", "repositoryOpts.username"),
    "operator.repositoryCredentials.password": ("gpu-operator-release", "repositoryOpts.password"),
    "images.registryCredentials.username": ("MIRROR_PULL_SECRET", "stringData..dockerconfigjson"),
    "images.registryCredentials.password": ("MIRROR_PULL_SECRET", "stringData..dockerconfigjson"),
}
BASE_FOR = {
    "operator.repositoryCredentials": ("operator.repository", "https://charts.example.internal/nvidia"),
    "images.registryCredentials": ("images.mirror", "registry.example.internal/gpu"),
}
"""What a secret-capable key needs beside it to be taken (a login needs what it logs in to)."""
NOT_AN_INPUT = {"kubernetes.version"}
"""Secret keys that are no resource's input (the schema version the manifests are checked against)."""


def test_every_secret_capable_key_is_walked():
    assert set(SECRET_CAPABLE) == set(REACHES) | NOT_AN_INPUT


def _stack_with_secret(tmp: Path, shape: str, ciphertext: str) -> Path:
    cfg = set_path(dev_config(), "kubernetes.kubeconfig", KUBECONFIG_PATH)
    secure = {shape.replace("[*]", "[0]"): None}
    parent, _, _leaf = shape.rpartition(".")
    if parent in BASE_FOR:
        cfg = set_path(cfg, *BASE_FOR[parent])
        secure.update({f"{parent}.{part}": None for part in ("username", "password")})
    text = stack_yaml(cfg, secure=secure)
    text = text.replace(f"{CANARY_CIPHERTEXT}-{shape.replace('[*]', '[0]')}", ciphertext)
    return project(tmp, text)


def _plan(root: Path):
    return run_program(read_stack(root, "t"), root)


def _provider_name(plan) -> str:
    return next(r.name for r in plan.resources if r.type == "pulumi:providers:kubernetes")


@pytest.mark.parametrize("shape", sorted(REACHES))
def test_a_changed_secret_input_is_said_counted_and_explained_without_its_value(tmp_path, shape):
    old = _plan(_stack_with_secret(tmp_path / "a", shape, "v1:first-ciphertext-AAAA"))
    new = _plan(_stack_with_secret(tmp_path / "b", shape, "v1:second-ciphertext-BBBB"))
    result = diff.diff_plans(old, new)
    name, path = REACHES[shape]
    name = _provider_name(new) if name == "k8s" else name
    if name == "MIRROR_PULL_SECRET":
        name = next(r.name for r in new.resources if r.type == "kubernetes:core/v1:Secret")
    change = next((c for c in result.changes if c.name == name), None)
    assert change is not None and path in change.secret_paths, (shape, [(c.name, c.paths) for c in result.changes])
    for fmt in ("text", "markdown"):
        text = diff.render(result, fmt)
        assert re.search(r"; \d+ secret inputs? changed \(values not shown\)", text.splitlines()[1 if fmt == "text" else 2])
        assert re.search(rf"secret {re.escape(path)} of {re.escape(name)}.* changed: ", text), text[:2000]
        assert "first-ciphertext" not in text and "second-ciphertext" not in text and SECRET_PLACEHOLDER_PREFIX not in text
    if change.type == "command:remote:Command" and path in ("connection.host", "connection.port", "connection.user"):
        # Another host (issue 31): the command is replaced, so the node is prepared there.
        assert change in result.node_commands and not change.updates_without_rerun
        assert "(its host changed: it is prepared on the new host)" in diff.render(result, "text")
    elif change.type == "command:remote:Command" and path == "connection.hostKey":
        # Another host key (audit 5, F6): a rebuilt host, prepared again; said without the key.
        assert change in result.node_commands and not change.updates_without_rerun
        text = diff.render(result, "text")
        assert "(its pinned host key changed (a rebuilt host, or a key pinned or unpinned): it is prepared again)" in text
        assert "node preparation runs again (a new host key usually means a rebuilt host)" in text
    elif change.type == "command:remote:Command":
        # The same host, another key: updated in place, nothing is prepared again (issue 23).
        assert change.updates_without_rerun and change not in result.node_commands
        assert (
            f"node command updated without a re-run on gpu-dev-1: node-prep-gpu-dev-1 (its connection changed: {path}"
            in diff.render(result, "text")
        )


@pytest.mark.parametrize("shape", sorted(REACHES))
def test_an_unchanged_secret_input_shows_no_change(tmp_path, shape):
    old = _plan(_stack_with_secret(tmp_path / "a", shape, "v1:same-ciphertext"))
    new = _plan(_stack_with_secret(tmp_path / "b", shape, "v1:same-ciphertext"))
    assert diff.diff_plans(old, new).changes == []


def test_a_plain_address_change_is_never_shown_as_replicas_only():
    from ..helpers import plan_of

    old = plan_of(dev_config())
    cfg = set_path(set_path(dev_config(), "nodes[0].address", "10.99.0.1"), "sharing.replicas", 8)
    text = diff.render(diff.diff_plans(old, plan_of(cfg)), "text")
    assert (
        "secret connection.host of node-prep-gpu-dev-1 on node gpu-dev-1 changed: the SSH session (as root) goes to "
        "another host; node preparation runs on the new host (nothing runs on the old one)"
    ) in text
    # Issue 31: the node is prepared on its new host; the reviewer is told so, per node.
    assert "node command re-runs on gpu-dev-1: node-prep-gpu-dev-1 (its host changed: it is prepared on the new host)" in text
    assert "secret connection.host of node-prep-gpu-dev-1-script changed" in text


def test_a_base_plan_without_fingerprints_says_its_secrets_were_not_compared():
    from ..helpers import plan_of

    old = plan_of(dev_config()).to_json()
    for r in old["resources"]:
        r.pop("secrets", None)
    text = diff.render(diff.diff_plans(old, plan_of(dev_config())), "text")
    assert "Secret inputs not compared for 4 resources" in text  # each node's command and script copy


# =========================================================================== diff --base, whatever the tree holds
def _link(target: str):
    def apply(repo: Path) -> None:
        (repo / "Pulumi.dev.yaml").unlink()
        os.symlink(target, repo / "Pulumi.dev.yaml")

    return apply


def _remove(*names: str):
    def apply(repo: Path) -> None:
        for name in names:
            git(repo, "rm", "-rq", name)

    return apply


def _write(name: str, text: str):
    def apply(repo: Path) -> None:
        (repo / name).write_text(text)

    return apply


def _submodule(repo: Path) -> None:
    (repo / "Pulumi.dev.yaml").unlink()
    git(repo, "rm", "-q", "--cached", "Pulumi.dev.yaml")
    head = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "update-index", "--add", "--cacheinfo", f"160000,{head},Pulumi.dev.yaml")


BASE_TREES = {
    "stack-file-is-a-submodule": _submodule,
    "stack-file-links-to-etc-passwd": _link("/etc/passwd"),
    "stack-file-links-outside": _link("../../outside.yaml"),
    "stack-file-links-to-a-device": _link("/dev/zero"),
    "stack-file-links-to-itself": _link("Pulumi.dev.yaml"),
    "stack-file-links-to-a-folder": _link("gpu_stack"),
    "no-stack-file": _remove("Pulumi.dev.yaml"),
    "no-project-file": _remove("Pulumi.yaml"),
    "no-program": _remove("gpu_stack"),
    "stack-file-not-yaml": _write("Pulumi.dev.yaml", "config: [unclosed\n"),
    "stack-file-bad-config": _write("Pulumi.dev.yaml", yaml.safe_dump({"config": {"gpu-stack:sharing": {"replicas": "yes"}}})),
    "plan-prints-garbage": _write("gpu_stack/__main__.py", "print('{\"resources\": [{\"nope\": 1}]}')\n"),
}


@pytest.mark.slow
@pytest.mark.parametrize("tree", list(BASE_TREES))
def test_diff_base_never_ends_in_a_traceback_whatever_the_tree_at_rev_holds(tmp_path, tree):
    repo = committed_project_copy(tmp_path)
    git(repo, "checkout", "-q", "-b", "odd")
    BASE_TREES[tree](repo)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", tree)
    odd = git(repo, "rev-parse", "HEAD").strip()
    git(repo, "checkout", "-q", "main")
    proc = cli(repo, "diff", "--stack", "dev", "--base", odd)
    assert proc.returncode in (0, 2), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    if proc.returncode == 2:
        assert proc.stderr.startswith("error: ") and proc.stdout == ""
    assert not (tmp_path / "outside.yaml").exists()


# =========================================================================== bounded at scale
def test_a_large_diff_leads_with_its_summary_and_keeps_every_line_readable():
    import sys

    from gpu_stack.offline.diff.blocks import LINE_LIMIT
    from gpu_stack.offline.runner import PROJECT_DIR

    from ..helpers import plan_of

    sys.path.insert(0, str(PROJECT_DIR / "bench"))
    from diff_scaling import head_config  # the bench's large pull request
    from plan_scaling import synthetic_config

    from gpu_stack.offline.effects import add_objects_and_effects

    def key(name: str) -> dict:
        return {"ssh": {"user": "ubuntu", "port": 22, "privateKey": f"-----BEGIN OPENSSH PRIVATE KEY-----\n{name}\n-----END OPENSSH PRIVATE KEY-----\n"}}

    base_cfg, head_cfg = synthetic_config(300), head_config(300)
    for cfg in (base_cfg, head_cfg):
        cfg.pop("ssh")
    base, head = plan_of(base_cfg, secrets=key("KEY-A")), plan_of(head_cfg, secrets=key("KEY-B"))
    result = diff.diff_plans(base, head)
    add_objects_and_effects(result, base, head, Path("/nonexistent"))
    for fmt in ("text", "markdown"):
        lines = diff.render(result, fmt).splitlines()
        assert max(len(line) for line in lines) <= LINE_LIMIT
        head = "\n".join(lines[:8])
        assert "to create" in head and "secret inputs changed (values not shown)" in head
    text = diff.render(result, "text")
    assert "and 292 more" in text  # the device plugin rolls on 300 nodes: 8 named, the rest counted
    assert re.search(r"secret connection.privateKey changed in 299 resources \(node-prep-gpu-00000, .* and 291 more\)", text)  # rotated key
    assert re.search(r"node commands updated without a re-run on \d+ nodes \(its connection changed: connection.privateKey; it runs its update command\)", text)
    assert '"gpu-[00299]"' in text and '"gpu-[new-1]"' in text  # a long alert expression: where it changed


def test_a_long_one_line_value_is_shown_where_it_changed():
    from gpu_stack.offline.diff.blocks import long_value_lines

    old = " or ".join(f'label_replace(vector({i}), "Hostname", "gpu-{i:05d}")' for i in range(2000))
    new = old.replace('"gpu-01234"', '"gpu-99999"')
    lines = long_value_lines(old, new)
    assert len(lines) == 2 and all(len(line) < 200 for line in lines)
    assert "[01234]" in lines[0] and "[99999]" in lines[1]
