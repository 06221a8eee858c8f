"""Per-node facts, computed once from Settings: what each node is and will advertise (no cluster).

Per node: its physical GPUs (and their catalog entry), the sharing profile and MIG config it
uses, its MIG layout, and the extended resources the device plugin will advertise with their
counts:
- no MIG: `nvidia.com/gpu` = G, times R when time-sliced or MPS-shared (`.shared` with rename);
- MIG single: `nvidia.com/gpu` = MIG instances on the node (times R when shared);
- MIG mixed: `nvidia.com/mig-<profile>` per profile = instances (times R when the sharing
  profile lists that MIG resource), plus `nvidia.com/gpu` for the node's GPUs with MIG off.

A node whose GPUs are allocated through DRA (`nodes[i].allocation`, `dra.allocation`)
advertises no extended resource: its devices are published in a ResourceSlice instead, counted
per DeviceClass (`gpu.nvidia.com`: GPUs with MIG off, `mig.nvidia.com`: MIG instances); the
device plugin's sharing and MIG resource do not apply there.

`node_facts` computes them for every node, once per derive(); the sharing and MIG configs, the
capacity table, node preparation, the alerts, the MIG rollout and the validation plan all read
these facts instead of starting again from Settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..config.dra import DRA, Allocation
from ..config.facts import (
    GPU_RESOURCE,
    GpuLayout,
    all_profiles,
    node_allocation,
    node_layout,
    node_profile_key,
    profile_resources,
)
from ..config.gpu_models import ALL_DISABLED, GpuModel, catalog, mig_resource_name
from ..config.mig import MigSettings
from ..config.nodes import NodeSettings
from ..config.root import Settings
from ..config.sharing import SharingProfile


@dataclass(frozen=True)
class NodeFacts:
    """Everything the stack decides about one node, before any object is generated."""

    index: int
    """Position in `nodes` (config keys name it: nodes[<index>])."""
    node: NodeSettings
    model: GpuModel | None
    """The node's GPU in the catalog (config/gpu-models.yaml); None for a model it does not know."""
    layout: list[GpuLayout] | None
    """Each GPU's MIG state once the node's MIG config is applied; None: MIG left as it is."""
    profile_key: str | None
    """The sharing ConfigMap key the node uses (its own, else the cluster default), or None."""
    profile: SharingProfile | None
    """That profile; None without one or for a no-sharing key."""
    physical: dict[str, int]
    """What the node advertises before sharing: whole GPUs and MIG instances."""
    advertised: dict[str, int]
    """Extended resource name -> count the node advertises, sharing and MIG applied."""
    mig_resource: str | None
    """The resource a pod requests to get one MIG device here; None when none is expected."""
    allocation: Allocation = "devicePlugin"
    """How the node's GPUs are allocated: devicePlugin or dra."""
    dra_devices: dict[str, int] = field(default_factory=dict)
    """DeviceClass -> devices the node's ResourceSlice publishes (DRA nodes only; empty otherwise)."""

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def uses_dra(self) -> bool:
        """True when the node's GPUs are allocated through DRA (its device plugin is off)."""
        return self.allocation == DRA

    @property
    def shares(self) -> bool:
        """True when the device plugin time-slices or MPS-shares the node's GPUs (never on a DRA
        node, where pods share a device by naming one ResourceClaim)."""
        return not self.uses_dra and self.profile is not None and self.profile.mode != "none"


def _physical(layout: list[GpuLayout] | None, strategy: str, count: int) -> dict[str, int]:
    if layout is None or not any(gpu is not None for gpu in layout):
        return {GPU_RESOURCE: count}
    whole = sum(1 for gpu in layout if gpu is None)
    if strategy == "single":
        # All GPUs of the node are MIG-enabled alike (a config rule); each instance is one nvidia.com/gpu.
        instances = sum(n for gpu in layout if gpu for n in gpu.values())
        return {GPU_RESOURCE: instances + whole}
    out: dict[str, int] = {GPU_RESOURCE: whole} if whole else {}
    for gpu in layout:
        for profile, n in (gpu or {}).items():
            if n > 0:
                name = mig_resource_name(profile)
                out[name] = out.get(name, 0) + n
    return out


def _advertised(physical: dict[str, int], profile: SharingProfile | None) -> dict[str, int]:
    if profile is None or profile.mode == "none":
        return physical
    replicas = {r.name: r.replicas for r in profile_resources(profile)}
    out: dict[str, int] = {}
    for name, count in physical.items():
        r = replicas.get(name)
        if r is None:
            out[name] = out.get(name, 0) + count
            continue
        shared = f"{name}.shared" if profile.rename_by_default else name
        out[shared] = out.get(shared, 0) + count * r
    return out


def _mig_resource(mig: MigSettings, node: NodeSettings, physical: dict[str, int]) -> str | None:
    if node.mig is None or node.mig == ALL_DISABLED or mig.strategy == "none":
        return None
    groups = mig.profiles.get(node.mig)
    if groups is not None and not any(g.mig_enabled and any(g.mig_devices.values()) for g in groups):
        return None
    mig_resources = sorted(r for r in physical if r.startswith("nvidia.com/mig-"))
    if mig_resources:
        return mig_resources[0]
    if mig.strategy == "single":
        return "nvidia.com/gpu"
    if groups is not None:
        profiles = sorted(p for g in groups if g.mig_enabled for p, n in g.mig_devices.items() if n > 0)
        return f"nvidia.com/mig-{profiles[0].replace('+', '.')}" if profiles else None
    if node.mig.startswith("all-") and node.mig[4:5].isdigit():
        # A built-in `all-<profile>` (e.g. all-1g.10gb) under the mixed strategy.
        return f"nvidia.com/mig-{node.mig[4:].replace('+', '.')}"
    return None


def node_facts(settings: Settings, profiles: dict[str, Any] | None = None) -> tuple[NodeFacts, ...]:
    """The facts of every node, in `nodes` order: each MIG layout and capacity computed once.

    `profiles`: `all_profiles(settings)` when the caller has it (derive() does; it walks every node)."""
    profiles = all_profiles(settings) if profiles is None else profiles
    cat = catalog()
    out = []
    for index, node in enumerate(settings.nodes):
        layout = node_layout(settings, node)
        key = node_profile_key(settings, node, profiles)
        profile = profiles.get(key) if key else None
        physical = _physical(layout, settings.mig.strategy, node.gpu.count)
        allocation = node_allocation(settings, node)
        dra = allocation == DRA
        out.append(NodeFacts(
            index=index,
            node=node,
            model=cat.lookup(node.gpu.model),
            layout=layout,
            profile_key=key,
            profile=profile,
            physical=physical,
            advertised={} if dra else _advertised(physical, profile),
            mig_resource=None if dra else _mig_resource(settings.mig, node, physical),
            allocation=allocation,
            dra_devices=dra_devices(layout, node.gpu.count) if dra else {},
        ))
    return tuple(out)


GPU_CLASS = "gpu.nvidia.com"
MIG_CLASS = "mig.nvidia.com"
"""The DRA driver's DeviceClasses of whole GPUs and of MIG devices
(kubernetes-sigs/dra-driver-nvidia-gpu at v0.4.1, its chart's templates deviceclass-gpu.yaml and deviceclass-mig.yaml)."""


def dra_devices(layout: list[GpuLayout] | None, count: int) -> dict[str, int]:
    """DeviceClass -> devices a DRA node publishes: its GPUs with MIG off, and its MIG instances."""
    whole = count if layout is None else sum(1 for gpu in layout if gpu is None)
    instances = sum(n for gpu in layout or () if gpu for n in gpu.values())
    return {c: n for c, n in ((GPU_CLASS, whole), (MIG_CLASS, instances)) if n}


def physical_resources(settings: Settings, node: NodeSettings) -> dict[str, int]:
    """What one node advertises before sharing (node_facts computes it for every node at once)."""
    return _physical(node_layout(settings, node), settings.mig.strategy, node.gpu.count)


def node_capacity(settings: Settings, node: NodeSettings, profiles: dict[str, Any] | None = None) -> dict[str, int]:
    """What one node advertises, sharing and MIG applied (node_facts computes it for every node at once)."""
    profiles = all_profiles(settings) if profiles is None else profiles
    key = node_profile_key(settings, node, profiles)
    return _advertised(physical_resources(settings, node), profiles.get(key) if key else None)


def capacity_table(nodes: Sequence[NodeFacts]) -> list[dict[str, Any]]:
    """One row per node, then a cluster total row."""
    rows: list[dict[str, Any]] = []
    totals: dict[str, int] = {}
    for facts in nodes:
        for k, v in facts.advertised.items():
            totals[k] = totals.get(k, 0) + v
        node = facts.node
        rows.append(
            {
                "node": node.name,
                "gpus": f"{node.gpu.count}x {node.gpu.model}",
                "sharing": facts.profile_key or "-",
                "mig": node.mig or "-",
                "advertises": facts.advertised,
                # A DRA node: the devices its ResourceSlice publishes, per DeviceClass.
                **({"claims": facts.dra_devices} if facts.uses_dra else {}),
            }
        )
    if rows:
        total: dict[str, Any] = {"node": "TOTAL", "gpus": sum(f.node.gpu.count for f in nodes), "sharing": "", "mig": "", "advertises": totals}
        if any(f.uses_dra for f in nodes):
            claims: dict[str, int] = {}
            for f in nodes:
                for cls, n in f.dra_devices.items():
                    claims[cls] = claims.get(cls, 0) + n
            total["claims"] = claims
        rows.append(total)
    return rows
