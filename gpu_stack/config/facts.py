"""What the settings say, read once the same way by the rules and by the builders.

The sharing profiles each node can use and the MIG layout each node's GPUs get are facts of
the config (plus the GPU catalog), not of any generated object: the cross-field rules check
them, and the builders (sharing, MIG, capacity, validation) build on them.
"""

from __future__ import annotations

from typing import Any

from .dra import DRA, Allocation
from .gpu_models import ALL_DISABLED, GpuModel, builtin_layout, catalog
from .mig import MigDeviceGroup
from .nodes import NodeSettings
from .root import Settings
from .sharing import SharedResource, SharingProfile

DEFAULT_KEY = "default"
"""The key of the cluster-wide profile built from the top-level `sharing.*` settings."""
NONE_KEY = "none"
"""The key a node selects (`nodes[i].sharing: none`) to opt out of sharing."""
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MPS_MAX_REPLICAS_BEFORE_7_5 = 16
"""MPS clients per GPU before compute capability 7.5 (Volta)."""
# The operator's toolkit container targets /etc/containerd/config.toml and
# /run/containerd/containerd.sock unless told otherwise; k3s and RKE2 keep their embedded
# containerd's generated config under /var/lib/rancher/<distribution>/ and share one socket.
# The CONTAINERD_* names are the toolkit container's env (gpu-operator v25.10.1
# controllers/object_controls.go); one ClusterPolicy, so one set for the whole cluster.
TOOLKIT_ENV_RUNTIMES = {"k3s": "k3s", "rke2": "rke2"}

GpuLayout = dict[str, int] | None
"""One GPU's MIG state: profile -> instances (MIG on), or None (MIG off)."""


# --------------------------------------------------------------------------- sharing profiles
def cluster_profile(settings: Settings) -> SharingProfile | None:
    """The cluster-wide default profile, or None when `sharing.mode` is none.

    `sharing.replicas` (default 4) shares nvidia.com/gpu unless `resources` lists resources and
    `replicas` was not set, or `resources` names nvidia.com/gpu itself.
    """
    s = settings.sharing
    if s.mode == "none":
        return None
    explicit = {r.name for r in s.resources}
    use_replicas = GPU_RESOURCE not in explicit and ("replicas" in s.model_fields_set or not s.resources)
    return SharingProfile(
        mode=s.mode,
        replicas=s.replicas if use_replicas else None,
        rename_by_default=s.rename_by_default,
        fail_requests_greater_than_one=s.fail_requests_greater_than_one,
        resources=s.resources,
    )


def profile_resources(profile: SharingProfile) -> list[SharedResource]:
    """The resources list of a profile: `replicas` for nvidia.com/gpu first, then explicit ones."""
    out: list[SharedResource] = []
    if profile.replicas is not None:
        out.append(SharedResource(name=GPU_RESOURCE, replicas=profile.replicas))
    out.extend(profile.resources)
    return out


def all_profiles(settings: Settings) -> dict[str, SharingProfile | None]:
    """Every key the sharing ConfigMap will hold (None: a no-sharing config)."""
    profiles: dict[str, SharingProfile | None] = {}
    default = cluster_profile(settings)
    if default is not None:
        profiles[DEFAULT_KEY] = default
    profiles.update(settings.sharing.profiles)
    if any(n.sharing == NONE_KEY for n in settings.nodes) and NONE_KEY not in profiles:
        profiles[NONE_KEY] = None
    return profiles


def node_profile_key(settings: Settings, node: NodeSettings, profiles: dict[str, Any] | None = None) -> str | None:
    """The sharing ConfigMap key a node uses: its own label, else the cluster default, else None.

    `profiles` is `all_profiles(settings)` when the caller already has it (it walks every node).
    """
    if node.sharing is not None:
        return node.sharing
    profiles = all_profiles(settings) if profiles is None else profiles
    return DEFAULT_KEY if DEFAULT_KEY in profiles else None


# --------------------------------------------------------------------------- MIG
def group_to_parted(group: MigDeviceGroup) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if group.device_filter is not None:
        entry["device-filter"] = group.device_filter if isinstance(group.device_filter, str) else list(group.device_filter)
    entry["devices"] = group.devices if group.devices == "all" else list(group.devices)
    entry["mig-enabled"] = group.mig_enabled
    if group.mig_enabled:
        entry["mig-devices"] = dict(group.mig_devices)
    return entry


def filter_ids(group: MigDeviceGroup) -> tuple[str, ...]:
    f = group.device_filter
    return () if f is None else ((f,) if isinstance(f, str) else tuple(f))


def applies_to(group: MigDeviceGroup, model: GpuModel | None) -> bool:
    """True when a mig-parted entry applies to GPUs of `model` (its device filter matches)."""
    ids = filter_ids(group)
    if not ids:
        return True
    if model is None:
        return False
    own = {d.lower() for d in model.pci_device_ids}
    return any(i.lower() in own for i in ids)


def _indices(group: MigDeviceGroup, count: int) -> list[int]:
    return list(range(count)) if group.devices == "all" else [i for i in group.devices if i < count]


def node_layout(settings: Settings, node: NodeSettings) -> list[GpuLayout] | None:
    """Each GPU's MIG state once the node's `nvidia.com/mig.config` is applied; None when the
    stack leaves MIG as it is (no config for the node, or mig.strategy none)."""
    if node.mig is None or settings.mig.strategy == "none":
        return None
    count = node.gpu.count
    model = catalog().lookup(node.gpu.model)
    groups = settings.mig.profiles.get(node.mig) if settings.mig.profiles else None
    if groups is not None:
        layout: list[GpuLayout] = [None] * count
        for group in groups:
            if applies_to(group, model):
                for i in _indices(group, count):
                    layout[i] = dict(group.mig_devices) if group.mig_enabled else None
        return layout
    if node.mig == ALL_DISABLED:
        return [None] * count
    builtin = catalog().builtin_configs.get(node.mig)
    per_gpu = builtin_layout(builtin, model) if builtin is not None and model is not None else None
    return None if per_gpu is None else [dict(per_gpu) for _ in range(count)]


def layout_profiles(layout: list[GpuLayout] | None) -> set[str]:
    """The instance profiles a node's layout creates (count > 0)."""
    return {p for gpu in layout or () if gpu for p, n in gpu.items() if n > 0}


def mig_enabled_on(layout: list[GpuLayout] | None) -> bool:
    return any(gpu is not None for gpu in layout or ())


# --------------------------------------------------------------------------- allocation
def node_allocation(settings: Settings, node: NodeSettings) -> Allocation:
    """How a node's GPUs are allocated: its own `allocation`, else `dra.allocation`."""
    return node.allocation if node.allocation is not None else settings.dra.allocation


def dra_nodes(settings: Settings) -> tuple[NodeSettings, ...]:
    """The nodes whose GPUs are allocated through DRA, in `nodes` order."""
    return tuple(n for n in settings.nodes if node_allocation(settings, n) == DRA)


def uses_dra(settings: Settings) -> bool:
    """True when any node's GPUs are allocated through DRA (the DRA driver's release is then installed)."""
    return any(node_allocation(settings, n) == DRA for n in settings.nodes)

