"""Secrets out of the plan: Pulumi secrets and any string carrying a secret config value become
`[secret]`, in inputs, outputs, warnings and error messages alike."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pulumi
from pulumi.runtime import rpc

from .plan import SECRET


class Scrubber:
    """Replaces Pulumi secrets and known secret strings by `[secret]`, recursively."""

    def __init__(self, secret_values: set[str]):
        self.secret_values = {v for v in secret_values if v}

    def __call__(self, value: Any) -> Any:
        """Inputs: secrets out, keys sorted, whole-number doubles as ints."""
        if rpc.is_rpc_secret(value):
            return SECRET
        if isinstance(value, pulumi.FileAsset):
            # As the engine stores it: the file, by path (its hash is computed by the engine).
            return {"fileAsset": str(value.path)}
        if isinstance(value, dict):
            return {k: self(value[k]) for k in sorted(value)}
        if isinstance(value, float) and value.is_integer():
            # The wire format carries every number as a double; show whole numbers as such.
            return int(value)
        if isinstance(value, (list, tuple)):
            return [self(v) for v in value]
        if isinstance(value, str) and any(s in value for s in self.secret_values):
            return SECRET
        return value

    def fingerprints(self, value: Any, path: str = "") -> dict[str, str]:
        """Input path -> fingerprint of each leaf the plan shows as `[secret]` (inside a Pulumi
        secret, or a string carrying a secret config value): two plans whose fingerprints differ
        at a path differ in that secret, which the diff says without showing either value.

        Offline a `secure:` value is a placeholder derived from its ciphertext (stack_files.py),
        never the value, so a fingerprint reveals no more than the committed stack file does."""
        if rpc.is_rpc_secret(value):
            return _leaf_prints(rpc.unwrap_rpc_secret(value), path)
        if isinstance(value, dict):
            return {k: v for key in sorted(value) for k, v in self.fingerprints(value[key], _join(path, key)).items()}
        if isinstance(value, (list, tuple)):
            return {k: v for i, item in enumerate(value) for k, v in self.fingerprints(item, f"{path}[{i}]").items()}
        if isinstance(value, str) and any(s in value for s in self.secret_values):
            return {path: fingerprint(value)}
        return {}

    def inputs(self, value: Any) -> tuple[Any, dict[str, str]]:
        """`(self(value), self.fingerprints(value))` in one walk of the inputs (a plan reads
        every registration's inputs so: one walk instead of two)."""
        prints: dict[str, str] = {}
        return self._walk(value, "", prints), prints

    def _walk(self, value: Any, path: str, prints: dict[str, str]) -> Any:
        if rpc.is_rpc_secret(value):
            prints.update(_leaf_prints(rpc.unwrap_rpc_secret(value), path))
            return SECRET
        if isinstance(value, pulumi.FileAsset):
            return {"fileAsset": str(value.path)}
        if isinstance(value, dict):
            return {k: self._walk(value[k], _join(path, k), prints) for k in sorted(value)}
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, (list, tuple)):
            return [self._walk(v, f"{path}[{i}]", prints) for i, v in enumerate(value)]
        if isinstance(value, str) and any(s in value for s in self.secret_values):
            prints[path] = fingerprint(value)
            return SECRET
        return value

    def text(self, message: str) -> str:
        """A message with every known secret string cut out (the rest stays readable)."""
        for secret in sorted(self.secret_values, key=len, reverse=True):
            message = message.replace(secret, SECRET)
        return message

    def plain(self, value: Any) -> Any:
        """Outputs: unwrap nothing, just scrub known secret strings."""
        if isinstance(value, dict):
            return {k: self.plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.plain(v) for v in value]
        if isinstance(value, str) and any(s in value for s in self.secret_values):
            return SECRET
        return value


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else str(key)


def fingerprint(value: Any) -> str:
    """A short digest of a secret leaf: equal values, equal digests; never the value."""
    if rpc.is_rpc_secret(value):
        value = rpc.unwrap_rpc_secret(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = json.dumps(value, sort_keys=True, default=str)
    return "sha256:" + hashlib.sha256(b"gpu-stack secret input\0" + text.encode()).hexdigest()[:16]


def _leaf_prints(value: Any, path: str) -> dict[str, str]:
    if rpc.is_rpc_secret(value):
        value = rpc.unwrap_rpc_secret(value)
    if isinstance(value, dict) and value:
        return {k: v for key in sorted(value) for k, v in _leaf_prints(value[key], _join(path, key)).items()}
    if isinstance(value, (list, tuple)) and value:
        return {k: v for i, item in enumerate(value) for k, v in _leaf_prints(item, f"{path}[{i}]").items()}
    return {path: fingerprint(value)}
