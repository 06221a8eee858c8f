"""DRA: NVIDIA's DRA driver release for the nodes whose GPUs are allocated through Dynamic Resource
Allocation, the labels that switch those nodes from the device plugin, and what workloads change.

One advertiser per node: on a DRA node the operator's device plugin is off
(`nvidia.com/gpu.deploy.device-plugin=false`; the operator honours a value already set, gpu-operator
v25.10.1 controllers/state_manager.go addGPUStateLabels) and the driver's kubelet plugin is placed
there alone (`gpu-stack/allocation=dra`, the chart's `kubeletPlugin.nodeSelector` and an affinity
that replaces the chart's default one on NFD labels). Nowhere else.

The chart is `dra-driver-nvidia-gpu` 0.4.1 (kubernetes-sigs/dra-driver-nvidia-gpu at v0.4.1,
deployments/helm/dra-driver-nvidia-gpu in that repository). Values the stack always sets, and why:

- `resourceApiVersion: resource.k8s.io/v1`: empty, the chart detects the version from the
  cluster's API list (its `_helpers.tpl`), which an offline render does not have: the chart then
  fails (`validation.yaml`), and plan and preview could differ.
- `gpuResourcesEnabledOverride: true`: the chart refuses `resources.gpus.enabled` without it,
  because the driver must not run beside the device plugin on a node (`validation.yaml`); the
  stack turns the device plugin off on exactly the nodes the kubelet plugin runs on.
- `nvidiaDriverRoot`: `/` for a host driver, `/run/nvidia/driver` for the operator's.

With `resource.k8s.io/v1` the chart's DeviceClass `gpu.nvidia.com` carries `extendedResourceName:
nvidia.com/gpu` (its `deviceclass-gpu.yaml`). Kubernetes keeps that field only while its alpha
`DRAExtendedResource` gate is on (KEP-5004; 1.34 drops a field of a disabled gate on write): the
stack cannot switch it off by a value, so it says what it means (`dra.extendedResource`): without
the gate, pods that request `nvidia.com/gpu` are never placed on DRA nodes and must use a claim.

Nothing here imports Pulumi.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config.dra import DRA_CHART, DRA_IMAGE, RESOURCE_API_VERSION, DraSettings
from ..config.facts import GPU_RESOURCE, profile_resources
from ..config.images import ImageSettings
from .capacity import GPU_CLASS, MIG_CLASS, NodeFacts
from .images import mirror_ref
from .operator import MAX_HISTORY

ALLOCATION_LABEL = "gpu-stack/allocation"
"""The node label the DRA kubelet plugin is placed by (value `dra`)."""
DRA_VALUE = "dra"
DEVICE_PLUGIN_LABEL = "nvidia.com/gpu.deploy.device-plugin"
"""The operator's per-node switch of its device plugin DaemonSet."""
DRA_NODE_LABELS: dict[str, str] = {ALLOCATION_LABEL: DRA_VALUE, DEVICE_PLUGIN_LABEL: "false"}
"""Every label a DRA node gets; a device-plugin node carries neither."""
SWITCH_LABELS = (ALLOCATION_LABEL, DEVICE_PLUGIN_LABEL)
DRIVER = "gpu.nvidia.com"
"""The driver name of the devices (and of the ResourceSlices) the kubelet plugin publishes."""
KUBELET_PLUGIN_SELECTOR: dict[str, str] = {f"{DRA_CHART}-component": "kubelet-plugin"}
"""The pod labels of the chart's kubelet plugin DaemonSet (`<chart>-kubelet-plugin`)."""
HOST_DRIVER_ROOT = "/"
OPERATOR_DRIVER_ROOT = "/run/nvidia/driver"
RELEASE_TIMEOUT_SECONDS = 600
"""Helm's wait for the controller Deployment and the kubelet plugin DaemonSet on the DRA nodes."""
DEVICE_CLASSES = (GPU_CLASS, MIG_CLASS, "vfio.gpu.nvidia.com")
"""The DeviceClasses the release creates with the stack's values (the two ComputeDomain ones too
with `dra.computeDomains`); the vfio one selects devices only under the PassthroughSupport gate."""


@dataclass(frozen=True)
class DraPlan:
    """The DRA driver's release and the DRA nodes, decided once."""

    nodes: tuple[str, ...]
    """The DRA nodes, in `nodes` order."""
    node_labels: dict[str, dict[str, str]]
    """DRA node -> DRA_NODE_LABELS."""
    release_name: str
    namespace: str
    chart: str
    """`oci://<repository>/dra-driver-nvidia-gpu`, a chart name in an https repository, or a local path."""
    version: str
    repository: str | None
    """The https repository URL; None for oci:// and local charts."""
    chart_path: str | None
    """`dra.chartPath` as set (the program resolves it against the project folder)."""
    values: dict[str, Any]
    expected_devices: dict[str, dict[str, int]]
    """DRA node -> DeviceClass -> devices its ResourceSlice should publish."""
    workload_changes: tuple[str, ...] = field(default_factory=tuple)
    """What workloads must change to use the DRA nodes, one line each (the plan's warnings)."""

    @property
    def release(self) -> dict[str, Any]:
        """helm.v3.Release inputs besides the chart source (installed, upgraded and rolled back like
        the operator's release: atomic, a bounded history)."""
        return {
            "name": self.release_name, "namespace": self.namespace, "create_namespace": False, "atomic": True,
            "cleanup_on_fail": True, "timeout": RELEASE_TIMEOUT_SECONDS, "max_history": MAX_HISTORY,
            # Helm validates the rendered objects against the cluster's OpenAPI. Stated: the provider
            # fills in false where it is unset (the real preview has it), so the plan says it too.
            "disable_openapi_validation": False,
            "values": self.values,
        }


def _plugin_placement() -> dict[str, Any]:
    term = {"matchExpressions": [{"key": ALLOCATION_LABEL, "operator": "In", "values": [DRA_VALUE]}]}
    return {
        "nodeSelector": {ALLOCATION_LABEL: DRA_VALUE},
        # A list replaces the chart's own terms (NFD's pci-10de labels or nvidia.com/gpu.present):
        # the stack knows its DRA nodes and places the plugin there only.
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}},
    }


def chart_values(dra: DraSettings, *, host_driver: bool, images: ImageSettings, pull_secrets: Sequence[str]) -> dict[str, Any]:
    """The values of the DRA driver's release."""
    repository, _, tag = mirror_ref(DRA_IMAGE, images).rpartition(":")
    values: dict[str, Any] = {
        "resourceApiVersion": RESOURCE_API_VERSION,
        "nvidiaDriverRoot": HOST_DRIVER_ROOT if host_driver else OPERATOR_DRIVER_ROOT,
        "gpuResourcesEnabledOverride": True,
        "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": dra.compute_domains}},
        "kubeletPlugin": _plugin_placement(),
    }
    if dra.feature_gates:
        values["featureGates"] = dict(sorted(dra.feature_gates.items()))
    if repository != DRA_IMAGE.rpartition(":")[0]:
        values["image"] = {"repository": repository, "tag": tag}
    if pull_secrets:
        values["imagePullSecrets"] = [{"name": n} for n in pull_secrets]
    return values


def _sharing_line(f: NodeFacts) -> str | None:
    p = f.profile
    if p is None or p.mode == "none":
        return None
    if p.mode == "mps":
        return (f"node {f.name} (profile {f.profile_key!r}, MPS): pods share a GPU through one ResourceClaim whose "
                "config is a GpuConfig with sharing strategy MPS (the driver's alpha MPSSupport gate); the MPS replica "
                "count does not carry over")
    counts = ", ".join(f"{r.name} x{r.replicas}" for r in profile_resources(p))
    return (f"node {f.name} (profile {f.profile_key!r}, time-slicing {counts}): replicas become pods that share one "
            "ResourceClaim (each pod names it under spec.resourceClaims); DRA enforces no replica count, so the "
            "number of pods sharing a GPU is the workload's")


def workload_changes(nodes: Sequence[NodeFacts], extended_resource: bool) -> tuple[str, ...]:
    """What a workload must change to run on the DRA nodes, one line each."""
    dra = [f for f in nodes if f.uses_dra]
    if not dra:
        return ()
    names = ", ".join(f.name for f in dra)
    if extended_resource:
        first = (f"DRA nodes ({names}): a pod that requests {GPU_RESOURCE} may be placed there through DeviceClass "
                 f"{GPU_CLASS}'s extendedResourceName (DRAExtendedResource); MIG devices and shared GPUs need a ResourceClaim")
    else:
        first = (f"DRA nodes ({names}) advertise no {GPU_RESOURCE}: a pod that requests it runs only on device-plugin "
                 f"nodes; to run on a DRA node it requests a ResourceClaim (template) of DeviceClass {GPU_CLASS} "
                 f"(DeviceClass {GPU_CLASS} keeps extendedResourceName only with the alpha DRAExtendedResource gate)")
    out = [first]
    for f in dra:
        line = _sharing_line(f)
        if line is not None:
            out.append(line)
        if f.dra_devices.get(MIG_CLASS):
            profiles = sorted({p for gpu in f.layout or () if gpu for p, n in gpu.items() if n > 0})
            out.append(f"node {f.name}: its MIG devices ({', '.join(profiles)}) are devices of DeviceClass {MIG_CLASS}; "
                       f"a claim selects a profile with device.attributes['{DRIVER}'].profile (nvidia.com/mig-* requests "
                       "do not apply there)")
    return tuple(out)


def operator_validator_warning(nodes: Sequence[NodeFacts]) -> tuple[str, ...]:
    """What the GPU Operator v25.10.1 does on a DRA node beside device-plugin nodes: its validator
    pod's plugin check waits for an nvidia.com/gpu or nvidia.com/mig-* capacity that a DRA node
    never has and fails (cmd/nvidia-validator/main.go validateGPUResource); the operator leaves the
    check out only when the device plugin is off cluster-wide (controllers/object_controls.go)."""
    dra = [f.name for f in nodes if f.uses_dra]
    if not dra:
        return ()
    shown = ", ".join(dra[:5]) + (" ..." if len(dra) > 5 else "")
    return ((
        f"the GPU Operator's validator pods on the DRA nodes ({shown}) stay not ready: their plugin check waits "
        "for the device plugin's nvidia.com/gpu, which a DRA node never advertises (operator v25.10.1 leaves the "
        "check out only with the chart's devicePlugin.enabled false, for every node); the DRA validation Jobs "
        "(check dra-claim) prove those nodes instead"
    ),)


def build_dra(
    dra: DraSettings, nodes: Sequence[NodeFacts], *, namespace: str, host_driver: bool,
    images: ImageSettings, pull_secrets: Sequence[str],
) -> DraPlan | None:
    """The DRA driver's release and the DRA nodes' labels; None when no node uses DRA."""
    on = [f for f in nodes if f.uses_dra]
    if not on:
        return None
    repo = dra.repository.rstrip("/")
    if dra.chart_path is not None:
        chart, repository = dra.chart_path, None
    elif repo.startswith("oci://"):
        chart, repository = f"{repo}/{DRA_CHART}", None
    else:
        chart, repository = DRA_CHART, repo
    return DraPlan(
        nodes=tuple(f.name for f in on),
        node_labels={f.name: dict(DRA_NODE_LABELS) for f in on},
        release_name=dra.release_name,
        namespace=namespace,
        chart=chart,
        version=dra.chart_version,
        repository=repository,
        chart_path=dra.chart_path,
        values=chart_values(dra, host_driver=host_driver, images=images, pull_secrets=pull_secrets),
        expected_devices={f.name: dict(f.dra_devices) for f in on},
        workload_changes=workload_changes(nodes, dra.extended_resource),
    )
