"""Run a script as the GPU Operator image runs it: under the real busybox `sh`, with only
busybox's applets (and the stubs a test gives, e.g. a fake kubectl) on PATH.

config/job-images.yaml says why: the operator image is NVIDIA's distroless `-dev` base, whose shell
and utilities are one busybox; it has no bash. A test stub must name its interpreter by absolute
path (`#!/usr/bin/python3`, never `#!/usr/bin/env bash`): nothing else is on PATH.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sandbox import pod_runner

BUSYBOX = pod_runner.BUSYBOX
"""Debian's busybox-static (`.ci/run --prepare` installs it), the closest this machine has to the
image's own busybox: the binary the end-to-end tier's pod runner runs these Jobs under."""


def require_busybox() -> str:
    """The busybox binary; skips naming the package where it is missing, fails under CI=true."""
    if Path(BUSYBOX).is_file() and os.access(BUSYBOX, os.X_OK):
        return BUSYBOX
    message = "busybox is not installed: apt-get install busybox-static (or .ci/run --prepare)"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def applets() -> list[str]:
    """Every applet of this busybox (`busybox --list`, as the pod runner reads it)."""
    require_busybox()
    return sorted(pod_runner.busybox_applets())


def image_bin(folder: Path, stubs: dict[str, Path] | None = None) -> Path:
    """A bin folder as the image's PATH holds it: a link per busybox applet, plus `stubs`
    (name -> executable) standing in for the image's own programs (kubectl). Returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    binary = require_busybox()
    for name in applets():
        link = folder / name
        if not link.exists():
            link.symlink_to(binary)
    for name, target in (stubs or {}).items():
        link = folder / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    return folder


def run_sh(script: Path, env: dict[str, str], bin_dir: Path, timeout: float = 120, args: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Runs `script` as the Job's `sh <script>` does on the image: busybox sh, PATH = `bin_dir` only."""
    full = {**env, "PATH": str(bin_dir)}
    return subprocess.run([str(bin_dir / "sh"), str(script), *args], env=full, capture_output=True, text=True, timeout=timeout)
