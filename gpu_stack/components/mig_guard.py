"""The MIG layout guard: RBAC, its script ConfigMap and the Job the operator release waits for
(see gpu_stack/design/mig_guard.py).

Pulumi awaits the Job: a layout edited under a config name nodes select fails `pulumi up` with
the Job's termination message, before the release restarts the MIG manager.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from ..design.mig_guard import GuardPlan
from .jobs import kubectl_job


@dataclass
class MigLayoutGuardArgs:
    plan: GuardPlan
    depends_on: Sequence[pulumi.Resource] = ()
    """The operator's namespace and the new mig-parted ConfigMap."""


class MigLayoutGuard(pulumi.ComponentResource):
    job: k8s.batch.v1.Job

    def __init__(self, name: str, args: MigLayoutGuardArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:MigLayoutGuard", name, None, opts)
        plan = args.plan
        self.job = kubectl_job(self, name, plan, args.depends_on)
        self.register_outputs({"job": plan.job_name})
