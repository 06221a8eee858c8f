"""The GPU Operator: its namespace, the ConfigMaps it mounts and the Helm release."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pulumi
import pulumi_kubernetes as k8s

from ..dcgm import DcgmMetricsConfig
from ..mig import MigConfig
from ..mig_guard import GuardPlan
from .mig_guard import MigLayoutGuard, MigLayoutGuardArgs
from ..config import OperatorSettings
from ..sharing import SharingConfig

PRIVILEGED_NAMESPACE_LABELS = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/audit": "privileged",
    "pod-security.kubernetes.io/warn": "privileged",
}
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-stack"}
SERVICEMONITOR_CRD = "servicemonitors.monitoring.coreos.com"
"""The Prometheus Operator's CRD; with dcgmExporter.serviceMonitor.enabled and no such CRD the
operator's DCGM exporter state never becomes ready (and the release waits for it until its timeout)."""


def wants_servicemonitor(values: dict[str, Any]) -> bool:
    exporter = values.get("dcgmExporter") or {}
    return bool(exporter.get("enabled")) and bool((exporter.get("serviceMonitor") or {}).get("enabled"))


@dataclass
class GpuOperatorArgs:
    operator: OperatorSettings
    values: dict[str, Any]
    sharing: SharingConfig
    mig: MigConfig
    dcgm: DcgmMetricsConfig
    depends_on: Sequence[pulumi.Resource] = ()
    """Resources the release must wait for (node preparation)."""
    guard: GuardPlan | None = None
    """The MIG layout guard Job the release waits for; None without custom MIG configs."""


class GpuOperator(pulumi.ComponentResource):
    namespace: k8s.core.v1.Namespace
    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:GpuOperator", name, None, opts)
        # Plain dicts for nested inputs (the same wire inputs as the *Args classes): the typed
        # classes would import pulumi_kubernetes.meta.v1, a large module, for three resources.
        op = args.operator
        child = pulumi.ResourceOptions(parent=self)
        protected = pulumi.ResourceOptions(parent=self, protect=op.protect)

        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": op.namespace, "labels": {**PRIVILEGED_NAMESPACE_LABELS, **MANAGED_BY}},
            opts=protected,
        )
        in_ns = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.namespace]))

        config_maps: list[pulumi.Resource] = []
        for suffix, cm_name, data, annotations in (
            ("sharing-config", args.sharing.configmap_name, args.sharing.data, {}),
            ("mig-config", args.mig.configmap_name, args.mig.data, args.mig.annotations),
            ("dcgm-metrics", args.dcgm.configmap_name, args.dcgm.data, {}),
        ):
            if cm_name is None:
                continue
            metadata = {"name": cm_name, "namespace": op.namespace, "labels": MANAGED_BY}
            if annotations:
                metadata["annotations"] = annotations
            config_maps.append(
                k8s.core.v1.ConfigMap(f"{name}-{suffix}", metadata=metadata, data=data, immutable=True, opts=in_ns)
            )
        # A layout edited under a name nodes select is refused here, before the release restarts
        # the MIG manager with the new ConfigMap (see mig_guard.py).
        guards: list[pulumi.Resource] = []
        if args.guard is not None:
            guard = MigLayoutGuard(
                f"{name}-mig-layout-guard",
                MigLayoutGuardArgs(plan=args.guard, depends_on=[self.namespace, *config_maps]),
                opts=child,
            )
            guards.append(guard.job)

        # A `.get` is a Read step: the engine runs it in preview and in up, before anything that
        # depends on it, and fails with "resource 'servicemonitors.monitoring.coreos.com' does not
        # exist" on this resource when the CRD is missing (pulumi-kubernetes answers a 404 with an
        # empty read). The release depends on it, so it is never installed into that cluster.
        required: list[pulumi.Resource] = []
        if wants_servicemonitor(args.values):
            from pulumi_kubernetes.apiextensions.v1 import CustomResourceDefinition

            required.append(CustomResourceDefinition.get(f"{name}-servicemonitor-crd", SERVICEMONITOR_CRD, opts=child))

        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            name=op.release_name,
            chart="gpu-operator",
            version=op.chart_version,
            repository_opts={"repo": op.repository},
            namespace=op.namespace,
            create_namespace=False,
            atomic=True,
            cleanup_on_fail=True,
            timeout=op.timeout_seconds,
            max_history=10,
            # operator.upgradeCRD: the chart's hook upgrades the CRDs before the new objects are applied;
            # validating them against the cluster's old CRD schema first would refuse new fields.
            disable_openapi_validation=True if op.upgrade_crd else None,
            values=args.values,
            opts=pulumi.ResourceOptions(
                parent=self,
                protect=op.protect,
                depends_on=[self.namespace, *config_maps, *guards, *required, *args.depends_on],
                # No customTimeouts: helm.v3.Release ignores them; its `timeout` input above rules.
            ),
        )
        self.register_outputs({"namespace": op.namespace, "release": self.release.status})
