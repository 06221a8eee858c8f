"""Rules on the sharing profiles: every config the device plugin v0.18.1 would reject or misread."""

from __future__ import annotations

from typing import Any

from pydantic.alias_generators import to_camel

from ..errors import MISSING, Problem, config_key
from ..facts import (
    DEFAULT_KEY,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    MPS_MAX_REPLICAS_BEFORE_7_5,
    all_profiles,
    mig_enabled_on,
    node_layout,
)
from ..gpu_models import catalog, mig_resource_name
from ..root import Settings
from ..sharing import SharedResource, SharingProfile
from ..types import MPS_MAX_REPLICAS, RESERVED_SHARING_KEYS

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
        out.append(Problem(key=config_key((*prefix, "replicas")), value=MISSING, message=(
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


def sharing_rules(settings: Settings) -> list[Problem]:
    s = settings.sharing
    profiles = all_profiles(settings)
    out = _profile_problems(settings, ("sharing",), s, profiles.get(DEFAULT_KEY))
    sources: dict[str, tuple[tuple[Any, ...], Any]] = {DEFAULT_KEY: (("sharing",), s)}
    for key, p in s.profiles.items():
        if key in RESERVED_SHARING_KEYS:
            out.append(Problem(key=config_key(("sharing", "profiles", key)), value=MISSING, message=(
                "is a reserved profile name: 'default' is the profile built from sharing.mode/replicas "
                "and 'none' turns sharing off; choose another name")))
            continue
        sources[key] = (("sharing", "profiles", key), p)
        out.extend(_profile_problems(settings, ("sharing", "profiles", key), p, p if p.mode != "none" else None))
    cat = catalog()
    for i, node in enumerate(settings.nodes):
        name = node.sharing if node.sharing is not None else (DEFAULT_KEY if DEFAULT_KEY in profiles else None)
        if node.sharing is not None and node.sharing not in profiles:
            defined = list(profiles) or ["(none: set sharing.mode or sharing.profiles)"]
            hint = " (sharing.mode is none, so there is no 'default')" if node.sharing == DEFAULT_KEY else ""
            out.append(Problem(key=config_key(("nodes", i, "sharing")), value=node.sharing, message=(
                f"names no sharing profile{hint}; defined: {', '.join(defined)}, or 'none' to opt out")))
            continue
        profile = profiles.get(name) if name else None
        if profile is None or profile.mode != "mps" or name not in sources:
            continue
        prefix, raw = sources[name]
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
                f"turns MIG on, but the node shares its GPUs with MPS (profile {name!r}); MPS cannot share "
                "MIG devices: use time-slicing for this node or leave MIG off")))
    return out
