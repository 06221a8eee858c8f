"""Settings of GPU sharing (time-slicing, MPS) through the device plugin."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from .safe_input import Flag, PlainStr, WholeNumber
from .types import ConfigModel, profile_names

# --------------------------------------------------------------------------- sharing
SharingMode = Literal["none", "time-slicing", "mps"]
# The device plugin advertises a MIG profile `1g.10gb+me` as `nvidia.com/mig-1g.10gb.me`.
RESOURCE_NAME_RE = re.compile(r"^nvidia\.com/(gpu|mig-[0-9]+g\.[0-9]+gb([.-][a-z]+)*)$")


class SharedResource(ConfigModel):
    """One advertised resource and how many replicas each of its devices is split into."""

    name: PlainStr = Field(max_length=63)
    """The advertised resource: nvidia.com/gpu or a MIG resource nvidia.com/mig-<N>g.<M>gb."""
    replicas: WholeNumber = Field(ge=2, le=1024)
    """How many replicas each device of the resource is split into."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not RESOURCE_NAME_RE.fullmatch(v):
            raise ValueError(
                "must be nvidia.com/gpu or a MIG resource nvidia.com/mig-<N>g.<M>gb (e.g. nvidia.com/mig-1g.10gb)"
            )
        return v


class SharingProfile(ConfigModel):
    """A device-plugin sharing config: one key of the sharing ConfigMap (`sharing.profiles.<key>`)."""

    mode: SharingMode = "time-slicing"
    """time-slicing, mps, or none (a profile that turns sharing off on the nodes that select it)."""
    replicas: WholeNumber | None = Field(None, ge=2, le=1024)
    """Replicas of every physical GPU (nvidia.com/gpu); omit when `resources` lists them."""
    rename_by_default: Flag = False
    """Advertise `<resource>.shared` instead of `<resource>`."""
    fail_requests_greater_than_one: Flag = False
    """Reject pods asking for more than one replica (always on under MPS)."""
    resources: tuple[SharedResource, ...] = ()
    """Per-resource replicas, e.g. MIG resources (nvidia.com/mig-1g.10gb) under the mixed strategy."""


class SharingSettings(ConfigModel):
    """GPU sharing for the device plugin.

    The common case is one key: `sharing.replicas` with `sharing.mode: time-slicing` gives every
    node without a profile of its own (`nodes[i].sharing`) that many replicas per GPU.
    """

    mode: SharingMode = "none"
    """Cluster-wide default: none, time-slicing or mps (the ConfigMap key `default`)."""
    replicas: WholeNumber = Field(4, ge=2, le=1024)
    """Replicas of every GPU (nvidia.com/gpu) under the default profile. When `resources` is set
    and this is not, only `resources` are shared."""
    rename_by_default: Flag = False
    """Default profile: advertise `<resource>.shared` instead of `<resource>`."""
    fail_requests_greater_than_one: Flag = False
    """Default profile: reject pods asking for more than one replica (always on under MPS)."""
    resources: tuple[SharedResource, ...] = ()
    """Default profile: per-resource replicas, e.g. MIG resources (nvidia.com/mig-1g.10gb) under the mixed strategy."""
    profiles: Annotated[dict[PlainStr, SharingProfile], AfterValidator(profile_names)] = Field(default_factory=dict)
    """Extra named profiles a node selects with `nodes[i].sharing` (keys are label values)."""
