"""Per-node labels that select a sharing profile and a MIG config (NodePatch, server-side apply)."""

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


class NodeLabels(pulumi.ComponentResource):
    patches: list[k8s.core.v1.NodePatch]

    def __init__(self, name: str, args: NodeLabelsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:NodeLabels", name, None, opts)
        self.patches = [
            k8s.core.v1.NodePatch(
                f"{name}-{node}",
                # A plain dict: the same inputs as ObjectMetaPatchArgs without importing meta.v1.
                metadata={"name": node, "labels": labels, "annotations": {"pulumi.com/patchForce": "true"}},
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on)),
            )
            for node, labels in sorted(args.labels.items())
        ]
        self.register_outputs({})
