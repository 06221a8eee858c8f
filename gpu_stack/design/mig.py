"""MIG: the custom mig-parted config in a content-named ConfigMap.

Custom configs (`mig.profiles`) go into one content-named ConfigMap (key `config.yaml`) that
replaces the operator's built-in list, so it always holds `all-disabled`. The ConfigMap carries a
fingerprint of each config's layout (annotation `gpu-stack/mig-layouts`): the layout guard Job
(mig_guard.py) compares them with those of the ConfigMap the MIG manager mounts, so a layout
edited under a name nodes select is refused before the release restarts the MIG manager.
Without custom configs a node may name any built-in config that works on its GPU model. Each node's MIG layout is a
fact of the config (config/facts.py); the checks against the GPU catalog (config/gpu-models.yaml)
are config rules (config/rules/mig.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from ..config.facts import group_to_parted
from ..config.gpu_models import ALL_DISABLED
from ..config.mig import MigDeviceGroup, MigSettings
from .capacity import NodeFacts
from .naming import content_hash, content_name

NODE_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
CONFIGMAP_PREFIX = "mig-parted-config"
CONFIG_KEY = "config.yaml"
LAYOUTS_ANNOTATION = "gpu-stack/mig-layouts"
BUILTIN_CONFIGMAP = "default-mig-parted-config"
"""The operator's own mig-parted ConfigMap, mounted when no custom config is set."""


@dataclass(frozen=True)
class MigConfig:
    configmap_name: str | None
    """None when no custom profiles are set (the operator's built-in config is used)."""
    data: dict[str, str] = field(default_factory=dict)
    document: dict[str, Any] = field(default_factory=dict)
    node_labels: dict[str, str] = field(default_factory=dict)
    layouts: dict[str, str] = field(default_factory=dict)
    """Config name -> fingerprint of its layout (custom configs only)."""

    @property
    def mounted_name(self) -> str:
        """The ConfigMap the MIG manager pods mount once the release is applied."""
        return self.configmap_name or BUILTIN_CONFIGMAP

    @property
    def annotations(self) -> dict[str, str]:
        if not self.layouts:
            return {}
        return {LAYOUTS_ANNOTATION: layouts_text(self.layouts)}


def layouts_text(layouts: dict[str, str]) -> str:
    """`<config>=<hash> ...` in name order: the annotation's value and the guard's NEW_LAYOUTS."""
    return " ".join(f"{name}={digest}" for name, digest in sorted(layouts.items()))


# mig-parted reads config.yaml with sigs.k8s.io/yaml (go-yaml v2: YAML 1.1), where a plain `n`,
# `y` or `1e3` is a boolean or a number, not a name: such a config name came out as the key
# "false" and `nvidia-mig-parted assert --valid-config -c n` found no config `n`
# (tests/design/test_mig_parted.py). PyYAML already quotes what YAML 1.1 reads as bool/int/null; these
# are the plain scalars it leaves alone and go-yaml does not.
_GO_YAML_NOT_A_STRING = re.compile(r"^([yYnN]|[-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9_]*)?)([eE][-+]?[0-9]+)?)$")


class _QuotedName(str):
    """A config name written double-quoted in config.yaml."""


class _PartedDumper(yaml.SafeDumper):
    pass


_PartedDumper.add_representer(_QuotedName, lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", str(v), style='"'))


def _name(name: str) -> str:
    return _QuotedName(name) if _GO_YAML_NOT_A_STRING.fullmatch(name) else name


def parted_yaml(document: dict[str, Any]) -> str:
    """config.yaml as mig-parted reads it back: every config name a string."""
    configs = {_name(k): v for k, v in document["mig-configs"].items()}
    return yaml.dump({**document, "mig-configs": configs}, Dumper=_PartedDumper, sort_keys=False)


def parted_document(profiles: Mapping[str, Sequence[MigDeviceGroup]]) -> dict[str, Any]:
    """mig-parted's document of the custom configs (`mig.profiles`), `all-disabled` first."""
    configs: dict[str, Any] = {ALL_DISABLED: [{"devices": "all", "mig-enabled": False}]}
    for name, groups in profiles.items():
        configs[name] = [group_to_parted(g) for g in groups]
    return {"version": "v1", "mig-configs": configs}


def build_mig(mig: MigSettings, nodes: Sequence[NodeFacts]) -> MigConfig:
    """The custom configs' ConfigMap (none without `mig.profiles`) and each node's MIG label."""
    labels = {f.name: f.node.mig for f in nodes if f.node.mig is not None}
    if not mig.profiles:
        return MigConfig(configmap_name=None, node_labels=labels)
    document = parted_document(mig.profiles)
    data = {CONFIG_KEY: parted_yaml(document)}
    return MigConfig(
        configmap_name=content_name(CONFIGMAP_PREFIX, data),
        data=data,
        document=document,
        node_labels=labels,
        layouts={name: content_hash(entries, 12) for name, entries in document["mig-configs"].items()},
    )
