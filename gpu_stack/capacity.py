"""What each node will advertise to the scheduler, computed from Settings (no cluster needed).

Per node: its physical GPUs, the sharing profile and MIG config it uses, and the extended
resources the device plugin will advertise with their counts:
- no MIG: `nvidia.com/gpu` = G, times R when time-sliced or MPS-shared (`.shared` with rename);
- MIG single: `nvidia.com/gpu` = MIG instances on the node (times R when shared);
- MIG mixed: `nvidia.com/mig-<profile>` per profile = instances (times R when the sharing
  profile lists that MIG resource), plus `nvidia.com/gpu` for the node's GPUs with MIG off.
"""

from __future__ import annotations

from typing import Any

from .config.facts import GPU_RESOURCE, all_profiles, node_layout, node_profile_key, profile_resources
from .config.nodes import NodeSettings
from .config.root import Settings
from .gpu_models import mig_resource_name


def physical_resources(settings: Settings, node: NodeSettings) -> dict[str, int]:
    """What the node advertises before sharing: whole GPUs and MIG instances."""
    layout = node_layout(settings, node)
    strategy = settings.mig.strategy
    if layout is None or not any(gpu is not None for gpu in layout):
        return {GPU_RESOURCE: node.gpu.count}
    whole = sum(1 for gpu in layout if gpu is None)
    if strategy == "single":
        # All GPUs of the node are MIG-enabled alike (a settings rule); each instance is one nvidia.com/gpu.
        instances = sum(n for gpu in layout if gpu for n in gpu.values())
        return {GPU_RESOURCE: instances + whole}
    out: dict[str, int] = {GPU_RESOURCE: whole} if whole else {}
    for gpu in layout:
        for profile, n in (gpu or {}).items():
            if n > 0:
                name = mig_resource_name(profile)
                out[name] = out.get(name, 0) + n
    return out


def node_capacity(settings: Settings, node: NodeSettings, profiles: dict[str, Any] | None = None) -> dict[str, int]:
    """Extended resource name -> count the node advertises, sharing and MIG applied."""
    profiles = all_profiles(settings) if profiles is None else profiles
    key = node_profile_key(settings, node, profiles)
    profile = profiles.get(key) if key else None
    physical = physical_resources(settings, node)
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


def capacity_table(settings: Settings) -> list[dict[str, Any]]:
    """One row per node, then a cluster total row."""
    rows: list[dict[str, Any]] = []
    totals: dict[str, int] = {}
    profiles = all_profiles(settings)  # once: it walks every node
    for node in settings.nodes:
        advertised = node_capacity(settings, node, profiles)
        for k, v in advertised.items():
            totals[k] = totals.get(k, 0) + v
        rows.append(
            {
                "node": node.name,
                "gpus": f"{node.gpu.count}x {node.gpu.model}",
                "sharing": node_profile_key(settings, node, profiles) or "-",
                "mig": node.mig or "-",
                "advertises": advertised,
            }
        )
    if rows:
        rows.append({"node": "TOTAL", "gpus": sum(n.gpu.count for n in settings.nodes), "sharing": "", "mig": "", "advertises": totals})
    return rows
