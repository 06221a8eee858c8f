"""GPU health alert rules: the PrometheusRule the stack installs (no Pulumi).

Built from `alerts.*`, the exporter's settings, the node facts and the fields the exporter
reports (`DcgmMetricsConfig.fields`, derived once). Every DCGM metric an alert reads must be in
that list: an alert whose metric is missing is left out, and when it was asked
for (`enabled: true`) the plan says which alert lost its data and which key to change. Alerts
with `enabled: null` are generated only when their metrics are listed (no warning otherwise).

Label names are the exporter's (dcgm-exporter 4.4.2-4.7.0 `rendermetrics`): `gpu`, `UUID`,
`modelName`, `Hostname` (the Kubernetes node name: the operator sets NODE_NAME from
spec.nodeName), `GPU_I_PROFILE` / `GPU_I_ID` on MIG instances; and kube-state-metrics' (`node`,
`resource`, `label_<sanitized node label>`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config import AlertRule, config_key
from ..config.monitoring import AlertSettings, DcgmExporterSettings
from .capacity import NodeFacts
from .labels import BASE_LABELS

API_VERSION = "monitoring.coreos.com/v1"
KIND = "PrometheusRule"
RULE_NAME = "gpu-stack-gpu-health"
GROUP_NAME = "gpu-stack.gpu-health"
DEFAULT_RULE_LABELS = {"release": "kube-prometheus-stack"}
DECLARED_RECORD = "gpu_stack:node_gpus:declared"
"""Recording rule: one series per node of the stack, `Hostname` = node name, value = nodes[i].gpu.count."""
PRESENCE_METRIC = "DCGM_FI_DEV_GPU_TEMP"
"""Counted per node to see how many GPUs report (every GPU has a temperature, MIG or not)."""
GPU = "Hostname, gpu, UUID, modelName"
"""What identifies one physical GPU in the exporter's series (pod and MIG labels vary)."""
XID_COUNT = "DCGM_EXP_XID_ERRORS_COUNT"
XID_GAUGE = "DCGM_FI_DEV_XID_ERRORS"
XID_NEW_WINDOW = "15m"
"""How long an XID read from the last-XID gauge keeps its alert firing."""
METRIC_RE = re.compile(r"\b(DCGM_(?:FI|EXP)_[A-Z0-9_]+)\b")


@dataclass(frozen=True)
class Alert:
    """One alerting rule, with the DCGM fields its expression reads."""

    key: str
    """The settings key under alerts.rules (camelCase, as typed)."""
    name: str
    expr: str
    rule: AlertRule
    summary: str
    description: str
    metrics: frozenset[str] = frozenset()

    def to_rule(self, extra_labels: dict[str, str]) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.rule.for_,
            "labels": {"severity": self.rule.severity, **extra_labels},
            "annotations": {"summary": self.summary, "description": self.description},
        }


@dataclass(frozen=True)
class AlertsConfig:
    enabled: bool
    rule_labels: dict[str, str] = field(default_factory=dict)
    groups: list[dict[str, Any]] = field(default_factory=list)
    alerts: tuple[str, ...] = ()
    """Names of the alerts generated."""
    warnings: tuple[str, ...] = ()
    """Alerts asked for whose metrics the exporter does not report."""


def alerts_enabled(a: AlertSettings, exporter: DcgmExporterSettings) -> bool:
    """`alerts.enabled`, or by default: the exporter and its ServiceMonitor are on (so the cluster
    runs the Prometheus Operator and scrapes the exporter)."""
    return exporter.enabled and exporter.service_monitor.enabled if a.enabled is None else a.enabled


def rule_labels(a: AlertSettings, exporter: DcgmExporterSettings) -> dict[str, str]:
    """The PrometheusRule's own labels: what the Prometheus' ruleSelector matches."""
    if a.rule_labels is not None:
        return dict(a.rule_labels)
    return dict(exporter.service_monitor.additional_labels or DEFAULT_RULE_LABELS)


def _quote(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _regex_alternatives(values: list[str]) -> str:
    """`a|b` matching exactly these values, as the inside of a PromQL string literal (an RE2
    metacharacter is escaped, and the escaping backslash doubled for the string)."""
    return "|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\\\1", v) for v in values)


def ksm_resource(name: str) -> str:
    """kube-state-metrics' `resource` label of an extended resource (nvidia.com/gpu -> nvidia_com_gpu)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def declared_gpus_expr(nodes: Sequence[NodeFacts]) -> str | None:
    """One `label_replace(vector(count), "Hostname", node)` per node of the stack, or None."""
    if not nodes:
        return None
    parts = [f'label_replace(vector({f.node.gpu.count}), "Hostname", {_quote(f.name)}, "", "")' for f in nodes]
    return " or ".join(parts)


def shared_resources(nodes: Sequence[NodeFacts]) -> dict[str, tuple[str, ...]]:
    """Node name -> the shared resources it advertises (kube-state-metrics spelling)."""
    out: dict[str, tuple[str, ...]] = {}
    for facts in nodes:
        shared = [name for name, count in facts.advertised.items() if facts.physical.get(name) != count]
        if shared:
            out[facts.name] = tuple(sorted(ksm_resource(r) for r in shared))
    return out


def sharing_saturation_expr(nodes: Sequence[NodeFacts], ratio: float) -> str | None:
    """Requested / advertised shared replicas per node and resource, at or above `ratio`."""
    shared = shared_resources(nodes)
    if not shared:
        return None
    by_resources: dict[tuple[str, ...], list[str]] = {}
    for node, resources in shared.items():
        by_resources.setdefault(resources, []).append(node)
    allocatable = " or ".join(
        f'kube_node_status_allocatable{{node=~"{_regex_alternatives(nodes)}", resource=~"{_regex_alternatives(list(res))}"}}'
        for res, nodes in by_resources.items()
    )
    all_resources = sorted({r for res in by_resources for r in res})
    requested = (
        f'sum by (node, resource) (kube_pod_container_resource_requests{{resource=~"{_regex_alternatives(all_resources)}"}}'
        ' * on (namespace, pod) group_left () max by (namespace, pod) (kube_pod_status_phase{phase=~"Pending|Running"} == 1))'
    )
    return f"{requested} / on (node, resource) max by (node, resource) ({allocatable}) >= {_number(ratio)}"


def _candidates(
    a: AlertSettings, nodes: Sequence[NodeFacts], fields: frozenset[str], declared: str | None, mig_manager: bool
) -> list[tuple[Alert | None, frozenset[str]]]:
    """Every alert of the stack (None where the stack has nothing to watch) with what it needs."""
    r = a.rules
    job = _quote(a.exporter_job)
    out: list[tuple[Alert | None, frozenset[str]]] = []

    def xid(key: str, name: str, rule: Any, kind: str) -> None:
        codes = [str(c) for c in rule.codes]
        if XID_COUNT in fields:
            # A count per XID code over the exporter's window (--xid-count-window-size, 5 min): every
            # XID counts, a repeat of the same one too.
            expr = f'max by ({GPU}, xid) ({XID_COUNT}{{xid=~"{"|".join(codes)}"}}) > 0'
            desc = "XID {{ $labels.xid }} was reported {{ $value }} times in the exporter's window"
            needs = frozenset({XID_COUNT})
        else:
            # The gauge holds the last XID until another one (or an exporter restart): a rule on its
            # value alone would page until the next XID, long after the reset or the restart. So
            # only while new (it changed within XID_NEW_WINDOW); a repeat of the same XID is no
            # change and is not seen: list DCGM_EXP_XID_ERRORS_COUNT where repeats matter.
            match = " or ".join(f"{XID_GAUGE} == {c}" for c in codes)
            expr = f"max by ({GPU}) (({match}) and changes({XID_GAUGE}[{XID_NEW_WINDOW}]) > 0)"
            desc = "the last XID reported is {{ $value }}"
            needs = frozenset({XID_GAUGE})
        out.append((Alert(key, name, expr, rule, f"GPU {{{{ $labels.gpu }}}} on {{{{ $labels.Hostname }}}}: {kind}",
                          f"GPU {{{{ $labels.gpu }}}} ({{{{ $labels.modelName }}}}, {{{{ $labels.UUID }}}}) on node {{{{ $labels.Hostname }}}}: {desc}.",
                          needs), needs))

    xid("xidFatal", "GpuXidFatal", r.xid_fatal, "XID that needs a GPU reset or repair")
    xid("xidApplication", "GpuXidApplication", r.xid_application, "XID after which the application must be restarted")

    def per_gpu(key: str, name: str, rule: Any, metric: str, expr: str, summary: str, description: str) -> None:
        needs = frozenset({metric})
        out.append((Alert(key, name, expr, rule, f"GPU {{{{ $labels.gpu }}}} on {{{{ $labels.Hostname }}}}: {summary}",
                          f"GPU {{{{ $labels.gpu }}}} ({{{{ $labels.modelName }}}}, {{{{ $labels.UUID }}}}) on node {{{{ $labels.Hostname }}}}: {description}.",
                          needs), needs))

    per_gpu("eccDoubleBit", "GpuEccDoubleBitErrors", r.ecc_double_bit, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            f"max by ({GPU}) (increase(DCGM_FI_DEV_ECC_DBE_VOL_TOTAL[15m])) > 0",
            "double-bit ECC errors", "about {{ $value | printf \"%.0f\" }} uncorrectable (double-bit) ECC errors in 15 minutes; drain the node and reset the GPU")
    per_gpu("uncorrectableRemappedRows", "GpuUncorrectableMemoryError", r.uncorrectable_remapped_rows, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            f"max by ({GPU}) (increase(DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS[15m])) > 0",
            "memory row remapped after an uncorrectable error", "about {{ $value | printf \"%.0f\" }} rows remapped for uncorrectable ECC errors in 15 minutes; reset the GPU to apply the remapping")
    per_gpu("rowRemapFailure", "GpuRowRemapFailure", r.row_remap_failure, "DCGM_FI_DEV_ROW_REMAP_FAILURE",
            f"max by ({GPU}) (DCGM_FI_DEV_ROW_REMAP_FAILURE) > 0",
            "row remapping failed", "the GPU could not remap a failing memory row; take it out of service and replace it")
    per_gpu("gpuTemperature", "GpuTemperatureHigh", r.gpu_temperature, "DCGM_FI_DEV_GPU_TEMP",
            f"max by ({GPU}) (DCGM_FI_DEV_GPU_TEMP) >= {_number(r.gpu_temperature.threshold)}",
            "temperature high", f"GPU temperature {{{{ $value }}}} C (threshold {_number(r.gpu_temperature.threshold)} C); clocks slow down to cool it")
    per_gpu("memoryTemperature", "GpuMemoryTemperatureHigh", r.memory_temperature, "DCGM_FI_DEV_MEMORY_TEMP",
            f"max by ({GPU}) (DCGM_FI_DEV_MEMORY_TEMP) >= {_number(r.memory_temperature.threshold)}",
            "memory temperature high", f"memory temperature {{{{ $value }}}} C (threshold {_number(r.memory_temperature.threshold)} C)")
    per_gpu("thermalThrottling", "GpuThermalThrottling", r.thermal_throttling, "DCGM_FI_DEV_THERMAL_VIOLATION",
            f"max by ({GPU}) (rate(DCGM_FI_DEV_THERMAL_VIOLATION[5m])) / 1e6 >= {_number(r.thermal_throttling.threshold)}",
            "thermal throttling", "clocks held down for heat {{ $value | humanizePercentage }} of the time")
    per_gpu("powerThrottling", "GpuPowerThrottling", r.power_throttling, "DCGM_FI_DEV_POWER_VIOLATION",
            f"max by ({GPU}) (rate(DCGM_FI_DEV_POWER_VIOLATION[5m])) / 1e6 >= {_number(r.power_throttling.threshold)}",
            "power throttling", "clocks held down by the power cap {{ $value | humanizePercentage }} of the time")

    down = f"up{{job={job}}} == 0"
    if nodes:
        down += f" or absent(up{{job={job}}})"
    out.append((Alert("exporterDown", "GpuExporterDown", down, r.exporter_down,
                      "DCGM exporter not scraped",
                      "Prometheus cannot scrape the DCGM exporter (job {{ $labels.job }}, target {{ $labels.instance }}), or has no target for it: GPU metrics and GPU alerts are blind."),
                frozenset()))

    presence = frozenset({PRESENCE_METRIC})
    if declared is None:
        out.append((None, presence))
        out.append((None, presence))
    else:
        out.append((Alert("nodeNotReporting", "GpuNodeNotReporting",
                          f"{DECLARED_RECORD} unless on (Hostname) count by (Hostname) ({PRESENCE_METRIC})",
                          r.node_not_reporting, "GPU node {{ $labels.Hostname }} reports no GPU",
                          "Node {{ $labels.Hostname }} should have {{ $value }} GPUs (nodes[i].gpu.count) but the DCGM exporter reports none: exporter pod down, driver gone, or the node is off.",
                          presence), presence))
        out.append((Alert("fewerGpus", "GpuNodeFewerGpus",
                          f"count by (Hostname) (count by (Hostname, UUID) ({PRESENCE_METRIC})) < on (Hostname) {DECLARED_RECORD}",
                          r.fewer_gpus, "GPU node {{ $labels.Hostname }} reports fewer GPUs than declared",
                          "Node {{ $labels.Hostname }} reports {{ $value }} GPUs, fewer than nodes[i].gpu.count declares: a GPU fell off the bus or lost its driver.",
                          presence), presence))

    if mig_manager:
        out.append((Alert("migConfigFailed", "GpuMigConfigFailed",
                          'max by (node) (kube_node_labels{label_nvidia_com_mig_config_state="failed"}) == 1',
                          r.mig_config_failed, "MIG reconfiguration failed on {{ $labels.node }}",
                          "mig-manager set nvidia.com/mig.config.state=failed on node {{ $labels.node }}: the MIG layout of its nvidia.com/mig.config label was not applied (profile not valid for the GPU, or GPUs busy). See the nvidia-mig-manager pod's log."),
                    frozenset()))
    saturated = sharing_saturation_expr(nodes, r.sharing_saturated.threshold)
    if saturated is None:
        out.append((None, frozenset()))
    else:
        out.append((Alert("sharingSaturated", "GpuSharingSaturated", saturated, r.sharing_saturated,
                          "Shared GPUs of {{ $labels.node }} are all allocated",
                          "Pods request {{ $value | humanizePercentage }} of the {{ $labels.resource }} replicas node {{ $labels.node }} advertises: new GPU pods stay Pending. Add replicas (sharing.replicas) or nodes."),
                    frozenset()))
    return out


def _missing_warning(exporter: DcgmExporterSettings, alert: Alert, missing: list[str]) -> str:
    key = config_key(("alerts", "rules", alert.key))
    if not exporter.enabled:
        where = "the DCGM exporter is off (gpu-stack:dcgmExporter.enabled is false)"
    elif exporter.metrics is None:
        where = ("the exporter's default metric list lacks it; list it in gpu-stack:dcgmExporter.metrics "
                 "(the default fields plus this one)")
    else:
        where = "gpu-stack:dcgmExporter.metrics does not list it; add it to that list"
    return (f"alert {alert.name} ({key}) gets no data: it needs {', '.join(missing)} and {where}, "
            f"or set {key}.enabled false")


def build_alerts(
    a: AlertSettings, exporter: DcgmExporterSettings, fields: frozenset[str], nodes: Sequence[NodeFacts], *, mig_manager: bool
) -> AlertsConfig:
    """The rule groups of the stack's PrometheusRule, or `enabled=False` when alerts are off.

    `fields`: what the exporter reports (DcgmMetricsConfig.fields); `nodes`: the node facts;
    `mig_manager`: mig.manager.enabled (the MIG-config alert watches its label)."""
    if not alerts_enabled(a, exporter):
        return AlertsConfig(enabled=False)
    declared = declared_gpus_expr(nodes)
    extra = dict(a.labels)
    rules: list[dict[str, Any]] = []
    names: list[str] = []
    warnings: list[str] = []
    declared_used = False
    for alert, needs in _candidates(a, nodes, fields, declared, mig_manager):
        if alert is None or alert.rule.enabled is False:
            continue
        missing = sorted(needs - fields)
        if missing:
            if alert.rule.enabled is True:
                warnings.append(_missing_warning(exporter, alert, missing))
            continue
        declared_used |= DECLARED_RECORD in alert.expr
        rules.append(alert.to_rule(extra))
        names.append(alert.name)
    if declared_used:
        rules.insert(0, {"record": DECLARED_RECORD, "expr": declared})
    groups = [{"name": GROUP_NAME, "rules": rules}] if rules else []
    return AlertsConfig(
        enabled=True,
        rule_labels=rule_labels(a, exporter),
        groups=groups,
        alerts=tuple(names),
        warnings=tuple(warnings),
    )


def rules_file(config: AlertsConfig) -> dict[str, Any]:
    """The rules as a Prometheus rule file (what `promtool check rules` reads)."""
    return {"groups": config.groups}


def manifest(config: AlertsConfig, namespace: str) -> dict[str, Any]:
    """The PrometheusRule object as Kubernetes receives it: the ruleSelector's labels and the base set."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": RULE_NAME, "namespace": namespace, "labels": {**config.rule_labels, **BASE_LABELS}},
        "spec": {"groups": config.groups},
    }


def metrics_in(expr: str) -> set[str]:
    """The DCGM metric names a PromQL expression reads."""
    return set(METRIC_RE.findall(expr))
