"""Rules on MIG: mig-parted's own rules on custom configs, and each node's config against the GPU catalog."""

from __future__ import annotations

from typing import Any

from ..errors import Problem, config_key
from ..facts import applies_to, filter_ids, group_to_parted, layout_profiles, mig_enabled_on, node_layout
from ..gpu_models import ALL_DISABLED, builtin_layout, builtin_names_for, catalog, fits
from ..nodes import NodeSettings
from ..root import Settings


def _group_key(name: str, j: int, *rest: Any) -> str:
    return config_key(("mig", "profiles", name, j, *rest))


def _structure(settings: Settings) -> list[Problem]:
    """mig-parted's own rules on each custom config, and profile names the catalog knows."""
    out: list[Problem] = []
    cat = catalog()
    known = cat.all_profile_names
    for name, groups in settings.mig.profiles.items():
        if not groups:
            out.append(Problem(key=config_key(("mig", "profiles", name)), value=[], message="must list at least one entry (devices, mig-enabled, mig-devices)"))
        for j, g in enumerate(groups):
            key = _group_key(name, j, "mig-devices")
            if g.mig_enabled and (not g.mig_devices or not any(g.mig_devices.values())):
                out.append(Problem(key=key, value=dict(g.mig_devices), message=(
                    "is required when mig-enabled is true: at least one profile with a count above 0, "
                    "e.g. {\"1g.10gb\": 7}")))
            if not g.mig_enabled and g.mig_devices:
                out.append(Problem(key=key, value=dict(g.mig_devices), message=(
                    "must be empty when mig-enabled is false (mig-parted rejects instances on a GPU with MIG off)")))
            for ident in filter_ids(g):
                if cat.by_device_id(ident) is None:
                    out.append(Problem(key=_group_key(name, j, "device-filter"), value=ident, message=(
                        "matches no GPU of the catalog (config/gpu-models.yaml); use a device id such as "
                        "0x233510DE (H200-141GB)")))
            if g.mig_enabled:
                for profile in g.mig_devices:
                    if profile not in known:
                        out.append(Problem(key=_group_key(name, j, "mig-devices", profile), value=g.mig_devices[profile], message=(
                            f"MIG profile {profile!r} exists on no GPU of the catalog")))
                for ident in filter_ids(g):
                    model = cat.by_device_id(ident)
                    reasons = fits(model, g.mig_devices) if model is not None else []
                    if model is not None and reasons:
                        out.append(Problem(key=key, value=dict(g.mig_devices), message=(
                            f"device-filter {ident} ({model.name}): " + "; ".join(reasons))))
    custom_off = settings.mig.profiles.get(ALL_DISABLED)
    if custom_off is not None:
        disables_all = all(not g.mig_enabled for g in custom_off) and any(
            g.devices == "all" and g.device_filter is None for g in custom_off
        )
        if not disables_all:
            out.append(Problem(key=config_key(("mig", "profiles", ALL_DISABLED)), value=[group_to_parted(g) for g in custom_off], message=(
                "must turn MIG off on every GPU: the operator labels MIG-capable nodes all-disabled by default; "
                "use [{devices: all, mig-enabled: false}] or remove it (the stack adds it)")))
    return out


def _node(settings: Settings, i: int, node: NodeSettings) -> list[Problem]:
    if node.mig is None:
        return []
    mig = settings.mig
    key = config_key(("nodes", i, "mig"))
    if mig.strategy == "none":
        return [Problem(key=key, value=node.mig, message=(
            "has no effect while mig.strategy is none (the device plugin ignores MIG); set mig.strategy "
            "to single or mixed, or remove nodes[].mig"))]
    if not mig.manager.enabled:
        return [Problem(key=key, value=node.mig, message=(
            "needs the MIG manager, which is off (mig.manager.enabled false); enable it or remove nodes[].mig"))]
    cat = catalog()
    model = cat.lookup(node.gpu.model)
    if model is None:
        return [Problem(key=config_key(("nodes", i, "gpu", "model")), value=node.gpu.model, message=(
            "is not in the GPU catalog (config/gpu-models.yaml), so its MIG config cannot be checked; "
            f"MIG-capable models: {', '.join(m.name for m in cat.models if m.mig_capable)}"))]
    if not model.mig_capable:
        return [Problem(key=key, value=node.mig, message=(
            f"{model.name} has no MIG; remove nodes[].mig for this node"))]
    out: list[Problem] = []
    if mig.profiles:
        groups = mig.profiles.get(node.mig)
        if groups is None:
            if node.mig == ALL_DISABLED:
                return []
            return [Problem(key=key, value=node.mig, message=(
                "names no config of mig.profiles (custom configs replace the operator's built-in list); "
                f"defined: {', '.join([ALL_DISABLED, *(k for k in mig.profiles if k != ALL_DISABLED)])}"))]
        applicable = [(j, g) for j, g in enumerate(groups) if applies_to(g, model)]
        if not applicable:
            return [Problem(key=key, value=node.mig, message=(
                f"no entry of mig.profiles[\"{node.mig}\"] applies to {model.name} (device-filter)"))]
        for j, g in applicable:
            if g.devices != "all":
                missing = [d for d in g.devices if d >= node.gpu.count]
                if missing:
                    out.append(Problem(key=_group_key(node.mig, j, "devices"), value=list(g.devices), message=(
                        f"GPU index {missing[0]} does not exist on node {node.name} ({node.gpu.count} GPUs, "
                        f"indices 0-{node.gpu.count - 1})")))
            if g.mig_enabled and g.mig_devices:
                reasons = fits(model, g.mig_devices)
                if reasons:
                    out.append(Problem(key=_group_key(node.mig, j, "mig-devices"), value=dict(g.mig_devices), message=(
                        f"does not fit {model.name} (node {node.name}): " + "; ".join(reasons))))
    else:
        builtin = cat.builtin_configs.get(node.mig)
        if builtin is None or (node.mig != ALL_DISABLED and builtin_layout(builtin, model) is None):
            valid = builtin_names_for(model)
            what = "is not a config of the operator's built-in list" if builtin is None else f"does not apply to {model.name}"
            return [Problem(key=key, value=node.mig, message=(
                f"{what}; built-in configs for {model.name}: {', '.join(valid)} (or define your own in mig.profiles)"))]
    if out:
        return out
    layout = node_layout(settings, node)
    profiles = layout_profiles(layout)
    if mig.strategy == "single":
        if len(profiles) > 1:
            out.append(Problem(key=config_key(("mig", "strategy")), value="single", message=(
                f"node {node.name} uses MIG config {node.mig!r} with several instance profiles "
                f"({', '.join(sorted(profiles))}); that needs mig.strategy mixed")))
        elif layout and mig_enabled_on(layout) and not all(gpu is not None for gpu in layout):
            out.append(Problem(key=config_key(("mig", "strategy")), value="single", message=(
                f"node {node.name} has MIG on some GPUs and off on others under MIG config {node.mig!r}; "
                "the single strategy needs all GPUs of a node alike: use mig.strategy mixed")))
    return out


def mig_rules(settings: Settings) -> list[Problem]:
    out = _structure(settings)
    for i, node in enumerate(settings.nodes):
        out.extend(_node(settings, i, node))
    return out
