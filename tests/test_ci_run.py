""".ci/run checks its prerequisites in one line each before it builds anything, and installs what a
Debian package gives. Run with stand-ins on PATH for what each check asks (nothing is installed)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

PROJECT_DIR = Path(__file__).resolve().parents[1]
RUN = PROJECT_DIR / ".ci" / "run"
CHECKS = ("Go >= 1.26", "C compiler (cgo)", "python3 -m venv", "free disk >= ", "unshare --net", "test tool")
"""The line names (`test tool`: the test tiers' tools, one line when all are there, one per missing one)."""
MACHINE = CHECKS[:-1]
"""What the build needs of the machine (the stand-ins below can take each away)."""


def _fake(bin_dir: Path, name: str, script: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text("#!/bin/sh\n" + script + "\n")
    (bin_dir / name).chmod(0o755)


def _run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    return subprocess.run(
        [str(RUN), *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, "HOME": str(tmp_path), "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", **env},
    )


def _lines(proc: subprocess.CompletedProcess[str]) -> dict[str, str]:
    out = {}
    for line in proc.stdout.splitlines():
        assert line.startswith("prerequisite "), line
        name = next(c for c in CHECKS if line.removeprefix("prerequisite ").startswith(c))
        out[name] = line
    return out


def test_every_prerequisite_missing_is_one_line_saying_what_to_do(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    _fake(bin_dir, "go", 'echo go1.25.7')
    _fake(bin_dir, "python3", "exit 1")
    _fake(bin_dir, "unshare", "exit 1")
    proc = _run(tmp_path, "--check", CC=str(tmp_path / "no-cc"), GPU_STACK_CI_DISK_GIB="1000000")
    assert proc.returncode == 1
    lines = _lines(proc)
    assert set(lines) == set(CHECKS) and all("MISSING" in lines[c] for c in MACHINE), proc.stdout
    assert "found: go1.25.7" in lines["Go >= 1.26"] and "GOTOOLCHAIN=local" in lines["Go >= 1.26"]
    assert "gcc libc6-dev" in lines["C compiler (cgo)"]
    assert "python3-venv" in lines["python3 -m venv"]
    assert "GPU_STACK_CI_DISK_GIB" in lines["free disk >= "]
    assert "run as root" in lines["unshare --net"] and "apparmor_restrict_unprivileged_userns" in lines["unshare --net"]
    assert "prerequisites missing: go cc venv disk netns" in proc.stderr
    # the test tiers' tools are checked by --check too (here they are all there)
    assert lines["test tool"].startswith("prerequisite test tool")


@pytest.mark.parametrize("version, ok", [("go1.26.0", True), ("go1.27.2", True), ("go1.9.1", False), ("go1.25.99", False), ("", False)])
def test_go_is_checked_by_its_version_without_fetching_another(tmp_path: Path, version, ok):
    # `go env GOVERSION` under GOTOOLCHAIN=local: the stand-in answers only when it is set so
    _fake(tmp_path / "bin", "go", f'[ "$GOTOOLCHAIN" = local ] && [ -n "{version}" ] && echo {version}')
    line = _lines(_run(tmp_path, "--check"))["Go >= 1.26"]
    assert ("MISSING" not in line) == ok, line


def test_the_checks_pass_where_everything_is_there(tmp_path: Path):
    """On a machine with the prerequisites (CI's, this one) every line says ok and the status is 0;
    wherever one line says MISSING the status is 1."""
    proc = _run(tmp_path, "--check", HOME=str(Path.home()))
    lines = _lines(proc)
    assert set(lines) == set(CHECKS)
    assert (proc.returncode == 0) == all(" ok (" in line for line in lines.values()), proc.stdout
    if os.environ.get("CI") == "true":
        assert proc.returncode == 0, proc.stdout


def test_what_a_debian_package_gives_is_installed_then_checked_again(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    _fake(bin_dir, "apt-get", f'echo "$*" >> {tmp_path}/apt-get.log')
    _fake(bin_dir, "sudo", '[ "$1" = -n ] && shift; exec "$@"')
    _fake(bin_dir, "python3", "exit 1")
    proc = _run(tmp_path, "--prepare", CC=str(tmp_path / "no-cc"))
    log = (tmp_path / "apt-get.log").read_text().splitlines()
    assert log[0] == "update -qq"
    installed = log[1].split()
    assert installed[:3] == ["install", "-y", "-qq"] and {"gcc", "libc6-dev", "python3-venv"} <= set(installed)
    # the stand-in installed nothing: checked again, still missing, so the run stops there
    assert "checked again after the install" in proc.stderr and proc.returncode == 1
    assert proc.stdout.count("prerequisite C compiler (cgo):") == 2
