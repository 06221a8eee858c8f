"""What the config allows but weakens: printed as warnings by `pulumi up` and the offline plan."""

from __future__ import annotations

import difflib

from ..gpu_models import catalog
from ..root import Settings
from ..types import NAMESPACE
from .dra import dra_advisories
from .driver import driver_fetches


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
    out += unknown_gpu_models(s)
    out += driver_fetches(s)
    out += dra_advisories(s)
    if "kubernetes.version" in s._offline_stand_ins:
        out.append(
            f"{NAMESPACE}:kubernetes.version is a secret the offline plan cannot read: the manifests are checked "
            f"against {s.kubernetes.version} here; `pulumi preview` checks them against the version you set"
        )
    return out


def unknown_gpu_models(s: Settings) -> list[str]:
    """Each GPU model the catalog does not know, by name: its capacity, MIG and MPS limits are guesses."""
    cat = catalog()
    unknown: dict[str, list[int]] = {}
    for i, node in enumerate(s.nodes):
        if cat.lookup(node.gpu.model) is None:
            unknown.setdefault(node.gpu.model, []).append(i)
    out = []
    for model, nodes in unknown.items():
        close = difflib.get_close_matches(model, cat.names(), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        where = ", ".join(f"nodes[{i}]" for i in nodes[:3]) + (f" and {len(nodes) - 3} more" if len(nodes) > 3 else "")
        out.append(
            f"GPU model {model!r} ({NAMESPACE}:{where}.gpu.model) is not in the GPU catalog (config/gpu-models.yaml){hint}: "
            "the stack cannot check its MIG profiles or MPS limits; add it to the catalog or use a catalog name"
        )
    return out
