"""What the program must know about the engine it runs under: the real Pulumi engine, or the
offline runner (Pulumi's mock runtime, no CLI, no cluster, no secrets).

The offline runner switches `offline()` on while it runs the program; nothing else does. Under the
real engine a missing secret is an error; offline the plan shows a placeholder where it goes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_offline = False

OFFLINE_SSH_KEY = "gpu-stack-offline-ssh-key-placeholder"
"""What the offline plan passes (as a Pulumi secret, so shown `[secret]`) when no key is set."""

SSH_KEY_COMMAND = "pulumi config set --secret --path 'gpu-stack:ssh.privateKey' < ~/.ssh/<your-node-key>"
"""The one command that sets the key (or put it in the stack's ESC environment, see README)."""


def is_offline() -> bool:
    return _offline


@contextmanager
def offline() -> Iterator[None]:
    """Mark the program as planned offline for the duration of the block."""
    global _offline
    previous, _offline = _offline, True
    try:
        yield
    finally:
        _offline = previous


def missing_ssh_key_message() -> str:
    """The one line `pulumi preview`/`up` prints when nodes need SSH and no key is set."""
    return (
        "gpu-stack:ssh.privateKey is not set, and the nodes are prepared over SSH "
        "(driver.placement or toolkit.placement is 'host'): run "
        f"`{SSH_KEY_COMMAND}` (or import it from the stack's ESC environment)"
    )
