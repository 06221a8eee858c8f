"""The Grafana dashboard of the stack's GPUs, generated from `alerts.dashboard` (no Pulumi, nothing copied).

A ConfigMap holding the dashboard JSON, labelled for kube-prometheus-stack's dashboard sidecar
(`grafana_dashboard: "1"` by default). Panels per cluster, node, GPU and MIG instance:
utilization, memory, temperature, power, XID and ECC counters, and per node the shared
replicas advertised against those allocated. A query reading a DCGM field the exporter of this
stack does not report (`DcgmMetricsConfig.fields`, derived once) is left out (and a panel left
without a query is dropped), so every panel shows data the cluster has.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from ..config.monitoring import DashboardSettings, DcgmExporterSettings
from .alerts import metrics_in

CONFIGMAP_NAME = "gpu-stack-dashboard"
DATA_KEY = "gpu-stack-gpu-health.json"
UID = "gpu-stack-gpu-health"
TITLE = "GPU health (gpu-stack)"
FOLDER_ANNOTATION = "grafana_folder"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'cluster=~"$cluster", Hostname=~"$node", gpu=~"$gpu"'
"""Selector of the node and GPU variables on the exporter's series."""
NODE_SEL = 'cluster=~"$cluster", Hostname=~"$node"'
KSM_SEL = 'cluster=~"$cluster", node=~"$node"'
GPU_RESOURCES = 'resource=~"nvidia_com_gpu.*|nvidia_com_mig_.*"'
RUNNING = 'max by (namespace, pod) (kube_pod_status_phase{phase=~"Pending|Running"} == 1)'
LEGEND_GPU = "{{Hostname}} GPU {{gpu}}"
LEGEND_MIG = "{{Hostname}} GPU {{gpu}} {{GPU_I_PROFILE}} #{{GPU_I_ID}}"


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str = ""


@dataclass(frozen=True)
class Panel:
    title: str
    kind: str
    """timeseries or stat."""
    targets: tuple[Target, ...]
    unit: str = "short"
    description: str = ""
    width: int = 12
    height: int = 8


@dataclass(frozen=True)
class DashboardConfig:
    enabled: bool
    configmap_name: str = CONFIGMAP_NAME
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    data: dict[str, str] = field(default_factory=dict)
    panels: tuple[Panel, ...] = ()
    """The panels kept (their queries read only reported fields)."""
    variables: tuple[dict[str, Any], ...] = ()
    dropped: tuple[str, ...] = ()
    """Titles of panels left out for lack of metrics."""


def dashboard_enabled(d: DashboardSettings, exporter: DcgmExporterSettings) -> bool:
    return exporter.enabled and exporter.service_monitor.enabled if d.enabled is None else d.enabled


def _panels() -> list[Panel]:
    return [
        Panel("GPUs reporting", "stat", (Target(f"count(count by (Hostname, UUID) (DCGM_FI_DEV_GPU_TEMP{{{NODE_SEL}}}))"),), width=6, height=4,
              description="Physical GPUs the DCGM exporter reports on the selected nodes."),
        Panel("Average GPU utilization", "stat", (Target(f"avg(DCGM_FI_DEV_GPU_UTIL{{{SEL}}})"),), unit="percent", width=6, height=4,
              description="GPUs in MIG mode do not report it (see the MIG instance panel)."),
        Panel("Framebuffer memory used", "stat",
              (Target(f"sum(DCGM_FI_DEV_FB_USED{{{SEL}}}) / (sum(DCGM_FI_DEV_FB_USED{{{SEL}}}) + sum(DCGM_FI_DEV_FB_FREE{{{SEL}}}))"),),
              unit="percentunit", width=6, height=4),
        Panel("Power draw", "stat", (Target(f"sum(DCGM_FI_DEV_POWER_USAGE{{{SEL}}})"),), unit="watt", width=6, height=4),
        Panel("GPU utilization", "timeseries", (Target(f"DCGM_FI_DEV_GPU_UTIL{{{SEL}}}", LEGEND_GPU),), unit="percent"),
        Panel("MIG instance activity", "timeseries",
              (Target(f'DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{SEL}, GPU_I_ID!=""}}', LEGEND_MIG),), unit="percentunit",
              description="Graphics engine activity of each MIG instance (profiling field)."),
        Panel("Framebuffer memory used per GPU / MIG instance", "timeseries",
              (Target(f"DCGM_FI_DEV_FB_USED{{{SEL}}} / (DCGM_FI_DEV_FB_USED{{{SEL}}} + DCGM_FI_DEV_FB_FREE{{{SEL}}})", "{{Hostname}} GPU {{gpu}} {{GPU_I_PROFILE}}"),),
              unit="percentunit"),
        Panel("Temperature", "timeseries",
              (Target(f"DCGM_FI_DEV_GPU_TEMP{{{SEL}}}", LEGEND_GPU + " GPU"), Target(f"DCGM_FI_DEV_MEMORY_TEMP{{{SEL}}}", LEGEND_GPU + " memory")),
              unit="celsius"),
        Panel("Power", "timeseries", (Target(f"DCGM_FI_DEV_POWER_USAGE{{{SEL}}}", LEGEND_GPU),), unit="watt"),
        Panel("Clock throttling", "timeseries",
              (Target(f"rate(DCGM_FI_DEV_THERMAL_VIOLATION{{{SEL}}}[$__rate_interval]) / 1e6", LEGEND_GPU + " thermal"),
               Target(f"rate(DCGM_FI_DEV_POWER_VIOLATION{{{SEL}}}[$__rate_interval]) / 1e6", LEGEND_GPU + " power")),
              unit="percentunit", description="Fraction of time the clocks were held down."),
        Panel("Last XID", "timeseries", (Target(f"max by (Hostname, gpu) (DCGM_FI_DEV_XID_ERRORS{{{SEL}}})", LEGEND_GPU),),
              description="The last XID error code each GPU reported (0: none since the exporter started)."),
        Panel("XIDs in the exporter's window", "timeseries",
              (Target(f'sum by (Hostname, gpu, xid) (DCGM_EXP_XID_ERRORS_COUNT{{{SEL}, xid!=""}})', LEGEND_GPU + " XID {{xid}}"),)),
        Panel("ECC and row remapping", "timeseries", (
            Target(f"max by (Hostname, gpu) (DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{{{SEL}}})", LEGEND_GPU + " rows remapped (uncorrectable)"),
            Target(f"max by (Hostname, gpu) (DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{{{SEL}}})", LEGEND_GPU + " rows remapped (correctable)"),
            Target(f"max by (Hostname, gpu) (DCGM_FI_DEV_ROW_REMAP_FAILURE{{{SEL}}})", LEGEND_GPU + " row remap failure"),
            Target(f"max by (Hostname, gpu) (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{{{SEL}}}[$__rate_interval]))", LEGEND_GPU + " double-bit ECC"),
            Target(f"max by (Hostname, gpu) (increase(DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{{{SEL}}}[$__rate_interval]))", LEGEND_GPU + " single-bit ECC"),
        )),
        Panel("Shared replicas per node: advertised vs allocated", "timeseries", (
            Target(f"max by (node, resource) (kube_node_status_allocatable{{{KSM_SEL}, {GPU_RESOURCES}}})", "{{node}} {{resource}} advertised"),
            Target(f"sum by (node, resource) (kube_pod_container_resource_requests{{{KSM_SEL}, {GPU_RESOURCES}}} * on (namespace, pod) group_left () {RUNNING})",
                   "{{node}} {{resource}} allocated"),
        ), width=24, description="From kube-state-metrics: what the device plugin advertises and what running or pending pods request."),
    ]


def _variables() -> list[dict[str, Any]]:
    def query(name: str, label: str, selector: str) -> dict[str, Any]:
        q = f"label_values({selector}, {label})"
        return {
            "name": name, "label": name.capitalize(), "type": "query", "datasource": DATASOURCE,
            "query": {"query": q, "refId": f"{name}-values"}, "definition": q, "selector": selector,
            "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*", "sort": 1,
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        }

    return [
        {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus", "current": {}},
        query("cluster", "cluster", "DCGM_FI_DEV_GPU_TEMP"),
        query("node", "Hostname", 'DCGM_FI_DEV_GPU_TEMP{cluster=~"$cluster"}'),
        query("gpu", "gpu", 'DCGM_FI_DEV_GPU_TEMP{cluster=~"$cluster", Hostname=~"$node"}'),
    ]


def _panel_json(panel: Panel, panel_id: int, x: int, y: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": panel.width, "h": panel.height},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull", "max"]}} if panel.kind == "timeseries" else {},
        "targets": [
            {"refId": chr(ord("A") + i), "expr": t.expr, "legendFormat": t.legend, "datasource": DATASOURCE}
            for i, t in enumerate(panel.targets)
        ],
    }


def dashboard_json(panels: list[Panel], variables: list[dict[str, Any]]) -> dict[str, Any]:
    laid_out = []
    x = y = row_height = 0
    for i, panel in enumerate(panels, start=1):
        if x + panel.width > 24:
            x, y, row_height = 0, y + row_height, 0
        laid_out.append(_panel_json(panel, i, x, y))
        x += panel.width
        row_height = max(row_height, panel.height)
    return {
        "uid": UID,
        "title": TITLE,
        "tags": ["gpu", "dcgm", "gpu-stack"],
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "graphTooltip": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "1m",
        "templating": {"list": [{k: v for k, v in var.items() if k != "selector"} for var in variables]},
        "panels": laid_out,
    }


def build_dashboard(d: DashboardSettings, exporter: DcgmExporterSettings, fields: frozenset[str]) -> DashboardConfig:
    """The dashboard ConfigMap's content, or `enabled=False`; `fields`: what the exporter reports."""
    if not dashboard_enabled(d, exporter):
        return DashboardConfig(enabled=False)
    kept, dropped, text = _dashboard_for(fields)
    return DashboardConfig(
        enabled=True,
        labels=dict(d.labels),
        annotations={FOLDER_ANNOTATION: d.folder} if d.folder else {},
        data={DATA_KEY: text},
        panels=kept,
        variables=tuple(_variables()),
        dropped=dropped,
    )


@functools.lru_cache(maxsize=16)
def _dashboard_for(fields: frozenset[str]) -> tuple[tuple[Panel, ...], tuple[str, ...], str]:
    """The panels kept and dropped for the exporter's `fields`, and the dashboard's JSON text:
    a function of `fields` alone, so computed once per field list in a process (the JSON with
    indents is Python's slow encoder; a fleet plan builds the same dashboard for many stacks)."""
    kept: list[Panel] = []
    dropped: list[str] = []
    for panel in _panels():
        targets = tuple(t for t in panel.targets if metrics_in(t.expr) <= fields)
        if targets:
            kept.append(Panel(panel.title, panel.kind, targets, panel.unit, panel.description, panel.width, panel.height))
        else:
            dropped.append(panel.title)
    model = dashboard_json(kept, _variables())
    return tuple(kept), tuple(dropped), json.dumps(model, indent=2, sort_keys=True) + "\n"


def queries(config: DashboardConfig) -> list[str]:
    """Every PromQL expression of the dashboard: the panels' and the variables' selectors."""
    out = [t.expr for p in config.panels for t in p.targets]
    out.extend(v["selector"] for v in config.variables if "selector" in v)
    return out
