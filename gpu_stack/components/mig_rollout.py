"""The MIG rollout: RBAC, the script and node table ConfigMaps, and the Job that sets each node's
`nvidia.com/mig.config` after draining it (see gpu_stack/mig_rollout.py).

Pulumi awaits the Job (no skipAwait): `pulumi up` finishes only when every wave succeeded, and
fails with the pod's termination message (node, state, MIG manager log) when one does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pulumi
import pulumi_kubernetes as k8s

from ..mig_rollout import RolloutPlan
from .jobs import JOB_REPLACEMENT


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
        # The operator's namespace comes with the release (which depends on it).
        after_release = pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on))
        account = k8s.core.v1.ServiceAccount(
            f"{name}-account",
            metadata=plan.service_account["metadata"],
            automount_service_account_token=plan.service_account["automountServiceAccountToken"],
            opts=after_release,
        )
        cluster_role = k8s.rbac.v1.ClusterRole(
            f"{name}-cluster-role", metadata=plan.cluster_role["metadata"], rules=plan.cluster_role["rules"],
            opts=pulumi.ResourceOptions(parent=self),
        )
        cluster_binding = k8s.rbac.v1.ClusterRoleBinding(
            f"{name}-cluster-role-binding",
            metadata=plan.cluster_role_binding["metadata"],
            role_ref=plan.cluster_role_binding["roleRef"],
            subjects=plan.cluster_role_binding["subjects"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[cluster_role, account]),
        )
        role = k8s.rbac.v1.Role(
            f"{name}-role", metadata=plan.role["metadata"], rules=plan.role["rules"], opts=after_release
        )
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-role-binding",
            metadata=plan.role_binding["metadata"],
            role_ref=plan.role_binding["roleRef"],
            subjects=plan.role_binding["subjects"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[role, account]),
        )
        script = k8s.core.v1.ConfigMap(
            f"{name}-script", metadata=plan.script["metadata"], data=plan.script["data"], immutable=True,
            opts=after_release,
        )
        table = k8s.core.v1.ConfigMap(
            f"{name}-nodes", metadata=plan.table["metadata"], data=plan.table["data"], immutable=True,
            opts=after_release,
        )
        timeouts = pulumi.CustomTimeouts(create=f"{plan.timeout_seconds}s", update=f"{plan.timeout_seconds}s")
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata=plan.job["metadata"],
            spec=plan.job["spec"],
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=[*args.depends_on, cluster_binding, binding, script, table],
                # JOB_REPLACEMENT (components/jobs.py): any change, and a failed or interrupted
                # create (its init error), replaces the Job, deleting the old one first.
                **JOB_REPLACEMENT,
                custom_timeouts=timeouts,
            ),
        )
        self.register_outputs({"job": plan.job_name, "waveSize": plan.wave_size})
