"""What the NodeLabels component registers, decided here: the Lease read that proves each declared
node exists (components/node_labels.py says why a Lease) and the NodePatch of each node with labels
to set (forced: the stack owns these labels even where another field manager set them before)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

NODE_LEASE_NAMESPACE = "kube-node-lease"
PATCH_FORCE = {"pulumi.com/patchForce": "true"}


@dataclass(frozen=True)
class NodeLabelsPlan:
    reads: dict[str, str]
    """Node name -> the id of its Lease (`kube-node-lease/<node>`), read to prove the node exists;
    every declared node and every node with labels, sorted."""
    patches: dict[str, dict[str, Any]]
    """Node name -> the NodePatch's metadata (labels and the force annotation), sorted; each patch
    waits for its node's read."""


def build_node_labels(nodes: Iterable[str], labels: dict[str, dict[str, str]]) -> NodeLabelsPlan:
    """The reads of `nodes` and the patches that set `labels` (node -> labels)."""
    return NodeLabelsPlan(
        reads={node: f"{NODE_LEASE_NAMESPACE}/{node}" for node in sorted({*nodes, *labels})},
        patches={
            node: {"name": node, "labels": node_labels, "annotations": dict(PATCH_FORCE)}
            for node, node_labels in sorted(labels.items())
        },
    )
