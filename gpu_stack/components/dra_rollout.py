"""The device plugin <-> DRA rollout: RBAC, the script and node table ConfigMaps, and the Job that
moves nodes between the two in drained waves (see gpu_stack/design/dra_rollout.py).

Pulumi awaits the Job (no skipAwait): `pulumi up` finishes only when every wave succeeded, and
fails with the pod's termination message (node, what it waited for) when one does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from ..design.dra_rollout import DraRolloutPlan
from .jobs import kubectl_job


@dataclass
class DraRolloutArgs:
    plan: DraRolloutPlan
    depends_on: Sequence[pulumi.Resource] = ()
    """The DRA driver's release (its kubelet plugin must be deployable before a node is switched)
    and the MIG rollout where there is one (both cordon and drain the same nodes)."""


class DraRollout(pulumi.ComponentResource):
    job: k8s.batch.v1.Job

    def __init__(self, name: str, args: DraRolloutArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:DraRollout", name, None, opts)
        plan = args.plan
        self.job = kubectl_job(self, name, plan, args.depends_on, {"nodes": plan.table})
        self.register_outputs({"job": plan.job_name, "waveSize": plan.wave_size, "minSchedulableGpus": plan.min_gpus})
