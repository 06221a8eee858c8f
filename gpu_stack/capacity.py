"""What each node will advertise to the scheduler, computed from Settings (no cluster needed)."""

from __future__ import annotations

from typing import Any

from .settings import NodeSettings, Settings
from .sharing import all_profiles, DEFAULT_KEY, profile_resources


def node_profile_key(settings: Settings, node: NodeSettings, profiles: dict[str, Any] | None = None) -> str | None:
    """The sharing ConfigMap key a node uses: its own label, else the cluster default, else None.

    `profiles` is `all_profiles(settings)` when the caller already has it (it walks every node).
    """
    if node.sharing is not None:
        return node.sharing
    profiles = all_profiles(settings) if profiles is None else profiles
    return DEFAULT_KEY if DEFAULT_KEY in profiles else None


def node_capacity(settings: Settings, node: NodeSettings, profiles: dict[str, Any] | None = None) -> dict[str, int]:
    """Extended resource name -> count the node advertises (MIG handled by the MIG rules)."""
    profiles = all_profiles(settings) if profiles is None else profiles
    key = node_profile_key(settings, node, profiles)
    profile = profiles.get(key) if key else None
    gpus = node.gpu.count
    if profile is None or profile.mode == "none":
        return {"nvidia.com/gpu": gpus}
    replicas = {r.name: r.replicas for r in profile_resources(profile)}
    r = replicas.get("nvidia.com/gpu", 1)
    name = "nvidia.com/gpu.shared" if profile.rename_by_default and r > 1 else "nvidia.com/gpu"
    return {name: gpus * r}


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
