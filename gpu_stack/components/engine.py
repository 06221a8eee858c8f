"""What the program must know about the engine it runs under: the real Pulumi engine, or the
offline runner (Pulumi's mock runtime, no CLI, no cluster, no secrets).

The offline runner switches `offline()` on while it runs the program; nothing else does. Under the
real engine a missing secret is an error; offline the plan shows a placeholder where it goes.
"""

from __future__ import annotations

import os
import stat
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
        f"`{SSH_KEY_COMMAND}` (or import it from the stack's ESC environment), "
        "or use an SSH agent (gpu-stack:ssh.agentSocketPath)"
    )


def ssh_agent_problem(path: str, environ: dict[str, str] | None = None) -> str | None:
    """Why the SSH agent `ssh.agentSocketPath` names cannot be used where Pulumi runs, or None.
    `$SSH_AUTH_SOCK` is the agent that variable names (the command provider reads it itself)."""
    env = os.environ if environ is None else environ
    where = path
    if path == "$SSH_AUTH_SOCK":
        where = env.get("SSH_AUTH_SOCK", "")
        if not where:
            return ("gpu-stack:ssh.agentSocketPath is '$SSH_AUTH_SOCK', but SSH_AUTH_SOCK is not set where Pulumi runs: "
                    "start an agent and add the node key (`eval \"$(ssh-agent)\"; ssh-add ~/.ssh/<your-node-key>`), "
                    "or set gpu-stack:ssh.privateKey instead")
    try:
        is_socket = stat.S_ISSOCK(os.stat(where).st_mode)
    except OSError as exc:
        return f"gpu-stack:ssh.agentSocketPath: the SSH agent socket {where} cannot be reached ({exc.strerror})"
    return None if is_socket else f"gpu-stack:ssh.agentSocketPath: {where} is not a socket (an SSH agent's socket is)"

