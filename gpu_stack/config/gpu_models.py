"""The GPU model catalog (config/gpu-models.yaml): names, MIG geometry, built-in MIG configs.

Pure data access: look a model up by its name or an nvidia-smi alias, ask which MIG profiles
it has and whether a layout of instances fits on one GPU, and expand the operator's built-in
MIG configs (`all-1g.10gb`, `all-balanced`, ...) into per-GPU layouts for a model.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from .package_data import config_path

CATALOG_PATH = config_path("gpu-models.yaml")

ALL_DISABLED = "all-disabled"
ALL_ENABLED = "all-enabled"
ALL_BALANCED = "all-balanced"


@dataclass(frozen=True)
class MigProfile:
    name: str
    max_instances: int
    compute_slices: int
    memory_slices: int


@dataclass(frozen=True)
class MigGeometry:
    name: str
    compute_slices: int
    memory_slices: int
    profiles: dict[str, MigProfile]
    balanced: dict[str, int]


@dataclass(frozen=True)
class GpuModel:
    name: str
    aliases: tuple[str, ...]
    pci_device_ids: tuple[str, ...]
    compute_capability: tuple[int, int]
    memory_gb: int
    mig: MigGeometry | None = None

    @property
    def mig_capable(self) -> bool:
        return self.mig is not None


@dataclass(frozen=True)
class BuiltinMigConfig:
    name: str
    special: str | None = None
    """disabled, enabled or balanced; None for a one-profile config."""
    profile: str | None = None
    only: tuple[str, ...] = ()
    """Model names the operator's device filter restricts the config to (empty: any model)."""


@dataclass(frozen=True)
class Catalog:
    models: tuple[GpuModel, ...]
    builtin_configs: dict[str, BuiltinMigConfig]
    _index: dict[str, GpuModel] = field(default_factory=dict, repr=False)

    def lookup(self, name: str) -> GpuModel | None:
        """The model for a catalog name or alias (case-insensitive), or None."""
        return self._index.get(name.strip().lower())

    def by_device_id(self, device_id: str) -> GpuModel | None:
        wanted = device_id.lower()
        return next((m for m in self.models if wanted in (d.lower() for d in m.pci_device_ids)), None)

    @property
    def all_profile_names(self) -> set[str]:
        return {p for m in self.models if m.mig for p in m.mig.profiles}

    def names(self) -> list[str]:
        return [m.name for m in self.models]


def _model(raw: Mapping[str, Any], geometries: dict[str, MigGeometry]) -> GpuModel:
    major, minor = (int(x) for x in str(raw["compute-capability"]).split("."))
    geometry = raw.get("mig")
    return GpuModel(
        name=raw["name"],
        aliases=tuple(raw.get("aliases") or ()),
        pci_device_ids=tuple(raw.get("pci-device-ids") or ()),
        compute_capability=(major, minor),
        memory_gb=int(raw["memory-gb"]),
        mig=geometries[geometry] if geometry else None,
    )


def parse_catalog(doc: Mapping[str, Any]) -> Catalog:
    geometries = {
        name: MigGeometry(
            name=name,
            compute_slices=int(g["compute-slices"]),
            memory_slices=int(g["memory-slices"]),
            profiles={p: MigProfile(p, *map(int, v)) for p, v in g["profiles"].items()},
            balanced=dict(g.get("balanced") or {}),
        )
        for name, g in doc["mig-geometries"].items()
    }
    models = tuple(_model(m, geometries) for m in doc["models"])
    index: dict[str, GpuModel] = {}
    for m in models:
        for key in (m.name, *m.aliases):
            if key.lower() in index:
                raise ValueError(f"gpu-models.yaml: {key!r} names two models")
            index[key.lower()] = m
    builtins = {
        name: BuiltinMigConfig(
            name=name,
            special=b.get("special"),
            profile=b.get("profile"),
            only=tuple(b.get("only") or ()),
        )
        for name, b in doc["builtin-mig-configs"].items()
    }
    return Catalog(models=models, builtin_configs=builtins, _index=index)


@functools.lru_cache(maxsize=1)
def catalog() -> Catalog:
    """The catalog shipped in config/gpu-models.yaml (read once; libyaml's safe loader when
    PyYAML has it: the same data, a sixth of the time)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return parse_catalog(yaml.load(CATALOG_PATH.read_text(), Loader=loader))  # a safe loader


def fits(model: GpuModel, layout: Mapping[str, int]) -> list[str]:
    """Why `layout` (profile -> instances on ONE GPU) does not fit `model`; empty when it does."""
    if model.mig is None:
        return [f"{model.name} has no MIG"]
    geometry = model.mig
    reasons: list[str] = []
    compute = memory = 0
    for profile, count in layout.items():
        spec = geometry.profiles.get(profile)
        if spec is None:
            reasons.append(
                f"profile {profile!r} does not exist on {model.name} "
                f"(it has {', '.join(geometry.profiles)})"
            )
            continue
        if count > spec.max_instances:
            reasons.append(f"{count} x {profile} is more than the {spec.max_instances} a {model.name} holds")
        compute += count * spec.compute_slices
        memory += count * spec.memory_slices
    if not reasons:
        if compute > geometry.compute_slices:
            reasons.append(
                f"the instances need {compute} compute slices; a {model.name} has {geometry.compute_slices}"
            )
        if memory > geometry.memory_slices:
            reasons.append(
                f"the instances need {memory} memory slices; a {model.name} has {geometry.memory_slices}"
            )
    return reasons


def builtin_layout(config: BuiltinMigConfig, model: GpuModel) -> dict[str, int] | None:
    """What a built-in config puts on each GPU of `model`: profile -> count; {} for MIG on with
    no instances; None when the config does not apply to that model (it would fail there).
    `all-disabled` is handled by the caller (MIG off)."""
    if model.mig is None:
        return None
    if config.only and model.name not in config.only:
        return None
    if config.special == "enabled":
        return {}
    if config.special == "balanced":
        return dict(model.mig.balanced) or None
    if config.profile is None:
        return None
    spec = model.mig.profiles.get(config.profile)
    return None if spec is None else {config.profile: spec.max_instances}


def builtin_names_for(model: GpuModel) -> list[str]:
    """Built-in MIG config names that work on `model` (for error messages)."""
    cat = catalog()
    names = [ALL_DISABLED]
    names += [n for n, b in cat.builtin_configs.items() if b.special != "disabled" and builtin_layout(b, model) is not None]
    return names


def mig_resource_name(profile: str) -> str:
    """The extended resource the device plugin advertises for a MIG profile (mixed strategy)."""
    return "nvidia.com/mig-" + profile.replace("+", ".")
