"""What the GPU Operator component registers, decided here: the namespace (pod-security
privileged: the operator's DaemonSets mount host paths and run privileged), the ConfigMaps it
mounts, the mirror's pull Secret, whether the ServiceMonitor CRD must be read first, and the Helm
release's inputs (all but where the chart comes from, config/chart_source.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..config import OperatorSettings
from .dcgm import DcgmMetricsConfig
from .driver import DriverFiles
from .labels import BASE_LABELS, pod_security
from .mig import MigConfig
from .mig_guard import GuardPlan
from .node_label_job import LabelJobPlan
from .sharing import SharingConfig

PRIVILEGED_NAMESPACE_LABELS = pod_security("privileged")
SERVICEMONITOR_CRD = "servicemonitors.monitoring.coreos.com"
"""The Prometheus Operator's CRD; with dcgmExporter.serviceMonitor.enabled and no such CRD the
operator's DCGM exporter state never becomes ready. The release does not notice (Helm's wait covers
the objects the chart renders, not the ClusterPolicy's states): the `up` would succeed with the
exporter broken, and only the dcgm-metrics validation Job would fail, at its deadline. So the
component reads the CRD first (components/operator.py says how that fails)."""
MAX_HISTORY = 10


@dataclass(frozen=True)
class OperatorPlan:
    """Every object of the GpuOperator component, ready to register."""

    namespace: dict[str, Any]
    """The operator namespace (Namespace manifest)."""
    config_maps: tuple[tuple[str, dict[str, Any]], ...]
    """(child suffix, immutable ConfigMap manifest) of each config the operator mounts, in
    registration order: sharing, MIG, DCGM metrics, the driver container's package sources and CA
    certificates; only those the stack makes."""
    release: dict[str, Any]
    """The helm.v3.Release inputs but the chart's source (keyword arguments, None = unset)."""
    protect: bool
    """Pulumi `protect` on the namespace and the release (operator.protect)."""
    servicemonitor_crd: str | None = None
    """The CRD the release needs and the component reads first; None when no ServiceMonitor is wanted."""
    guard: GuardPlan | None = None
    """The MIG layout guard Job the release waits for; None without custom MIG configs."""
    pull_secret: dict[str, Any] | None = field(default=None, repr=False)
    """The mirror login's pull Secret in the namespace (design/images.py), or None."""
    label_job: LabelJobPlan | None = None
    """The Job that labels the stack's nodes from a table, before the release; None without nodes."""

    @property
    def namespace_name(self) -> str:
        name: str = self.namespace["metadata"]["name"]
        return name


def wants_servicemonitor(values: dict[str, Any]) -> bool:
    """Whether the chart's values ask for the DCGM exporter's ServiceMonitor."""
    exporter = values.get("dcgmExporter") or {}
    return bool(exporter.get("enabled")) and bool((exporter.get("serviceMonitor") or {}).get("enabled"))


def _config_map(name: str, namespace: str, data: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(BASE_LABELS)}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data, "immutable": True}


def build_operator(
    op: OperatorSettings,
    values: dict[str, Any],
    sharing: SharingConfig,
    mig: MigConfig,
    dcgm: DcgmMetricsConfig,
    guard: GuardPlan | None = None,
    pull_secret: dict[str, Any] | None = None,
    label_job: LabelJobPlan | None = None,
    driver_files: DriverFiles | None = None,
) -> OperatorPlan:
    """The operator's objects for the chart `values` and the configs derived before them."""
    files = driver_files or DriverFiles()
    config_maps = tuple(
        (suffix, _config_map(name, op.namespace, data, annotations))
        for suffix, name, data, annotations in (
            ("sharing-config", sharing.configmap_name, sharing.data, {}),
            ("mig-config", mig.configmap_name, mig.data, mig.annotations),
            ("dcgm-metrics", dcgm.configmap_name, dcgm.data, {}),
            ("driver-repo-config", files.repo_configmap, files.repo_data, {}),
            ("driver-cert-config", files.cert_configmap, files.cert_data, {}),
        )
        if name is not None
    )
    release = {
        "name": op.release_name,
        "namespace": op.namespace,
        "create_namespace": False,
        "atomic": True,
        "cleanup_on_fail": True,
        "timeout": op.timeout_seconds,
        "max_history": MAX_HISTORY,
        # operator.upgradeCRD, as the chart asks. pulumi-kubernetes passes this to Helm's install
        # action only, not to upgrade (provider/pkg/provider/helm_release.go): it spares the
        # first install on a cluster that still holds older CRDs; an upgrade validates the
        # rendered objects against the installed CRDs before the chart's pre-upgrade hook runs
        # (docs/upgrades-and-destroy.md).
        "disable_openapi_validation": True if op.upgrade_crd else None,
        "values": values,
    }
    return OperatorPlan(
        namespace={
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": op.namespace, "labels": {**PRIVILEGED_NAMESPACE_LABELS, **BASE_LABELS}},
        },
        config_maps=config_maps,
        release=release,
        protect=op.protect,
        servicemonitor_crd=SERVICEMONITOR_CRD if wants_servicemonitor(values) else None,
        guard=guard,
        pull_secret=pull_secret,
        label_job=label_job,
    )
