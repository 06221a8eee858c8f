"""The validation suite: namespace, payload ConfigMap, node-reader RBAC, the sharing barrier
Service, and the Jobs (at most one per node; the cluster Jobs with their table ConfigMap).

Pulumi awaits every Job (no skipAwait): `pulumi up` finishes only when each Job completed, and
fails with the Job's pods' termination message (the payload's FAIL line) when one fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ..design.sharing_cost import ResultsError, cost_table, parse_results
from ..design.validation import ValidationPlan, job_names
from .jobs import JOB_REPLACEMENT
from .operator import mirror_pull_secret


@dataclass
class ValidationSuiteArgs:
    plan: ValidationPlan
    depends_on: Sequence[pulumi.Resource] = ()
    """What the Jobs must wait for: the operator release (which waits for the node labels)."""
    pull_secret: dict[str, Any] | None = None
    """The mirror login's pull Secret in the validation namespace (derive()'s
    `validation_pull_secret`), or None."""


def _cost_table(data: Mapping[str, str] | None) -> dict | None:
    """The `sharingCost` output from the collector's ConfigMap; a warning (not a failed `up`) when
    its lines are not the benchmark's."""
    try:
        return cost_table(parse_results((data or {}).get("results", "")))
    except ResultsError as exc:
        pulumi.log.warn(f"validation: the sharing-cost ConfigMap holds a line that is not the benchmark's: {exc}")
        return None


class ValidationSuite(pulumi.ComponentResource):
    namespace: k8s.core.v1.Namespace
    payloads: k8s.core.v1.ConfigMap
    jobs: dict[str, k8s.batch.v1.Job]
    sharing_cost: pulumi.Output[dict | None] | None
    """The sharing benchmark's cost table (stack output `sharingCost`); None when it is off."""

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

        barrier: k8s.core.v1.Service | None = None
        if plan.barrier_service is not None:
            # One Service for every sharing Job, named for good: a replicas edit replaces only Jobs.
            barrier = k8s.core.v1.Service(
                f"{name}-sharing-barrier",
                metadata=plan.barrier_service["metadata"],
                spec=plan.barrier_service["spec"],
                opts=in_ns,
            )

        collector: list[pulumi.Resource] = []
        if plan.collector is not None:
            c = plan.collector
            # Not `{name}-sharing-cost`: that is the collector Job's name, and one name for two
            # resources makes the plan, the diff and `pulumi preview` ambiguous (the alias keeps
            # a stack that has the account under the old name from replacing it).
            account = k8s.core.v1.ServiceAccount(
                f"{name}-sharing-cost-account",
                metadata=c["service_account"]["metadata"],
                automount_service_account_token=c["service_account"]["automountServiceAccountToken"],
                opts=pulumi.ResourceOptions.merge(in_ns, pulumi.ResourceOptions(aliases=[pulumi.Alias(name=f"{name}-sharing-cost")])),
            )
            cost_role = k8s.rbac.v1.Role(f"{name}-sharing-cost-role", metadata=c["role"]["metadata"], rules=c["role"]["rules"], opts=in_ns)
            cost_binding = k8s.rbac.v1.RoleBinding(
                f"{name}-sharing-cost-binding",
                metadata=c["role_binding"]["metadata"],
                role_ref=c["role_binding"]["roleRef"],
                subjects=c["role_binding"]["subjects"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[cost_role, account]),
            )
            collector = [account, cost_role, cost_binding]

        timeouts = pulumi.CustomTimeouts(create=f"{plan.timeout_seconds}s", update=f"{plan.timeout_seconds}s")
        base: list[pulumi.Resource] = [self.namespace, self.payloads, *args.depends_on]
        if args.pull_secret is not None:
            base.append(mirror_pull_secret(f"{name}-mirror-pull", args.pull_secret, in_ns))
        self.jobs = {}
        for job in plan.jobs:
            # A Job that waits for other Jobs depends on them alone: they already wait for the
            # namespace, the payloads and the release, and every direct dependency makes the SDK's
            # cycle check walk that dependency's whole closure (every node, through the release).
            deps: list[pulumi.Resource] = [self.jobs[key] for key in job.after] if job.after else list(base)
            if job.reads_nodes:
                deps += readers
            if job.collects:
                deps += collector
            if job.table is not None:
                deps.append(
                    k8s.core.v1.ConfigMap(
                        f"{name}-{job.key}-table",
                        metadata=job.table["metadata"],
                        data=job.table["data"],
                        immutable=True,
                        opts=in_ns,
                    )
                )
            if job.barrier and barrier is not None:
                deps.append(barrier)
            if job.claim_template is not None:
                # resource.k8s.io/v1 has no typed class in pulumi-kubernetes 4.25.0 (4.26.0 adds
                # them): an untyped object, applied by the provider like any served kind (docs/dra.md).
                template = job.claim_template
                deps.append(k8s.apiextensions.CustomResource(
                    f"{name}-{job.key}-claim-template",
                    api_version=template["apiVersion"],
                    kind=template["kind"],
                    metadata=template["metadata"],
                    spec=template["spec"],
                    opts=in_ns,
                ))
            manifest = job.manifest
            self.jobs[job.key] = k8s.batch.v1.Job(
                f"{name}-{job.key}",
                metadata=manifest["metadata"],
                spec=manifest["spec"],
                opts=pulumi.ResourceOptions(
                    parent=self,
                    depends_on=deps,
                    # Replaced on any change or init error, the old Job deleted first (jobs.py).
                    **JOB_REPLACEMENT,
                    # How long `pulumi up` awaits the Job: a little over activeDeadlineSeconds.
                    custom_timeouts=timeouts,
                ),
            )
        self.sharing_cost = None
        collecting = [self.jobs[j.key] for j in plan.jobs if j.collects]
        if plan.results_configmap is not None and collecting:
            # Read once the collector completed: the id comes from the Job's `status`, which only
            # the cluster gives (a previewed create returns the inputs, `metadata` included, but
            # no status), so a preview that (re)creates the collector reads nothing (the engine
            # skips a read whose id is unknown), and `up` reads what this run measured.
            where = f"{plan.namespace['metadata']['name']}/{plan.results_configmap}"
            results = k8s.core.v1.ConfigMap.get(
                f"{name}-sharing-cost-results",
                collecting[0].status.apply(lambda _: where),
                opts=pulumi.ResourceOptions(parent=self, depends_on=collecting),
            )
            self.sharing_cost = results.data.apply(_cost_table)
        for note in plan.notes:
            pulumi.log.warn(note)
        # Plain names (fixed by the plan): an Output per Job would make the SDK's cycle check walk
        # each Job's whole dependency closure (every node, through the release): N^2 at scale.
        self.register_outputs({"namespace": plan.namespace["metadata"]["name"], "jobs": job_names(plan)})
