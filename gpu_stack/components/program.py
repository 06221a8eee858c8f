"""The entry points `__main__.py` uses: read the stack config, fail clearly on a bad one."""

from __future__ import annotations

from ..config import Settings, SettingsError, load_settings
from ..config.pulumi_config import other_keys, read_namespace, secret_keys, secure_paths


def load_settings_from_pulumi() -> Settings:
    """Settings from the running program's `gpu-stack:*` config; nothing is registered on error.

    Under `pulumi up` a SettingsError becomes the program's one error message (pulumi.RunError
    prints without a Python traceback).
    """
    try:
        keys = secret_keys()
        return load_settings(
            read_namespace(),
            secret_keys=keys,
            secret_paths=secure_paths() if keys else None,
            other_keys=other_keys(),
        )
    except SettingsError as exc:
        import pulumi

        raise pulumi.RunError(str(exc)) from None
