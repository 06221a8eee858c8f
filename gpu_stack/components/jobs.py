"""How every Job of the stack is replaced (the validation Jobs and the MIG rollout Job).

- `replace_on_changes=["*"]`: any input change replaces the Job, and so does an init error (a
  create that failed, or an `up` interrupted while the Job ran): the engine's
  `applyReplaceOnChanges` (pulumi/pulumi pkg/resource/deploy/step_generator.go) turns the init
  error into a replacement only when a replaceOnChanges path covers it (`*` does). Without it the
  engine retries the failed create as an in-place update, and the provider's update first reads
  the live Job: once the Job's TTL removed it, every later preview and `up` fails ("unable to get
  cluster state", tests/design/test_mig_rollout.py pins the option).
- `delete_before_replace=True`: a replacement for an init error keeps the Job's name, and the
  provider asks for delete-first only when one of its own replace keys changed (provider.go,
  `deleteBeforeReplace := len(replaces) > 0 && ...`), not for the engine's init-error or
  replaceOnChanges replacements. Created first, the new Job meets the old one of the same name:
  pulumi-kubernetes 4.29+ (client-side create) answers AlreadyExists; 4.25 with server-side apply
  patches the old Job (upsert) and then the old resource's delete removes the very Job the new
  resource points at. Deleting first avoids both; a Job holds no state worth keeping.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

JOB_REPLACEMENT: dict[str, Any] = {"replace_on_changes": ["*"], "delete_before_replace": True}
"""Keyword arguments of `pulumi.ResourceOptions` for every Job."""


def kubectl_job(
    owner: pulumi.ComponentResource,
    name: str,
    plan: Any,
    depends_on: Sequence[pulumi.Resource],
    config_maps: Mapping[str, dict[str, Any]] = {},
    job_after: Sequence[pulumi.Resource] = (),
) -> k8s.batch.v1.Job:
    """A Job that talks to the API with its own ServiceAccount (the MIG rollout, the layout
    guard, the node labels): the account, its ClusterRole and Role (where `plan.role` is not None)
    with their bindings, the script ConfigMap and
    `config_maps` (name suffix -> manifest), then the Job, which waits for all of them. `plan`
    holds the manifests (service_account, cluster_role(_binding), role(_binding), script, job) and
    `timeout_seconds`; `depends_on` is what the namespaced objects and the Job wait for, `job_after`
    what the Job alone waits for (each dependency is a URN in the state of every resource that
    has it: one per node for the node reads)."""
    in_ns = pulumi.ResourceOptions(parent=owner, depends_on=list(depends_on))
    account = k8s.core.v1.ServiceAccount(
        f"{name}-account",
        metadata=plan.service_account["metadata"],
        automount_service_account_token=plan.service_account["automountServiceAccountToken"],
        opts=in_ns,
    )
    cluster_role = k8s.rbac.v1.ClusterRole(
        f"{name}-cluster-role", metadata=plan.cluster_role["metadata"], rules=plan.cluster_role["rules"],
        opts=pulumi.ResourceOptions(parent=owner),
    )
    cluster_binding = k8s.rbac.v1.ClusterRoleBinding(
        f"{name}-cluster-role-binding",
        metadata=plan.cluster_role_binding["metadata"],
        role_ref=plan.cluster_role_binding["roleRef"],
        subjects=plan.cluster_role_binding["subjects"],
        opts=pulumi.ResourceOptions(parent=owner, depends_on=[cluster_role, account]),
    )
    bindings: list[pulumi.Resource] = [cluster_binding]
    if plan.role is not None:
        role = k8s.rbac.v1.Role(f"{name}-role", metadata=plan.role["metadata"], rules=plan.role["rules"], opts=in_ns)
        bindings.append(k8s.rbac.v1.RoleBinding(
            f"{name}-role-binding",
            metadata=plan.role_binding["metadata"],
            role_ref=plan.role_binding["roleRef"],
            subjects=plan.role_binding["subjects"],
            opts=pulumi.ResourceOptions(parent=owner, depends_on=[role, account]),
        ))
    maps = [
        k8s.core.v1.ConfigMap(f"{name}-{suffix}", metadata=cm["metadata"], data=cm["data"], immutable=True, opts=in_ns)
        for suffix, cm in {"script": plan.script, **config_maps}.items()
    ]
    timeouts = pulumi.CustomTimeouts(create=f"{plan.timeout_seconds}s", update=f"{plan.timeout_seconds}s")
    return k8s.batch.v1.Job(
        f"{name}-job",
        metadata=plan.job["metadata"],
        spec=plan.job["spec"],
        opts=pulumi.ResourceOptions(
            parent=owner,
            depends_on=[*depends_on, *job_after, *bindings, *maps],
            # any change, and a failed or interrupted create (its init error), replaces the Job,
            # deleting the old one first (JOB_REPLACEMENT above)
            **JOB_REPLACEMENT,
            custom_timeouts=timeouts,
        ),
    )
