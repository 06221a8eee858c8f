"""Bad stack configs: each fails with one message naming the key, registers nothing, and the offline
plan CLI exits non-zero without a traceback.

Each case starts from the dev stack and changes a few keys (`pulumi config set --path` style).
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_stack.offline.runner import PROJECT_DIR, PlanError

from ..helpers import assert_refused, dev_config, plan_of, set_path

DELETE = object()


def _apply(edits: dict[str, Any]) -> dict[str, Any]:
    cfg = dev_config()
    for path, value in edits.items():
        if value is DELETE:
            parent, _, leaf = path.rpartition(".")
            marker = object()
            set_path(cfg, f"{parent}.{leaf}", marker)  # reach the parent the way set_path does
            target: Any = cfg
            for token in parent.replace("]", "").split("."):
                for i, piece in enumerate(token.split("[")):
                    target = target[int(piece) if i else piece]
            del target[leaf]
        elif path.startswith("="):  # replace a whole top-level key
            cfg[path[1:]] = copy.deepcopy(value)
        else:
            set_path(cfg, path, copy.deepcopy(value))
    return cfg


def _case(label: str, edits: dict[str, Any], message: str):
    return pytest.param(edits, message, id=label)


H100_NODE = {"name": "gpu-h100", "address": "10.20.0.21", "gpu": {"model": "H100-80GB", "count": 8}}

CASES = [
    # ---------------------------------------------------------------- an image that cannot run the scripts
    _case("kubectl-image-without-shell", {"validation.images.kubectl": "registry.k8s.io/kubectl:v1.34.4"},
          "gpu-stack:validation.images.kubectl = 'registry.k8s.io/kubectl:v1.34.4': lacks sh: the Jobs that talk to "
          "the API run POSIX sh scripts with kubectl, and registry.k8s.io/kubectl:v1.34.4 has shell none"),
    _case("rollout-image-without-shell", {"mig.rollout.image": "registry.k8s.io/kubectl@sha256:" + "0" * 64},
          "gpu-stack:mig.rollout.image = 'registry.k8s.io/kubectl@sha256:" + "0" * 64 + "': is no image whose contents gpu-stack knows"),
    # ---------------------------------------------------------------- wrong types
    _case("count-not-a-number", {"nodes[0].gpu.count": "two"}, "gpu-stack:nodes[0].gpu.count = 'two': must be a whole number"),
    _case("count-fraction", {"nodes[0].gpu.count": 2.5}, "gpu-stack:nodes[0].gpu.count = 2.5: must be a whole number"),
    _case("replicas-text", {"sharing.replicas": "four"}, "gpu-stack:sharing.replicas = 'four': must be a whole number"),
    _case("port-text", {"ssh.port": "ssh"}, "gpu-stack:ssh.port = 'ssh': must be a whole number"),
    _case("protect-not-bool", {"operator.protect": "maybe"}, "gpu-stack:operator.protect = 'maybe': must be true or false"),
    _case("enabled-list", {"dcgmExporter.enabled": []}, "gpu-stack:dcgmExporter.enabled = []: must be true or false"),
    _case("nodes-mapping", {"=nodes": {"name": "gpu-dev-1"}}, "gpu-stack:nodes = {'name': 'gpu-dev-1'}: must be a list"),
    _case("sharing-string", {"=sharing": "time-slicing"}, "gpu-stack:sharing = 'time-slicing': must be a mapping of keys to values"),
    _case("node-name-number", {"nodes[0].name": 7}, "gpu-stack:nodes[0].name = 7: must be a string"),
    _case("gpu-missing", {"nodes[0].gpu": DELETE}, "gpu-stack:nodes[0].gpu: is required"),
    # ---------------------------------------------------------------- out of range
    _case("replicas-1", {"sharing.replicas": 1}, "gpu-stack:sharing.replicas = 1: must be at least 2"),
    _case("replicas-huge", {"sharing.replicas": 5000}, "gpu-stack:sharing.replicas = 5000: must be at most 1024"),
    _case("profile-replicas-1", {"sharing.profiles.small": {"replicas": 1}}, "gpu-stack:sharing.profiles.small.replicas = 1: must be at least 2"),
    _case("resource-replicas-1", {"sharing.resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}, "gpu-stack:sharing.resources[0].replicas = 1: must be at least 2"),
    _case("count-0", {"nodes[0].gpu.count": 0}, "gpu-stack:nodes[0].gpu.count = 0: must be at least 1"),
    _case("count-17", {"nodes[0].gpu.count": 17}, "gpu-stack:nodes[0].gpu.count = 17: must be at most 16"),
    _case("node-port-0", {"nodes[1].port": 0}, "gpu-stack:nodes[1].port = 0: must be at least 1"),
    _case("helm-timeout", {"operator.timeoutSeconds": 60}, "gpu-stack:operator.timeoutSeconds = 60: must be at least 600"),
    _case("job-timeout", {"validation.timeoutSeconds": 10}, "gpu-stack:validation.timeoutSeconds = 10: must be at least 60"),
    _case("mps-64", {"sharing.mode": "mps", "sharing.replicas": 64}, "gpu-stack:sharing.replicas = 64: must be at most 48"),
    # ---------------------------------------------------------------- unknown and misspelt keys
    _case("typo-top", {"sharring": {}}, "gpu-stack:sharring: unknown key; did you mean 'gpu-stack:sharing'?"),
    _case("typo-sharing", {"sharing.replcas": 4}, "gpu-stack:sharing.replcas: unknown key; did you mean 'replicas'?"),
    _case("typo-node", {"nodes[0].adress": "10.0.0.1"}, "gpu-stack:nodes[0].adress: unknown key; did you mean 'address'?"),
    _case("typo-gpu", {"nodes[0].gpu.modle": "L4"}, "gpu-stack:nodes[0].gpu.modle: unknown key; did you mean 'model'?"),
    _case("typo-monitor", {"dcgmExporter.serviceMonitor.intervall": "30s"}, "gpu-stack:dcgmExporter.serviceMonitor.intervall: unknown key; did you mean 'interval'?"),
    _case("typo-operator", {"operator.protected": True}, "gpu-stack:operator.protected: unknown key; did you mean 'protect'?"),
    _case("misplaced-flag", {"sharing.flags": {"migStrategy": "none"}}, "gpu-stack:sharing.flags: unknown key"),
    # ---------------------------------------------------------------- names Kubernetes refuses
    _case("duplicate-node", {"nodes[1].name": "gpu-dev-1"}, "gpu-stack:nodes[1].name = 'gpu-dev-1': duplicate node name"),
    _case("node-name-upper", {"nodes[0].name": "GPU_Node"}, "gpu-stack:nodes[0].name = 'GPU_Node': must be a Kubernetes node name"),
    _case("namespace-upper", {"operator.namespace": "GPU-Operator"}, "gpu-stack:operator.namespace = 'GPU-Operator': must be a DNS-1123 label"),
    _case("namespace-long", {"validation.namespace": "v" * 64}, "gpu-stack:validation.namespace = '" + "v" * 64 + "': must be a DNS-1123 label"),
    _case("release-underscore", {"operator.releaseName": "gpu_operator"}, "gpu-stack:operator.releaseName = 'gpu_operator': must be a Helm release name"),
    # A valid DNS label (<= 63) that Helm would refuse only at install: refused before preview.
    _case("release-54-chars", {"operator.releaseName": "g" * 54},
          "gpu-stack:operator.releaseName = '" + "g" * 54 + "': must be a Helm release name: at most 53 lowercase letters"),
    _case("profile-key", {"sharing.profiles": {"bad key!": {"replicas": 2}}}, "profile name 'bad key!' must be a Kubernetes label value"),
    _case("node-sharing-long", {"nodes[0].sharing": "p" * 64}, "gpu-stack:nodes[0].sharing = '" + "p" * 64 + "': must be a Kubernetes label value"),
    _case("label-value", {"dcgmExporter.serviceMonitor.additionalLabels": {"release": "kube prometheus"}}, "label 'release' value 'kube prometheus' must be a Kubernetes label value"),
    _case("label-key", {"dcgmExporter.serviceMonitor.additionalLabels": {"bad key": "x"}}, "label key 'bad key' is not a valid Kubernetes label key"),
    # ---------------------------------------------------------------- GPU sharing, MIG, DCGM rules
    _case("missing-sharing-profile", {"nodes[0].sharing": "fast"}, "gpu-stack:nodes[0].sharing = 'fast': names no sharing profile"),
    _case("missing-mig-profile", {"mig.strategy": "single", "=nodes": [{**H100_NODE, "mig": "half"}]}, "gpu-stack:nodes[0].mig = 'half'"),
    _case("mig-profile-not-on-gpu", {"mig.strategy": "single", "=nodes": [{**H100_NODE, "mig": "small"}],
                                     "mig.profiles.small": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}]},
          "gpu-stack:mig.profiles.small[0].mig-devices"),
    _case("mig-on-l4", {"mig.strategy": "single", "nodes[0].mig": "small",
                        "mig.profiles.small": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]},
          "gpu-stack:nodes[0].mig = 'small'"),
    _case("mps-with-mixed", {"sharing.mode": "mps", "mig.strategy": "mixed"}, "gpu-stack:sharing.mode = 'mps'"),
    _case("dcgm-two-fields", {"dcgmExporter.metrics": "DCGM_FI_DEV_GPU_UTIL, gauge\n"}, "gpu-stack:dcgmExporter.metrics: invalid metrics CSV: line 1: 2 fields, need exactly 3"),
    _case("dcgm-comma-in-help", {"dcgmExporter.metrics": "DCGM_FI_DEV_GPU_UTIL, gauge, GPU use, in percent\n"}, "no comma inside the help text"),
    _case("dcgm-bad-type", {"dcgmExporter.metrics": "DCGM_FI_DEV_GPU_UTIL, gauges, GPU use\n"}, "line 1: type 'gauges' must be one of"),
    # ---------------------------------------------------------------- node preparation
    _case("host-node-without-address", {"nodes[1].address": DELETE}, "gpu-stack:nodes[1].address = None: is required when the driver or toolkit lives on the host"),
    _case("mixed-runtimes", {"toolkit.placement": "operator", "nodes[1].runtime": "k3s"}, "gpu-stack:nodes[1].runtime = 'k3s': differs from nodes[0].runtime = 'containerd' while toolkit.placement = 'operator'"),
    _case("validation-in-operator-ns", {"validation.namespace": "gpu-operator"}, "gpu-stack:validation.namespace = 'gpu-operator': must differ from operator.namespace"),
    _case("reserved-profile", {"sharing.profiles.default": {"replicas": 2}}, "gpu-stack:sharing.profiles.default: is a reserved profile name"),
    _case("device-filter", {"mig.strategy": "single", "=nodes": [{**H100_NODE, "mig": "p"}],
                            "mig.profiles.p": [{"devices": "all", "device-filter": "nvidia", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]},
          "gpu-stack:mig.profiles.p[0].device-filter = 'nvidia': 'nvidia' is not a PCI device id"),
    _case("mig-all-zero", {"mig.strategy": "single", "=nodes": [{**H100_NODE, "mig": "p"}],
                           "mig.profiles.p": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 0}}]},
          "gpu-stack:mig.profiles.p[0].mig-devices = {'1g.10gb': 0}: is required when mig-enabled is true"),
    _case("mig-does-not-fit", {"mig.strategy": "mixed", "=nodes": [{**H100_NODE, "mig": "p"}],
                               "mig.profiles.p": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7, "3g.40gb": 2}}]},
          "does not fit H100-80GB (node gpu-h100)"),
    _case("mig-mixed-needed", {"mig.strategy": "single", "=nodes": [{**H100_NODE, "mig": "p"}],
                               "mig.profiles.p": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 2, "2g.20gb": 1}}]},
          "gpu-stack:mig.strategy = 'single': node gpu-h100 uses MIG config 'p' with several instance profiles"),
    _case("max-sharing-pods", {"validation.maxSharingPods": 1}, "gpu-stack:validation.maxSharingPods = 1: must be at least 2"),
    _case("ttl", {"validation.ttlSecondsAfterFinished": 5}, "gpu-stack:validation.ttlSecondsAfterFinished = 5: must be at least 60"),
    _case("metrics-without-exporter", {"dcgmExporter.enabled": False, "dcgmExporter.metrics": "DCGM_FI_DEV_GPU_UTIL, gauge, x\n"},
          "gpu-stack:dcgmExporter.metrics: has no effect while dcgmExporter.enabled is false"),
    _case("kubernetes-version", {"kubernetes.version": "1.20"}, "gpu-stack:kubernetes.version = '1.20': must be one of '1.29'"),
    _case("chart-version", {"operator.chartVersion": "v24.9.0"}, "gpu-stack:operator.chartVersion = 'v24.9.0': must be one of 'v25.10.1'"),
    _case("runtime-unknown", {"nodes[0].runtime": "cri-o"}, "gpu-stack:nodes[0].runtime = 'cri-o': must be one of 'containerd', 'docker', 'crio', 'k3s' or 'rke2'"),
]


@pytest.mark.parametrize("edits,message", CASES)
def test_bad_config_names_the_key_and_registers_nothing(edits, message):
    with pytest.raises(PlanError) as info:
        plan_of(_apply(edits))
    text = str(info.value)
    assert message in text
    assert text.startswith("invalid stack config:\n  "), "one problem, one line"
    assert info.value.registered == 0
    assert "Traceback" not in text


def test_at_least_forty_cases():
    assert len(CASES) + len(HOSTILE_CASES) >= 40 and len(CASES) >= 40


# --------------------------------------------------------------------------- hostile strings
# Every field whose value reaches a node script, an SSH connection or a manifest, with the start
# of the message that refuses it.
HOSTILE_FIELDS = {
    "nodes[0].name": "must be a Kubernetes node name",
    "nodes[0].address": "must be a host name or an IP address",
    "nodes[0].user": "must be an SSH user name",
    "ssh.user": "must be an SSH user name",
    "nodes[0].hostKey": "must be an OpenSSH public host key",
    "nodes[0].gpu.model": "must be a GPU model name",
    "nodes[0].sharing": "must be a Kubernetes label value",
    "nodes[0].mig": "must be a Kubernetes label value",
    "driver.version": "must be a driver version",
    "operator.namespace": "must be a DNS-1123 label",
    "operator.releaseName": "must be a Helm release name",
    "operator.repository": "must be an https:// or oci:// chart repository URL",
    "validation.namespace": "must be a DNS-1123 label",
    "validation.images.cuda": "must be a container image reference",
    "validation.images.toolbox": "must be a container image reference",
    "validation.images.kubectl": "must be a container image reference",
    "dcgmExporter.serviceMonitor.interval": "must be a Prometheus duration",
}
HOSTILE_VALUES = {
    "command": "gpu-1$(reboot)",
    "backticks": "gpu-1`id`",
    "semicolon": "gpu-1;reboot",
    "single-quote": "gpu-1'x",
    "double-quote": 'gpu-1"x',
    "newline": "gpu-1\nreboot",
    "space": "gpu-1 -oProxyCommand=reboot",
}
# A value that is fine in every field but for its payload: a valid prefix, then the payload.
BASE_VALUE = {
    "nodes[0].hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA",
    "operator.repository": "https://helm.example.com/nvidia",
    "validation.images.cuda": "nvcr.io/nvidia/cuda:12",
    "validation.images.toolbox": "nvcr.io/nvidia/cuda:12",
    "validation.images.kubectl": "nvcr.io/nvidia/gpu-operator:v1",
    "driver.version": "580.105.08",
    "dcgmExporter.serviceMonitor.interval": "15s",
}
HOSTILE_CASES = [
    pytest.param(field, label, payload, id=f"{field}-{label}")
    for field in HOSTILE_FIELDS
    for label, payload in HOSTILE_VALUES.items()
]


@pytest.mark.parametrize("field,label,payload", HOSTILE_CASES)
def test_hostile_strings_are_refused_where_they_reach_a_script_or_manifest(field, label, payload):
    value = BASE_VALUE[field] + payload[len("gpu-1"):] if field in BASE_VALUE else payload
    edits = {field: value, "mig.strategy": "single"} if field == "nodes[0].mig" else {field: value}
    with pytest.raises(PlanError) as info:
        plan_of(_apply(edits))
    text = str(info.value)
    assert info.value.registered == 0
    key = f"gpu-stack:{field}"
    shown = repr(value)
    # A control character (the newline) is refused as such, before the field's own format.
    expected = "contains an invisible or control character" if "\n" in payload else HOSTILE_FIELDS[field]
    assert f"{key} = {shown}: {expected}" in text, text


# --------------------------------------------------------------------------- the CLI
CLI_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("replicas-1", {"sharing.replicas": 1}, "gpu-stack:sharing.replicas = 1: must be at least 2"),
    ("typo", {"sharing.replcas": 4}, "gpu-stack:sharing.replcas: unknown key; did you mean 'replicas'?"),
    ("hostile-address", {"nodes[0].address": "10.0.0.1;reboot"}, "gpu-stack:nodes[0].address = '10.0.0.1;reboot': must be a host name"),
    ("duplicate-node", {"nodes[1].name": "gpu-dev-1"}, "duplicate node name"),
    ("count-type", {"nodes[0].gpu.count": "two"}, "gpu-stack:nodes[0].gpu.count = 'two': must be a whole number"),
    ("mixed-runtimes", {"toolkit.placement": "operator", "nodes[1].runtime": "rke2"}, "differs from nodes[0].runtime = 'containerd'"),
]


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "Pulumi.yaml").write_text((PROJECT_DIR / "Pulumi.yaml").read_text())
    (root / "__main__.py").write_text((PROJECT_DIR / "__main__.py").read_text())
    for label, edits, _ in CLI_CASES:
        cfg = _apply(edits)
        cfg["ssh"]["privateKey"] = {"secure": "v1:placeholder"}
        doc = {"config": {f"gpu-stack:{k}": v for k, v in cfg.items()}}
        (root / f"Pulumi.{label}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return root


@pytest.mark.parametrize("label,edits,message", CLI_CASES, ids=[c[0] for c in CLI_CASES])
def test_cli_exits_nonzero_with_the_message_and_no_traceback(project, label, edits, message):
    for fmt in ("text", "json"):
        proc = subprocess.run(
            [sys.executable, "-m", "gpu_stack", "--project-dir", str(project), "plan", "--stack", label, "--format", fmt],
            capture_output=True, text=True, cwd=PROJECT_DIR,
        )
        assert proc.returncode == 2
        assert message in proc.stderr
        assert proc.stderr.startswith("error: invalid stack config")
        assert "Traceback" not in proc.stderr + proc.stdout
        assert proc.stdout == ""


# --------------------------------------------------------------------------- malformed stack files
STACK_FILES = [
    ("config-list", "config: [1, 2]\n", "'config:' must be a mapping"),
    ("config-string", "config: hello\n", "'config:' must be a mapping"),
    ("int-key", "config:\n  1: x\n", "config key 1 must be a string"),
    ("binary", "config:\n  gpu-stack:sharing:\n    replicas: !!binary aGVsbG8=\n", "gpu-stack:sharing (in Pulumi.f.yaml or Pulumi.yaml): holds a value config cannot carry"),
    ("set", "config:\n  gpu-stack:sharing: !!set {a, b}\n", "holds a value config cannot carry"),
    ("date", "config:\n  gpu-stack:nodes: 2024-01-01\n", "gpu-stack:nodes = '2024-01-01': must be a list"),
    ("not-yaml", "config:\n  gpu-stack:sharing: [\n", "not valid YAML"),
    ("alias", "config: {gpu-stack:nodes: *a}\n", "not valid YAML"),
]


@pytest.mark.parametrize("text,message", [pytest.param(t, m, id=i) for i, t, m in STACK_FILES])
def test_malformed_stack_files_fail_with_a_message_not_a_traceback(tmp_path, text, message):
    (tmp_path / "Pulumi.yaml").write_text((PROJECT_DIR / "Pulumi.yaml").read_text())
    (tmp_path / "__main__.py").write_text((PROJECT_DIR / "__main__.py").read_text())
    (tmp_path / "Pulumi.f.yaml").write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_stack", "--project-dir", str(tmp_path), "plan", "--stack", "f"],
        capture_output=True, text=True, cwd=PROJECT_DIR,
    )
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_a_release_name_of_53_characters_is_accepted():
    plan = plan_of(set_path(dev_config(), "operator.releaseName", "g" * 53))
    assert plan.by_name("gpu-operator-release").inputs["name"] == "g" * 53


# --------------------------------------------------------------------------- values the CLI types
def test_label_values_typed_as_a_number_or_boolean_by_the_cli_are_taken_as_their_text():
    # `pulumi config set --path 'gpu-stack:alerts.dashboard.labels.grafana_dashboard' 1` stores the number 1.
    cfg = set_path(dev_config(), "alerts.dashboard.labels.grafana_dashboard", 1)
    set_path(cfg, "dcgmExporter.serviceMonitor.additionalLabels.scraped", True)
    set_path(cfg, "alerts.labels.tier", 1)
    plan = plan_of(cfg)
    rule = plan.by_name("gpu-monitoring-rules")
    assert all(r["labels"]["tier"] == "1" for g in rule.inputs["spec"]["groups"] for r in g["rules"] if "alert" in r)
    dashboard = plan.by_name("gpu-monitoring-dashboard")
    assert dashboard.inputs["metadata"]["labels"]["grafana_dashboard"] == "1"
    sm = plan.by_name("gpu-operator-release").inputs["values"]["dcgmExporter"]["serviceMonitor"]
    assert sm["additionalLabels"]["scraped"] == "true"


def test_a_node_profile_name_typed_as_a_number_selects_the_profile_of_that_name():
    cfg = set_path(dev_config(), "sharing.profiles.2", {"replicas": 2})
    set_path(cfg, "nodes[1].sharing", 2)
    plan = plan_of(cfg)
    table = plan.by_name("gpu-operator-node-labels-table").inputs["data"]["nodes"]
    assert "gpu-dev-2 nvidia.com/device-plugin.config=2\n" in table


def test_a_string_typed_as_a_number_names_the_cli_flag_that_keeps_it_a_string():
    assert_refused(
        set_path(dev_config(), "operator.releaseName", 123),
        "gpu-stack:operator.releaseName = 123: must be a string (`pulumi config set --path` stores 1, 2.5 or true "
        "as a number or a boolean: set it again with `--type string`)",
    )


def test_a_float_label_value_is_refused_not_guessed():
    assert_refused(set_path(dev_config(), "alerts.dashboard.labels.grafana_dashboard", 1.1), "--type string")
