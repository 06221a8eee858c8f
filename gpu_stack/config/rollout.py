"""What the two wave rollouts share (`mig.rollout` and `dra.rollout`): the wave size, the eviction
and wave timeouts, the drain switches and the Job's image, each read and refused the same way."""

from __future__ import annotations

import re
from typing import Any

from pydantic import field_validator

from .safe_input import Flag, PlainStr, WholeNumber, ascii_digits
from .types import KUBECTL_IMAGE, ConfigModel, JobImageRef

ROLLOUT_DURATION_RE = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")


def _wave_size(v: Any) -> int | str:
    """A rollout's maxUnavailable: a node count (1 to 9999) or a percentage from 1% to 100%."""
    text = str(v) if isinstance(v, (int, str)) and not isinstance(v, bool) else None
    if text is not None and re.fullmatch(r"[1-9][0-9]{0,3}", text):
        return int(text)
    if text is not None and re.fullmatch(r"(100|[1-9][0-9]?)%", text):
        return text
    raise ValueError("must be a node count of at least 1 (e.g. 2) or a percentage from 1% to 100% (e.g. 25%)")


def _rollout_seconds(value: Any, low: int, high: int) -> int:
    """A duration as whole seconds (300) or a string such as 90s, 10m or 1h30m, within [low, high]."""
    allowed = f"whole seconds or a duration such as 90s, 10m or 1h30m, from {low}s to {high // 3600}h"
    if isinstance(value, bool):
        raise ValueError(f"must be {allowed}")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and ascii_digits(value) and len(value) <= 9:
        seconds = int(value)
    elif isinstance(value, str) and value and (m := ROLLOUT_DURATION_RE.fullmatch(value)):
        h, mi, se = (int(g) if g else 0 for g in m.groups())
        seconds = h * 3600 + mi * 60 + se
    else:
        raise ValueError(f"must be {allowed}")
    if not low <= seconds <= high:
        raise ValueError(f"must be {allowed}")
    return seconds


class RolloutSettings(ConfigModel):
    """The settings of a rollout in drained waves of nodes: `maxUnavailable` nodes at a time,
    each wave given `evictionTimeout` for its GPU pods to leave and `timeout` to show its new
    resources. Each rollout (MigRolloutSettings in gpu_stack/config/mig.py, DraRolloutSettings in
    gpu_stack/config/dra.py) sets its own `timeout` default, adds its own settings, and declares a
    field again where its docstring says something of that feature alone (the field keeps these
    validators); the fields without a docstring here are declared again by both."""

    max_unavailable: WholeNumber | PlainStr = 1
    eviction_timeout: WholeNumber = 600
    """How long the GPU pods of a wave may take to leave; seconds or a duration such as 10m."""
    timeout: WholeNumber
    evict: Flag = True
    ignore_unevictable: Flag = False
    """true: a GPU pod the drain cannot evict does not stop the wave. false: the wave fails before
    anything is cordoned, naming those pods."""
    image: JobImageRef = KUBECTL_IMAGE
    """Runs the rollout script, which needs a POSIX sh and kubectl: the operator's own image v25.10.1
    by default (busybox's sh and kubectl 1.34; `registry.k8s.io/kubectl` has no shell). Another
    image needs a row in config/job-images.yaml or a declaration under images.jobImages."""

    @field_validator("max_unavailable", mode="before")
    @classmethod
    def _max_unavailable(cls, v: Any) -> Any:
        return _wave_size(v)

    @field_validator("eviction_timeout", mode="before")
    @classmethod
    def _eviction_timeout(cls, v: Any) -> int:
        return _rollout_seconds(v, 10, 86400)

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> int:
        return _rollout_seconds(v, 60, 86400)
