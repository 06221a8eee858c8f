"""Rules on the nodes as a whole: unique names and addresses, one toolkit layout, SSH where needed."""

from __future__ import annotations

from ..errors import Problem, config_key
from ..facts import TOOLKIT_ENV_RUNTIMES
from ..root import Settings
from ..safe_input import address_identity


def nodes_unique(s: Settings) -> list[Problem]:
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


def addresses_unique(s: Settings) -> list[Problem]:
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


def placement(s: Settings) -> list[Problem]:
    """The operator's toolkit is configured once for the cluster (toolkit.env in one ClusterPolicy):
    k3s/RKE2 nodes need their own containerd paths, so they cannot share it with other runtimes."""
    if s.toolkit.placement != "operator" or not s.nodes:
        return []
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


def ssh(s: Settings) -> list[Problem]:
    if not s.host_managed:
        return []
    # A missing ssh.privateKey is not a config error: the offline plan runs without secrets, and
    # under the engine the program stops with one line saying how to set it (stack.py).
    out: list[Problem] = []
    if s.ssh.private_key is not None and s.ssh.agent_socket_path is not None:
        out.append(Problem(
            key=config_key(("ssh", "agentSocketPath")),
            value=s.ssh.agent_socket_path,
            message="is set together with ssh.privateKey: set one of them (the agent's keys, or the key itself)",
        ))
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
