"""`pulumi new <the repository or a clone's path>`: Pulumi.yaml's `template:` section, as the Pulumi
CLI 3.259.0 reads it, starts a project whose stack plans offline.

What the CLI does with it (pulumi v3.259.0 sdk/go/common/apitype/templates.go ProjectTemplate;
pkg/cmd/pulumi/project/newcmd/new.go and config.go; pkg/cmd/pulumi/templates/project_templates.go):
it reads displayName, description, quickstart, config (each key: description, default, secret) and
metadata; it copies every file of the template folder but .git, drops `template:` from the new
Pulumi.yaml, creates the stack and saves each config key as written, never as a --path key
(`ParseConfigKeyForProject(..., path=false)`), its value a string; then it installs the
dependencies (which needs the package registry).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpu_stack.config.load import expand_dotted_keys
from gpu_stack.offline.runner import plan_stack

ROOT = Path(__file__).resolve().parents[1]
PROJECT = yaml.safe_load((ROOT / "Pulumi.yaml").read_text(encoding="utf-8"))
TEMPLATE = PROJECT["template"]
TEMPLATE_FIELDS = {"displayName", "description", "quickstart", "config", "metadata", "important"}
CONFIG_FIELDS = {"description", "default", "secret"}


def test_the_template_holds_only_what_the_cli_reads():
    assert set(TEMPLATE) <= TEMPLATE_FIELDS
    assert isinstance(TEMPLATE["description"], str) and TEMPLATE["description"]
    config = TEMPLATE["config"]
    assert "gpu-stack:kubernetes.context" in config  # the one thing a user must say: which cluster
    for key, field in config.items():
        assert key.startswith("gpu-stack:") and set(field) <= CONFIG_FIELDS, key
        # the CLI's fields are strings (a YAML true would not load into its string field)
        assert all(isinstance(v, str) for k, v in field.items() if k != "secret"), key
        assert not field.get("secret"), "a secret set without --path is refused (expand_dotted_keys)"


def _new_project(folder: Path, values: dict[str, str] | None = None) -> Path:
    """The project `pulumi new` leaves: Pulumi.yaml without `template:` and with the template tag,
    the program, and the stack file with the template's config (each key as written, a string)."""
    folder.mkdir(parents=True)
    project = {k: v for k, v in PROJECT.items() if k != "template"}
    project["name"] = "my-gpus"
    project["config"] = {"pulumi:tags": {"value": {"pulumi:template": str(ROOT)}}}
    (folder / "Pulumi.yaml").write_text(yaml.safe_dump(project), encoding="utf-8")
    shutil.copy2(ROOT / "__main__.py", folder / "__main__.py")
    config = {key: field.get("default", "") for key, field in TEMPLATE["config"].items()}
    config.update(values or {})
    (folder / "Pulumi.mine.yaml").write_text(yaml.safe_dump({"config": {k: v for k, v in config.items() if v}}))
    return folder


def _context(plan) -> str:
    (provider,) = plan.of_type("pulumi:providers:kubernetes")
    return provider.inputs["context"]


def test_the_templates_config_applied_to_a_fresh_stack_plans_offline(tmp_path: Path):
    plan = plan_stack("mine", _new_project(tmp_path / "new"))
    assert (plan.project, plan.stack) == ("my-gpus", "mine")
    assert _context(plan) == "my-cluster"
    assert plan.of_type("kubernetes:helm.sh/v3:Release")
    assert plan.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")  # monitoring on: the default


def test_the_answers_a_user_gives_are_the_settings_planned(tmp_path: Path):
    plan = plan_stack("mine", _new_project(tmp_path / "new", {
        "gpu-stack:kubernetes.context": "prod-east", "gpu-stack:dcgmExporter.serviceMonitor.enabled": "false",
    }))
    assert _context(plan) == "prod-east"
    assert not plan.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
    assert not plan.reads  # no Prometheus Operator CRD is read: a cluster without them previews


def test_a_key_set_without_path_is_the_setting_with_path():
    raw = {"kubernetes.context": "c", "kubernetes": {"version": "1.32"}, "dcgmExporter.serviceMonitor.enabled": False}
    out, problems = expand_dotted_keys(raw)
    assert problems == []
    assert out == {"kubernetes": {"version": "1.32", "context": "c"}, "dcgmExporter": {"serviceMonitor": {"enabled": False}}}
    assert raw["kubernetes"] == {"version": "1.32"}  # the caller's mapping is not changed
    # not a setting's path: left for the unknown-key message
    assert expand_dotted_keys({"kubernetes.x[0]": 1, "nope.x": 1}) == ({"kubernetes.x[0]": 1, "nope.x": 1}, [])
    _, problems = expand_dotted_keys({"kubernetes.context": "a", "kubernetes": {"context": "b"}})
    assert [p.render() for p in problems] == [
        "gpu-stack:kubernetes.context = 'a': is set twice: as a key of its own (set without --path) and inside gpu-stack:kubernetes; keep one"
    ]
    _, problems = expand_dotted_keys({"sharing": 3, "sharing.replicas": 4})
    assert [p.message for p in problems] == ["gpu-stack:sharing is set to a value that is no map"]
    _, problems = expand_dotted_keys({"kubernetes.kubeconfig": "[secret]"}, secret_keys={"kubernetes.kubeconfig"})
    assert "is a secret set without --path" in problems[0].render() and "pulumi config set --secret --path" in problems[0].render()


def _pulumi_release() -> Path:
    from sandbox.toolchain import ToolchainMissing, find, in_ci

    try:
        return find(("pulumi-release",)).bins["pulumi"]
    except ToolchainMissing as exc:
        if in_ci():
            pytest.fail(f"CI=true and {exc}", pytrace=False)
        pytest.skip(str(exc))


def _netns() -> list[str]:
    """A network namespace with only loopback (as `make e2e` runs), proof that nothing is fetched,
    where one can be made; else none (the unit tier runs as a user that Ubuntu 24.04's AppArmor
    refuses a user namespace): nothing asks for the network anyway (a local template, a file
    backend, no plugin acquisition, pip with no index)."""
    if shutil.which("unshare") is None:
        return []
    netns = ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "--map-root-user", "--net"]
    probe = subprocess.run([*netns, "sh", "-c", "ip link set lo up"], capture_output=True, timeout=30)
    return netns if probe.returncode == 0 else []


def test_pulumi_new_from_a_clone_starts_a_project_that_plans_offline(tmp_path: Path):
    """The real CLI, offline: `pulumi new <a clone> --yes -s mine` copies the project, creates the
    stack with the template's config and reaches the dependency install, which needs the registry
    (here it has none: the CLI then says to run `pulumi install`); the stack plans offline."""
    pulumi = _pulumi_release()
    source = tmp_path / "clone"
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, names):
        if (ROOT / name).is_file() and not (ROOT / name).is_symlink():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    (tmp_path / "state").mkdir()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PULUMI_", "PIP_"))},
        "PATH": f"{pulumi.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PULUMI_HOME": str(tmp_path / "pulumi-home"),
        "PULUMI_BACKEND_URL": f"file://{tmp_path / 'state'}",
        "PULUMI_CONFIG_PASSPHRASE": "gpu-stack-template-test",
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "NO_COLOR": "1",
        "PIP_NO_INDEX": "1",  # the dependency install fails at once instead of retrying a network
    }
    new = tmp_path / "my-gpus"
    netns = _netns()
    command = ("ip link set lo up && " if netns else "") + f"exec {pulumi} new {source} --yes --force --dir {new} -s mine"
    proc = subprocess.run([*netns, "sh", "-c", command], env=env, capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert "Created stack 'mine'" in out and "Saved config" in out, out[-3000:]
    assert proc.returncode == 0 or "Run `pulumi install` to complete the installation." in out, out[-3000:]

    stack = yaml.safe_load((new / "Pulumi.mine.yaml").read_text())
    assert stack["config"] == {key: field["default"] for key, field in TEMPLATE["config"].items()}
    made = yaml.safe_load((new / "Pulumi.yaml").read_text())
    assert "template" not in made and made["runtime"] == PROJECT["runtime"]
    assert (new / "__main__.py").read_bytes() == (ROOT / "__main__.py").read_bytes()
    assert not (new / ".git").exists()

    plan = plan_stack("mine", new)
    assert plan.stack == "mine" and _context(plan) == "my-cluster"
    assert plan.of_type("kubernetes:helm.sh/v3:Release")
