"""DCGM exporter: the custom metrics ConfigMap, its CSV checks, and the ServiceMonitor values."""

from __future__ import annotations

import pytest

from gpu_stack.config.dcgm_csv import csv_errors
from gpu_stack.design.dcgm import CSV_KEY
from gpu_stack.offline.runner import PlanError

from ..helpers import assert_refused, dev_config, plan_of, plan_stack_file, require_reference, set_path

CONFIGMAP = "kubernetes:core/v1:ConfigMap"
METRICS_CM = "gpu-operator-dcgm-metrics"
RELEASE_NAME = "gpu-operator-release"
GOOD_CSV = """# Format: DCGM FIELD, Prometheus metric type, help message
DCGM_FI_DEV_GPU_UTIL,      gauge, GPU utilization (in %).

DCGM_FI_DEV_FB_USED,       gauge, Framebuffer memory used (in MiB).
DCGM_FI_DEV_XID_ERRORS,    gauge, Value of the last XID error encountered.
DCGM_FI_DRIVER_VERSION,    label, Driver Version
"""


def test_dev_service_monitor_flows_to_the_chart():
    values = plan_stack_file("dev").by_name(RELEASE_NAME).inputs["values"]
    assert values["dcgmExporter"]["enabled"] is True
    assert values["dcgmExporter"]["serviceMonitor"] == {
        "enabled": True, "interval": "15s", "honorLabels": False,
        "additionalLabels": {"release": "kube-prometheus-stack"},
    }
    assert "config" not in values["dcgmExporter"]


def test_custom_metrics_become_a_configmap_named_in_the_values():
    cfg = set_path(dev_config(), "dcgmExporter.metrics", GOOD_CSV)
    set_path(cfg, "dcgmExporter.serviceMonitor.interval", "30s")
    plan = plan_of(cfg)
    cm = plan.by_name(METRICS_CM)
    assert cm.type == CONFIGMAP
    assert cm.inputs["metadata"]["namespace"] == "gpu-operator"
    assert cm.inputs["data"] == {CSV_KEY: GOOD_CSV}
    values = plan.by_name(RELEASE_NAME).inputs["values"]["dcgmExporter"]
    assert values["config"] == {"name": cm.inputs["metadata"]["name"]}
    assert values["serviceMonitor"]["interval"] == "30s"
    assert METRICS_CM in plan.by_name(RELEASE_NAME).depends_on
    # A metrics edit gives a new name, so the exporter re-reads it.
    other = plan_of(set_path(dev_config(), "dcgmExporter.metrics", GOOD_CSV.replace("label,", "label ,")))
    assert other.by_name(METRICS_CM).inputs["metadata"]["name"] != cm.inputs["metadata"]["name"]


@pytest.mark.parametrize("name", ["default-counters.csv", "dcp-metrics-included.csv"])
def test_nvidias_own_metric_lists_pass_the_checks(name):
    path = require_reference() / name
    assert csv_errors(path.read_text()) == []


CSV_REJECTIONS = [
    ("two fields", GOOD_CSV + "DCGM_FI_DEV_SM_CLOCK, gauge\n", "line 7: 2 fields, need exactly 3"),
    ("comma in help", GOOD_CSV + "DCGM_FI_DEV_SM_CLOCK, gauge, SM clock, in MHz\n", "line 7: 4 fields, need exactly 3: FIELD, type, help"),
    ("unknown type", "DCGM_FI_DEV_SM_CLOCK, gauges, SM clock\n", "line 1: type 'gauges' must be one of gauge, counter, histogram, summary, label"),
    ("not a DCGM field", "# x\nGPU_UTIL, gauge, util\n", "line 2: 'GPU_UTIL' is not a DCGM field name dcgm-exporter knows (DCGM_FI_..., DCGM_EXP_..."),
    ("duplicate field", GOOD_CSV + "DCGM_FI_DEV_GPU_UTIL, gauge, again\n", "line 7: DCGM_FI_DEV_GPU_UTIL is already listed on line 2"),
    ("empty help", "DCGM_FI_DEV_GPU_UTIL, gauge,\n", "line 1: the help text is empty"),
    ("only comments", "# nothing\n\n", "lists no metric"),
]


@pytest.mark.parametrize("label,csv,message", CSV_REJECTIONS, ids=[c[0] for c in CSV_REJECTIONS])
def test_bad_metrics_csv_is_a_settings_error_naming_the_line(label, csv, message):
    with pytest.raises(PlanError) as info:
        plan_of(set_path(dev_config(), "dcgmExporter.metrics", csv))
    text = str(info.value)
    assert "gpu-stack:dcgmExporter.metrics: invalid metrics CSV: " in text
    assert message in text
    assert info.value.registered == 0


def test_metrics_with_the_exporter_off_is_a_settings_error():
    assert_refused(
        {"dcgmExporter": {"enabled": False, "metrics": GOOD_CSV}},
        "gpu-stack:dcgmExporter.metrics: has no effect while dcgmExporter.enabled is false",
    )


def test_bad_service_monitor_interval_names_its_key():
    assert_refused(
        set_path(dev_config(), "dcgmExporter.serviceMonitor.interval", "fast"),
        "gpu-stack:dcgmExporter.serviceMonitor.interval = 'fast': must be a Prometheus duration",
    )


def test_relabelings_reach_the_chart_in_the_crds_spelling():
    cfg = set_path(dev_config(), "dcgmExporter.serviceMonitor.relabelings", [
        {"source_labels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance"},
        {"action": "labeldrop", "regex": "pod"},
    ])
    sm = plan_of(cfg).by_name(RELEASE_NAME).inputs["values"]["dcgmExporter"]["serviceMonitor"]
    assert sm["relabelings"] == [
        {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance", "action": "replace"},
        {"regex": "pod", "action": "labeldrop"},
    ]
    assert_refused(
        set_path(dev_config(), "dcgmExporter.serviceMonitor.relabelings", [{"action": "rename"}]),
        "gpu-stack:dcgmExporter.serviceMonitor.relabelings[0].action = 'rename': must be one of",
    )


def test_a_path_edit_of_one_dcgm_sub_key_keeps_every_other_default(tmp_path):
    # What `pulumi config set --path 'gpu-stack:dcgmExporter.serviceMonitor.interval' 30s` writes:
    # the stack's own gpu-stack:dcgmExporter with that one key. A project-level value in Pulumi.yaml
    # would be replaced whole by it; the defaults live in the models, so nothing is lost.
    import yaml

    from gpu_stack.config.stack_files import read_stack
    from gpu_stack.offline.runner import PROJECT_DIR, run_program

    assert "config" not in yaml.safe_load((PROJECT_DIR / "Pulumi.yaml").read_text())
    (tmp_path / "Pulumi.yaml").write_text((PROJECT_DIR / "Pulumi.yaml").read_text())
    stack = yaml.safe_load((PROJECT_DIR / "Pulumi.dev.yaml").read_text())
    assert "gpu-stack:dcgmExporter" not in stack["config"]
    stack["config"]["gpu-stack:dcgmExporter"] = {"serviceMonitor": {"interval": "30s"}}
    (tmp_path / "Pulumi.edited.yaml").write_text(yaml.safe_dump(stack))
    plan = run_program(read_stack(tmp_path, "edited"), PROJECT_DIR)
    sm = plan.by_name(RELEASE_NAME).inputs["values"]["dcgmExporter"]["serviceMonitor"]
    assert sm["enabled"] is True and sm["interval"] == "30s"
    assert sm["additionalLabels"] == {"release": "kube-prometheus-stack"}
    rule = plan.by_name("gpu-monitoring-rules")  # the alerts stay on with the ServiceMonitor
    assert rule.inputs["metadata"]["labels"]["release"] == "kube-prometheus-stack"
