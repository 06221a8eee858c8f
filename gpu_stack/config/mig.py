"""Settings of MIG: the strategy, mig-manager, the rollout of a change and custom mig-parted configs."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from .rollout import RolloutSettings, _rollout_seconds
from .safe_input import Flag, PlainStr, WholeNumber
from .types import ConfigModel, profile_names

MIG_PROFILE_RE = re.compile(r"^[0-9]+g\.[0-9]+gb([+-][a-z]+(\.[a-z]+)*)?$")
PCI_DEVICE_ID_RE = re.compile(r"^0x[0-9A-Fa-f]{8}$")

# --------------------------------------------------------------------------- MIG
class MigDeviceGroup(BaseModel):
    """One entry of a mig-parted config, in mig-parted's own key names."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, use_attribute_docstrings=True)

    devices: Literal["all"] | tuple[Annotated[WholeNumber, Field(ge=0, le=15)], ...] = "all"
    """`all` or GPU indices on the node."""
    mig_enabled: Flag = Field(alias="mig-enabled")
    """MIG mode on (true) or off (false) on the GPUs of this entry."""
    mig_devices: dict[PlainStr, Annotated[WholeNumber, Field(ge=0, le=7)]] = Field(default_factory=dict, alias="mig-devices")
    """MIG profile -> instances per GPU, e.g. {"1g.10gb": 2, "2g.20gb": 1}; only when mig-enabled."""
    device_filter: PlainStr | tuple[PlainStr, ...] | None = Field(None, alias="device-filter")
    """PCI device id(s) this entry applies to, as mig-parted writes them (0x233510DE)."""

    @field_validator("devices")
    @classmethod
    def _devices(cls, v: Any) -> Any:
        if v != "all" and (len(v) == 0 or len(set(v)) != len(v)):
            raise ValueError("must be 'all' or a non-empty list of distinct GPU indices")
        return v

    @field_validator("mig_devices")
    @classmethod
    def _profiles(cls, v: dict[str, int]) -> dict[str, int]:
        for name in v:
            if not MIG_PROFILE_RE.fullmatch(name):
                raise ValueError(f"{name!r} is not a MIG profile name such as 1g.10gb, 3g.40gb or 1g.10gb+me")
        return v

    @field_validator("device_filter")
    @classmethod
    def _filter(cls, v: Any) -> Any:
        ids = (v,) if isinstance(v, str) else (v or ())
        if v is not None and not ids:
            raise ValueError("must be a PCI device id such as 0x233510DE or a non-empty list of them")
        for item in ids:
            if not PCI_DEVICE_ID_RE.fullmatch(item):
                raise ValueError(f"{item!r} is not a PCI device id such as 0x233510DE (device then vendor)")
        return v


class MigManagerSettings(ConfigModel):
    enabled: Flag = True
    """Deploy the MIG manager (needed for any `nodes[i].mig`)."""
    with_reboot: Flag = False
    """Set WITH_REBOOT=true for clouds that need a reboot to change MIG mode."""


class MigRolloutSettings(RolloutSettings):
    """How a change of a node's MIG config is rolled out (`mig.rollout`): per node check for GPU
    pods a drain cannot evict, wait for its MIG manager, cordon, evict its GPU pods, relabel, wait
    for mig-manager's success and the new resources, uncordon; nodes change in waves of
    `maxUnavailable`, a wave only after the previous one succeeded. A node without `mig` whose MIG
    config the rollout set earlier goes back to whole GPUs (all-disabled) the same way."""

    max_unavailable: WholeNumber | PlainStr = 1
    """Nodes reconfigured at once: a count (at least 1) or a percentage of the MIG nodes such as
    25% (rounded down, at least 1 node)."""
    eviction_timeout: WholeNumber = 600
    """How long the GPU pods of a wave may take to leave (evictions a PodDisruptionBudget refuses
    are retried until then); seconds or a duration such as 10m."""
    timeout: WholeNumber = 1800
    """How long a wave may take, once relabelled, to reach nvidia.com/mig.config.state=success and
    advertise its new MIG resources; seconds or a duration such as 30m."""
    manager_timeout: int = 900
    """How long the rollout waits, before it cordons a wave and again before it relabels it, for
    each node's MIG manager pod to be ready and mount the stack's mig-parted ConfigMap (the
    operator rolls the MIG manager onto a new one node by node; on a first install it starts
    after the driver and toolkit); seconds or a duration such as 15m."""
    evict: Flag = True
    """false: no cordon and no eviction (you drain by other means); the label is still set by the
    rollout Job, which waits for success."""
    ignore_unevictable: Flag = False
    """true: a GPU pod the drain cannot evict (a DaemonSet's or a static pod) does not stop the
    wave; it must release its GPUs by itself or MIG manager fails or waits. false: the wave fails
    before anything is cordoned, naming those pods."""

    @field_validator("manager_timeout", mode="before")
    @classmethod
    def _manager_timeout(cls, v: Any) -> int:
        return _rollout_seconds(v, 30, 86400)


class MigSettings(ConfigModel):
    """MIG strategy and custom mig-parted configs."""

    strategy: Literal["none", "single", "mixed"] = "single"
    """The device plugin's MIG strategy: none (MIG ignored), single (each MIG instance is an nvidia.com/gpu), mixed (nvidia.com/mig-<profile> per profile)."""
    manager: MigManagerSettings = MigManagerSettings()
    """The operator's MIG manager, which applies each node's `nvidia.com/mig.config` label."""
    rollout: MigRolloutSettings = MigRolloutSettings()
    profiles: Annotated[dict[PlainStr, tuple[MigDeviceGroup, ...]], AfterValidator(profile_names)] = Field(default_factory=dict)
    """Custom mig-parted configs (replace the operator's built-in list; `all-disabled` is kept)."""
