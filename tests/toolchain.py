"""The binaries toolchain/build.sh builds from NVIDIA's (and others') Go modules, for the tests.

`tool("nvidia-ctk")` is the path of the pinned build (toolchain/versions.env) in the cache folder
($GPU_STACK_TOOLS, default ~/.cache/gpu-stack/tools/<name>-<version>/). When it is absent the test
is skipped with the command that builds it; under CI=true (CI builds the toolchain first) it
fails instead, so a CI run can never pass on skipped real-binary tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
VERSIONS = ROOT / "toolchain" / "versions.env"

# binary -> (component argument of toolchain/build.sh, cache folder prefix, version key)
BINARIES = {
    "nvidia-ctk": ("nvidia-ctk", "nvidia-container-toolkit", "NVIDIA_CONTAINER_TOOLKIT_VERSION"),
    "nvidia-cdi-hook": ("nvidia-ctk", "nvidia-container-toolkit", "NVIDIA_CONTAINER_TOOLKIT_VERSION"),
    "nvidia-container-runtime": ("nvidia-ctk", "nvidia-container-toolkit", "NVIDIA_CONTAINER_TOOLKIT_VERSION"),
    "nvidia-container-runtime-hook": ("nvidia-ctk", "nvidia-container-toolkit", "NVIDIA_CONTAINER_TOOLKIT_VERSION"),
    "nvidia-mig-parted": ("mig-parted", "nvidia-mig-parted", "NVIDIA_MIG_PARTED_VERSION"),
}


def pinned_versions() -> dict[str, str]:
    out: dict[str, str] = {}
    for line in VERSIONS.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def tools_dir() -> Path:
    return Path(os.environ.get("GPU_STACK_TOOLS") or Path.home() / ".cache" / "gpu-stack" / "tools")


def find(name: str) -> tuple[Path | None, str]:
    """(path or None, why it is missing)."""
    component, prefix, key = BINARIES[name]
    folder = tools_dir() / f"{prefix}-{pinned_versions()[key]}"
    path = folder / name
    if (folder / ".complete").is_file() and os.access(path, os.X_OK):
        return path, ""
    return None, f"{name} is not built: {path} is missing (run `bash toolchain/build.sh {component}`)"


def tool(name: str) -> Path:
    """The pinned binary; skips the test when it is absent (fails under CI=true)."""
    path, why = find(name)
    if path is not None:
        return path
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true and {why}: CI builds the toolchain before `make test`", pytrace=False)
    pytest.skip(why)
