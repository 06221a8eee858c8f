"""Device-plugin sharing configs (time-slicing, MPS) generated from Settings, and their rules.

All profiles go into one ConfigMap in the operator namespace, one key per profile; the key is
also the value of the node label `nvidia.com/device-plugin.config`. The ConfigMap's name is a
hash of its data, and the Helm values reference exactly that name.

Every config the device plugin v0.18.1 would reject (or silently misread) is a settings error
here, naming the key to fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml
from pydantic.alias_generators import to_camel

from . import checks
from .gpu_models import catalog, mig_resource_name
from .mig import mig_enabled_on, node_layout
from .naming import content_name
from .settings import _MISSING, MPS_MAX_REPLICAS, RESERVED_SHARING_KEYS, Problem, Settings, SharedResource, SharingProfile, config_key

DEFAULT_KEY = "default"
"""The key of the cluster-wide profile built from the top-level `sharing.*` settings."""
NONE_KEY = "none"
"""The key a node selects (`nodes[i].sharing: none`) to opt out of sharing."""
NODE_LABEL = "nvidia.com/device-plugin.config"
CONFIGMAP_PREFIX = "device-plugin-sharing"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
MPS_MAX_REPLICAS_BEFORE_7_5 = 16
"""MPS clients per GPU before compute capability 7.5 (Volta)."""


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


def build_sharing(settings: Settings) -> SharingConfig:
    profiles = all_profiles(settings)
    if not profiles:
        return SharingConfig(configmap_name=None)
    files = {key: device_plugin_config(p, settings.mig.strategy) for key, p in profiles.items()}
    data = {key: yaml.safe_dump(cfg, sort_keys=False) for key, cfg in files.items()}
    return SharingConfig(
        configmap_name=content_name(CONFIGMAP_PREFIX, data),
        data=data,
        files=files,
        default_key=DEFAULT_KEY if DEFAULT_KEY in profiles else "",
        node_labels={n.name: n.sharing for n in settings.nodes if n.sharing is not None},
    )


# --------------------------------------------------------------------------- rules
_OPTIONAL_KEYS = ("replicas", "rename_by_default", "fail_requests_greater_than_one", "resources")


def _profile_problems(
    settings: Settings, prefix: tuple[Any, ...], raw: Any, profile: SharingProfile | None
) -> list[Problem]:
    """Rules on one profile: `raw` is the model as typed (SharingSettings or SharingProfile),
    `profile` what the builder makes of it (None when its mode is none)."""
    out: list[Problem] = []
    where = config_key(prefix)
    if raw.mode == "none":
        for name in _OPTIONAL_KEYS:
            if name in raw.model_fields_set:
                out.append(Problem(key=config_key((*prefix, to_camel(name))), value=_plain(getattr(raw, name)), message=(
                    f"has no effect while {where.split(':', 1)[1]}.mode is none (the device plugin would ignore it); "
                    "set the mode to time-slicing or mps, or remove this key")))
        return out
    assert profile is not None
    if isinstance(raw, SharingProfile) and raw.replicas is None and not raw.resources:
        out.append(Problem(key=config_key((*prefix, "replicas")), value=_MISSING, message=(
            f"is required for a {raw.mode} profile unless `resources` lists what to share "
            "(the device plugin rejects a config with no resources)")))
    seen: dict[str, int] = {}
    for j, r in enumerate(raw.resources):
        rkey = config_key((*prefix, "resources", j, "name"))
        if r.name in seen:
            out.append(Problem(key=rkey, value=r.name, message=f"is listed twice (also resources[{seen[r.name]}])"))
        seen.setdefault(r.name, j)
        if r.name == GPU_RESOURCE and "replicas" in raw.model_fields_set and raw.replicas is not None:
            out.append(Problem(key=rkey, value=r.name, message=(
                f"is also set by {where.split(':', 1)[1]}.replicas; give nvidia.com/gpu its replicas in one place")))
        if r.name.startswith(MIG_RESOURCE_PREFIX):
            if r.name not in _known_mig_resources():
                out.append(Problem(key=rkey, value=r.name, message=(
                    "names a MIG profile no GPU of the catalog has (config/gpu-models.yaml); e.g. "
                    "nvidia.com/mig-1g.10gb, nvidia.com/mig-3g.71gb")))
            if raw.mode == "mps":
                out.append(Problem(key=rkey, value=r.name, message="MPS cannot share MIG devices; share nvidia.com/gpu or use time-slicing"))
            elif settings.mig.strategy != "mixed":
                out.append(Problem(key=rkey, value=r.name, message=(
                    f"MIG resources exist only under mig.strategy mixed (now {settings.mig.strategy!r}); "
                    "under single MIG instances are nvidia.com/gpu")))
    if raw.mode == "mps":
        if settings.mig.strategy == "mixed":
            out.append(Problem(key=config_key((*prefix, "mode")), value="mps", message=(
                "the device plugin refuses MPS with mig.strategy mixed; use time-slicing, or mig.strategy single/none")))
        if "fail_requests_greater_than_one" in raw.model_fields_set and not raw.fail_requests_greater_than_one:
            out.append(Problem(key=config_key((*prefix, "failRequestsGreaterThanOne")), value=False, message=(
                "MPS always fails requests for more than one replica; remove this key")))
        for rkey, r in _replica_keys(prefix, raw, profile):
            if r.replicas > MPS_MAX_REPLICAS:
                out.append(Problem(key=rkey, value=r.replicas, message=f"must be at most {MPS_MAX_REPLICAS} under MPS (clients per GPU)"))
    return out


def _known_mig_resources() -> set[str]:
    return {mig_resource_name(p) for p in catalog().all_profile_names}


def _replica_keys(prefix: tuple[Any, ...], raw: Any, profile: SharingProfile) -> list[tuple[str, SharedResource]]:
    """(config key of each replicas value, resource) of a profile as the builder emits it."""
    out: list[tuple[str, SharedResource]] = []
    if profile.replicas is not None:
        out.append((config_key((*prefix, "replicas")), SharedResource(name=GPU_RESOURCE, replicas=profile.replicas)))
    for j, r in enumerate(raw.resources):
        out.append((config_key((*prefix, "resources", j, "replicas")), r))
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [v.model_dump(by_alias=True) if hasattr(v, "model_dump") else v for v in value]
    return value


def _sharing_rules(settings: Settings) -> list[Problem]:
    s = settings.sharing
    profiles = all_profiles(settings)
    out = _profile_problems(settings, ("sharing",), s, profiles.get(DEFAULT_KEY))
    sources: dict[str, tuple[tuple[Any, ...], Any]] = {DEFAULT_KEY: (("sharing",), s)}
    for key, p in s.profiles.items():
        if key in RESERVED_SHARING_KEYS:
            out.append(Problem(key=config_key(("sharing", "profiles", key)), value=_MISSING, message=(
                f"is a reserved profile name: 'default' is the profile built from sharing.mode/replicas "
                "and 'none' turns sharing off; choose another name")))
            continue
        sources[key] = (("sharing", "profiles", key), p)
        out.extend(_profile_problems(settings, ("sharing", "profiles", key), p, p if p.mode != "none" else None))
    cat = catalog()
    for i, node in enumerate(settings.nodes):
        key = node.sharing if node.sharing is not None else (DEFAULT_KEY if DEFAULT_KEY in profiles else None)
        if node.sharing is not None and node.sharing not in profiles:
            defined = [k for k in profiles] or ["(none: set sharing.mode or sharing.profiles)"]
            hint = " (sharing.mode is none, so there is no 'default')" if node.sharing == DEFAULT_KEY else ""
            out.append(Problem(key=config_key(("nodes", i, "sharing")), value=node.sharing, message=(
                f"names no sharing profile{hint}; defined: {', '.join(defined)}, or 'none' to opt out")))
            continue
        profile = profiles.get(key) if key else None
        if profile is None or profile.mode != "mps" or key not in sources:
            continue
        prefix, raw = sources[key]
        model = cat.lookup(node.gpu.model)
        if model is not None and model.compute_capability < (7, 5):
            for rkey, r in _replica_keys(prefix, raw, profile):
                if r.replicas > MPS_MAX_REPLICAS_BEFORE_7_5:
                    out.append(Problem(key=rkey, value=r.replicas, message=(
                        f"must be at most {MPS_MAX_REPLICAS_BEFORE_7_5} under MPS on {model.name} "
                        f"(compute capability {model.compute_capability[0]}.{model.compute_capability[1]}, "
                        f"node {node.name})")))
        if mig_enabled_on(node_layout(settings, node)):
            out.append(Problem(key=config_key(("nodes", i, "mig")), value=node.mig, message=(
                f"turns MIG on, but the node shares its GPUs with MPS (profile {key!r}); MPS cannot share "
                "MIG devices: use time-slicing for this node or leave MIG off")))
    return out


checks.RULES.append(_sharing_rules)
