"""The validation suite: namespace, payload ConfigMap, node-reader RBAC and one Job per check.

Pulumi awaits every Job (no skipAwait): `pulumi up` finishes only when each Job completed, and
fails with the Job's pods' termination message (the payload's FAIL line) when one fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pulumi
import pulumi_kubernetes as k8s

from ..validation_jobs import ValidationPlan, job_names


@dataclass
class ValidationSuiteArgs:
    plan: ValidationPlan
    depends_on: Sequence[pulumi.Resource] = ()
    """What the Jobs must wait for: the operator release and the node label patches."""


class ValidationSuite(pulumi.ComponentResource):
    namespace: k8s.core.v1.Namespace
    payloads: k8s.core.v1.ConfigMap
    jobs: dict[str, k8s.batch.v1.Job]

    def __init__(self, name: str, args: ValidationSuiteArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:ValidationSuite", name, None, opts)
        plan = args.plan
        child = pulumi.ResourceOptions(parent=self)

        self.namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata=plan.namespace["metadata"], opts=child)
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])
        cm = plan.configmap
        self.payloads = k8s.core.v1.ConfigMap(
            f"{name}-payloads", metadata=cm["metadata"], data=cm["data"], immutable=True, opts=in_ns
        )

        readers: list[pulumi.Resource] = []
        if plan.service_account is not None and plan.cluster_role is not None and plan.cluster_role_binding is not None:
            account = k8s.core.v1.ServiceAccount(
                f"{name}-node-reader",
                metadata=plan.service_account["metadata"],
                automount_service_account_token=plan.service_account["automountServiceAccountToken"],
                opts=in_ns,
            )
            role = k8s.rbac.v1.ClusterRole(
                f"{name}-node-reader-role",
                metadata=plan.cluster_role["metadata"],
                rules=plan.cluster_role["rules"],
                opts=child,
            )
            binding = k8s.rbac.v1.ClusterRoleBinding(
                f"{name}-node-reader-binding",
                metadata=plan.cluster_role_binding["metadata"],
                role_ref=plan.cluster_role_binding["roleRef"],
                subjects=plan.cluster_role_binding["subjects"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[role, account]),
            )
            readers = [account, role, binding]

        timeouts = pulumi.CustomTimeouts(create=f"{plan.timeout_seconds}s", update=f"{plan.timeout_seconds}s")
        self.jobs = {}
        for job in plan.jobs:
            deps: list[pulumi.Resource] = [self.namespace, self.payloads, *args.depends_on]
            if job.reads_nodes:
                deps += readers
            deps += [self.jobs[key] for key in job.after]
            if job.service is not None:
                deps.append(
                    k8s.core.v1.Service(
                        f"{name}-{job.key}-peers",
                        metadata=job.service["metadata"],
                        spec=job.service["spec"],
                        opts=in_ns,
                    )
                )
            manifest = job.manifest
            self.jobs[job.key] = k8s.batch.v1.Job(
                f"{name}-{job.key}",
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=deps,
                    # Same name after a failure (replaceUnready): the old Job must go first.
                    delete_before_replace=True,
                    custom_timeouts=timeouts,
                ),
            )
        # Plain names (fixed by the plan): an Output per Job would make the SDK's cycle check walk
        # each Job's whole dependency closure (every node, through the release): N^2 at scale.
        self.register_outputs({"namespace": plan.namespace["metadata"]["name"], "jobs": job_names(plan)})
