"""Settings of monitoring: the DCGM exporter and its ServiceMonitor, the GPU alerts and the dashboard."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from .safe_input import Flag, Number, PlainStr, TextStr, WholeNumber
from .types import PROM_LABEL_NAME_RE, ConfigModel, Duration, K8sLabels, LabelText, ScrapeInterval, one_spelling

Severity = Literal["critical", "warning", "info"]

# --------------------------------------------------------------------------- DCGM
_PROM_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_RELABEL_TARGET_TEMPLATE = re.compile(r"(?:(?:[a-zA-Z_]|\$(?:\{\w+\}|\w+))+\w*)+")
"""Prometheus' own rule for a replace action's target label (relabel.go, relabelTarget)."""


class Relabeling(ConfigModel):
    """One Prometheus relabeling of the exporter's ServiceMonitor endpoint. Written to the chart
    camelCased as the ServiceMonitor CRD spells it (`sourceLabels`, `targetLabel`), whichever
    spelling the stack config uses."""

    source_labels: tuple[PlainStr, ...] | None = None
    """Labels whose values, joined by `separator`, are the input of the action."""
    separator: PlainStr | None = None
    """Joins the source labels' values; None: Prometheus' default `;`."""
    target_label: PlainStr | None = None
    """Label the result is written to (replace, hashmod, ...)."""
    regex: PlainStr | None = None
    """Regular expression matched against the joined values; None: Prometheus' default `(.*)`."""
    modulus: WholeNumber | None = Field(None, ge=1)
    """Modulus of the hash of the source values (hashmod)."""
    replacement: PlainStr | None = None
    """Value written to the target label, with regex groups such as $1; None: Prometheus' default `$1`."""
    action: Literal[
        "replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep",
        "lowercase", "uppercase", "keepequal", "dropequal",
    ] = "replace"
    """The relabeling action."""

    @field_validator("source_labels")
    @classmethod
    def _source_labels(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for label in v or ():
            if not re.fullmatch(r"^[a-zA-Z_][a-zA-Z0-9_]*$", label):
                raise ValueError(f"{label!r} is not a Prometheus label name (letters, digits, '_')")
        return v

    @field_validator("regex")
    @classmethod
    def _regex(cls, v: str | None) -> str | None:
        """A regular expression Go's RE2 (Prometheus) compiles: no look-around, no back-reference."""
        if v is None:
            return v
        if re.search(r"\(\?<?[=!]|\\[1-9]|\(\?P=", v):
            raise ValueError("uses look-around or a back-reference, which Prometheus' regular expressions (RE2) do not have")
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"is not a regular expression ({exc.msg} at position {exc.pos})") from None
        return v

    @model_validator(mode="after")
    def _as_prometheus_validates(self) -> Relabeling:
        """The rules the Prometheus Operator (and Prometheus' relabel.Config) refuse a ServiceMonitor by."""
        needs_target = ("replace", "hashmod", "lowercase", "uppercase", "keepequal", "dropequal")
        if self.action in needs_target and not self.target_label:
            raise ValueError(f"action {self.action} needs targetLabel (the label it writes)")
        if self.action == "hashmod" and self.modulus is None:
            raise ValueError("action hashmod needs modulus (a whole number of at least 1)")
        if self.target_label is not None:
            templated = _RELABEL_TARGET_TEMPLATE if self.action == "replace" else _PROM_LABEL
            if not templated.fullmatch(self.target_label):
                raise ValueError(
                    f"targetLabel {self.target_label[:60]!r} is not a Prometheus label name (letters, digits, '_', not "
                    "starting with a digit" + (", with $1 or ${name} references" if self.action == "replace" else "") + ")"
                )
        if self.action in ("labeldrop", "labelkeep") and any(
            v is not None for v in (self.source_labels, self.target_label, self.modulus, self.separator, self.replacement)
        ):
            raise ValueError(f"action {self.action} takes regex only (no sourceLabels, targetLabel, modulus, separator or replacement)")
        if self.action in ("keepequal", "dropequal") and any(
            v is not None for v in (self.regex, self.modulus, self.separator, self.replacement)
        ):
            raise ValueError(f"action {self.action} takes sourceLabels and targetLabel only")
        return self


DEFAULT_SERVICEMONITOR_LABELS = {"release": "kube-prometheus-stack"}
"""The project's defaults live in the models, not in Pulumi.yaml: `pulumi config set --path` on one
sub-key writes the stack's own `gpu-stack:dcgmExporter`, which replaces a project-level value
whole; a model default survives that edit field by field."""


class ServiceMonitorSettings(ConfigModel):
    """The DCGM exporter's ServiceMonitor (created only where the Prometheus Operator CRDs exist)."""

    enabled: Flag = True
    """Create the ServiceMonitor (needs the Prometheus Operator's CRDs in the cluster: `pulumi
    preview` fails on a read of the CRD where they are missing; set false there)."""
    interval: ScrapeInterval = "15s"
    """How often Prometheus scrapes the exporter (a Prometheus duration)."""
    honor_labels: Flag = False
    """Keep the exporter's labels when they clash with the target's (Prometheus `honorLabels`)."""
    additional_labels: K8sLabels = Field(default_factory=lambda: dict(DEFAULT_SERVICEMONITOR_LABELS))
    """Labels your Prometheus selects ServiceMonitors (and the alerts' PrometheusRule) by;
    kube-prometheus-stack's default selector is `release: <its release name>`. `{}` sets none."""
    relabelings: tuple[Relabeling, ...] = ()
    """Relabelings of the scraped target (Prometheus `relabelings`)."""


class DcgmExporterSettings(ConfigModel):
    enabled: Flag = True
    """Deploy the DCGM exporter (GPU metrics for Prometheus)."""
    service_monitor: ServiceMonitorSettings = ServiceMonitorSettings()
    metrics: TextStr | None = None
    """Custom metric list in dcgm-exporter's CSV format (`FIELD, type, help` per line); None: the exporter's defaults."""


# --------------------------------------------------------------------------- alerts and dashboard
class AlertRule(ConfigModel):
    """One alert: whether it is generated, how long its condition must hold, how loud it is."""

    enabled: Flag | None = True
    """true: generated (the plan warns when the exporter's metric list lacks a metric it needs);
    false: left out; null: generated only when every metric it needs is in the metric list."""
    for_: Duration = Field("5m", alias="for")
    """How long the condition must hold before the alert fires (Prometheus `for:`)."""
    severity: Severity = "warning"
    """The `severity` label Alertmanager routes on."""


class XidAlert(AlertRule):
    codes: tuple[Annotated[WholeNumber, Field(ge=1, le=1000)], ...]
    """The XID codes this alert fires on."""

    @field_validator("codes")
    @classmethod
    def _codes(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or len(set(v)) != len(v):
            raise ValueError("must be a non-empty list of distinct XID codes")
        return v


class ThresholdAlert(AlertRule):
    threshold: Number = Field(ge=0, le=200, allow_inf_nan=False)
    """The value at or above which the condition holds (a temperature in C)."""


class RatioAlert(AlertRule):
    threshold: Number = Field(gt=0, le=1, allow_inf_nan=False)
    """The fraction (0-1] at or above which the condition holds."""


_UNSET = object()
ALERT_DEFAULTS: dict[str, dict[str, Any]] = {
    # XIDs classified by the immediate action of NVIDIA's XID catalog (docs.nvidia.com/deploy/xid-errors).
    # Reset the GPU (or the node), or repair: double-bit ECC (48), micro-controller halt (62), row
    # remap / page retirement pending or failed (63, 64), NVLink (74), fallen off the bus (79),
    # uncontained ECC (95), GSP timeout / error (119, 120), unrecovered ECC (140), recovery action
    # changed (154).
    "xid_fatal": {"codes": [48, 62, 63, 64, 74, 79, 95, 119, 120, 140, 154], "severity": "critical", "for": "0s"},
    # Restart the application, the GPU is fine: graphics exception (13), page fault (31), stopped
    # channel (43), preemptive cleanup after one of those (45), contained ECC error (94: the error
    # hit only that application's memory). XID 92 (high single-bit ECC rate, corrected) is
    # informational in the catalog: no alert (the ECC counters show the trend).
    "xid_application": {"codes": [13, 31, 43, 45, 94], "severity": "warning", "for": "0s"},
    # Volatile double-bit ECC errors (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL is not in NVIDIA's default list:
    # on only when the metric list has it, unless set to true).
    "ecc_double_bit": {"enabled": None, "severity": "critical", "for": "0s"},
    # A row was remapped after an uncorrectable memory error (Ampere and newer): reset the GPU to apply.
    "uncorrectable_remapped_rows": {"severity": "warning", "for": "0s"},
    # Row remapping failed: memory errors the GPU can no longer hide; replace it.
    "row_remap_failure": {"severity": "critical", "for": "0s"},
    # GPU / memory temperature in C at or above the threshold, close to thermal slowdown.
    "gpu_temperature": {"threshold": 85, "severity": "warning", "for": "5m"},
    "memory_temperature": {"threshold": 95, "severity": "warning", "for": "5m"},
    # Fraction of time (0-1) the clocks were held down for heat / by the power cap (the violation
    # counters are not in NVIDIA's default list: on only when the metric list has them).
    "thermal_throttling": {"enabled": None, "threshold": 0.1, "severity": "warning", "for": "10m"},
    "power_throttling": {"enabled": None, "threshold": 0.2, "severity": "warning", "for": "15m"},
    # The exporter's scrape target is down, or Prometheus has no target for it at all.
    "exporter_down": {"severity": "critical", "for": "10m"},
    # A node of `nodes` reports no GPU at all / fewer GPUs than nodes[i].gpu.count.
    "node_not_reporting": {"severity": "critical", "for": "10m"},
    "fewer_gpus": {"severity": "critical", "for": "10m"},
    # mig-manager set nvidia.com/mig.config.state=failed (exported by kube-state-metrics).
    "mig_config_failed": {"severity": "critical", "for": "5m"},
    # Requested share (0-1) of a node's advertised shared replicas; 1 = every replica allocated.
    "sharing_saturated": {"threshold": 1.0, "severity": "warning", "for": "30m"},
}
"""Each alert's defaults; a stack sets only what it changes (`alerts.rules.gpuTemperature.threshold`)."""


class AlertRules(ConfigModel):
    """Every alert the stack generates, by key (`alerts.rules.<key>`); defaults in ALERT_DEFAULTS."""

    xid_fatal: XidAlert
    """XID errors whose catalog action is a GPU or node reset, or a repair (critical, at once)."""
    xid_application: XidAlert
    """XID errors whose catalog action is restarting the application: the job failed, the GPU is fine."""
    ecc_double_bit: AlertRule
    """Volatile double-bit ECC errors (generated when the metric list has the field, unless enabled true)."""
    uncorrectable_remapped_rows: AlertRule
    """A row was remapped after an uncorrectable memory error: reset the GPU to apply it."""
    row_remap_failure: AlertRule
    """Row remapping failed: memory errors the GPU can no longer hide; replace it."""
    gpu_temperature: ThresholdAlert
    """GPU temperature (C) at or above the threshold, close to thermal slowdown."""
    memory_temperature: ThresholdAlert
    """Memory temperature (C) at or above the threshold."""
    thermal_throttling: RatioAlert
    """Fraction of time (0-1) the clocks were held down for heat, at or above the threshold."""
    power_throttling: RatioAlert
    """Fraction of time (0-1) the clocks were held down by the power cap, at or above the threshold."""
    exporter_down: AlertRule
    """The exporter's scrape target is down, or Prometheus has no target for it."""
    node_not_reporting: AlertRule
    """A node of `nodes` reports no GPU at all."""
    fewer_gpus: AlertRule
    """A node reports fewer GPUs than its nodes[i].gpu.count."""
    mig_config_failed: AlertRule
    """mig-manager set nvidia.com/mig.config.state=failed on a node."""
    sharing_saturated: RatioAlert
    """Requested share (0-1) of a node's advertised shared replicas at or above the threshold."""

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        """Lay what the stack sets for an alert over that alert's own defaults."""
        if not isinstance(data, dict):
            return data
        one_spelling(cls, data)  # before the defaults are laid under it (which keeps one spelling)
        out: dict[str, Any] = {}
        for name, defaults in ALERT_DEFAULTS.items():
            alias = to_camel(name)
            given = data.get(alias, data.get(name, _UNSET))
            if given is _UNSET:
                out[alias] = dict(defaults)
            elif isinstance(given, dict):
                merged = dict(defaults)
                for key, value in given.items():
                    merged["for" if key == "for_" else key] = value
                out[alias] = merged
            else:
                out[alias] = given
        for key, value in data.items():
            if key not in ALERT_DEFAULTS and key not in out:
                out[key] = value
        return out


class DashboardSettings(ConfigModel):
    """The Grafana dashboard, a ConfigMap kube-prometheus-stack's dashboard sidecar loads."""

    enabled: Flag | None = None
    """null: on whenever the exporter and its ServiceMonitor are on (Prometheus scrapes the exporter)."""
    labels: K8sLabels = Field(default_factory=lambda: {"grafana_dashboard": "1"})
    """Labels the sidecar selects dashboard ConfigMaps by (kube-prometheus-stack: grafana_dashboard=1)."""
    folder: PlainStr | None = None
    """Grafana folder, through the sidecar's folder annotation (`grafana_folder`); null: the default folder."""

    @field_validator("folder")
    @classmethod
    def _folder(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,62}", v):
            raise ValueError("must be a folder name of letters, digits, spaces, '.', '_' and '-' (at most 63)")
        return v


class AlertSettings(ConfigModel):
    """GPU health alerts (a PrometheusRule) and the Grafana dashboard, both in the operator namespace."""

    enabled: Flag | None = None
    """null: on whenever the exporter and its ServiceMonitor are on (the cluster runs the Prometheus Operator)."""
    rule_labels: K8sLabels | None = None
    """Labels of the PrometheusRule object that your Prometheus selects rules by; null: the
    ServiceMonitor's additionalLabels, else `release: kube-prometheus-stack`."""
    labels: dict[PlainStr, LabelText] = Field(default_factory=dict)
    """Extra labels on every alert, for Alertmanager routing (e.g. `team: gpu-platform`; a value
    the CLI stored as a number or boolean is taken as its text)."""
    exporter_job: PlainStr = "nvidia-dcgm-exporter"
    """The `job` label of the exporter's scrape target (the operator's ServiceMonitor sets it from the
    Service's `app` label)."""
    rules: AlertRules = Field(default_factory=AlertRules)
    """Each alert's settings by key; what a stack does not set keeps the alert's defaults."""
    dashboard: DashboardSettings = DashboardSettings()

    @field_validator("labels")
    @classmethod
    def _alert_labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not PROM_LABEL_NAME_RE.fullmatch(key) or key.startswith("__"):
                raise ValueError(f"{key!r} is not a Prometheus label name (letters, digits, '_'; not starting with '__')")
            if key in ("alertname", "severity"):
                raise ValueError(f"{key!r} is set by the stack itself (use rules.<alert>.severity for severity)")
            if not re.fullmatch(r"[^\n\r{}$]{1,128}", value):
                raise ValueError(f"label {key!r} value {value!r} must be 1-128 characters without newlines, braces or '$'")
        return v

    @field_validator("exporter_job")
    @classmethod
    def _job(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,126}", v):
            raise ValueError("must be a Prometheus job name such as nvidia-dcgm-exporter")
        return v
