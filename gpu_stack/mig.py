"""MIG manager config (mig-parted format) generated from Settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from .naming import content_name
from .settings import MigDeviceGroup, Settings

ALL_DISABLED = "all-disabled"
NODE_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
CONFIGMAP_PREFIX = "mig-parted-config"
CONFIG_KEY = "config.yaml"


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
