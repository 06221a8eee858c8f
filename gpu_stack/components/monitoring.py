"""GPU health monitoring: the PrometheusRule with the alert rules and the Grafana dashboard ConfigMap."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from ..design.alerts import API_VERSION, KIND, RULE_NAME, AlertsConfig
from ..design.dashboard import DashboardConfig
from .operator import MANAGED_BY

PROMETHEUSRULE_CRD = "prometheusrules.monitoring.coreos.com"
"""The Prometheus Operator's CRD for the alert rules (read before the PrometheusRule is created)."""


@dataclass
class GpuMonitoringArgs:
    namespace: str
    """Both objects live in the operator namespace (the Prometheus Operator and the Grafana
    sidecar of kube-prometheus-stack look in every namespace by default)."""
    alerts: AlertsConfig
    dashboard: DashboardConfig
    depends_on: Sequence[pulumi.Resource] = ()
    """The namespace."""


class GpuMonitoring(pulumi.ComponentResource):
    rule: k8s.apiextensions.CustomResource | None
    dashboard: k8s.core.v1.ConfigMap | None

    def __init__(self, name: str, args: GpuMonitoringArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:GpuMonitoring", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        self.rule = None
        self.dashboard = None
        if args.alerts.groups:
            # The CRD read first, as the ServiceMonitor's (components/operator.py): a custom resource
            # whose CRD is absent is not previewed (preview passes, `up` fails); a read of a missing
            # CRD fails preview and `up` alike, before the rule.
            from pulumi_kubernetes.apiextensions.v1 import CustomResourceDefinition

            crd = CustomResourceDefinition.get(f"{name}-prometheusrule-crd", PROMETHEUSRULE_CRD, opts=pulumi.ResourceOptions(parent=self))
            self.rule = k8s.apiextensions.CustomResource(
                f"{name}-rules",
                api_version=API_VERSION,
                kind=KIND,
                metadata={"name": RULE_NAME, "namespace": args.namespace, "labels": {**args.alerts.rule_labels, **MANAGED_BY}},
                spec={"groups": args.alerts.groups},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, crd]),
            )
        if args.dashboard.enabled:
            metadata = {"name": args.dashboard.configmap_name, "namespace": args.namespace, "labels": {**args.dashboard.labels, **MANAGED_BY}}
            if args.dashboard.annotations:
                metadata["annotations"] = args.dashboard.annotations
            self.dashboard = k8s.core.v1.ConfigMap(f"{name}-dashboard", metadata=metadata, data=args.dashboard.data, opts=child)
        self.register_outputs({})
