"""GPU health monitoring: the PrometheusRule with the alert rules and the Grafana dashboard
ConfigMap, registered from the design's MonitoringPlan (gpu_stack/design/monitoring.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from ..design.monitoring import MonitoringPlan


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
