"""Per-node labels that select a sharing profile and a MIG config (NodePatch, server-side apply).

Every declared node is read first (`Node.get`, which `pulumi preview` runs): a node name that is
not in the cluster fails the preview with the provider's "not found" for `node-<name>`, instead of
the server-side-apply patch creating a phantom Node object. Each patch depends on its node's read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import pulumi
import pulumi_kubernetes as k8s


@dataclass
class NodeLabelsArgs:
    labels: dict[str, dict[str, str]]
    """Node name -> labels to set on it."""
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)
    nodes: Sequence[str] = field(default_factory=tuple)
    """Every declared node (read to prove it exists); nodes with labels are always read."""


class NodeLabels(pulumi.ComponentResource):
    patches: list[k8s.core.v1.NodePatch]
    nodes: dict[str, k8s.core.v1.Node]
    """Node name -> the live Node, read during preview."""

    def __init__(self, name: str, args: NodeLabelsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:NodeLabels", name, None, opts)
        self.nodes = {
            node: k8s.core.v1.Node.get(f"node-{node}", node, opts=pulumi.ResourceOptions(parent=self))
            for node in sorted({*args.nodes, *args.labels})
        }
        self.patches = [
            k8s.core.v1.NodePatch(
                f"{name}-{node}",
                # A plain dict: the same inputs as ObjectMetaPatchArgs without importing meta.v1.
                metadata={"name": node, "labels": labels, "annotations": {"pulumi.com/patchForce": "true"}},
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*args.depends_on, self.nodes[node]]),
            )
            for node, labels in sorted(args.labels.items())
        ]
        self.register_outputs({})
