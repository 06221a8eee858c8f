"""Shared test helpers: run the real program offline for a stack file or a config dict."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from gpu_stack.offline.runner import PROJECT_DIR, Plan, run_program
from gpu_stack.stack_files import StackConfig, read_stack

REFERENCE = PROJECT_DIR.parent / "shared" / "reference" / "gpu-operator-v25.10.1"


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
