"""Settings of GPUs allocated through Dynamic Resource Allocation: NVIDIA's DRA driver chart, its
feature gates, and the rollout that moves nodes between the device plugin and DRA.

A node's GPUs are allocated either by the operator's device plugin (`nvidia.com/gpu` and MIG
extended resources, the default) or by the DRA driver (`resource.k8s.io/v1` ResourceClaims on the
DeviceClasses `gpu.nvidia.com` and `mig.nvidia.com`): `nodes[i].allocation`, else `dra.allocation`.
The driver's chart is `dra-driver-nvidia-gpu` 0.4.1 (kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, Field, field_validator

from .cluster import chart_repository_url
from .rollout import RolloutSettings, _rollout_seconds
from .safe_input import Flag, PlainStr, WholeNumber
from .types import KUBECTL_IMAGE, ConfigModel, HelmReleaseName, JobImageRef

Allocation = Literal["devicePlugin", "dra"]
DEVICE_PLUGIN: Final = "devicePlugin"
DRA: Final = "dra"
DRA_CHART: Final = "dra-driver-nvidia-gpu"
DRA_CHART_VERSION: Final = "0.4.1"
DRA_REPOSITORY: Final = "oci://registry.k8s.io/dra-driver-nvidia/charts"
"""The oci:// registry path the project publishes the chart under (chart `dra-driver-nvidia-gpu`)."""
RESOURCE_API_VERSION: Final = "resource.k8s.io/v1"
"""The one `resource.k8s.io` version the stack renders and applies: GA and served with no flag
from Kubernetes 1.34 (KEP-4381); the chart would otherwise detect it from the cluster."""
DRA_MIN_KUBERNETES: Final = "1.34"
DRA_IMAGE: Final = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"
"""The driver's image at the chart's appVersion (the chart's `image.repository`, tag `v<appVersion>`)."""

# kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1:pkg/featuregates/featuregates.go:49-147 (name -> stage).
ALPHA_GATES: Final = ("TimeSlicingSettings", "MPSSupport", "PassthroughSupport", "NVMLDeviceHealthCheck", "DeviceMetadata")
BETA_GATES: Final = ("IMEXDaemonsWithDNSNames", "ComputeDomainCliques", "CrashOnNVLinkFabricErrors")
REFUSED_GATES: Final = {
    "DynamicMIG": (
        "makes MIG devices per claim on the same GPUs whose static layouts the MIG manager applies "
        "(nodes[i].mig); the stack keeps one owner of MIG geometry"
    ),
}
"""Driver gates the stack refuses whatever their value, and why."""
KNOWN_GATES: Final = (*ALPHA_GATES, *BETA_GATES, *REFUSED_GATES)


def _dra_repository(value: str) -> str:
    last = value.rstrip("/").rsplit("/", 1)[-1]
    if last == DRA_CHART or last.startswith(f"{DRA_CHART}:"):
        raise ValueError(
            f"must be the registry path that holds the chart, without the chart's name or a tag: the stack "
            f"appends {DRA_CHART} and pins dra.chartVersion itself"
        )
    return value


class DraRolloutSettings(RolloutSettings):
    """How nodes move between the device plugin and DRA (`dra.rollout`): per wave cordon, evict the
    GPU pods, switch the node's labels, wait until it advertises no nvidia.com/gpu and its
    ResourceSlice shows its devices, validate, uncordon; a wave only after the previous one
    succeeded, stopping at the first failure. The way back (a node set to devicePlugin again)
    is the same in reverse."""

    max_unavailable: WholeNumber | PlainStr = 1
    """Nodes switched at once: a count (at least 1) or a percentage of the nodes that move such
    as 25% (rounded down, at least 1 node)."""
    timeout: WholeNumber = 900
    """How long a switched wave may take to advertise no nvidia.com/gpu and publish its devices
    in a ResourceSlice (or, on the way back, the reverse); seconds or a duration such as 15m."""
    plugin_timeout: WholeNumber = 600
    """How long the rollout waits for the DRA kubelet plugin pod of a switched node to be ready;
    seconds or a duration such as 10m."""
    min_schedulable_gpus: WholeNumber | PlainStr = 0
    """The floor: how many of the stack's GPUs stay schedulable while a wave moves (a count, or a
    percentage of the stack's GPUs such as 75%, rounded up); waves are made smaller to hold it.
    0: only `maxUnavailable` bounds a wave."""
    evict: Flag = True
    """false: no cordon and no eviction (you drain by other means); the labels are still switched
    by the rollout Job, which waits for the node's devices."""
    image: JobImageRef = KUBECTL_IMAGE
    """Runs the rollout script (a POSIX sh and kubectl), like `mig.rollout.image`."""

    @field_validator("min_schedulable_gpus", mode="before")
    @classmethod
    def _floor(cls, v: Any) -> Any:
        text = str(v) if isinstance(v, (int, str)) and not isinstance(v, bool) else None
        if text is not None and re.fullmatch(r"0|[1-9][0-9]{0,5}", text):
            return int(text)
        if text is not None and re.fullmatch(r"(100|[1-9]?[0-9])%", text):
            return text
        raise ValueError("must be a GPU count (0 or more, e.g. 16) or a percentage of the stack's GPUs from 0% to 100% (e.g. 75%)")

    @field_validator("plugin_timeout", mode="before")
    @classmethod
    def _plugin_timeout(cls, v: Any) -> int:
        return _rollout_seconds(v, 30, 86400)


class DraSettings(ConfigModel):
    """GPUs through Dynamic Resource Allocation: which nodes, and NVIDIA's DRA driver release.

    The driver's chart is installed only when a node uses DRA; its kubelet plugin runs only on
    those nodes, where the operator's device plugin is off (one advertiser per node)."""

    allocation: Allocation = DEVICE_PLUGIN
    """How the GPUs of every node without `nodes[i].allocation` are allocated: devicePlugin (the
    operator's device plugin, `nvidia.com/gpu` requests) or dra (ResourceClaims on the DRA
    driver's DeviceClasses)."""
    chart_version: Literal["0.4.1"] = DRA_CHART_VERSION
    """The chart `dra-driver-nvidia-gpu` version; the stack is built and checked against this one only."""
    repository: Annotated[PlainStr, AfterValidator(chart_repository_url), AfterValidator(_dra_repository)] = DRA_REPOSITORY
    """The oci:// registry path (or https:// chart repository) the chart is fetched from; the
    chart is `<repository>/dra-driver-nvidia-gpu`."""
    chart_path: PlainStr | None = None
    """A local copy of the chart instead of a repository (air-gapped clusters): the chart folder
    or a packaged `.tgz`; a relative path is relative to the project folder."""
    release_name: HelmReleaseName = "nvidia-dra-driver-gpu"
    """Name of the DRA driver's Helm release (in `operator.namespace`)."""
    feature_gates: dict[PlainStr, bool] = Field(default_factory=dict)
    """The driver's feature gates (chart value `featureGates`), e.g. `{MPSSupport: true}`. Alpha
    gates (TimeSlicingSettings, MPSSupport, PassthroughSupport, NVMLDeviceHealthCheck,
    DeviceMetadata) may be turned on only with `allowAlpha`; DynamicMIG is refused."""
    allow_alpha: Flag = False
    """Explicit opt-in to alpha features: the driver's alpha gates and `extendedResource`."""
    extended_resource: Flag = False
    """The cluster runs Kubernetes' alpha `DRAExtendedResource` gate (kube-apiserver, scheduler,
    controller-manager and kubelet), so the API server keeps the `extendedResourceName:
    nvidia.com/gpu` the chart sets on DeviceClass `gpu.nvidia.com` and unchanged pods that request
    `nvidia.com/gpu` can run on DRA nodes. Needs `allowAlpha`. false: the field is dropped by the
    API server and such pods run only on device-plugin nodes."""
    compute_domains: Flag = False
    """Chart value `resources.computeDomains.enabled`: ComputeDomains (multi-node NVLink, IMEX)."""
    rollout: DraRolloutSettings = DraRolloutSettings()

    @field_validator("chart_path")
    @classmethod
    def _local(cls, v: str | None) -> str | None:
        if v is not None and (not v.strip() or "://" in v):
            raise ValueError(
                "must be a local path (relative to the project folder), not a URL; "
                "a chart in a registry goes in dra.repository"
            )
        return v
