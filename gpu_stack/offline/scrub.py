"""Secrets out of the plan: Pulumi secrets and any string carrying a secret config value become
`[secret]`, in inputs, outputs, warnings and error messages alike."""

from __future__ import annotations

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
