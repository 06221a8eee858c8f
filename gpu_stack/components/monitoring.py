"""GPU health monitoring: the PrometheusRule with the alert rules and the Grafana dashboard
ConfigMap, registered from the design's MonitoringPlan (gpu_stack/design/monitoring.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

import pulumi
import pulumi_kubernetes as k8s

from ..design.monitoring import MonitoringPlan
from .kube_api import READ_FAILURES, KubeApiError, connect, get_json

MONITORING_OFF = (
    "set gpu-stack:dcgmExporter.serviceMonitor.enabled to false (no ServiceMonitor, no alert rules; "
    "or gpu-stack:alerts.enabled false to keep the ServiceMonitor only)"
)


def refuse_missing_crds(kubeconfig: str | None, context: str | None, crds: Sequence[str]) -> None:
    """Fails `pulumi preview` and `up` in one line when the cluster lacks a CRD the stack reads
    before its custom resources (the Prometheus Operator's, for the ServiceMonitor and the
    PrometheusRule), naming each and the two ways out, instead of the provider's error for the
    first read. A cluster this cannot read is only a warning: the provider then reports the
    connection's problem."""
    if not crds:
        return
    missing = []
    try:
        connection = connect(kubeconfig, context)
        for crd in crds:
            try:
                get_json(connection, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{quote(crd, safe='')}")
            except KubeApiError as exc:
                if exc.status != 404:
                    raise
                missing.append(crd)
    except READ_FAILURES as exc:
        pulumi.log.warn(f"could not check the cluster for the CRDs {', '.join(crds)}: {exc}")
        return
    if missing:
        raise pulumi.RunError(
            f"the cluster has no CustomResourceDefinition {', '.join(missing)} (the Prometheus Operator's), which the "
            "stack's monitoring reads before it creates its resources: install the Prometheus Operator's CRDs "
            f"(kube-prometheus-stack installs them), or {MONITORING_OFF}"
        )


@dataclass
class GpuMonitoringArgs:
    plan: MonitoringPlan
    """The rule, the CRD read before it and the dashboard (derive()'s `monitoring`)."""
    depends_on: Sequence[pulumi.Resource] = ()
    """The namespace."""


class GpuMonitoring(pulumi.ComponentResource):
    rule: k8s.apiextensions.CustomResource | None
    dashboard: k8s.core.v1.ConfigMap | None

    def __init__(self, name: str, args: GpuMonitoringArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:GpuMonitoring", name, None, opts)
        plan = args.plan
        child = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        self.rule = None
        self.dashboard = None
        if plan.rule is not None:
            # The CRD read first, as the ServiceMonitor's (components/operator.py): a custom resource
            # whose CRD is absent is not previewed (preview passes, `up` fails); a read of a missing
            # CRD fails preview and `up` alike, before the rule.
            reads: list[pulumi.Resource] = []
            if plan.rule_crd is not None:
                from pulumi_kubernetes.apiextensions.v1 import CustomResourceDefinition

                reads.append(CustomResourceDefinition.get(f"{name}-prometheusrule-crd", plan.rule_crd, opts=pulumi.ResourceOptions(parent=self)))
            rule = plan.rule
            self.rule = k8s.apiextensions.CustomResource(
                f"{name}-rules",
                api_version=rule["apiVersion"],
                kind=rule["kind"],
                metadata=rule["metadata"],
                spec=rule["spec"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, *reads]),
            )
        if plan.dashboard is not None:
            cm = plan.dashboard
            self.dashboard = k8s.core.v1.ConfigMap(f"{name}-dashboard", metadata=cm["metadata"], data=cm["data"], opts=child)
        self.register_outputs({})
