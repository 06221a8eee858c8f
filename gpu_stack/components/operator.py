"""The GPU Operator: its namespace, the ConfigMaps it mounts and the Helm release."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import pulumi
import pulumi_kubernetes as k8s

from ..dcgm import DcgmMetricsConfig
from ..mig import MigConfig
from ..settings import OperatorSettings
from ..sharing import SharingConfig

PRIVILEGED_NAMESPACE_LABELS = {
    "pod-security.kubernetes.io/enforce": "privileged",
    "pod-security.kubernetes.io/audit": "privileged",
    "pod-security.kubernetes.io/warn": "privileged",
}
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-stack"}


@dataclass
class GpuOperatorArgs:
    operator: OperatorSettings
    values: dict[str, Any]
    sharing: SharingConfig
    mig: MigConfig
    dcgm: DcgmMetricsConfig
    depends_on: Sequence[pulumi.Resource] = ()
    """Resources the release must wait for (node preparation)."""


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
        for suffix, cm_name, data in (
            ("sharing-config", args.sharing.configmap_name, args.sharing.data),
            ("mig-config", args.mig.configmap_name, args.mig.data),
            ("dcgm-metrics", args.dcgm.configmap_name, args.dcgm.data),
        ):
            if cm_name is None:
                continue
            config_maps.append(
                k8s.core.v1.ConfigMap(
                    f"{name}-{suffix}",
                    metadata={"name": cm_name, "namespace": op.namespace, "labels": MANAGED_BY},
                    data=data,
                    immutable=True,
                    opts=in_ns,
                )
            )

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
            values=args.values,
            opts=pulumi.ResourceOptions(
                parent=self,
                protect=op.protect,
                depends_on=[self.namespace, *config_maps, *args.depends_on],
                # No customTimeouts: helm.v3.Release ignores them; its `timeout` input above rules.
            ),
        )
        self.register_outputs({"namespace": op.namespace, "release": self.release.status})
