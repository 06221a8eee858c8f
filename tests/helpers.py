"""Shared test helpers: run the real program offline for a stack file or a config dict."""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpu_stack.config.stack_files import StackConfig, read_stack
from gpu_stack.offline.chart import ChartUnavailable, helm_sdk
from gpu_stack.offline.plan import Plan
from gpu_stack.offline.runner import PROJECT_DIR, PlanError, run_program
from sandbox import reference

REFERENCE = reference.path(reference.CHART_DIR)
CHART_REF = reference.CHART
"""The GPU Operator's reference files (real chart, values, lists), in the one reference folder
(sandbox/reference.py: $GPU_STACK_REFERENCE, default the user cache `make reference` fills)."""


def dev_config() -> dict[str, Any]:
    """The dev stack's `gpu-stack:*` config as a plain dict (secrets as their placeholders)."""
    return copy.deepcopy(read_stack(PROJECT_DIR, "dev").namespace())


def stack_config(namespace: dict[str, Any], stack: str = "test", secrets: dict[str, Any] | None = None) -> StackConfig:
    """A StackConfig for `gpu-stack:*` values; `secrets` are plain values marked secret."""
    cfg = StackConfig(project="gpu-stack", stack=stack)
    for key, value in namespace.items():
        cfg.values[f"gpu-stack:{key}"] = value
    base = read_stack(PROJECT_DIR, "dev")
    for key in base.secret_keys:
        if key in cfg.values:
            cfg.secret_keys.add(key)
    cfg.secret_values |= base.secret_values
    for key, value in (secrets or {}).items():
        cfg.values[f"gpu-stack:{key}"] = value
        cfg.secret_keys.add(f"gpu-stack:{key}")
    return cfg


def plan_of(namespace: dict[str, Any], **kwargs: Any) -> Plan:
    return run_program(stack_config(namespace, **kwargs), PROJECT_DIR)


def plan_stack_file(stack: str) -> Plan:
    return run_program(read_stack(PROJECT_DIR, stack), PROJECT_DIR)


def assert_refused(namespace: dict[str, Any], message: str) -> None:
    """Planning `namespace` fails with an error that contains `message` and registers no resource."""
    with pytest.raises(PlanError) as info:
        plan_of(namespace)
    assert message in str(info.value)
    assert info.value.registered == 0


def set_path(config: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """`set_path(cfg, "sharing.replicas", 8)` like `pulumi config set --path`; returns cfg."""
    parts: list[Any] = []
    for token in path.replace("]", "").split("."):
        for i, piece in enumerate(token.split("[")):
            parts.append(int(piece) if i > 0 else piece)
    target = config
    for part in parts[:-1]:
        target = target[part] if isinstance(target, list) else target.setdefault(part, {})
    target[parts[-1]] = value
    return config


def reference_dir() -> Path:
    return REFERENCE


def reference_missing(rel: str = reference.CHART_DIR) -> str | None:
    """Why the reference files under `rel` (relative to the reference folder) are not usable here,
    naming `make reference`; None when they are there with their pinned sums."""
    return reference.unavailable(rel)


def require_reference(rel: str = reference.CHART_DIR) -> Path:
    """The reference folder's `rel`; skips the test when its files are missing or differ from
    their sums (the reason names `make reference`), fails instead under CI=true."""
    why = reference.unavailable(rel)
    if why is not None:
        if reference.in_ci():
            pytest.fail(f"CI=true and {why}", pytrace=False)
        pytest.skip(why)
    return reference.path(rel)


needs_reference = pytest.mark.reference_data
"""`@needs_reference("gpu-operator-v25.10.1/chart")`: the test runs only with those reference files
(tests/conftest.py: skipped naming `make reference`, failed under CI=true)."""


def helm_sdk_problem() -> str | None:
    """Why Helm's Go SDK cannot render the reference chart here (for a skip reason), or None."""
    try:
        helm_sdk()
    except ChartUnavailable as exc:
        return str(exc)
    return None


def git(repo: Path, *args: str) -> str:
    """Runs `git -C repo ARGS...` as a fixed test author; returns its stdout."""
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return proc.stdout


def committed_project_copy(tmp_path: Path) -> Path:
    """The project's files (tracked, and new ones git does not ignore), committed as `base` on `main`
    of a fresh repository at tmp_path/repo; skips the test when git is not installed."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    files = subprocess.run(
        ["git", "-C", str(PROJECT_DIR), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode().split("\0")
    repo = tmp_path / "repo"
    for rel in filter(None, files):
        src = PROJECT_DIR / rel
        if src.is_file():
            dest = repo / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    return repo


def built_tool(name: str, version_key: str, binary: str) -> Path:
    """A binary toolchain/build.sh built (`$GPU_STACK_TOOLS` or ~/.cache/gpu-stack/tools/<name>-<version>/),
    at the version pinned in toolchain/versions.env; skips the test when it is absent (fails under
    CI=true, where the toolchain is built first)."""
    pins = {}
    for line in (PROJECT_DIR / "toolchain" / "versions.env").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            pins[key.strip()] = value.strip()
    root = Path(os.environ.get("GPU_STACK_TOOLS") or Path.home() / ".cache" / "gpu-stack" / "tools")
    folder = root / f"{name}-{pins[version_key]}"
    path = folder / binary
    if (folder / ".complete").exists() and path.is_file():
        return path
    reason = f"{binary} {pins[version_key]} is not built under {folder} (run toolchain/build.sh)"
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)
