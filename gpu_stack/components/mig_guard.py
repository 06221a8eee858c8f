"""The MIG layout guard: RBAC, its script ConfigMap and the Job the operator release waits for
(see gpu_stack/mig_guard.py).

Pulumi awaits the Job: a layout edited under a config name nodes select fails `pulumi up` with
the Job's termination message, before the release restarts the MIG manager.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pulumi
import pulumi_kubernetes as k8s

from ..mig_guard import GuardPlan
from .jobs import JOB_REPLACEMENT


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
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        child = pulumi.ResourceOptions(parent=self)
        account = k8s.core.v1.ServiceAccount(
            f"{name}-account",
            metadata=plan.service_account["metadata"],
            automount_service_account_token=plan.service_account["automountServiceAccountToken"],
            opts=in_ns,
        )
        cluster_role = k8s.rbac.v1.ClusterRole(
            f"{name}-cluster-role", metadata=plan.cluster_role["metadata"], rules=plan.cluster_role["rules"], opts=child
        )
        cluster_binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-cluster-role-binding",
            metadata=plan.cluster_role_binding["metadata"],
            role_ref=plan.cluster_role_binding["roleRef"],
            subjects=plan.cluster_role_binding["subjects"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[cluster_role, account]),
        )
        role = k8s.rbac.v1.Role(f"{name}-role", metadata=plan.role["metadata"], rules=plan.role["rules"], opts=in_ns)
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-role-binding",
            metadata=plan.role_binding["metadata"],
            role_ref=plan.role_binding["roleRef"],
            subjects=plan.role_binding["subjects"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[role, account]),
        )
        script = k8s.core.v1.ConfigMap(
            f"{name}-script", metadata=plan.script["metadata"], data=plan.script["data"], immutable=True, opts=in_ns
        )
        timeouts = pulumi.CustomTimeouts(create=f"{plan.timeout_seconds}s", update=f"{plan.timeout_seconds}s")
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata=plan.job["metadata"],
            spec=plan.job["spec"],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[*args.depends_on, cluster_binding, binding, script],
                # JOB_REPLACEMENT (components/jobs.py): any change, and a failed or interrupted
                # create (its init error), replaces the Job, deleting the old one first.
                **JOB_REPLACEMENT,
                custom_timeouts=timeouts,
            ),
        )
        self.register_outputs({"job": plan.job_name})
