"""MIG: the custom mig-parted config, each node's MIG layout, and the rules that check them.

Custom configs (`mig.profiles`) go into one content-named ConfigMap (key `config.yaml`) that
replaces the operator's built-in list, so it always holds `all-disabled`. Without custom configs
a node may name any built-in config that works on its GPU model. Every node's config is checked
against the GPU catalog (config/gpu-models.yaml): the profiles exist on that model, the counts
fit one GPU, the indices exist, and several profiles on one node need `mig.strategy: mixed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from . import checks
from .gpu_models import ALL_DISABLED, GpuModel, builtin_layout, builtin_names_for, catalog, fits
from .naming import content_name
from .settings import MigDeviceGroup, NodeSettings, Problem, Settings, config_key

NODE_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
CONFIGMAP_PREFIX = "mig-parted-config"
CONFIG_KEY = "config.yaml"

GpuLayout = dict[str, int] | None
"""One GPU's MIG state: profile -> instances (MIG on), or None (MIG off)."""


@dataclass(frozen=True)
class MigConfig:
    configmap_name: str | None
    """None when no custom profiles are set (the operator's built-in config is used)."""
    data: dict[str, str] = field(default_factory=dict)
    document: dict[str, Any] = field(default_factory=dict)
    node_labels: dict[str, str] = field(default_factory=dict)


def group_to_parted(group: MigDeviceGroup) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if group.device_filter is not None:
        entry["device-filter"] = group.device_filter if isinstance(group.device_filter, str) else list(group.device_filter)
    entry["devices"] = group.devices if group.devices == "all" else list(group.devices)
    entry["mig-enabled"] = group.mig_enabled
    if group.mig_enabled:
        entry["mig-devices"] = dict(group.mig_devices)
    return entry


def parted_document(settings: Settings) -> dict[str, Any]:
    configs: dict[str, Any] = {ALL_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for name, groups in settings.mig.profiles.items():
        configs[name] = [group_to_parted(g) for g in groups]
    return {"version": "v1", "mig-configs": configs}


def build_mig(settings: Settings) -> MigConfig:
    labels = {n.name: n.mig for n in settings.nodes if n.mig is not None}
    if not settings.mig.profiles:
        return MigConfig(configmap_name=None, node_labels=labels)
    document = parted_document(settings)
    data = {CONFIG_KEY: yaml.safe_dump(document, sort_keys=False)}
    return MigConfig(
        configmap_name=content_name(CONFIGMAP_PREFIX, data),
        data=data,
        document=document,
        node_labels=labels,
    )


# --------------------------------------------------------------------------- layouts
def _filter_ids(group: MigDeviceGroup) -> tuple[str, ...]:
    f = group.device_filter
    return () if f is None else ((f,) if isinstance(f, str) else tuple(f))


def applies_to(group: MigDeviceGroup, model: GpuModel | None) -> bool:
    """True when a mig-parted entry applies to GPUs of `model` (its device filter matches)."""
    ids = _filter_ids(group)
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


# --------------------------------------------------------------------------- rules
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
            for ident in _filter_ids(g):
                if cat.by_device_id(ident) is None:
                    out.append(Problem(key=_group_key(name, j, "device-filter"), value=ident, message=(
                        "matches no GPU of the catalog (config/gpu-models.yaml); use a device id such as "
                        "0x233510DE (H200-141GB)")))
            if g.mig_enabled:
                for profile in g.mig_devices:
                    if profile not in known:
                        out.append(Problem(key=_group_key(name, j, "mig-devices", profile), value=g.mig_devices[profile], message=(
                            f"MIG profile {profile!r} exists on no GPU of the catalog")))
                for ident in _filter_ids(g):
                    model = cat.by_device_id(ident)
                    reasons = fits(model, g.mig_devices) if model is not None else []
                    if reasons:
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


def _mig_rules(settings: Settings) -> list[Problem]:
    out = _structure(settings)
    for i, node in enumerate(settings.nodes):
        out.extend(_node(settings, i, node))
    return out


checks.RULES.append(_mig_rules)
