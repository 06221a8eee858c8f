"""The GPU Operator: its namespace, the ConfigMaps it mounts and the Helm release, registered from
the design's OperatorPlan (gpu_stack/design/operator.py decides every object and input)."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pulumi
import pulumi_kubernetes as k8s

from ..config.chart_source import ChartSource
from ..design.helm_pending import RELEASE_RECORD_SELECTOR, pending_release_problem, record_store
from ..design.operator import OperatorPlan
from .kube_api import READ_FAILURES, connect, list_metadata
from .mig_guard import MigLayoutGuard, MigLayoutGuardArgs
from .node_labels import NodeLabelJob, NodeLabelJobArgs


@dataclass
class GpuOperatorArgs:
    plan: OperatorPlan
    """Every object and release input (derive()'s `operator`)."""
    chart: ChartSource
    """Where the chart comes from (chart_source.py): repository, registry or a local copy."""
    depends_on: Sequence[pulumi.Input[pulumi.Resource]] = ()
    """Resources the release must wait for (node preparation and its preflight check)."""
    label_after: Sequence[pulumi.Resource] = ()
    """What the label Job waits for besides the namespace (every node's read)."""


def refuse_pending_release(
    kubeconfig: str | None, context: str | None, plan: OperatorPlan,
    environ: Mapping[str, str] | None = None, now: float | None = None,
) -> None:
    """Fails `pulumi preview` and `up` in one line when Helm's newest record of the release is
    pending (an interrupted install or upgrade, or one still under way: design/helm_pending.py),
    before Helm fails with a message that names neither cause nor fix. The records are read where
    the provider's Helm keeps them (PULUMI_K8S_HELM_DRIVER: Secrets or ConfigMaps; nothing to read
    for `memory`; a warning for `sql`). A cluster this cannot read is only a warning: the provider
    then reports what is wrong with the connection. `kubeconfig` and `context` are the provider's
    (`kubernetes.kubeconfig`, `kubernetes.context`)."""
    name, namespace = str(plan.release["name"]), str(plan.release["namespace"])
    store = record_store(os.environ if environ is None else environ)
    if store.kind is None:
        if store.why_not is not None:
            pulumi.log.warn(f"could not check the Helm release {namespace}/{name} for an interrupted install or upgrade: {store.why_not}")
        return
    try:
        connection = connect(kubeconfig, context)
        records = list_metadata(
            connection, f"/api/v1/namespaces/{quote(namespace, safe='')}/{store.resource}", RELEASE_RECORD_SELECTOR.format(name=name)
        )
    except READ_FAILURES as exc:
        pulumi.log.warn(f"could not check the Helm release {namespace}/{name} for an interrupted install or upgrade: {exc}")
        return
    problem = pending_release_problem(
        records, name, namespace, timeout_seconds=int(plan.release["timeout"]),
        now=time.time() if now is None else now, kind=store.kind,
    )
    if problem is not None:
        raise pulumi.RunError(problem)


def mirror_pull_secret(name: str, manifest: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """The mirror login's pull Secret (design/images.py); its content stays a Pulumi secret."""
    return k8s.core.v1.Secret(
        name,
        metadata=manifest["metadata"],
        type=manifest["type"],
        string_data={key: pulumi.Output.secret(value) for key, value in manifest["stringData"].items()},
        opts=opts,
    )


class GpuOperator(pulumi.ComponentResource):
    namespace: k8s.core.v1.Namespace
    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: GpuOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:GpuOperator", name, None, opts)
        # Plain dicts for nested inputs (the same wire inputs as the *Args classes): the typed
        # classes would import pulumi_kubernetes.meta.v1, a large module, for three resources.
        plan = args.plan
        child = pulumi.ResourceOptions(parent=self)
        protected = pulumi.ResourceOptions(parent=self, protect=plan.protect)

        self.namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata=plan.namespace["metadata"], opts=protected)
        in_ns = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.namespace]))

        config_maps: list[pulumi.Resource] = []
        pull: list[pulumi.Resource] = []
        if plan.pull_secret is not None:
            pull.append(mirror_pull_secret(f"{name}-mirror-pull", plan.pull_secret, in_ns))
            config_maps.extend(pull)
        for suffix, cm in plan.config_maps:
            config_maps.append(
                k8s.core.v1.ConfigMap(f"{name}-{suffix}", metadata=cm["metadata"], data=cm["data"], immutable=cm["immutable"], opts=in_ns)
            )
        # A layout edited under a name nodes select is refused here, before the release restarts
        # the MIG manager with the new ConfigMap (see mig_guard.py).
        guards: list[pulumi.Resource] = []
        if plan.guard is not None:
            guard = MigLayoutGuard(
                f"{name}-mig-layout-guard",
                MigLayoutGuardArgs(plan=plan.guard, depends_on=[self.namespace, *config_maps]),
                opts=child,
            )
            guards.append(guard.job)

        # The nodes' labels (sharing profile) before the release: the device plugin reads its
        # node's label when it starts (and follows a later change of it).
        if plan.label_job is not None:
            labeller = NodeLabelJob(
                f"{name}-node-labels",
                NodeLabelJobArgs(plan=plan.label_job, depends_on=[self.namespace, *pull], job_after=args.label_after),
                opts=child,
            )
            guards.append(labeller.job)

        # A `.get` is a Read step: the engine runs it in preview and in up, before anything that
        # depends on it, and fails with "resource 'servicemonitors.monitoring.coreos.com' does not
        # exist" on this resource when the CRD is missing (pulumi-kubernetes answers a 404 with an
        # empty read). The release depends on it, so it is never installed into that cluster.
        required: list[pulumi.Resource] = []
        if plan.servicemonitor_crd is not None:
            from pulumi_kubernetes.apiextensions.v1 import CustomResourceDefinition

            required.append(CustomResourceDefinition.get(f"{name}-servicemonitor-crd", plan.servicemonitor_crd, opts=child))

        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            # A local chart gets no repository_opts: the provider then loads the path from disk.
            # Repository credentials stay Pulumi secrets: in the state, the plan and the diff.
            **args.chart.release_inputs(secret=pulumi.Output.secret),
            **plan.release,
            opts=pulumi.ResourceOptions(
                parent=self,
                protect=plan.protect,
                # A new release name or namespace replaces the Release; the provider would install
                # the new one first (create-before-delete), and Helm refuses to adopt the chart's
                # cluster-scoped objects the old release still owns: the old one goes first.
                delete_before_replace=True,
                depends_on=[self.namespace, *config_maps, *guards, *required, *args.depends_on],
                # No customTimeouts: helm.v3.Release ignores them; its `timeout` input above rules.
            ),
        )
        self.register_outputs({"namespace": plan.namespace_name, "release": self.release.status})
