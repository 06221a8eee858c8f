"""gpu-stack: NVIDIA GPU Operator platform for Kubernetes, as a Pulumi program and a component.

`from gpu_stack import GpuPlatform` gives the component (gpu_stack/components/platform.py); it is
loaded on first use, so the pure parts (settings, design, the offline plan) import no Pulumi.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .components.platform import GpuPlatform

__all__ = ["GpuPlatform"]


def __getattr__(name: str) -> Any:
    if name == "GpuPlatform":
        from .components.platform import GpuPlatform

        return GpuPlatform
    raise AttributeError(f"module 'gpu_stack' has no attribute {name!r}")
