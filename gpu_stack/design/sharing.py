"""Device-plugin sharing configs (time-slicing, MPS) generated from Settings.

All profiles go into one ConfigMap in the operator namespace, one key per profile; the key is
also the value of the node label `nvidia.com/device-plugin.config`. The ConfigMap's name is a
hash of its data, and the Helm values reference exactly that name.

Which profiles exist and which one a node uses are facts of the config (config/facts.py), read
once per derive() and passed in; every config the device plugin v0.18.1 would reject is a config
rule (config/rules/sharing.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..config.facts import DEFAULT_KEY, profile_resources
from ..config.sharing import SharingProfile
from .capacity import NodeFacts
from .naming import content_name

NODE_LABEL = "nvidia.com/device-plugin.config"
CONFIGMAP_PREFIX = "device-plugin-sharing"


@dataclass(frozen=True)
class SharingConfig:
    """What the cluster receives for GPU sharing."""

    configmap_name: str | None
    """None when no node shares GPUs (no ConfigMap, devicePlugin.config untouched)."""
    data: dict[str, str] = field(default_factory=dict)
    """ConfigMap data: profile key -> device-plugin config file (YAML)."""
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The same configs as dicts (for capacity and tests)."""
    default_key: str = ""
    node_labels: dict[str, str] = field(default_factory=dict)
    """Node name -> profile key, for nodes that select a profile of their own."""


def device_plugin_config(profile: SharingProfile | None, mig_strategy: str) -> dict[str, Any]:
    """One device-plugin config file (`version: v1`) for a profile; None means no sharing."""
    config: dict[str, Any] = {"version": "v1", "flags": {"migStrategy": mig_strategy}}
    if profile is None or profile.mode == "none":
        return config
    body: dict[str, Any] = {
        "renameByDefault": profile.rename_by_default,
        "failRequestsGreaterThanOne": profile.fail_requests_greater_than_one or profile.mode == "mps",
        "resources": [{"name": r.name, "replicas": r.replicas} for r in profile_resources(profile)],
    }
    config["sharing"] = {"timeSlicing" if profile.mode == "time-slicing" else "mps": body}
    return config


def build_sharing(
    profiles: Mapping[str, SharingProfile | None], mig_strategy: str, nodes: Sequence[NodeFacts]
) -> SharingConfig:
    """The ConfigMap of every profile (`profiles`: config.facts.all_profiles, derived once) and
    the labels of the nodes that select one of their own."""
    if not profiles:
        return SharingConfig(configmap_name=None)
    files = {key: device_plugin_config(p, mig_strategy) for key, p in profiles.items()}
    data = {key: yaml.safe_dump(cfg, sort_keys=False) for key, cfg in files.items()}
    return SharingConfig(
        configmap_name=content_name(CONFIGMAP_PREFIX, data),
        data=data,
        files=files,
        default_key=DEFAULT_KEY if DEFAULT_KEY in profiles else "",
        # A DRA node runs no device plugin: no profile label (its profile is said in DRA terms, design/dra.py).
        node_labels={f.name: f.node.sharing for f in nodes if f.node.sharing is not None and not f.uses_dra},
    )
