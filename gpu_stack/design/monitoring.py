"""What the GPU Monitoring component registers, decided here: the PrometheusRule with the alert
rules (and the CRD read before it) and the Grafana dashboard ConfigMap; no component when neither
is wanted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .alerts import AlertsConfig, manifest as rule_manifest
from .dashboard import DashboardConfig
from .labels import BASE_LABELS

PROMETHEUSRULE_CRD = "prometheusrules.monitoring.coreos.com"
"""The Prometheus Operator's CRD for the alert rules (read before the PrometheusRule is created)."""


@dataclass(frozen=True)
class MonitoringPlan:
    """The objects of the GpuMonitoring component, ready to register. Both live in the operator
    namespace (the Prometheus Operator and the Grafana sidecar of kube-prometheus-stack look in
    every namespace by default)."""

    rule: dict[str, Any] | None
    """The PrometheusRule manifest; None without alert rules."""
    rule_crd: str | None
    """The CRD read before the rule; None without one."""
    dashboard: dict[str, Any] | None
    """The dashboard ConfigMap manifest; None when the dashboard is off."""


def dashboard_manifest(config: DashboardConfig, namespace: str) -> dict[str, Any]:
    """The dashboard ConfigMap as Kubernetes receives it (the sidecar's labels and the base set)."""
    metadata: dict[str, Any] = {"name": config.configmap_name, "namespace": namespace, "labels": {**config.labels, **BASE_LABELS}}
    if config.annotations:
        metadata["annotations"] = config.annotations
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": config.data}


def build_monitoring(namespace: str, alerts: AlertsConfig, dashboard: DashboardConfig) -> MonitoringPlan | None:
    """The monitoring objects in `namespace`, or None when there are neither rules nor a dashboard."""
    if not alerts.groups and not dashboard.enabled:
        return None
    return MonitoringPlan(
        rule=rule_manifest(alerts, namespace) if alerts.groups else None,
        rule_crd=PROMETHEUSRULE_CRD if alerts.groups else None,
        dashboard=dashboard_manifest(dashboard, namespace) if dashboard.enabled else None,
    )
