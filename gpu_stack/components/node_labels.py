"""The stack's nodes proven to exist (a read of each node's Lease), and the one Job that sets their
labels from a table (gpu_stack/design/node_label_job.py).

Every declared node is proven to exist first, by a read (which `pulumi preview` runs) of the
node's Lease: every kubelet keeps one, named after its node, in `kube-node-lease`, owned by the
Node (so it goes with it). A node name that is not in the cluster, or a Node without a kubelet,
fails the preview with the provider's "does not exist" for `kube-node-lease/<name>`. The Lease,
not the Node, because a read keeps what it read in the state and refreshes it on every `up`: a
Node holds its images, conditions, every label and its managed fields (tens of KB per GPU node),
a Lease a few hundred bytes. The label Job depends on every read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from ..design.node_label_job import LabelJobPlan
from .jobs import kubectl_job

NODE_LEASE_NAMESPACE = "kube-node-lease"


@dataclass
class NodeLabelsArgs:
    nodes: Sequence[str] = field(default_factory=tuple)
    """Every declared node (read to prove it exists)."""


class NodeLabels(pulumi.ComponentResource):
    nodes: dict[str, k8s.coordination.v1.Lease]
    """Node name -> the node's Lease (kube-node-lease/<name>), read during preview."""

    def __init__(self, name: str, args: NodeLabelsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:NodeLabels", name, None, opts)
        self.nodes = {
            node: k8s.coordination.v1.Lease.get(f"node-{node}", f"{NODE_LEASE_NAMESPACE}/{node}", opts=pulumi.ResourceOptions(parent=self))
            for node in sorted(set(args.nodes))
        }
        self.register_outputs({})


@dataclass
class NodeLabelJobArgs:
    plan: LabelJobPlan
    depends_on: Sequence[pulumi.Resource] = ()
    """The operator's namespace (and what else the namespaced objects wait for)."""
    job_after: Sequence[pulumi.Resource] = ()
    """Every node's read: the Job alone waits for them."""


class NodeLabelJob(pulumi.ComponentResource):
    job: k8s.batch.v1.Job

    def __init__(self, name: str, args: NodeLabelJobArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:NodeLabelJob", name, None, opts)
        plan = args.plan
        self.job = kubectl_job(self, name, plan, args.depends_on, {"table": plan.table}, job_after=args.job_after)
        self.register_outputs({"job": plan.job_name})
