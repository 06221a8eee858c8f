"""The GPU Operator: its namespace, the ConfigMaps it mounts and the Helm release."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ..config import OperatorSettings
from ..config.chart_source import ChartSource
from ..design.dcgm import DcgmMetricsConfig
from ..design.mig import MigConfig
from ..design.mig_guard import GuardPlan
from ..design.node_label_job import LabelJobPlan
from ..design.sharing import SharingConfig
from .mig_guard import MigLayoutGuard, MigLayoutGuardArgs
from .node_labels import NodeLabelJob, NodeLabelJobArgs

PRIVILEGED_NAMESPACE_LABELS = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/audit": "privileged",
    "pod-security.kubernetes.io/warn": "privileged",
}
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-stack"}
SERVICEMONITOR_CRD = "servicemonitors.monitoring.coreos.com"
"""The Prometheus Operator's CRD; with dcgmExporter.serviceMonitor.enabled and no such CRD the
operator's DCGM exporter state never becomes ready. The release does not notice (Helm's wait covers
the objects the chart renders, not the ClusterPolicy's states): the `up` would succeed with the
exporter broken, and only the dcgm-metrics validation Job would fail, at its deadline."""


def wants_servicemonitor(values: dict[str, Any]) -> bool:
    exporter = values.get("dcgmExporter") or {}
    return bool(exporter.get("enabled")) and bool((exporter.get("serviceMonitor") or {}).get("enabled"))


@dataclass
class GpuOperatorArgs:
    operator: OperatorSettings
    chart: ChartSource
    """Where the chart comes from (chart_source.py): repository, registry or a local copy."""
    values: dict[str, Any]
    sharing: SharingConfig
    mig: MigConfig
    dcgm: DcgmMetricsConfig
    depends_on: Sequence[pulumi.Resource] = ()
    """Resources the release must wait for (node preparation)."""
    pull_secret: str | None = None
    """The mirror login's `.dockerconfigjson` (images.registryCredentials), or None."""
    guard: GuardPlan | None = None
    """The MIG layout guard Job the release waits for; None without custom MIG configs."""
    label_job: LabelJobPlan | None = None
    """The Job that labels the stack's nodes from a table, before the release; None without nodes."""
    label_after: Sequence[pulumi.Resource] = ()
    """What the label Job waits for besides the namespace (every node's read)."""


def mirror_pull_secret(name: str, namespace: str, config_json: str, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """The pull Secret of the mirror login in `namespace`; its content stays a Pulumi secret."""
    from ..design.images import MIRROR_PULL_SECRET

    return k8s.core.v1.Secret(
        name,
        metadata={"name": MIRROR_PULL_SECRET, "namespace": namespace, "labels": MANAGED_BY},
        type="kubernetes.io/dockerconfigjson",
        string_data={".dockerconfigjson": pulumi.Output.secret(config_json)},
        opts=opts,
    )


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
        pull: list[pulumi.Resource] = []
        if args.pull_secret is not None:
            pull.append(mirror_pull_secret(f"{name}-mirror-pull", op.namespace, args.pull_secret, in_ns))
            config_maps.extend(pull)
        for suffix, cm_name, data, cm_annotations in (
            ("sharing-config", args.sharing.configmap_name, args.sharing.data, {}),
            ("mig-config", args.mig.configmap_name, args.mig.data, args.mig.annotations),
            ("dcgm-metrics", args.dcgm.configmap_name, args.dcgm.data, {}),
        ):
            if cm_name is None:
                continue
            metadata = {"name": cm_name, "namespace": op.namespace, "labels": MANAGED_BY}
            if cm_annotations:
                metadata["annotations"] = cm_annotations
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

        # The nodes' labels (sharing profile) before the release: the device plugin reads its
        # node's label when it starts (and follows a later change of it).
        if args.label_job is not None:
            labeller = NodeLabelJob(
                f"{name}-node-labels",
                NodeLabelJobArgs(plan=args.label_job, depends_on=[self.namespace, *pull], job_after=args.label_after),
                opts=child,
            )
            guards.append(labeller.job)

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
            # A local chart gets no repository_opts: the provider then loads the path from disk.
            # Repository credentials stay Pulumi secrets: in the state, the plan and the diff.
            **args.chart.release_inputs(secret=pulumi.Output.secret),
            namespace=op.namespace,
            create_namespace=False,
            atomic=True,
            cleanup_on_fail=True,
            timeout=op.timeout_seconds,
            max_history=10,
            # operator.upgradeCRD, as the chart asks. pulumi-kubernetes passes this to Helm's install
            # action only, not to upgrade (provider/pkg/provider/helm_release.go): it spares the
            # first install on a cluster that still holds older CRDs; an upgrade validates the
            # rendered objects against the installed CRDs before the chart's pre-upgrade hook runs
            # (docs/upgrades-and-destroy.md).
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

