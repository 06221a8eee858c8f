"""Read the whole `gpu-stack:*` namespace from the running Pulumi program's config.

`pulumi.Config` only answers for keys it is asked about; to reject unknown keys (with a
"did you mean") the program needs every key that was set, which the runtime keeps in its
config map (set by `pulumi up` through PULUMI_CONFIG, or by the mock runtime).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from pulumi.runtime import config as runtime_config

from . import NAMESPACE


def _all_config() -> dict[str, Any]:
    merged: dict[str, Any] = {}
    merged.update(runtime_config.get_config_env())
    merged.update(runtime_config.CONFIG.get())
    return merged


def read_namespace(namespace: str = NAMESPACE) -> dict[str, Any]:
    """Top-level key -> value (structured values decoded from their JSON form)."""
    prefix = namespace + ":"
    out: dict[str, Any] = {}
    for key, value in _all_config().items():
        if not key.startswith(prefix):
            continue
        short = key[len(prefix) :]
        if isinstance(value, str):
            stripped = value.strip()
            if stripped[:1] in ("{", "[") or stripped in ("true", "false") or _is_number(stripped):
                with contextlib.suppress(json.JSONDecodeError):
                    value = json.loads(stripped)
        out[short] = value
    return out


def secret_keys(namespace: str = NAMESPACE) -> set[str]:
    """Top-level keys of the namespace that the stack holds as secrets (`pulumi config set --secret`)."""
    prefix = namespace + ":"
    # `pulumi up` passes the secret keys in PULUMI_CONFIG_SECRET_KEYS; the mock runtime (and
    # automation API) through set_all_config.
    keys = set(runtime_config.get_config_secret_keys_env())
    keys |= {k for k in _all_config() if runtime_config.is_config_secret(k)}
    return {k[len(prefix) :] for k in keys if k.startswith(prefix)}


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def other_keys(namespace: str = NAMESPACE) -> list[str]:
    """Every config key outside the namespace (checked for a misspelt namespace)."""
    return sorted(k for k in _all_config() if not k.startswith(namespace + ":"))


def secure_paths(namespace: str = NAMESPACE) -> dict[str, list[tuple[Any, ...]]] | None:
    """Top-level key -> paths of its `secure:` values, from `Pulumi.<stack>.yaml` in the project
    folder (the working directory under `pulumi up`); None when that file cannot be read.

    The engine marks a whole top-level key secret when one nested value is (`pulumi config set
    --secret --path nodes[0].hostKey`); the stack file says which part it is.
    """
    import pulumi

    from .stack_files import StackFileError, secure_value_paths

    try:
        stack = pulumi.get_stack()
        path = Path(os.getcwd()) / f"Pulumi.{stack}.yaml"
        if not path.is_file():
            return None
        return secure_value_paths(path, namespace)
    except (StackFileError, OSError, ValueError):
        return None


def project_dir() -> Path:
    """The project folder (where Pulumi.yaml is): what a relative path in the config is relative to.

    The engine tells the program (`pulumi.get_root_directory()`; the offline runner sets it to its
    project folder); an engine that does not runs the program in that folder.
    """
    import pulumi

    try:
        root = pulumi.get_root_directory()
    except AttributeError:  # mock settings without the attribute
        root = None
    # Only an absolute folder counts: the SDK's unconfigured default is a placeholder word.
    if root and os.path.isabs(root) and os.path.isdir(root):
        return Path(root)
    return Path(os.getcwd())
