"""What the config allows but weakens: printed as warnings by `pulumi up` and the offline plan."""

from __future__ import annotations

from ..root import Settings
from ..types import NAMESPACE


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
