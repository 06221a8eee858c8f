"""Per-node labels that select a sharing profile and a MIG config (NodePatch, server-side apply).

Every declared node is proven to exist first, by a read (which `pulumi preview` runs) of the
node's Lease: every kubelet keeps one, named after its node, in `kube-node-lease`, owned by the
Node (so it goes with it). A node name that is not in the cluster, or a Node without a kubelet (a
phantom an earlier patch created), fails the preview with the provider's "does not exist" for
`kube-node-lease/<name>`, instead of the server-side-apply patch creating a phantom Node object.
The Lease, not the Node, because a read keeps what it read in the state and refreshes it on every
`up`: a Node holds its images, conditions, every label and its managed fields (tens of KB per GPU
node), a Lease a few hundred bytes. Each patch depends on its node's read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import pulumi
import pulumi_kubernetes as k8s

NODE_LEASE_NAMESPACE = "kube-node-lease"


@dataclass
class NodeLabelsArgs:
    labels: dict[str, dict[str, str]]
    """Node name -> labels to set on it."""
    depends_on: Sequence[pulumi.Resource] = field(default_factory=tuple)
    nodes: Sequence[str] = field(default_factory=tuple)
    """Every declared node (read to prove it exists); nodes with labels are always read."""


class NodeLabels(pulumi.ComponentResource):
    patches: list[k8s.core.v1.NodePatch]
    nodes: dict[str, k8s.coordination.v1.Lease]
    """Node name -> the node's Lease (kube-node-lease/<name>), read during preview."""

    def __init__(self, name: str, args: NodeLabelsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:NodeLabels", name, None, opts)
        self.nodes = {
            node: k8s.coordination.v1.Lease.get(f"node-{node}", f"{NODE_LEASE_NAMESPACE}/{node}", opts=pulumi.ResourceOptions(parent=self))
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
