"""The MIG rollout: RBAC, the script and node table ConfigMaps, and the Job that sets each node's
`nvidia.com/mig.config` after draining it (see gpu_stack/design/mig_rollout.py).

Pulumi awaits the Job (no skipAwait): `pulumi up` finishes only when every wave succeeded, and
fails with the pod's termination message (node, state, MIG manager log) when one does not.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from ..design.mig_rollout import RolloutPlan
from .jobs import kubectl_job


@dataclass
class MigRolloutArgs:
    plan: RolloutPlan
    depends_on: Sequence[pulumi.Resource] = ()
    """The operator release: MIG manager must run before a label can be applied."""


class MigRollout(pulumi.ComponentResource):
    job: k8s.batch.v1.Job

    def __init__(self, name: str, args: MigRolloutArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:MigRollout", name, None, opts)
        plan = args.plan
        self.job = kubectl_job(self, name, plan, args.depends_on, {"nodes": plan.table})
        self.register_outputs({"job": plan.job_name, "waveSize": plan.wave_size})
