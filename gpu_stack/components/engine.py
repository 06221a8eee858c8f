"""What the program must know about the engine it runs under: the real Pulumi engine, or the
offline runner (Pulumi's mock runtime, no CLI, no cluster, no secrets).

The offline runner switches `offline()` on while it runs the program; nothing else does. Under the
real engine a missing secret is an error; offline the plan shows a placeholder where it goes.
"""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from ..config.safe_input import escape

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



def _agent_unreachable(path: str) -> str | None:
    """Why nothing answers at the agent socket `path` (what pulumi-command's dialAgent, a plain
    `net.Dial("unix", path)`, would meet), or None when a connect succeeds."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2)
    try:
        probe.connect(path)
    except OSError as exc:
        return exc.strerror or str(exc)
    finally:
        probe.close()
    return None


def stale_agent_problem(environ: Mapping[str, str] | None = None) -> str | None:
    """With ssh.privateKey (and no ssh.agentSocketPath): the one line `pulumi preview`/`up` fails with
    when SSH_AUTH_SOCK, where Pulumi runs, names no agent that answers, else None.

    pulumi-command 1.2.1 remote/connection.go SSHConfig takes SSH_AUTH_SOCK whenever agentSocketPath
    is unset (connection_unix.go tryGetDefaultAgentSocket: any non-empty value), also when a private
    key is given, and returns the dial's error for the whole connection: a dead agent (a tmux session
    outliving its SSH login, a runner that exports the variable) fails every node, and the key in the
    state is never tried."""
    env = os.environ if environ is None else environ
    where = env.get("SSH_AUTH_SOCK", "")
    if not where:
        return None
    why = _agent_unreachable(where)
    if why is None:
        return None
    return (
        f"SSH_AUTH_SOCK names no SSH agent that answers ({escape(where)[:200]}: {why}), and pulumi-command 1.2.1 dials "
        "it on every node connection even with gpu-stack:ssh.privateKey set, so every node would fail: run "
        "`unset SSH_AUTH_SOCK` (or start the agent it names) where Pulumi runs, then run it again"
    )
