"""The dev stack run through the real __main__.py under mocks: the release and the plan contract."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpu_stack.config import Settings, load_settings
from gpu_stack.offline.runner import PROJECT_DIR

from ..helpers import assert_refused, dev_config, plan_of, plan_stack_file

RELEASE = "kubernetes:helm.sh/v3:Release"


@pytest.fixture(scope="module")
def dev_plan():
    return plan_stack_file("dev")


def test_dev_release_is_the_pinned_chart(dev_plan):
    (release,) = dev_plan.of_type(RELEASE)
    inputs = release.inputs
    assert inputs["name"] == "gpu-operator"
    assert inputs["chart"] == "gpu-operator"
    assert inputs["version"] == "v25.10.1"
    assert inputs["repositoryOpts"] == {"repo": "https://helm.ngc.nvidia.com/nvidia"}
    assert inputs["namespace"] == "gpu-operator"
    assert inputs["atomic"] is True
    assert inputs["cleanupOnFail"] is True
    assert inputs["timeout"] >= 600
    assert inputs["createNamespace"] is False


def test_dev_driver_and_toolkit_follow_host_placement(dev_plan):
    values = dev_plan.by_name("gpu-operator-release").inputs["values"]
    assert values["driver"] == {"enabled": False}
    assert values["toolkit"] == {"enabled": False}
    assert "defaultRuntime" not in values.get("operator", {})


def test_operator_placement_enables_driver_and_toolkit():
    cfg = dev_config()
    cfg["driver"] = {"placement": "operator"}
    cfg["toolkit"] = {"placement": "operator"}
    values = plan_of(cfg).by_name("gpu-operator-release").inputs["values"]
    assert {k: v for k, v in values["driver"].items() if k != "upgradePolicy"} == {"enabled": True, "version": "580.105.08"}
    assert values["driver"]["upgradePolicy"]["autoUpgrade"] is True  # tests/config/test_upgrades.py has the rest
    # only pods that request a GPU get one (docs/node-preparation.md)
    assert values["toolkit"] == {"enabled": True, "env": [{"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"}]}


def test_operator_namespace_allows_privileged_pods(dev_plan):
    ns = dev_plan.by_name("gpu-operator-namespace")
    labels = ns.inputs["metadata"]["labels"]
    assert ns.inputs["metadata"]["name"] == "gpu-operator"
    for mode in ("enforce", "audit", "warn"):
        assert labels[f"pod-security.kubernetes.io/{mode}"] == "privileged"
    assert "gpu-operator-namespace" in dev_plan.by_name("gpu-operator-release").depends_on


def test_settings_defaults():
    s = load_settings({})
    assert isinstance(s, Settings)
    assert s.operator.namespace == "gpu-operator"
    assert s.operator.chart_version == "v25.10.1"
    assert s.operator.timeout_seconds == 900
    assert s.driver.placement == "operator" and s.toolkit.placement == "operator"
    assert s.sharing.mode == "none" and s.sharing.replicas == 4
    assert s.mig.strategy == "single"
    # The project defaults live in the models (a `--path` edit of one sub-key cannot drop them).
    assert s.dcgm_exporter.enabled is True and s.dcgm_exporter.service_monitor.enabled is True
    assert s.dcgm_exporter.service_monitor.additional_labels == {"release": "kube-prometheus-stack"}
    assert s.validation.enabled is True and s.validation.namespace == "gpu-validation"
    assert s.nodes == ()


BAD_CONFIGS = [
    ("sharing.replicas", {"sharing": {"mode": "time-slicing", "replicas": 1}}, "gpu-stack:sharing.replicas = 1: must be at least 2"),
    ("typo top-level", {"sharring": {}}, "gpu-stack:sharring: unknown key; did you mean 'gpu-stack:sharing'?"),
    ("typo nested", {"sharing": {"replcas": 4}}, "gpu-stack:sharing.replcas: unknown key; did you mean 'replicas'?"),
    ("mig strategy", {"mig": {"strategy": "dual"}}, "gpu-stack:mig.strategy = 'dual': must be one of 'none', 'single' or 'mixed'"),
    ("timeout too low", {"operator": {"timeoutSeconds": 60}}, "gpu-stack:operator.timeoutSeconds = 60: must be at least 600"),
    ("node count type", {"nodes": [{"name": "n1", "gpu": {"model": "L4", "count": "two"}}]}, "gpu-stack:nodes[0].gpu.count = 'two': must be a whole number"),
    ("mixed runtimes", {"toolkit": {"placement": "operator"}, "nodes": [
        {"name": "n1", "gpu": {"model": "L4", "count": 1}}, {"name": "n2", "gpu": {"model": "L4", "count": 1}, "runtime": "rke2"},
    ]}, "gpu-stack:nodes[1].runtime = 'rke2': differs from nodes[0].runtime = 'containerd'"),
]


@pytest.mark.parametrize("label,config,message", BAD_CONFIGS, ids=[b[0] for b in BAD_CONFIGS])
def test_bad_config_names_key_and_registers_nothing(label, config, message):
    assert_refused(config, message)


def test_bad_config_cli_exits_nonzero_without_traceback(tmp_path):
    (tmp_path / "Pulumi.yaml").write_text((PROJECT_DIR / "Pulumi.yaml").read_text())
    (tmp_path / "__main__.py").write_text((PROJECT_DIR / "__main__.py").read_text())
    (tmp_path / "Pulumi.bad.yaml").write_text("config:\n  gpu-stack:sharing:\n    mode: time-slicing\n    replicas: 1\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_stack", "--project-dir", str(tmp_path), "plan", "--stack", "bad"],
        capture_output=True, text=True, cwd=PROJECT_DIR,
    )
    assert proc.returncode == 2
    assert "gpu-stack:sharing.replicas = 1: must be at least 2" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert proc.stdout == ""


def test_plan_json_follows_the_contract():
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_stack", "plan", "--stack", "dev", "--format", "json"],
        capture_output=True, text=True, cwd=PROJECT_DIR, check=True,
    )
    doc = json.loads(proc.stdout)
    assert doc["project"] == "gpu-stack" and doc["stack"] == "dev"
    assert isinstance(doc["capacity"], list) and isinstance(doc["warnings"], list)
    # What a resource may wait for: another resource, or an object the program reads (`reads`).
    names = {r["name"] for r in doc["resources"]} | {r["name"] for r in doc["reads"]}
    for r in doc["resources"]:
        assert set(r) >= {"type", "name", "parent", "inputs", "depends_on"}
        assert isinstance(r["type"], str) and ":" in r["type"]
        assert r["parent"] is None or r["parent"] in names
        assert all(d in names for d in r["depends_on"])
    assert json.loads(json.dumps(doc)) == doc
    assert any(r["type"] == RELEASE for r in doc["resources"])


def test_no_secret_in_any_plan_output(dev_plan):
    from gpu_stack.offline.render import render_text

    placeholder = "v1:placeholder-replace-with-pulumi-config-set-secret"
    text = render_text(dev_plan)
    blob = json.dumps(dev_plan.to_json())
    for out in (text, blob):
        assert placeholder not in out
        assert "gpu-stack-offline-secret-" not in out
