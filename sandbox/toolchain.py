"""Where the end-to-end toolchain's binaries are: the version-keyed cache `toolchain/build.sh`
fills, or (for the Pulumi CLI with its language host, and the two provider plugins) a user's own
release on PATH."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

PROJECT_DIR = Path(__file__).resolve().parents[1]
VERSIONS_FILE = PROJECT_DIR / "toolchain" / "versions.env"
BUILD_HINT = "build it with `make e2e-tools` (toolchain/build.sh; about 35 minutes cold on 2 cores, cached after)"


def versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """The pins of toolchain/versions.env (KEY=VALUE lines; comments and blanks skipped)."""
    pins: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            pins[key.strip()] = value.strip()
    return pins


def cache_dir() -> Path:
    return Path(os.environ.get("GPU_STACK_TOOLS") or Path.home() / ".cache" / "gpu-stack" / "tools")


# component -> (versions.env key, cache folder prefix, binaries it holds)
COMPONENTS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "pulumi": ("PULUMI_VERSION", "pulumi", ("pulumi",)),
    "language-python": ("PULUMI_VERSION", "pulumi-language-python", ("pulumi-language-python", "pulumi-language-python-exec")),
    # the released CLI's layout: the CLI with the language host beside it (where the CLI looks)
    "pulumi-release": ("PULUMI_VERSION", "pulumi-release", ("pulumi", "pulumi-language-python", "pulumi-language-python-exec")),
    "command-provider": ("PULUMI_COMMAND_VERSION", "pulumi-command", ("pulumi-resource-command",)),
    "kubernetes-provider": ("PULUMI_KUBERNETES_VERSION", "pulumi-kubernetes", ("pulumi-resource-kubernetes",)),
    "kubernetes": (
        "KUBERNETES_VERSION",
        "kubernetes",
        ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl"),
    ),
    "etcd": ("ETCD_VERSION", "etcd", ("etcd",)),
    "kwok": ("KWOK_VERSION", "kwok", ("kwok", "kwokctl")),
    "kwok-stages": (
        "KWOK_VERSION",
        "kwok-stages",
        tuple(f"{s}.yaml" for s in ("node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete")),
    ),
    "nvidia-ctk": ("NVIDIA_CONTAINER_TOOLKIT_VERSION", "nvidia-container-toolkit", ("nvidia-ctk", "nvidia-cdi-hook")),
    "mig-parted": ("NVIDIA_MIG_PARTED_VERSION", "nvidia-mig-parted", ("nvidia-mig-parted",)),
    "device-plugin": ("NVIDIA_DEVICE_PLUGIN_VERSION", "nvidia-device-plugin", ("nvidia-device-plugin",)),
    "mps-control-daemon": ("NVIDIA_DEVICE_PLUGIN_VERSION", "nvidia-mps-control-daemon", ("mps-control-daemon",)),
}
HARNESS = ("pulumi-release", "command-provider", "kubernetes-provider", "kubernetes", "etcd", "kwok", "kwok-stages", "nvidia-ctk")
"""What the end-to-end harness needs: the CLI as released (with the Python language host), both
provider plugins, the control plane, kwok, and the real nvidia-ctk of the SSH nodes' fake roots."""
FROM_PATH = {
    # a user's released CLI (it bundles the language host) and plugins they installed
    "pulumi-release": ("pulumi", "pulumi-language-python", "pulumi-language-python-exec"),
    "kubernetes-provider": ("pulumi-resource-kubernetes",),
    "command-provider": ("pulumi-resource-command",),
}


class ToolchainMissing(RuntimeError):
    """A binary the harness needs is neither cached nor (where allowed) on PATH."""


@dataclass(frozen=True)
class Toolchain:
    bins: dict[str, Path]
    """binary name -> path"""
    pins: dict[str, str]

    def __getitem__(self, name: str) -> Path:
        return self.bins[name]

    @property
    def pulumi_version(self) -> str:
        return self.pins["PULUMI_VERSION"]

    @property
    def kubernetes_provider_version(self) -> str:
        return self.pins["PULUMI_KUBERNETES_VERSION"]

    @property
    def command_provider_version(self) -> str:
        return self.pins["PULUMI_COMMAND_VERSION"]

    @property
    def kube_version(self) -> str:
        return self.pins["KUBERNETES_VERSION"]


def component_dir(component: str, pins: dict[str, str] | None = None) -> Path:
    pins = pins or versions()
    key, prefix, _ = COMPONENTS[component]
    return cache_dir() / f"{prefix}-{pins[key]}"


def installed_plugin(binary: str, version: str) -> Path | None:
    """A provider plugin a user installed with `pulumi plugin install resource NAME VERSION`."""
    if not binary.startswith("pulumi-resource-"):
        return None
    home = Path(os.environ.get("PULUMI_HOME") or Path.home() / ".pulumi")
    path = home / "plugins" / f"resource-{binary.removeprefix('pulumi-resource-')}-v{version}" / binary
    return path if os.access(path, os.X_OK) else None


def find(components: tuple[str, ...] = HARNESS) -> Toolchain:
    """Every binary of `components`, from the cache; the Pulumi CLI and provider may come from PATH
    (a user's released `pulumi`). Raises ToolchainMissing naming what is missing and how to build it."""
    pins = versions()
    bins: dict[str, Path] = {}
    missing: list[str] = []
    for component in components:
        folder = component_dir(component, pins)
        for binary in COMPONENTS[component][2]:
            path = folder / binary
            if (folder / ".complete").exists() and (os.access(path, os.X_OK) or (binary.endswith(".yaml") and path.exists())):
                bins[binary] = path
            elif binary in FROM_PATH.get(component, ()) and shutil.which(binary):
                bins[binary] = Path(shutil.which(binary))  # type: ignore[arg-type]
            elif installed_plugin(binary, pins[COMPONENTS[component][0]]) is not None:
                bins[binary] = installed_plugin(binary, pins[COMPONENTS[component][0]])  # type: ignore[assignment]
            else:
                missing.append(f"{binary} ({folder.name})")
    if missing:
        raise ToolchainMissing(f"end-to-end toolchain incomplete: missing {', '.join(missing)} in {cache_dir()}; {BUILD_HINT}")
    return Toolchain(bins=bins, pins=pins)
