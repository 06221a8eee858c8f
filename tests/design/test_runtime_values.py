"""What the release and the node commands receive for each runtime and placement: CDI, the
k3s/RKE2 toolkit env (k3s sample stack under tests/stacks/), the operator's driver under a host
toolkit, and the ServiceMonitor CRD read the release waits for."""

from __future__ import annotations

import shutil
from pathlib import Path

from gpu_stack.config import load_settings
from gpu_stack.config.stack_files import read_stack
from gpu_stack.design.derive import derive
from gpu_stack.offline.plan import Plan
from gpu_stack.offline.runner import PROJECT_DIR, run_program

from ..helpers import assert_refused, dev_config, plan_of, plan_stack_file, set_path

RELEASE = "gpu-operator-release"
CRD_READ = "gpu-operator-servicemonitor-crd"
SAMPLE_STACKS = Path(__file__).resolve().parents[1] / "stacks"
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\ntest-only\n-----END OPENSSH PRIVATE KEY-----\n"


def plan_sample_stack(name: str, tmp_path: Path) -> Plan:
    """A stack file of tests/stacks/ planned with the project's own Pulumi.yaml and program."""
    shutil.copy(PROJECT_DIR / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    shutil.copy(SAMPLE_STACKS / f"Pulumi.{name}.yaml", tmp_path / f"Pulumi.{name}.yaml")
    return run_program(read_stack(tmp_path, name), PROJECT_DIR)


def values_of(plan: Plan) -> dict:
    return plan.by_name(RELEASE).inputs["values"]


# Only pods that request a GPU get one (toolkit.acceptEnvvarWhenUnprivileged false, the default).
CLOSED = [{"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"}]
K3S_ENV = [
    {"name": "CONTAINERD_CONFIG", "value": "/var/lib/rancher/k3s/agent/etc/containerd/config.toml"},
    {"name": "CONTAINERD_SOCKET", "value": "/run/k3s/containerd/containerd.sock"},
    {"name": "CONTAINERD_RUNTIME_CLASS", "value": "nvidia"},
    *CLOSED,
]


def test_k3s_sample_stack_release_carries_the_k3s_toolkit_env(tmp_path):
    plan = plan_sample_stack("k3s", tmp_path)
    values = values_of(plan)
    assert values["toolkit"] == {"enabled": True, "env": K3S_ENV}
    assert values["driver"]["enabled"] is True and values["cdi"] == {"enabled": True}
    assert plan.of_type("command:remote:Command") == []  # nothing on the hosts: all by the operator
    # no ServiceMonitor in this lab: no CRD read, the release does not wait for one
    assert CRD_READ not in values_of(plan) and CRD_READ not in plan.by_name(RELEASE).depends_on


def test_rke2_gets_its_own_config_path():
    cfg = dev_config()
    cfg["driver"] = {"placement": "operator"}
    cfg["toolkit"] = {"placement": "operator"}
    for node in cfg["nodes"]:
        node["runtime"] = "rke2"
    env = values_of(plan_of(cfg))["toolkit"]["env"]
    assert env[0] == {"name": "CONTAINERD_CONFIG", "value": "/var/lib/rancher/rke2/agent/etc/containerd/config.toml"}
    assert env[1]["value"] == "/run/k3s/containerd/containerd.sock"


def test_plain_containerd_gets_only_the_isolation_env_and_host_toolkits_none():
    for stack in ("dev", "staging", "prod"):
        values = values_of(plan_stack_file(stack))
        toolkit = values["toolkit"]
        if toolkit["enabled"]:
            assert toolkit["env"] == CLOSED, stack
        else:
            assert "env" not in toolkit, stack
        assert "env" not in values["devicePlugin"], stack  # CDI on: the operator sets the CDI strategies


def test_k3s_mixed_with_containerd_under_the_operators_toolkit_is_refused():
    cfg = dev_config()
    cfg["toolkit"] = {"placement": "operator"}
    cfg["nodes"][1]["runtime"] = "k3s"
    assert_refused(cfg, "gpu-stack:nodes[1].runtime = 'k3s': differs from nodes[0].runtime = 'containerd' while toolkit.placement = 'operator'")


def test_mixed_runtimes_are_fine_with_a_host_toolkit():
    cfg = dev_config()
    cfg["nodes"][1]["runtime"] = "k3s"
    assert "env" not in values_of(plan_of(cfg))["toolkit"]


# --------------------------------------------------------------------------- CDI
def test_cdi_setting_reaches_the_chart_and_every_node_command():
    assert values_of(plan_stack_file("dev"))["cdi"] == {"enabled": True}
    cfg = set_path(dev_config(), "toolkit.cdi", False)
    assert values_of(plan_of(cfg))["cdi"] == {"enabled": False}
    cfg["ssh"]["privateKey"] = KEY
    assert {c.values["GPU_STACK_CDI"] for c in list(derive(load_settings(cfg)).commands)} == {"false"}


# --------------------------------------------------------------------------- operator driver, host toolkit
def test_operator_driver_with_host_toolkit_is_supported():
    cfg = dev_config()
    cfg["driver"] = {"placement": "operator"}
    plan = plan_of(cfg)
    values = values_of(plan)
    assert {k: values["driver"][k] for k in ("enabled", "version")} == {"enabled": True, "version": "580.105.08"}
    assert values["driver"]["upgradePolicy"]["autoUpgrade"] is True  # the operator's driver rolls per its policy
    assert values["toolkit"] == {"enabled": False}
    assert "GPU_STACK_DRIVER=operator" in plan.by_name("node-prep-gpu-dev-1").inputs["create"]
    cfg["ssh"]["privateKey"] = KEY
    for cmd in list(derive(load_settings(cfg)).commands):
        assert cmd.values["GPU_STACK_PHASES"] == "preflight toolkit runtime" and cmd.values["GPU_STACK_DRIVER"] == "operator"


# --------------------------------------------------------------------------- ServiceMonitor CRD
def test_release_waits_for_a_read_of_the_servicemonitor_crd():
    plan = plan_stack_file("dev")
    (read,) = [r for r in plan.reads if r["name"] == CRD_READ]
    assert read["type"] == "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
    assert read["id"] == "servicemonitors.monitoring.coreos.com"
    assert read["parent"] == "gpu-operator"
    assert CRD_READ in plan.by_name(RELEASE).depends_on


def test_no_crd_read_without_a_servicemonitor():
    cfg = set_path(dev_config(), "dcgmExporter.serviceMonitor.enabled", False)
    plan = plan_of(cfg)
    assert CRD_READ not in [r["name"] for r in plan.reads]
    assert CRD_READ not in plan.by_name(RELEASE).depends_on


# --------------------------------------------------------------------------- PrometheusRule CRD
RULE_CRD_READ = "gpu-monitoring-prometheusrule-crd"


def test_alerts_without_a_servicemonitor_still_wait_for_a_read_of_the_prometheusrule_crd():
    # A custom resource whose CRD is absent is not previewed: without the read, preview passes and
    # `up` fails on the rule; with it, preview fails on the read ("does not exist").
    cfg = set_path(dev_config(), "dcgmExporter.serviceMonitor.enabled", False)
    plan = plan_of(set_path(cfg, "alerts.enabled", True))
    (read,) = [r for r in plan.reads if r["name"] == RULE_CRD_READ]
    assert read["type"] == "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
    assert read["id"] == "prometheusrules.monitoring.coreos.com"
    assert read["parent"] == "gpu-monitoring"
    rule = plan.by_name("gpu-monitoring-rules")
    assert RULE_CRD_READ in rule.depends_on and CRD_READ not in [r["name"] for r in plan.reads]


def test_no_prometheusrule_crd_read_without_alerts():
    cfg = set_path(dev_config(), "alerts.enabled", False)
    plan = plan_of(cfg)
    assert RULE_CRD_READ not in [r["name"] for r in plan.reads]
