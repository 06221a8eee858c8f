"""The Grafana dashboard ConfigMap: where it lands, what it shows, and every query parsing in promtool."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from typing import Any

import pytest
import yaml

from gpu_stack.config.dcgm_csv import default_fields
from gpu_stack.design.alerts import metrics_in
from gpu_stack.design.dashboard import DATA_KEY

from ..helpers import assert_refused, dev_config, plan_of, plan_stack_file, set_path
from .test_alerts import EXTRA_METRICS, metrics_csv

CONFIGMAP = "kubernetes:core/v1:ConfigMap"
DASHBOARD = "gpu-monitoring-dashboard"
PROMTOOL = shutil.which("promtool")
VARIABLES = {"$cluster": ".*", "$node": ".*", "$gpu": ".*", "$__rate_interval": "5m"}


def dashboard_of(plan) -> dict[str, Any]:
    return json.loads(plan.by_name(DASHBOARD).inputs["data"][DATA_KEY])


def queries(model: dict[str, Any]) -> list[str]:
    out = [t["expr"] for p in model["panels"] for t in p["targets"]]
    for var in model["templating"]["list"]:
        if var["type"] == "query":
            match = re.fullmatch(r"label_values\((.*), (\w+)\)", var["query"]["query"])
            assert match, var["query"]
            out.append(match.group(1))
    return out


def as_rule_expression(expr: str) -> str:
    """A dashboard query with Grafana's variables replaced by what they expand to (All)."""
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


def promtool_check(tmp_path, exprs: list[str]) -> subprocess.CompletedProcess:
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:query_{i}", "expr": as_rule_expression(e)} for i, e in enumerate(exprs)]}]}
    (tmp_path / "queries.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    assert PROMTOOL is not None  # the test skips first
    return subprocess.run([PROMTOOL, "check", "rules", "queries.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_dev_plan_holds_the_dashboard_configmap_for_the_grafana_sidecar():
    plan = plan_stack_file("dev")
    cm = plan.by_name(DASHBOARD)
    assert cm.type == CONFIGMAP
    assert cm.inputs["metadata"] == {
        "name": "gpu-stack-dashboard",
        "namespace": "gpu-operator",
        "labels": {"grafana_dashboard": "1", "app.kubernetes.io/managed-by": "gpu-stack"},
    }
    assert plan.outputs["dashboardConfigMap"] == "gpu-stack-dashboard"
    model = dashboard_of(plan)
    assert (model["uid"], model["title"]) == ("gpu-stack-gpu-health", "GPU health (gpu-stack)")
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert list(variables) == ["datasource", "cluster", "node", "gpu"]
    assert variables["node"]["query"]["query"] == 'label_values(DCGM_FI_DEV_GPU_TEMP{cluster=~"$cluster"}, Hostname)'
    assert variables["gpu"]["query"]["query"] == 'label_values(DCGM_FI_DEV_GPU_TEMP{cluster=~"$cluster", Hostname=~"$node"}, gpu)'
    titles = [p["title"] for p in model["panels"]]
    assert titles == [
        "GPUs reporting", "Average GPU utilization", "Framebuffer memory used", "Power draw",
        "GPU utilization", "MIG instance activity", "Framebuffer memory used per GPU / MIG instance",
        "Temperature", "Power", "Last XID", "ECC and row remapping",
        "Shared replicas per node: advertised vs allocated",
    ]
    panels = {p["title"]: p for p in model["panels"]}
    # Per GPU queries follow the node and GPU variables; MIG instances by profile and instance id.
    assert panels["GPU utilization"]["targets"][0]["expr"] == 'DCGM_FI_DEV_GPU_UTIL{cluster=~"$cluster", Hostname=~"$node", gpu=~"$gpu"}'
    assert 'GPU_I_ID!=""' in panels["MIG instance activity"]["targets"][0]["expr"]
    assert panels["MIG instance activity"]["targets"][0]["legendFormat"] == "{{Hostname}} GPU {{gpu}} {{GPU_I_PROFILE}} #{{GPU_I_ID}}"
    shared = [t["legendFormat"] for t in panels["Shared replicas per node: advertised vs allocated"]["targets"]]
    assert shared == ["{{node}} {{resource}} advertised", "{{node}} {{resource}} allocated"]


def test_panels_do_not_overlap():
    model = dashboard_of(plan_stack_file("dev"))
    cells = set()
    for panel in model["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, panel["title"]
                cells.add((x, y))


@pytest.mark.parametrize("which", ["default", "full"])
def test_every_dcgm_metric_of_the_dashboard_is_in_the_configured_metric_set(which):
    fields = default_fields() if which == "default" else default_fields() | set(EXTRA_METRICS)
    cfg = dev_config() if which == "default" else set_path(dev_config(), "dcgmExporter.metrics", metrics_csv(fields))
    model = dashboard_of(plan_of(cfg))
    used = set().union(*(metrics_in(q) for q in queries(model)))
    assert used and used <= fields, used - fields
    titles = {p["title"] for p in model["panels"]}
    extra = {"Clock throttling", "XIDs in the exporter's window"}
    assert (extra <= titles) if which == "full" else not (extra & titles)


def test_a_custom_list_without_a_field_drops_its_queries():
    fields = default_fields() - {"DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_POWER_USAGE"}
    model = dashboard_of(plan_of(set_path(dev_config(), "dcgmExporter.metrics", metrics_csv(fields))))
    panels = {p["title"]: p for p in model["panels"]}
    assert "Power" not in panels and "Power draw" not in panels
    assert [t["legendFormat"] for t in panels["Temperature"]["targets"]] == ["{{Hostname}} GPU {{gpu}} GPU"]


@pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (Debian package `prometheus`; .ci/run installs it)")
@pytest.mark.parametrize("which", ["default", "full"])
def test_every_dashboard_query_parses_in_promtool(tmp_path, which):
    cfg = dev_config()
    if which == "full":
        set_path(cfg, "dcgmExporter.metrics", metrics_csv(default_fields() | set(EXTRA_METRICS)))
    exprs = queries(dashboard_of(plan_of(cfg)))
    result = promtool_check(tmp_path, exprs)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(exprs)} rules found" in result.stdout
    # The check bites: a query with a bad matcher is refused.
    broken = promtool_check(tmp_path, [exprs[0].replace("=~", "=~~", 1)])
    assert broken.returncode != 0


def test_dashboard_labels_folder_and_switch_come_from_config():
    cfg = set_path(dev_config(), "alerts.dashboard", {"labels": {"grafana_dashboard": "gpu"}, "folder": "GPU platform"})
    cm = plan_of(cfg).by_name(DASHBOARD)
    assert cm.inputs["metadata"]["labels"] == {"grafana_dashboard": "gpu", "app.kubernetes.io/managed-by": "gpu-stack"}
    assert cm.inputs["metadata"]["annotations"] == {"grafana_folder": "GPU platform"}
    off = plan_of(set_path(dev_config(), "alerts.dashboard.enabled", False))
    assert DASHBOARD not in [r.name for r in off.resources]
    assert off.outputs["dashboardConfigMap"] is None
    # The dashboard stays when only the alerts are turned off.
    alerts_off = plan_of(set_path(dev_config(), "alerts.enabled", False))
    assert alerts_off.by_name(DASHBOARD).type == CONFIGMAP


def test_bad_dashboard_settings_name_the_key():
    assert_refused(
        set_path(dev_config(), "alerts.dashboard.folder", "a/b"),
        "gpu-stack:alerts.dashboard.folder = 'a/b': must be a folder name",
    )
    assert_refused(
        set_path(dev_config(), "alerts.dashboard.lables", {}),
        "gpu-stack:alerts.dashboard.lables: unknown key; did you mean 'labels'?",
    )
