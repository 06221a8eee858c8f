"""Cross-field rules over validated Settings: each returns Problems naming the config key.

Per-field rules live on the models in settings.py; what needs two fields at once lives here.
Sharing, MIG and DCGM rules are added by their own modules through `RULES`.
"""

from __future__ import annotations

from typing import Callable

from .safe_input import address_identity
from .settings import NAMESPACE, Problem, Settings, config_key

Rule = Callable[[Settings], list[Problem]]


def _nodes_unique(s: Settings) -> list[Problem]:
    first: dict[str, int] = {}
    out = []
    for i, n in enumerate(s.nodes):
        if n.name in first:
            out.append(Problem(
                key=config_key(("nodes", i, "name")), value=n.name,
                message=f"duplicate node name (also nodes[{first[n.name]}]); each node must appear once",
            ))
        first.setdefault(n.name, i)
    return out


def _addresses_unique(s: Settings) -> list[Problem]:
    """Two nodes at one SSH address (and port) would be one machine prepared twice, under two names."""
    first: dict[tuple[str, int], int] = {}
    out = []
    for i, n in enumerate(s.nodes):
        if n.address is None:
            continue
        mark = (address_identity(n.address), n.port or s.ssh.port)
        if mark in first:
            out.append(Problem(
                key=config_key(("nodes", i, "address")), value=n.address,
                message=(
                    f"is also the address of nodes[{first[mark]}] ({s.nodes[first[mark]].name}); "
                    "each node needs its own address"
                ),
            ))
        first.setdefault(mark, i)
    return out


def _placement(s: Settings) -> list[Problem]:
    """The operator's toolkit is configured once for the cluster (toolkit.env in one ClusterPolicy):
    k3s/RKE2 nodes need their own containerd paths, so they cannot share it with other runtimes."""
    if s.toolkit.placement != "operator" or not s.nodes:
        return []
    from .helm_values import TOOLKIT_ENV_RUNTIMES

    kinds = {TOOLKIT_ENV_RUNTIMES.get(n.runtime, "default") for n in s.nodes}
    if len(kinds) <= 1:
        return []
    first = s.nodes[0]
    out = []
    for i, n in enumerate(s.nodes):
        if TOOLKIT_ENV_RUNTIMES.get(n.runtime, "default") != TOOLKIT_ENV_RUNTIMES.get(first.runtime, "default"):
            out.append(Problem(
                key=config_key(("nodes", i, "runtime")),
                value=n.runtime,
                message=(
                    f"differs from nodes[0].runtime = '{first.runtime}' while toolkit.placement = 'operator': the "
                    "operator's toolkit gets one set of containerd paths for the whole cluster (toolkit.env), and "
                    "k3s/RKE2 keep theirs elsewhere; use one runtime kind per cluster, or toolkit.placement 'host'"
                ),
            ))
    return out


def _ssh(s: Settings) -> list[Problem]:
    if not s.host_managed:
        return []
    # A missing ssh.privateKey is not a config error: the offline plan runs without secrets, and
    # under the engine the program stops with one line saying how to set it (stack.py).
    out: list[Problem] = []
    for i, n in enumerate(s.nodes):
        if n.address is None:
            out.append(
                Problem(
                    key=config_key(("nodes", i, "address")),
                    value=None,
                    message="is required when the driver or toolkit lives on the host (the node is prepared over SSH)",
                )
            )
    return out


RULES: list[Rule] = [_nodes_unique, _addresses_unique, _placement, _ssh]


def advisories(s: Settings) -> list[str]:
    """What the config allows but weakens: printed as warnings by `pulumi up` and the offline plan."""
    out: list[str] = []
    if s.host_managed:
        unpinned = [i for i, n in enumerate(s.nodes) if n.host_key is None]
        if unpinned:
            shown = ", ".join(f"nodes[{i}] ({s.nodes[i].name})" for i in unpinned[:5])
            more = f" and {len(unpinned) - 5} more" if len(unpinned) > 5 else ""
            out.append(
                f"SSH host keys are not pinned ({NAMESPACE}:nodes[i].hostKey) for {shown}{more}: node preparation "
                "runs as root over a connection that accepts any host key at the address; pin each node's "
                "key (`ssh-keyscan -t ed25519 <address>`) in production"
            )
    return out


def check_settings(settings: Settings) -> list[Problem]:
    """Every cross-field problem of the config, in a stable order."""
    # Feature modules register their rules on import.
    from . import sharing, mig, dcgm, validation_jobs  # noqa: F401

    problems: list[Problem] = []
    for rule in RULES:
        problems.extend(rule(settings))
    return problems
