"""The offline diff: what a reviewer sees for a change, with the providers' replace-vs-update rules."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_stack.config.stack_files import SECRET_PLACEHOLDER_PREFIX, list_stacks
from gpu_stack.offline.diff import (
    COMMAND,
    CONFIGMAP,
    CREATE,
    DELETE,
    JOB,
    RELEASE,
    REPLACE,
    UPDATE,
    DiffError,
    diff_plans,
    render_markdown,
    render_text,
)
from gpu_stack.offline.runner import PROJECT_DIR

from ..helpers import committed_project_copy, dev_config, git, plan_of, plan_stack_file, set_path

SHARING_CM = "gpu-operator-sharing-config"
RELEASE_NAME = "gpu-operator-release"
# What a secret may never look like in any output: the offline stand-in and the stack file's ciphertext.
SECRET_MARKS = (SECRET_PLACEHOLDER_PREFIX, "v1:placeholder-replace-with")


def _no_secret(text: str) -> None:
    for mark in SECRET_MARKS:
        assert mark not in text


def _cli(*args: str, cwd: Path = PROJECT_DIR) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG")}
    env["PYTHONPATH"] = str(PROJECT_DIR)
    return subprocess.run(
        [sys.executable, "-m", "gpu_stack", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


# --------------------------------------------------------------------------- the replicas edit
@pytest.fixture(scope="module")
def replicas_diff():
    before = plan_of(dev_config())
    after = plan_of(set_path(dev_config(), "sharing.replicas", 8))
    return before, after, diff_plans(before, after, "main", "working tree")


def test_replicas_edit_replaces_the_sharing_configmap(replicas_diff):
    _, _, diff = replicas_diff
    cm = diff.get(CONFIGMAP, SHARING_CM)
    assert cm is not None and cm.action == REPLACE
    assert "metadata.name changed" in cm.reasons
    assert sorted(cm.paths) == ["data.default", "metadata.name"]
    old_name = cm.old["metadata"]["name"]
    new_name = cm.new["metadata"]["name"]
    assert old_name != new_name and new_name.startswith("device-plugin-sharing-")


def test_replicas_edit_changes_release_values_only_in_device_plugin_config(replicas_diff):
    _, after, diff = replicas_diff
    release = diff.get(RELEASE, RELEASE_NAME)
    assert release is not None and release.action == UPDATE and release.reasons == []
    assert release.paths == ["values.devicePlugin.config.name"]
    (field,) = release.fields
    assert field.new == after.by_name(SHARING_CM).inputs["metadata"]["name"]


def _in_validation_suite(plan, name: str | None) -> bool:
    types = {r.name: r.type for r in plan.resources}
    parents = {r.name: r.parent for r in plan.resources}
    while name is not None:
        if types.get(name) == "gpu-stack:index:ValidationSuite":
            return True
        name = parents.get(name)
    return False


def test_replicas_edit_touches_nothing_else_and_reruns_no_node_command(replicas_diff):
    before, after, diff = replicas_diff
    jobs = [r for r in before.resources if r.type == JOB]
    expected = {(CONFIGMAP, SHARING_CM, REPLACE), (RELEASE, RELEASE_NAME, UPDATE)}
    seen = {(c.type, c.name, c.action) for c in diff.changes}
    others = seen - expected
    assert expected <= seen
    # What validates sharing (when the stack has validation Jobs) is the only other change: replaced, so it re-runs.
    assert all(a == REPLACE and _in_validation_suite(after, n) for _, n, a in others), others
    if jobs:
        assert any(t == JOB and "sharing" in n for t, n, _ in others), "the sharing validation Job must re-run"
    else:
        assert others == set()
    assert diff.node_commands == []
    assert not any(c.type == COMMAND for c in diff.changes)
    assert diff.summary() == f"0 to create, 1 to update, {1 + len(others)} to replace, 0 to delete"


def test_replicas_edit_text_shows_the_line_that_changed(replicas_diff):
    _, _, diff = replicas_diff
    text = render_text(diff)
    lines = text.splitlines()
    assert lines[1] == diff.summary()
    assert "Node commands that re-run: none" in lines
    assert f"+- replace {CONFIGMAP} {SHARING_CM} (metadata.name changed; data of an immutable ConfigMap changed)" in lines
    assert f"~ update {RELEASE} {RELEASE_NAME}" in lines
    # A line diff of the device-plugin file, not two opaque strings.
    assert "        -      replicas: 4" in lines
    assert "        +      replicas: 8" in lines
    assert "    data.default:" in lines
    # The Helm values as a YAML diff under their own key.
    assert "    values.devicePlugin (Helm values):" in lines
    assert any(line.startswith("        -    name: device-plugin-sharing-") for line in lines)
    assert any(line.startswith("        +    name: device-plugin-sharing-") for line in lines)
    # Capacity: each L4 time-sliced 8 ways instead of 4.
    assert any(line.strip().startswith("+  gpu-dev-1") and line.rstrip().endswith("nvidia.com/gpu=16") for line in lines)
    _no_secret(text)


def test_replicas_edit_markdown_is_one_collapsible_section_per_resource(replicas_diff):
    _, _, diff = replicas_diff
    md = render_markdown(diff)
    assert f"**{diff.summary()}**" in md
    assert md.count("<details>") == len(diff.changes) == md.count("<summary>") - 1  # + the capacity section
    assert md.count("</details>") == len(diff.changes) + 1
    assert (
        f"<summary>+- <b>replace</b> <code>{CONFIGMAP}</code> <b>{SHARING_CM}</b> — "
        "metadata.name changed; data of an immutable ConfigMap changed</summary>"
    ) in md
    assert f"<summary>~ <b>update</b> <code>{RELEASE}</code> <b>{RELEASE_NAME}</b></summary>" in md
    lines = md.splitlines()
    assert "-      replicas: 4" in lines and "+      replicas: 8" in lines
    assert "```diff" in lines
    assert "Node commands that re-run: none" in lines
    _no_secret(md)


# --------------------------------------------------------------------------- environments
@pytest.fixture(scope="module")
def stacks():
    return {s: plan_stack_file(s) for s in ("dev", "staging", "prod")}


def test_every_environment_plans(stacks):
    assert {"dev", "staging", "prod"} <= set(list_stacks(PROJECT_DIR))
    for name, plan in stacks.items():
        assert plan.of_type(RELEASE), name


def test_environments_differ_the_way_real_ones_do(stacks):
    values = {s: p.by_name(RELEASE_NAME).inputs["values"] for s, p in stacks.items()}
    assert values["dev"]["mig"]["strategy"] == "none"
    assert values["prod"]["mig"]["strategy"] == "mixed"
    # prod: host driver from the node image, operator toolkit; staging: the operator installs both.
    assert values["prod"]["driver"]["enabled"] is False and values["prod"]["toolkit"]["enabled"] is True
    assert values["staging"]["driver"]["enabled"] is True and values["staging"]["toolkit"]["enabled"] is True
    # Shared once in Pulumi.yaml: every stack gets the ServiceMonitor for the cluster's Prometheus.
    for s in stacks:
        sm = values[s]["dcgmExporter"]["serviceMonitor"]
        assert sm["enabled"] is True and sm["additionalLabels"] == {"release": "kube-prometheus-stack"}, s
    prod = stacks["prod"]
    assert prod.by_name(RELEASE_NAME).options["protect"] is True
    assert prod.by_name("gpu-operator-namespace").options["protect"] is True
    assert prod.by_name(RELEASE_NAME).inputs["timeout"] > stacks["dev"].by_name(RELEASE_NAME).inputs["timeout"]
    # prod's MIG configs are set by the rollout Job (after a drain): no NodePatch carries them.
    assert not prod.of_type("kubernetes:core/v1:NodePatch")
    mig_labels = {
        line.split()[0]: line.split()[2]
        for line in prod.by_name("mig-rollout-nodes").inputs["data"]["nodes"].splitlines()
    }
    assert mig_labels == {
        "gpu-prod-h200-1": "inference-balanced",
        "gpu-prod-h200-2": "inference-balanced",
        "gpu-prod-h200-3": "all-disabled",
    }
    assert all(row["gpus"].endswith("H200-141GB") for row in prod.capacity if row["node"] != "TOTAL")


def test_dev_against_prod_is_readable(stacks):
    diff = diff_plans(stacks["prod"], stacks["dev"], "stack prod", "stack dev", same_stack=False)
    md = render_markdown(diff)
    text = render_text(diff)
    lines = text.splitlines()
    assert lines[0] == "Stack 'dev': stack prod -> stack dev"
    assert md.startswith("### Stack `dev`: stack prod → stack dev\n")
    # The clusters differ by design: listed, not a cascade of replacements.
    assert diff.get("pulumi:providers:kubernetes", "k8s").action == UPDATE
    assert '    context: "prod-cluster" -> "dev-cluster"' in lines
    assert diff.get(CONFIGMAP, "gpu-operator-mig-config").action == DELETE
    assert diff.get(CONFIGMAP, SHARING_CM).action == CREATE
    # dev has no MIG node: prod's MIG rollout goes (prod's nodes carry no NodePatch at all).
    assert diff.get("kubernetes:batch/v1:Job", "mig-rollout-job").action == DELETE
    # The Helm values as readable YAML line diffs.
    assert "    values.mig (Helm values):" in lines
    assert "        -  strategy: mixed" in lines and "        +  strategy: none" in lines
    assert "-  strategy: mixed" in md.splitlines()
    # Deleting prod's protected resources would be refused: the reviewer is told.
    release = diff.get(RELEASE, RELEASE_NAME)
    assert release.paths.count("options.protect") == 1
    assert "options.protect: removed (was true)" in text
    _no_secret(text)
    _no_secret(md)


def test_prod_diff_names_the_node_commands_that_run(stacks):
    diff = diff_plans(stacks["dev"], stacks["prod"], "stack dev", "stack prod", same_stack=False)
    commands = [c for c in diff.changes if c.type == COMMAND]
    if not commands:
        pytest.skip("this tree has no node commands (node preparation not present)")
    text = render_text(diff)
    for c in diff.node_commands:
        assert c.node and c.node.startswith("gpu-prod-h200-")
        assert f"node command re-runs on {c.node}: {c.name} (new)" in text
    assert any(c.action == DELETE for c in commands)
    _no_secret(text)


# --------------------------------------------------------------------------- provider rules
def _plan(*resources: dict) -> dict:
    return {"project": "p", "stack": "s", "resources": list(resources), "capacity": [], "warnings": []}


def _res(type_token: str, name: str, inputs: dict, **options) -> dict:
    return {"type": type_token, "name": name, "parent": None, "inputs": inputs, "depends_on": [], "options": options}


@pytest.mark.parametrize(
    "type_token, old, new, action, reason",
    [
        (CONFIGMAP, {"metadata": {"name": "a"}, "data": {"k": "1"}}, {"metadata": {"name": "b"}, "data": {"k": "1"}}, REPLACE, "metadata.name changed"),
        (CONFIGMAP, {"metadata": {"name": "a"}, "data": {"k": "1"}, "immutable": True}, {"metadata": {"name": "a"}, "data": {"k": "2"}, "immutable": True}, REPLACE, "data of an immutable ConfigMap changed"),
        (CONFIGMAP, {"metadata": {"name": "a"}, "data": {"k": "1"}}, {"metadata": {"name": "a"}, "data": {"k": "2"}}, REPLACE, "ConfigMap data changed"),
        (CONFIGMAP, {"metadata": {"name": "a", "labels": {"x": "1"}}}, {"metadata": {"name": "a", "labels": {"x": "2"}}}, UPDATE, None),
        ("kubernetes:core/v1:Namespace", {"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}, REPLACE, "metadata.name changed"),
        ("kubernetes:core/v1:Namespace", {"metadata": {"name": "a", "labels": {}}}, {"metadata": {"name": "a", "labels": {"x": "y"}}}, UPDATE, None),
        (JOB, {"metadata": {"name": "j"}, "spec": {"template": {"spec": {"image": "a"}}}}, {"metadata": {"name": "j"}, "spec": {"template": {"spec": {"image": "b"}}}}, REPLACE, "a Job's spec cannot be changed in place"),
        (JOB, {"metadata": {"name": "j"}, "spec": {"backoffLimit": 1}}, {"metadata": {"name": "j"}, "spec": {"backoffLimit": 2}}, REPLACE, "a Job's spec cannot be changed in place"),
        (JOB, {"metadata": {"name": "j", "labels": {"a": "1"}}}, {"metadata": {"name": "j", "labels": {"a": "2"}}}, UPDATE, None),
        (JOB, {"metadata": {"name": "j"}}, {"metadata": {"name": "k"}}, REPLACE, "metadata.name changed"),
        (COMMAND, {"create": "a", "triggers": ["1"]}, {"create": "a", "triggers": ["2"]}, REPLACE, "triggers changed"),
        (COMMAND, {"create": "a", "triggers": ["1"]}, {"create": "b", "triggers": ["1"]}, UPDATE, None),
        (RELEASE, {"name": "r", "values": {"a": 1}}, {"name": "r", "values": {"a": 2}}, UPDATE, None),
        (RELEASE, {"name": "r", "values": {}}, {"name": "s", "values": {}}, REPLACE, "release name changed"),
        ("kubernetes:core/v1:NodePatch", {"metadata": {"name": "n", "labels": {"l": "a"}}}, {"metadata": {"name": "n", "labels": {"l": "b"}}}, UPDATE, None),
        ("random:index:Thing", {"a": 1}, {"a": 2}, UPDATE, None),
    ],
)
def test_replace_or_update_follows_the_provider(type_token, old, new, action, reason):
    diff = diff_plans(_plan(_res(type_token, "x", old)), _plan(_res(type_token, "x", new)))
    (change,) = diff.changes
    assert change.action == action
    if reason:
        assert any(r.startswith(reason) for r in change.reasons), change.reasons
    else:
        assert change.reasons == []


def test_mutable_configmaps_update_in_place_when_the_provider_allows_it():
    provider = _res("pulumi:providers:kubernetes", "k8s", {"enableConfigMapMutable": "true"})
    old = _res(CONFIGMAP, "c", {"metadata": {"name": "a"}, "data": {"k": "1"}})
    new = _res(CONFIGMAP, "c", {"metadata": {"name": "a"}, "data": {"k": "2"}})
    (change,) = diff_plans(_plan(provider, old), _plan(provider, new)).changes
    assert change.action == UPDATE


def test_created_and_deleted_resources_and_command_reruns():
    conn = {"host": "10.0.0.5", "user": "ubuntu", "privateKey": "[secret]"}
    keep = _res(COMMAND, "node-prep-gpu-a", {"connection": conn, "create": "install", "triggers": ["v1"]})
    bumped = _res(COMMAND, "node-prep-gpu-a", {"connection": conn, "create": "install", "triggers": ["v2"]})
    gone = _res(CONFIGMAP, "old-cm", {"metadata": {"name": "old"}})
    new = _res(CONFIGMAP, "new-cm", {"metadata": {"name": "new", "namespace": "ns"}})
    base = _plan(keep, gone)
    head = _plan(bumped, new)
    head["capacity"] = [{"node": "gpu-a"}, {"node": "TOTAL"}]
    diff = diff_plans(base, head)
    assert [(c.name, c.action) for c in diff.changes] == [
        ("node-prep-gpu-a", REPLACE),
        ("new-cm", CREATE),
        ("old-cm", DELETE),
    ]
    assert diff.summary() == "1 to create, 0 to update, 1 to replace, 1 to delete"
    text = render_text(diff)
    assert "node command re-runs on gpu-a (10.0.0.5): node-prep-gpu-a (triggers changed)" in text
    assert "    ns/new" in text.splitlines()
    md = render_markdown(diff)
    assert "- node command re-runs on `gpu-a (10.0.0.5)`: `node-prep-gpu-a` (triggers changed)" in md


def test_a_replaced_provider_replaces_everything_it_manages():
    old_p = _res("pulumi:providers:kubernetes", "k8s", {"context": "a"})
    new_p = _res("pulumi:providers:kubernetes", "k8s", {"context": "b"})
    ns = _res("kubernetes:core/v1:Namespace", "ns", {"metadata": {"name": "n"}}, provider="k8s", protect=True)
    diff = diff_plans(_plan(old_p, ns), _plan(new_p, ns))
    assert [(c.name, c.action) for c in diff.changes] == [("k8s", REPLACE), ("ns", REPLACE)]
    assert diff.get("kubernetes:core/v1:Namespace", "ns").reasons == ["its provider k8s is replaced"]
    assert any("protected" in n for n in diff.get("kubernetes:core/v1:Namespace", "ns").notes)
    # Two stacks on two clusters: the difference is expected, nothing cascades.
    across = diff_plans(_plan(old_p, ns), _plan(new_p, ns), same_stack=False)
    assert [(c.name, c.action) for c in across.changes] == [("k8s", UPDATE)]


def test_markdown_fences_survive_backticks_in_scripts():
    old = _res(COMMAND, "c", {"create": "echo `date`\necho a\n", "triggers": []})
    new = _res(COMMAND, "c", {"create": "echo ```x```\necho b\n", "triggers": []})
    md = render_markdown(diff_plans(_plan(old), _plan(new)))
    assert "````diff" in md and "\n````\n" in md


def test_a_plan_carrying_an_unscrubbed_secret_is_refused():
    leaky = _plan(_res(COMMAND, "c", {"create": f"echo {SECRET_PLACEHOLDER_PREFIX}1"}))
    with pytest.raises(DiffError, match="secret"):
        diff_plans(_plan(), leaky)


def test_changed_secrets_never_show():
    cfg = dev_config()
    key_a = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAAfirstkeymaterial\n-----END OPENSSH PRIVATE KEY-----\n"
    key_b = "-----BEGIN OPENSSH PRIVATE KEY-----\nBBBBsecondkeymaterial\n-----END OPENSSH PRIVATE KEY-----\n"
    ssh_a = {**cfg["ssh"], "privateKey": key_a}
    ssh_b = {**cfg["ssh"], "privateKey": key_b}
    base = {k: v for k, v in cfg.items() if k != "ssh"}
    before = plan_of(copy.deepcopy(base), secrets={"ssh": ssh_a})
    after = plan_of(set_path(copy.deepcopy(base), "sharing.replicas", 8), secrets={"ssh": ssh_b})
    diff = diff_plans(before, after)
    for out in (render_text(diff), render_markdown(diff)):
        assert "firstkeymaterial" not in out and "secondkeymaterial" not in out
        assert "PRIVATE KEY" not in out
        _no_secret(out)


# --------------------------------------------------------------------------- the command line
def test_cli_against_a_stack_and_exit_codes():
    same = _cli("diff", "--stack", "dev", "--against", "dev", "--exit-code")
    assert same.returncode == 0, same.stderr
    assert "0 to create, 0 to update, 0 to replace, 0 to delete" in same.stdout
    differ = _cli("diff", "--stack", "dev", "--against", "prod", "--format", "markdown", "--exit-code")
    assert differ.returncode == 1, differ.stderr
    assert differ.stdout.startswith("### Stack `dev`: stack prod → stack dev")
    _no_secret(differ.stdout + differ.stderr)
    missing = _cli("diff", "--stack", "dev", "--against", "nope")
    assert missing.returncode == 2 and "Pulumi.nope.yaml" in missing.stderr


@pytest.fixture
def temp_repo(tmp_path: Path) -> Path:
    """The project's files, committed on `main` of a fresh repository."""
    return committed_project_copy(tmp_path)


def _set_replicas(repo: Path, replicas: int) -> None:
    path = repo / "Pulumi.dev.yaml"
    text = path.read_text()
    assert "    replicas: 4\n" in text
    path.write_text(text.replace("    replicas: 4\n", f"    replicas: {replicas}\n", 1))


def test_git_revision_diff_in_a_temporary_repository(temp_repo: Path):
    clean = _cli("--project-dir", str(temp_repo), "diff", "--stack", "dev", "--base", "HEAD", "--exit-code")
    assert clean.returncode == 0, clean.stderr
    assert "0 to create, 0 to update, 0 to replace, 0 to delete" in clean.stdout

    _set_replicas(temp_repo, 8)
    out = _cli("--project-dir", str(temp_repo), "diff", "--stack", "dev", "--base", "HEAD", "--exit-code")
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    head = git(temp_repo, "rev-parse", "HEAD").strip()
    assert lines[0] == f"Stack 'dev': HEAD ({head[:12]}) -> working tree"
    assert lines[1].startswith("0 to create, 1 to update, ")
    assert "        -      replicas: 4" in lines and "        +      replicas: 8" in lines
    assert "Node commands that re-run: none" in lines
    _no_secret(out.stdout + out.stderr)


def test_default_base_is_the_merge_base_with_main(temp_repo: Path):
    base = git(temp_repo, "rev-parse", "HEAD").strip()
    git(temp_repo, "checkout", "-q", "-b", "more-replicas")
    _set_replicas(temp_repo, 8)
    git(temp_repo, "commit", "-q", "-am", "replicas 8")
    # A stack added on the branch: every resource is a create.
    shutil.copy2(temp_repo / "Pulumi.dev.yaml", temp_repo / "Pulumi.qa.yaml")
    out = _cli("--project-dir", str(temp_repo), "diff", "--stack", "dev", "--format", "markdown")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"### Stack `dev`: merge-base with main ({base[:12]}) → working tree")
    assert "+      replicas: 8" in out.stdout.splitlines()
    new_stack = _cli("--project-dir", str(temp_repo), "diff", "--stack", "qa")
    assert new_stack.returncode == 0, new_stack.stderr
    assert ", 0 to update, 0 to replace, 0 to delete" in new_stack.stdout.splitlines()[1]
    assert not new_stack.stdout.splitlines()[1].startswith("0 to create")


def test_unknown_revision_is_a_clear_error(temp_repo: Path):
    out = _cli("--project-dir", str(temp_repo), "diff", "--stack", "dev", "--base", "no-such-ref")
    assert out.returncode == 2
    assert "unknown git revision 'no-such-ref'" in out.stderr


def test_named_list_items_are_addressed_by_name():
    def job(value: str, extra: bool = False) -> dict:
        env = [{"name": "A", "value": "1"}, {"name": "EXPECT", "value": value}]
        if extra:
            env.append({"name": "NEW", "value": "x"})
        return {"metadata": {"name": "j"}, "spec": {"template": {"spec": {"containers": [{"name": "c", "env": env}]}}}}

    diff = diff_plans(_plan(_res(JOB, "j", job("4"))), _plan(_res(JOB, "j", job("8", extra=True))))
    (change,) = diff.changes
    assert change.paths == ["spec.template.spec.containers[c].env[EXPECT].value", "spec.template.spec.containers[c].env[NEW]"]
    text = render_text(diff)
    assert '    spec.template.spec.containers[c].env[EXPECT].value: "4" -> "8"' in text


def test_replace_on_changes_option_forces_a_replacement():
    old = _res("kubernetes:core/v1:Service", "s", {"metadata": {"name": "s"}, "spec": {"ports": [1]}}, replaceOnChanges=["spec"])
    new = _res("kubernetes:core/v1:Service", "s", {"metadata": {"name": "s"}, "spec": {"ports": [2]}}, replaceOnChanges=["spec"])
    (change,) = diff_plans(_plan(old), _plan(new)).changes
    assert change.action == REPLACE and change.reasons == ["replaceOnChanges: spec"]
    labels = _res("kubernetes:core/v1:Service", "s", {"metadata": {"name": "s", "labels": {"a": "b"}}, "spec": {"ports": [1]}}, replaceOnChanges=["spec"])
    (change,) = diff_plans(_plan(old), _plan(labels)).changes
    assert change.action == UPDATE


# --------------------------------------------------------------------------- what re-runs a node command
COPY = "command:remote:CopyToRemote"


@pytest.fixture(scope="module")
def dev_base():
    return plan_of(dev_config())


@pytest.mark.parametrize("path,value", [("ssh.timeoutSeconds", 3000)])
def test_a_time_limit_edit_updates_node_commands_without_a_rerun(dev_base, path, value):
    diff = diff_plans(dev_base, plan_of(set_path(dev_config(), path, value)))
    commands = diff.of_type(COMMAND)
    assert [c.action for c in commands] == [UPDATE, UPDATE]
    assert diff.node_commands == []
    text = render_text(diff).splitlines()
    assert "Node commands that re-run: none" in text
    assert "node command updated without a re-run on gpu-dev-1: node-prep-gpu-dev-1 (create changed; it runs its update command)" in text
    assert "- node command updated without a re-run on `gpu-dev-1`" in render_markdown(diff)


@pytest.mark.parametrize(
    "path,value,nodes",
    [("nodes[0].address", "10.20.0.99", ["gpu-dev-1"]), ("nodes[0].user", "gpuadmin", ["gpu-dev-1"]),
     ("ssh.port", 2200, ["gpu-dev-1", "gpu-dev-2"])],
)
def test_a_new_connection_target_prepares_the_node_there(dev_base, path, value, nodes):
    # Issue 31: user@host:port is a trigger: a node moved to another host is prepared on it
    # (idempotent: the same host re-addressed changes nothing), and nothing runs on the old one.
    diff = diff_plans(dev_base, plan_of(set_path(dev_config(), path, value)))
    assert sorted(c.node for c in diff.node_commands) == nodes
    assert {c.action for c in diff.node_commands} == {REPLACE}
    assert {c.action for c in diff.of_type(COPY)} == {REPLACE}
    text = render_text(diff)
    for node in nodes:
        assert f"node command re-runs on {node}: node-prep-{node} (its host changed: it is prepared on the new host)" in text


# A rotated ssh.privateKey (a secret) updates in place and runs nothing: tests/offline/test_diff_secrets.py.


def test_a_new_host_key_prepares_that_node_again_and_the_diff_says_why(dev_base):
    # Audit 5, F6: a re-imaged host at the same address has a new host key; as for a new address,
    # the node is prepared again (idempotent on an intact host), and the reviewer is told why.
    cfg = set_path(dev_config(), "nodes[0].hostKey", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHFpNHXFvxRkhR8mBAJoiwJGwZQ8JxFMOyEdMT9kX2u2")
    diff = diff_plans(dev_base, plan_of(cfg))
    assert [(c.node, c.action) for c in diff.node_commands] == [("gpu-dev-1", REPLACE)]
    assert {c.name: c.action for c in diff.of_type(COPY)} == {"node-prep-gpu-dev-1-script": REPLACE}
    text = render_text(diff)
    assert (
        "node command re-runs on gpu-dev-1: node-prep-gpu-dev-1 (its pinned host key changed (a rebuilt host, "
        "or a key pinned or unpinned): it is prepared again)"
    ) in text
    assert "gpu-dev-2" not in "\n".join(x for x in text.splitlines() if x.startswith("node command"))


def test_a_plan_of_the_three_trigger_version_says_the_upgrade_prepares_the_nodes_again(dev_base):
    old = copy.deepcopy(dev_base.to_json())
    for r in old["resources"]:
        if r["type"] == COMMAND:
            r["inputs"]["triggers"] = r["inputs"]["triggers"][:3]
    diff = diff_plans(old, dev_base)
    text = render_text(diff)
    assert "its triggers now hold the pinned host key (a gpu-stack upgrade): it is prepared again" in text, text


def test_removing_or_reordering_a_node_reruns_no_other_node(dev_base):
    cfg = dev_config()
    cfg["nodes"] = list(reversed(cfg["nodes"]))
    reordered = diff_plans(dev_base, plan_of(cfg))
    assert [c for c in reordered.changes if c.type in (COMMAND, COPY)] == []
    cfg["nodes"] = [n for n in cfg["nodes"] if n["name"] != "gpu-dev-1"]
    removed = diff_plans(dev_base, plan_of(cfg))
    assert {(c.type, c.name, c.action) for c in removed.changes if c.type in (COMMAND, COPY)} == {
        (COMMAND, "node-prep-gpu-dev-1", DELETE), (COPY, "node-prep-gpu-dev-1-script", DELETE)
    }
    assert removed.node_commands == []


def test_a_node_value_edit_reruns_that_node_only(dev_base):
    diff = diff_plans(dev_base, plan_of(set_path(dev_config(), "nodes[1].gpu.count", 2)))
    assert [(c.name, c.action, c.reasons) for c in diff.node_commands] == [
        ("node-prep-gpu-dev-2", REPLACE, ["triggers changed"])
    ]


def test_one_nodes_profile_change_is_one_table_line_and_the_diff_names_the_node():
    cfg = set_path(dev_config(), "nodes[1].sharing", "none")
    base = plan_of(copy.deepcopy(cfg))
    diff = diff_plans(base, plan_of(set_path(cfg, "nodes[1].sharing", None)))
    # The table is content-named: replaced, and the Job with it (it re-runs); no per-node resource.
    table = diff.get("kubernetes:core/v1:ConfigMap", "gpu-operator-node-labels-table")
    job = diff.get("kubernetes:batch/v1:Job", "gpu-operator-node-labels-job")
    assert table is not None and table.action == REPLACE and job is not None and job.action == REPLACE
    assert not diff.of_type("kubernetes:core/v1:NodePatch")
    text = render_text(diff)
    assert "Node labels the Job gpu-operator-node-labels-job sets (1 node(s); the table changed, so the Job re-runs):" in text
    assert "  gpu-dev-2: nvidia.com/device-plugin.config none -> (removed)" in text
    assert "gpu-dev-1:" not in text.split("Node labels the Job")[1].split("\n\n")[0]


def test_removing_a_node_says_its_labels_stay_and_how_to_remove_them():
    cfg = set_path(dev_config(), "nodes[1].sharing", "none")
    base = plan_of(copy.deepcopy(cfg))
    cfg["nodes"] = [n for n in cfg["nodes"] if n["name"] != "gpu-dev-2"]
    text = render_text(diff_plans(base, plan_of(cfg)))
    assert ("  gpu-dev-2: leaves the table; its labels stay on the node (nvidia.com/device-plugin.config=none): "
            "remove them with `kubectl label node gpu-dev-2 nvidia.com/device-plugin.config-`") in text
    # No label patch is deleted, so none can recreate a Node that has left the cluster.
    assert "creates an empty Node" not in text


def test_an_old_plans_label_patch_deleted_warns_that_it_would_recreate_a_node_that_left():
    # Moving from a version with one NodePatch per node: the `up` deletes each patch.
    base = plan_of(dev_config()).to_json()
    base["resources"].append({"type": "kubernetes:core/v1:NodePatch", "name": "node-labels-gpu-dev-2", "parent": "node-labels",
                              "inputs": {"metadata": {"name": "gpu-dev-2", "labels": {"nvidia.com/device-plugin.config": "none"}}}})
    diff = diff_plans(base, plan_of(dev_config()))
    patch = diff.get("kubernetes:core/v1:NodePatch", "node-labels-gpu-dev-2")
    assert patch is not None and patch.action == DELETE
    urn = "urn:pulumi:test::gpu-stack::gpu-stack:index:GpuPlatform$gpu-stack:index:NodeLabels$kubernetes:core/v1:NodePatch::node-labels-gpu-dev-2"
    note = (
        "if node gpu-dev-2 has already left the cluster, this delete creates an empty Node gpu-dev-2: "
        f"run `pulumi up --exclude '{urn}'`, then `pulumi state delete '{urn}'` instead"
    )
    assert patch.notes == [note]


def test_a_value_that_changes_type_only_is_a_change_though_python_calls_the_two_equal():
    """The diff skips records equal on both sides without walking them, and `==` takes 1 for 1.0
    and for True: a field that went from `1` to `true` (or `1.0`) is still shown, in a record and
    in a nested list, and a record equal in type and value on both sides is no change."""
    base = {"project": "p", "stack": "s", "resources": [
        {"type": "kubernetes:core/v1:ConfigMap", "name": "cm", "inputs": {"data": {"a": 1, "b": [1, 2]}}, "secrets": {}},
    ]}
    for old, new in ((1, True), (1, 1.0), (0, False)):
        before, head = copy.deepcopy(base), copy.deepcopy(base)
        before["resources"][0]["inputs"]["data"]["a"] = old
        head["resources"][0]["inputs"]["data"]["a"] = new
        changes = diff_plans(before, head, "main", "working tree").changes
        assert [(f.path, f.old, f.new) for c in changes for f in c.fields] == [("data.a", old, new)]
        head = copy.deepcopy(base)
        head["resources"][0]["inputs"]["data"]["b"] = [new, 2]
        before["resources"][0]["inputs"]["data"] = {"a": 1, "b": [old, 2]}
        changes = diff_plans(before, head, "main", "working tree").changes
        assert [(f.path, f.old, f.new) for c in changes for f in c.fields] == [("data.b[0]", old, new)]
    assert diff_plans(base, copy.deepcopy(base), "main", "working tree").changes == []
