"""Where the end-to-end toolchain's binaries are: the version-keyed cache `toolchain/build.sh`
fills, or, outside CI, a user's own install of the pinned versions: the released Pulumi CLI on
PATH (it bundles the Python language host; used only when `pulumi version` and the language host
report the pin) and the provider plugins `pulumi plugin install resource NAME VERSION` put in
~/.pulumi/plugins (their folder names the version). A plugin found on PATH is never used: its
version cannot be asked without starting it. Under CI (CI=true) only the cache counts: CI builds
the toolchain, so a run never tests another version than the pinned one."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
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
    # a user's released CLI, which bundles the language host and its shim beside it
    "pulumi-release": ("pulumi", "pulumi-language-python", "pulumi-language-python-exec"),
}
VERSION_ARGS = {"pulumi": ("version",), "pulumi-language-python": ("-version",)}
"""How a binary taken from PATH says its version."""


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


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def reported_version(path: Path, binary: str) -> str | None:
    """The version `path` reports (`pulumi version`: v3.259.0), without a leading v; None when it
    does not answer."""
    try:
        proc = subprocess.run([str(path), *VERSION_ARGS[binary]], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = re.search(r"v?(\d+\.\d+\.\d+\S*)", proc.stdout + proc.stderr)
    return found.group(1) if proc.returncode == 0 and found else None


def from_path(binary: str, version: str) -> tuple[Path | None, str]:
    """(the `binary` of a released CLI on PATH when it is the pinned `version`, else None; why not)."""
    found = shutil.which(binary)
    if found is None:
        return None, ""
    path = Path(found)
    # the shim is a script without a version: it goes with the language host beside it
    asked, probe = ("pulumi-language-python", path.parent / "pulumi-language-python") if binary.endswith("-exec") else (binary, path)
    reported = reported_version(probe, asked) if probe.exists() else None
    if reported != version:
        return None, f"{asked} at {probe} reports {reported or 'no version'}, not the pinned {version}"
    return path, ""


def installed_plugin(binary: str, version: str) -> Path | None:
    """A provider plugin a user installed with `pulumi plugin install resource NAME VERSION`."""
    if not binary.startswith("pulumi-resource-"):
        return None
    home = Path(os.environ.get("PULUMI_HOME") or Path.home() / ".pulumi")
    path = home / "plugins" / f"resource-{binary.removeprefix('pulumi-resource-')}-v{version}" / binary
    return path if os.access(path, os.X_OK) else None


def find(components: tuple[str, ...] = HARNESS) -> Toolchain:
    """Every binary of `components`, from the cache; outside CI the released Pulumi CLI of the pinned
    version on PATH and the plugins installed at their pinned versions count too. Raises
    ToolchainMissing naming what is missing, why a binary found elsewhere was not taken, and how
    to build it."""
    pins = versions()
    bins: dict[str, Path] = {}
    missing: list[str] = []
    refused: list[str] = []
    for component in components:
        folder = component_dir(component, pins)
        version = pins[COMPONENTS[component][0]]
        for binary in COMPONENTS[component][2]:
            path = folder / binary
            if (folder / ".complete").exists() and (os.access(path, os.X_OK) or (binary.endswith(".yaml") and path.exists())):
                bins[binary] = path
                continue
            if not in_ci():
                found, why = from_path(binary, version) if binary in FROM_PATH.get(component, ()) else (None, "")
                found = found or installed_plugin(binary, version)
                if found is not None:
                    bins[binary] = found
                    continue
                if why and why not in refused:
                    refused.append(why)
            missing.append(f"{binary} ({folder.name})")
    if missing:
        note = f" (not taken from PATH: {'; '.join(refused)})" if refused else ""
        ci = " (CI=true: only the cache counts)" if in_ci() else ""
        raise ToolchainMissing(
            f"end-to-end toolchain incomplete: missing {', '.join(missing)} in {cache_dir()}{ci}{note}; {BUILD_HINT}"
        )
    return Toolchain(bins=bins, pins=pins)
