"""GPU health alerts: the PrometheusRule the plan registers, checked and unit-tested with promtool.

The rules under test are the ones the offline plan registers (the PrometheusRule's spec), written
to a rule file; each alert gets synthetic series that make it fire and series that must leave it
silent, and `promtool test rules` (Debian's `prometheus` package) decides.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_stack.config.dcgm_csv import default_fields
from gpu_stack.design.alerts import DECLARED_RECORD, metrics_in

from ..helpers import assert_refused, dev_config, plan_of, plan_stack_file, require_reference, set_path

RULE_TYPE = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"
RULE_RESOURCE = "gpu-monitoring-rules"
PROMETHEUS_CRD = "prometheus-operator-v0.93.0/crd-prometheusrules.yaml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package `prometheus`; .ci/run installs it)")

EXTRA_METRICS = ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_THERMAL_VIOLATION", "DCGM_FI_DEV_POWER_VIOLATION", "DCGM_EXP_XID_ERRORS_COUNT")
ROUTING = {"team": "gpu-platform"}


def metrics_csv(fields) -> str:
    return "".join(f"{f}, {'label' if f == 'DCGM_FI_DRIVER_VERSION' else 'gauge'}, {f.lower()}\n" for f in sorted(fields))


def dev_with_routing() -> dict[str, Any]:
    return set_path(dev_config(), "alerts.labels", dict(ROUTING))


def full_metrics_config() -> dict[str, Any]:
    """dev, with a custom metric list: the default fields plus those the opt-in alerts read."""
    return set_path(dev_with_routing(), "dcgmExporter.metrics", metrics_csv(default_fields() | set(EXTRA_METRICS)))


def rule_spec(plan) -> dict[str, Any]:
    return plan.by_name(RULE_RESOURCE).inputs["spec"]


def alert_names(plan) -> list[str]:
    return [r["alert"] for g in rule_spec(plan)["groups"] for r in g["rules"] if "alert" in r]


@pytest.fixture(scope="module")
def dev_rules() -> dict[str, Any]:
    return rule_spec(plan_of(dev_with_routing()))


@pytest.fixture(scope="module")
def full_rules() -> dict[str, Any]:
    return rule_spec(plan_of(full_metrics_config()))


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    assert PROMTOOL is not None  # needs_promtool skips first
    return subprocess.run([PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def run_unit_tests(tmp_path: Path, rules: dict[str, Any], tests: list[dict[str, Any]]) -> subprocess.CompletedProcess:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    (tmp_path / "tests.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False)
    )
    return promtool("test", "rules", "tests.yaml", cwd=tmp_path)


def gpu(node: str, index: int, **extra: str) -> str:
    labels = {"Hostname": node, "gpu": str(index), "UUID": f"GPU-{node}-{index}", "modelName": "NVIDIA L4",
              "device": f"nvidia{index}", "pci_bus_id": f"00000000:0{index}:00.0", **extra}
    return ", ".join(f'{k}="{v}"' for k, v in labels.items())


def gpu_labels(node: str, index: int, severity: str, **extra: str) -> dict[str, str]:
    return {"Hostname": node, "gpu": str(index), "UUID": f"GPU-{node}-{index}", "modelName": "NVIDIA L4",
            "severity": severity, **ROUTING, **extra}


def gpu_text(node: str, index: int) -> str:
    return f"GPU {index} (NVIDIA L4, GPU-{node}-{index}) on node {node}"


def case(alert: str, at: str, expected: list[dict[str, Any]]) -> dict[str, Any]:
    return {"eval_time": at, "alertname": alert, "exp_alerts": expected}


def fired(labels: dict[str, str], summary: str, description: str) -> dict[str, Any]:
    return {"exp_labels": labels, "exp_annotations": {"summary": summary, "description": description}}


# --------------------------------------------------------------------------- the rules themselves
def test_dev_plan_holds_the_prometheus_rule_in_the_operator_namespace():
    plan = plan_stack_file("dev")
    rule = plan.by_name(RULE_RESOURCE)
    assert rule.type == RULE_TYPE
    assert rule.inputs["apiVersion"] == "monitoring.coreos.com/v1" and rule.inputs["kind"] == "PrometheusRule"
    assert rule.inputs["metadata"]["namespace"] == "gpu-operator"
    # The same label the ServiceMonitor carries, so kube-prometheus-stack's ruleSelector picks it up.
    assert rule.inputs["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert "gpu-operator-namespace" in rule.depends_on
    assert alert_names(plan) == [
        "GpuXidFatal", "GpuXidApplication", "GpuUncorrectableMemoryError", "GpuRowRemapFailure",
        "GpuTemperatureHigh", "GpuMemoryTemperatureHigh", "GpuExporterDown", "GpuNodeNotReporting",
        "GpuNodeFewerGpus", "GpuMigConfigFailed", "GpuSharingSaturated",
    ]
    assert plan.outputs["alertRules"] == alert_names(plan)
    assert plan.warnings == [w for w in plan.warnings if "alert" not in w]


def test_declared_gpus_come_from_the_nodes_of_the_stack(dev_rules):
    record = dev_rules["groups"][0]["rules"][0]
    assert record == {
        "record": DECLARED_RECORD,
        "expr": 'label_replace(vector(2), "Hostname", "gpu-dev-1", "", "") or label_replace(vector(1), "Hostname", "gpu-dev-2", "", "")',
    }


@needs_promtool
@pytest.mark.parametrize("which", ["dev", "full"])
def test_promtool_check_rules_accepts_the_generated_rules(tmp_path, which, dev_rules, full_rules):
    rules = dev_rules if which == "dev" else full_rules
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    result = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(g["rules"]) for g in rules["groups"])
    assert f"SUCCESS: {count} rules found" in result.stdout


def test_rule_manifest_validates_against_the_prometheus_operator_crd(dev_rules, full_rules):
    jsonschema = pytest.importorskip("jsonschema")
    crd = yaml.safe_load(require_reference(PROMETHEUS_CRD).read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = version["schema"]["openAPIV3Schema"]
    plan = plan_of(full_metrics_config())
    inputs = plan.by_name(RULE_RESOURCE).inputs
    manifest = {k: inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}
    # No metaschema check: one pattern of the CRD is Go RE2 syntax Python's re refuses
    # (`^(?i)(abort|warn)?$`, on a field the stack does not set).
    validator = jsonschema.Draft202012Validator(schema)
    assert [e.message for e in validator.iter_errors(manifest)] == []
    # The schema does bite: a `for` that is not a duration is refused.
    broken = json.loads(json.dumps(manifest))
    broken["spec"]["groups"][0]["rules"][1]["for"] = "soon"
    assert [e.message for e in validator.iter_errors(broken)] == ["'soon' does not match '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$'"]


def test_every_dcgm_metric_an_alert_reads_is_in_the_configured_metric_set(dev_rules, full_rules):
    for rules, fields in ((dev_rules, default_fields()), (full_rules, default_fields() | set(EXTRA_METRICS))):
        used = set()
        for group in rules["groups"]:
            for rule in group["rules"]:
                used |= metrics_in(rule["expr"])
        assert used and used <= fields, used - fields
    # With the exporter's own XID counter listed, the XID alerts read it instead of the gauge.
    exprs = {r.get("alert"): r["expr"] for r in full_rules["groups"][0]["rules"]}
    assert metrics_in(exprs["GpuXidFatal"]) == {"DCGM_EXP_XID_ERRORS_COUNT"}
    assert {"GpuEccDoubleBitErrors", "GpuThermalThrottling", "GpuPowerThrottling"} <= set(exprs)


def test_default_metric_list_matches_the_operators(tmp_path):
    path = require_reference() / "dcp-metrics-included.csv"
    from gpu_stack.config.dcgm_csv import csv_fields

    assert default_fields() == csv_fields(path.read_text())


# --------------------------------------------------------------------------- what the plan says
def test_custom_metric_list_without_the_xid_field_names_the_xid_alerts():
    fields = default_fields() - {"DCGM_FI_DEV_XID_ERRORS"}
    plan = plan_of(set_path(dev_config(), "dcgmExporter.metrics", metrics_csv(fields)))
    assert "GpuXidFatal" not in alert_names(plan) and "GpuXidApplication" not in alert_names(plan)
    assert (
        "alert GpuXidFatal (gpu-stack:alerts.rules.xidFatal) gets no data: it needs DCGM_FI_DEV_XID_ERRORS and "
        "gpu-stack:dcgmExporter.metrics does not list it; add it to that list, or set "
        "gpu-stack:alerts.rules.xidFatal.enabled false"
    ) in plan.warnings
    assert any(w.startswith("alert GpuXidApplication (gpu-stack:alerts.rules.xidApplication) gets no data") for w in plan.warnings)
    # The other alerts keep their data and stay.
    assert "GpuTemperatureHigh" in alert_names(plan)


def test_opt_in_alerts_follow_the_metric_list_and_warn_only_when_forced():
    plan = plan_stack_file("dev")
    assert "GpuEccDoubleBitErrors" not in alert_names(plan)
    assert not any("GpuEccDoubleBitErrors" in w for w in plan.warnings)
    forced = plan_of(set_path(dev_config(), "alerts.rules.eccDoubleBit.enabled", True))
    assert "GpuEccDoubleBitErrors" not in alert_names(forced)
    assert any(
        w.startswith("alert GpuEccDoubleBitErrors (gpu-stack:alerts.rules.eccDoubleBit) gets no data: it needs "
                     "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL and the exporter's default metric list lacks it")
        for w in forced.warnings
    )


def test_thresholds_for_severity_and_routing_labels_come_from_config():
    cfg = dev_config()
    set_path(cfg, "alerts.rules.gpuTemperature", {"threshold": 80, "for": "2m", "severity": "critical"})
    set_path(cfg, "alerts.rules.migConfigFailed.enabled", False)
    set_path(cfg, "alerts.labels", {"team": "ml-infra", "pager": "gpu"})
    set_path(cfg, "alerts.ruleLabels", {"prometheus": "main"})
    plan = plan_of(cfg)
    rule = plan.by_name(RULE_RESOURCE)
    temp = next(r for r in rule.inputs["spec"]["groups"][0]["rules"] if r.get("alert") == "GpuTemperatureHigh")
    assert temp["expr"] == "max by (Hostname, gpu, UUID, modelName) (DCGM_FI_DEV_GPU_TEMP) >= 80"
    assert temp["for"] == "2m"
    assert temp["labels"] == {"severity": "critical", "team": "ml-infra", "pager": "gpu"}
    assert "GpuMigConfigFailed" not in alert_names(plan)
    assert rule.inputs["metadata"]["labels"] == {"prometheus": "main", "app.kubernetes.io/managed-by": "gpu-stack"}
    # Untouched alerts keep their own defaults (not the shared model defaults).
    fatal = next(r for r in rule.inputs["spec"]["groups"][0]["rules"] if r.get("alert") == "GpuXidFatal")
    assert (fatal["for"], fatal["labels"]["severity"]) == ("0s", "critical")


def test_alerts_off_registers_no_rule_and_follow_the_service_monitor():
    plan = plan_of(set_path(dev_config(), "alerts.enabled", False))
    assert plan.of_type(RULE_TYPE) == []
    no_monitor = plan_of({**dev_config(), "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": False}}})
    assert no_monitor.of_type(RULE_TYPE) == []
    assert no_monitor.outputs["alertRules"] == []
    # The exporter off: no rules by default, and no warning per alert.
    no_exporter = plan_of({**dev_config(), "dcgmExporter": {"enabled": False}})
    assert no_exporter.of_type(RULE_TYPE) == [] and not any("alert" in w for w in no_exporter.warnings)


def test_an_alert_edit_changes_only_the_rule():
    from gpu_stack.offline.diff import diff_plans

    base = plan_of(dev_config())
    head = plan_of(set_path(dev_config(), "alerts.rules.gpuTemperature.threshold", 80))
    diff = diff_plans(base, head)
    assert [(c.action, c.name) for c in diff.changes] == [("update", RULE_RESOURCE)]
    assert sorted((f.old, f.new) for f in diff.changes[0].fields) == [
        (("GPU {{ $labels.gpu }} ({{ $labels.modelName }}, {{ $labels.UUID }}) on node {{ $labels.Hostname }}: GPU temperature "
         "{{ $value }} C (threshold 85 C); clocks slow down to cool it."),
         ("GPU {{ $labels.gpu }} ({{ $labels.modelName }}, {{ $labels.UUID }}) on node {{ $labels.Hostname }}: GPU temperature "
         "{{ $value }} C (threshold 80 C); clocks slow down to cool it.")),
        ("max by (Hostname, gpu, UUID, modelName) (DCGM_FI_DEV_GPU_TEMP) >= 85",
         "max by (Hostname, gpu, UUID, modelName) (DCGM_FI_DEV_GPU_TEMP) >= 80"),
    ]


BAD_SETTINGS = [
    ("alerts.rules.gpuTemperature.for", "soon", "gpu-stack:alerts.rules.gpuTemperature.for = 'soon': must be a Prometheus duration such as 0s, 5m or 1h30m"),
    ("alerts.rules.xidFatal.severity", "page", "gpu-stack:alerts.rules.xidFatal.severity = 'page': must be one of 'critical', 'warning' or 'info'"),
    ("alerts.rules.xidFatal.codes", [], "gpu-stack:alerts.rules.xidFatal.codes = []: must be a non-empty list of distinct XID codes"),
    ("alerts.rules.sharingSaturated.threshold", 1.5, "gpu-stack:alerts.rules.sharingSaturated.threshold = 1.5: must be at most 1"),
    ("alerts.rules.gpuTemperature.threshold", -1, "gpu-stack:alerts.rules.gpuTemperature.threshold = -1: must be at least 0"),
    ("alerts.rules.gpuTemp", {"threshold": 80}, "gpu-stack:alerts.rules.gpuTemp: unknown key; did you mean 'gpuTemperature'?"),
    ("alerts.labels", {"severity": "page"}, "gpu-stack:alerts.labels = {'severity': 'page'}: 'severity' is set by the stack itself"),
    ("alerts.labels", {"team-name": "x"}, "gpu-stack:alerts.labels = {'team-name': 'x'}: 'team-name' is not a Prometheus label name"),
    ("alerts.ruleLabels", {"release": "kube prometheus"}, "gpu-stack:alerts.ruleLabels = {'release': 'kube prometheus'}: label 'release' value 'kube prometheus' must be a Kubernetes label value"),
    ("alerts.exporterJob", "a b", "gpu-stack:alerts.exporterJob = 'a b': must be a Prometheus job name"),
]


@pytest.mark.parametrize("path,value,message", BAD_SETTINGS, ids=[b[0] + "=" + repr(b[1]) for b in BAD_SETTINGS])
def test_bad_alert_settings_name_the_key_and_register_nothing(path, value, message):
    assert_refused(set_path(dev_config(), path, value), message)


# --------------------------------------------------------------------------- promtool unit tests
@needs_promtool
def test_unit_tests_can_fail(tmp_path, dev_rules):
    """The harness is not vacuous: a wrong expectation makes promtool fail."""
    tests = [{
        "interval": "1m",
        "input_series": [{"series": f"DCGM_FI_DEV_GPU_TEMP{{{gpu('gpu-dev-1', 0)}}}", "values": "50x20"}],
        "alert_rule_test": [case("GpuTemperatureHigh", "15m", [fired(gpu_labels("gpu-dev-1", 0, "warning"), "x", "y")])],
    }]
    result = run_unit_tests(tmp_path, dev_rules, tests)
    assert result.returncode != 0
    assert "GpuTemperatureHigh" in result.stdout + result.stderr


@needs_promtool
def test_xid_codes_follow_the_catalogs_immediate_action():
    from gpu_stack.config import load_settings

    rules = load_settings(dev_config()).alerts.rules
    # 92 (high single-bit ECC rate) is informational; 94 (contained ECC) asks to restart the application.
    assert 92 not in rules.xid_fatal.codes and 92 not in rules.xid_application.codes
    assert 94 in rules.xid_application.codes and 94 not in rules.xid_fatal.codes
    assert {48, 79, 95} <= set(rules.xid_fatal.codes) and {13, 31, 43} <= set(rules.xid_application.codes)


def test_no_xid_alert_on_the_gauge_fires_on_the_value_alone(dev_rules):
    for r in dev_rules["groups"][0]["rules"]:
        if r.get("alert") in ("GpuXidFatal", "GpuXidApplication"):
            assert "changes(DCGM_FI_DEV_XID_ERRORS[15m]) > 0" in r["expr"], r["expr"]


@needs_promtool
def test_xid_alerts_tell_reset_codes_from_application_faults(tmp_path, dev_rules):
    n = "gpu-dev-1"
    tests = [{
        "interval": "1m",
        "input_series": [
            # GPU 0 falls off the bus (XID 79) at minute 5 and stays there.
            {"series": f"DCGM_FI_DEV_XID_ERRORS{{{gpu(n, 0)}}}", "values": "0x4 79x40"},
            # GPU 1: an application's illegal memory access (XID 13) at minute 5, then nothing new.
            {"series": f"DCGM_FI_DEV_XID_ERRORS{{{gpu(n, 1)}}}", "values": "0x4 13x40"},
        ],
        "alert_rule_test": [
            case("GpuXidFatal", "3m", []),
            case("GpuXidApplication", "3m", []),
            case("GpuXidFatal", "10m", [fired(gpu_labels(n, 0, "critical"),
                 f"GPU 0 on {n}: XID that needs a GPU reset or repair", f"{gpu_text(n, 0)}: the last XID reported is 79.")]),
            case("GpuXidApplication", "10m", [fired(gpu_labels(n, 1, "warning"),
                 f"GPU 1 on {n}: XID after which the application must be restarted", f"{gpu_text(n, 1)}: the last XID reported is 13.")]),
            # The gauge keeps the last XID until the next one: a rule on its value would page for
            # ever after the reset. Both alerts stop once no new XID came for 15 minutes.
            case("GpuXidFatal", "40m", []),
            case("GpuXidApplication", "40m", []),
        ],
    }]
    result = run_unit_tests(tmp_path, dev_rules, tests)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_xid_count_alerts_use_the_xid_label(tmp_path, full_rules):
    n = "gpu-dev-2"
    window = {"window_size_in_ms": "300000"}
    tests = [{
        "interval": "1m",
        "input_series": [
            {"series": f"DCGM_EXP_XID_ERRORS_COUNT{{{gpu(n, 0, xid='48', **window)}}}", "values": "0x4 2x5 0x20"},
            {"series": f"DCGM_EXP_XID_ERRORS_COUNT{{{gpu(n, 0, xid='31', **window)}}}", "values": "0x4 1x5 0x20"},
        ],
        "alert_rule_test": [
            case("GpuXidFatal", "2m", []),
            case("GpuXidFatal", "7m", [fired(gpu_labels(n, 0, "critical", xid="48"),
                 f"GPU 0 on {n}: XID that needs a GPU reset or repair",
                 f"{gpu_text(n, 0)}: XID 48 was reported 2 times in the exporter's window.")]),
            case("GpuXidApplication", "7m", [fired(gpu_labels(n, 0, "warning", xid="31"),
                 f"GPU 0 on {n}: XID after which the application must be restarted",
                 f"{gpu_text(n, 0)}: XID 31 was reported 1 times in the exporter's window.")]),
            case("GpuXidFatal", "20m", []),
        ],
    }]
    result = run_unit_tests(tmp_path, full_rules, tests)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_memory_error_alerts(tmp_path, full_rules):
    n = "gpu-dev-1"
    tests = [{
        "interval": "1m",
        "input_series": [
            # GPU 0 has carried 2 remapped rows for long (no alert); a third appears at minute 10.
            {"series": f"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{gpu(n, 0)}}}", "values": "2x9 3x40"},
            {"series": f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{gpu(n, 0)}}}", "values": "0x9 1x40"},
            {"series": f"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{gpu(n, 1)}}}", "values": "0x9 1x40"},
            {"series": f"DCGM_FI_DEV_ROW_REMAP_FAILURE{{{gpu(n, 1)}}}", "values": "0x50"},
        ],
        "alert_rule_test": [
            case("GpuUncorrectableMemoryError", "5m", []),
            case("GpuRowRemapFailure", "5m", []),
            case("GpuEccDoubleBitErrors", "5m", []),
            case("GpuUncorrectableMemoryError", "12m", [fired(gpu_labels(n, 0, "warning"),
                 f"GPU 0 on {n}: memory row remapped after an uncorrectable error",
                 f"{gpu_text(n, 0)}: about 1 rows remapped for uncorrectable ECC errors in 15 minutes; reset the GPU to apply the remapping.")]),
            case("GpuRowRemapFailure", "12m", [fired(gpu_labels(n, 0, "critical"),
                 f"GPU 0 on {n}: row remapping failed",
                 f"{gpu_text(n, 0)}: the GPU could not remap a failing memory row; take it out of service and replace it.")]),
            case("GpuEccDoubleBitErrors", "12m", [fired(gpu_labels(n, 1, "critical"),
                 f"GPU 1 on {n}: double-bit ECC errors",
                 f"{gpu_text(n, 1)}: about 1 uncorrectable (double-bit) ECC errors in 15 minutes; drain the node and reset the GPU.")]),
            # No new error for 15 minutes: the counters' alerts resolve, the failure does not.
            case("GpuUncorrectableMemoryError", "40m", []),
            case("GpuEccDoubleBitErrors", "40m", []),
            case("GpuRowRemapFailure", "40m", [fired(gpu_labels(n, 0, "critical"),
                 f"GPU 0 on {n}: row remapping failed",
                 f"{gpu_text(n, 0)}: the GPU could not remap a failing memory row; take it out of service and replace it.")]),
        ],
    }]
    result = run_unit_tests(tmp_path, full_rules, tests)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_temperature_and_throttling_alerts(tmp_path, full_rules):
    n = "gpu-dev-1"
    tests = [{
        "interval": "1m",
        "input_series": [
            {"series": f"DCGM_FI_DEV_GPU_TEMP{{{gpu(n, 0)}}}", "values": "70x4 90x30"},
            {"series": f"DCGM_FI_DEV_GPU_TEMP{{{gpu(n, 1)}}}", "values": "84x34"},
            {"series": f"DCGM_FI_DEV_MEMORY_TEMP{{{gpu(n, 0)}}}", "values": "80x4 97x30"},
            # Held down for heat half of the time on GPU 0, 1.7 % on GPU 1 (microseconds per minute).
            {"series": f"DCGM_FI_DEV_THERMAL_VIOLATION{{{gpu(n, 0)}}}", "values": "0+30000000x34"},
            {"series": f"DCGM_FI_DEV_THERMAL_VIOLATION{{{gpu(n, 1)}}}", "values": "0+1000000x34"},
            {"series": f"DCGM_FI_DEV_POWER_VIOLATION{{{gpu(n, 1)}}}", "values": "0+36000000x34"},
        ],
        "alert_rule_test": [
            # Hot since minute 5, `for: 5m`: pending at 8, firing at 12.
            case("GpuTemperatureHigh", "8m", []),
            case("GpuTemperatureHigh", "12m", [fired(gpu_labels(n, 0, "warning"), f"GPU 0 on {n}: temperature high",
                 f"{gpu_text(n, 0)}: GPU temperature 90 C (threshold 85 C); clocks slow down to cool it.")]),
            case("GpuMemoryTemperatureHigh", "12m", [fired(gpu_labels(n, 0, "warning"), f"GPU 0 on {n}: memory temperature high",
                 f"{gpu_text(n, 0)}: memory temperature 97 C (threshold 95 C).")]),
            case("GpuThermalThrottling", "8m", []),
            case("GpuThermalThrottling", "20m", [fired(gpu_labels(n, 0, "warning"), f"GPU 0 on {n}: thermal throttling",
                 f"{gpu_text(n, 0)}: clocks held down for heat 50% of the time.")]),
            case("GpuPowerThrottling", "10m", []),
            case("GpuPowerThrottling", "25m", [fired(gpu_labels(n, 1, "warning"), f"GPU 1 on {n}: power throttling",
                 f"{gpu_text(n, 1)}: clocks held down by the power cap 60% of the time.")]),
        ],
    }]
    result = run_unit_tests(tmp_path, full_rules, tests)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_exporter_down_and_missing(tmp_path, dev_rules):
    job = "nvidia-dcgm-exporter"
    down_desc = "Prometheus cannot scrape the DCGM exporter (job {job}, target {target}), or has no target for it: GPU metrics and GPU alerts are blind."
    labels = {"job": job, "severity": "critical", **ROUTING}
    tests = [
        {
            "interval": "1m",
            "input_series": [
                {"series": f'up{{job="{job}", instance="10.0.0.1:9400", pod="nvidia-dcgm-exporter-a"}}', "values": "1x4 0x30"},
                {"series": f'up{{job="{job}", instance="10.0.0.2:9400", pod="nvidia-dcgm-exporter-b"}}', "values": "1x34"},
                {"series": 'up{job="node-exporter", instance="10.0.0.3:9100"}', "values": "0x34"},
            ],
            "alert_rule_test": [
                case("GpuExporterDown", "10m", []),
                case("GpuExporterDown", "20m", [fired({**labels, "instance": "10.0.0.1:9400", "pod": "nvidia-dcgm-exporter-a"},
                     "DCGM exporter not scraped", down_desc.format(job=job, target="10.0.0.1:9400"))]),
            ],
        },
        {
            # Prometheus has no exporter target at all (ServiceMonitor not selected, DaemonSet gone).
            "interval": "1m",
            "input_series": [{"series": 'up{job="node-exporter", instance="10.0.0.3:9100"}', "values": "1x20"}],
            "alert_rule_test": [case("GpuExporterDown", "15m", [fired(labels, "DCGM exporter not scraped", down_desc.format(job=job, target=""))])],
        },
    ]
    result = run_unit_tests(tmp_path, dev_rules, tests)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_node_gpu_count_alerts_compare_with_the_declared_nodes(tmp_path, dev_rules):
    # gpu-dev-1 declares 2 GPUs: GPU 0 reports twice (two pods attributed), GPU 1 stopped at minute 5.
    # gpu-dev-2 declares 1 GPU and reports it until minute 5, then nothing.
    tests = [{
        "interval": "1m",
        "input_series": [
            {"series": f"DCGM_FI_DEV_GPU_TEMP{{{gpu('gpu-dev-1', 0, exported_pod='a')}}}", "values": "40x40"},
            {"series": f"DCGM_FI_DEV_GPU_TEMP{{{gpu('gpu-dev-1', 0, exported_pod='b')}}}", "values": "40x40"},
            {"series": f"DCGM_FI_DEV_GPU_TEMP{{{gpu('gpu-dev-1', 1)}}}", "values": "40x4"},
            {"series": f"DCGM_FI_DEV_GPU_TEMP{{{gpu('gpu-dev-2', 0)}}}", "values": "40x4"},
        ],
        "alert_rule_test": [
            case("GpuNodeFewerGpus", "4m", []),
            case("GpuNodeNotReporting", "4m", []),
            # Series go stale 5 minutes after their last sample; `for: 10m` after that.
            case("GpuNodeFewerGpus", "25m", [fired({"Hostname": "gpu-dev-1", "severity": "critical", **ROUTING},
                 "GPU node gpu-dev-1 reports fewer GPUs than declared",
                 "Node gpu-dev-1 reports 1 GPUs, fewer than nodes[i].gpu.count declares: a GPU fell off the bus or lost its driver.")]),
            case("GpuNodeNotReporting", "25m", [fired({"Hostname": "gpu-dev-2", "severity": "critical", **ROUTING},
                 "GPU node gpu-dev-2 reports no GPU",
                 "Node gpu-dev-2 should have 1 GPUs (nodes[i].gpu.count) but the DCGM exporter reports none: exporter pod down, driver gone, or the node is off.")]),
        ],
    }]
    result = run_unit_tests(tmp_path, dev_rules, tests)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_mig_config_failed_reads_the_node_label_from_kube_state_metrics(tmp_path, dev_rules):
    ksm = 'job="kube-state-metrics", instance="10.0.0.9:8080"'
    tests = [{
        "interval": "1m",
        "input_series": [
            {"series": f'kube_node_labels{{{ksm}, node="gpu-dev-1", label_nvidia_com_mig_config_state="failed"}}', "values": "1x20"},
            {"series": f'kube_node_labels{{{ksm}, node="gpu-dev-2", label_nvidia_com_mig_config_state="success"}}', "values": "1x20"},
        ],
        "alert_rule_test": [
            case("GpuMigConfigFailed", "3m", []),
            case("GpuMigConfigFailed", "10m", [fired({"node": "gpu-dev-1", "severity": "critical", **ROUTING},
                 "MIG reconfiguration failed on gpu-dev-1",
                 "mig-manager set nvidia.com/mig.config.state=failed on node gpu-dev-1: the MIG layout of its nvidia.com/mig.config "
                 "label was not applied (profile not valid for the GPU, or GPUs busy). See the nvidia-mig-manager pod's log.")]),
        ],
    }]
    result = run_unit_tests(tmp_path, dev_rules, tests)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
def test_sharing_saturated_counts_only_live_pods_against_the_advertised_replicas(tmp_path, dev_rules):
    ksm = 'job="kube-state-metrics"'
    series = [
        # dev: gpu-dev-1 advertises 2 GPUs x 4 replicas, gpu-dev-2 1 x 4.
        (f'kube_node_status_allocatable{{{ksm}, node="gpu-dev-1", resource="nvidia_com_gpu", unit="integer"}}', "8x40"),
        (f'kube_node_status_allocatable{{{ksm}, node="gpu-dev-2", resource="nvidia_com_gpu", unit="integer"}}', "4x40"),
    ]
    pods = [("p1", "gpu-dev-1", 5, "Running"), ("p2", "gpu-dev-1", 3, "Pending"), ("p3", "gpu-dev-2", 3, "Running"), ("p4", "gpu-dev-2", 1, "Succeeded")]
    for pod, node, gpus, phase in pods:
        series.append((f'kube_pod_container_resource_requests{{{ksm}, namespace="ml", pod="{pod}", container="c", node="{node}", resource="nvidia_com_gpu", unit="integer"}}', f"{gpus}x40"))
        for p in ("Pending", "Running", "Succeeded"):
            series.append((f'kube_pod_status_phase{{{ksm}, namespace="ml", pod="{pod}", phase="{p}"}}', f"{1 if p == phase else 0}x40"))
    tests = [{
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series],
        "alert_rule_test": [
            case("GpuSharingSaturated", "20m", []),
            # gpu-dev-1: 8 of 8 requested for 30 minutes; gpu-dev-2: 3 of 4 (the finished pod does not count).
            case("GpuSharingSaturated", "35m", [fired({"node": "gpu-dev-1", "resource": "nvidia_com_gpu", "severity": "warning", **ROUTING},
                 "Shared GPUs of gpu-dev-1 are all allocated",
                 "Pods request 100% of the nvidia_com_gpu replicas node gpu-dev-1 advertises: new GPU pods stay Pending. "
                 "Add replicas (sharing.replicas) or nodes.")]),
        ],
    }]
    result = run_unit_tests(tmp_path, dev_rules, tests)
    assert result.returncode == 0, result.stdout + result.stderr


@needs_promtool
@pytest.mark.parametrize("stack", ["staging", "prod"])
def test_every_stack_files_rules_pass_promtool(tmp_path, stack):
    plan = plan_stack_file(stack)
    rules = rule_spec(plan)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    result = promtool("check", "rules", "rules.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    used = set().union(*(metrics_in(r["expr"]) for g in rules["groups"] for r in g["rules"]))
    assert used <= default_fields()


def test_saturation_watches_the_renamed_shared_resource_of_shared_nodes_only():
    cfg = set_path(dev_config(), "sharing.renameByDefault", True)
    set_path(cfg, "nodes[1].sharing", "none")
    rules = rule_spec(plan_of(cfg))["groups"][0]["rules"]
    expr = next(r["expr"] for r in rules if r.get("alert") == "GpuSharingSaturated")
    assert 'kube_node_status_allocatable{node=~"gpu-dev-1", resource=~"nvidia_com_gpu_shared"}' in expr
    assert "gpu-dev-2" not in expr
    # No shared node at all: no saturation alert.
    unshared = plan_of({**dev_config(), "sharing": {"mode": "none"}})
    assert "GpuSharingSaturated" not in alert_names(unshared)


# --------------------------------------------------------------------------- any input
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st  # noqa: E402

ALERT_KEYS = ["enabled", "for", "severity", "threshold", "codes", "labels", "ruleLabels", "rules", "dashboard",
              "exporterJob", "folder", "xidFatal", "gpuTemperature", "sharingSaturated", "fewerGpus", "team", "x"]
alert_leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 2000), st.floats(allow_nan=True, allow_infinity=True),
                       st.text(max_size=10), st.sampled_from(["5m", "0s", "critical", "info", "gpu", "1"]))
alert_value = st.recursive(
    alert_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(ALERT_KEYS), inner, max_size=4)),
    max_leaves=16,
)


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(alert_value)
def test_any_alerts_config_is_refused_with_named_keys_or_built(value):
    from gpu_stack.config import SettingsError, load_settings
    from gpu_stack.design.derive import derive

    try:
        settings = load_settings({"alerts": value, "nodes": dev_config()["nodes"]})
    except SettingsError as exc:
        assert exc.problems and all(p.key.startswith("gpu-stack:") for p in exc.problems)
        return
    config = derive(settings).alerts
    for group in config.groups:
        for rule in group["rules"]:
            assert rule["expr"] and not re.search(r"\b(nan|inf)\b", rule["expr"], re.IGNORECASE)
