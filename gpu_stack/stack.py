"""Compose the whole GPU platform from Settings: pure builders first, then thin components."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .alerts import build_alerts
from .capacity import capacity_table
from .config import advisories
from .components.node_labels import NodeLabels, NodeLabelsArgs
from .components.monitoring import GpuMonitoring, GpuMonitoringArgs
from .components.mig_rollout import MigRollout, MigRolloutArgs
from .components.node_preparation import NodePreparation, NodePreparationArgs
from .components.operator import GpuOperator, GpuOperatorArgs
from .components.validation import ValidationSuite, ValidationSuiteArgs
from .dashboard import build_dashboard
from .dcgm import DcgmMetricsConfig, build_dcgm
from .engine import OFFLINE_SSH_KEY, SSH_KEY_COMMAND, is_offline, missing_ssh_key_message
from .helm_values import build_values
from .mig import NODE_LABEL as MIG_LABEL, MigConfig, build_mig
from .mig_rollout import RolloutPlan, build_rollout
from .node_prep import node_commands
from .generated_limits import stack_problems
from .config import Settings, SettingsError
from .sharing import NODE_LABEL as SHARING_LABEL, SharingConfig, build_sharing
from .validation_jobs import build_validation, job_names


@dataclass(frozen=True)
class Derived:
    """Everything the pure core decides for one stack, before any resource exists."""

    sharing: SharingConfig
    mig: MigConfig
    dcgm: DcgmMetricsConfig
    values: dict[str, Any]
    node_labels: dict[str, dict[str, str]]
    rollout: RolloutPlan | None = None
    """The Job that sets each node's MIG label after draining it; None without MIG nodes."""

    @property
    def patched_labels(self) -> dict[str, dict[str, str]]:
        """The labels the NodePatch sets: all but the MIG config of the nodes the rollout Job
        relabels (a label set before the drain would reconfigure a busy node)."""
        rolled = {n.name for n in self.rollout.nodes} if self.rollout is not None else set()
        out: dict[str, dict[str, str]] = {}
        for node, labels in self.node_labels.items():
            kept = {k: v for k, v in labels.items() if not (k == MIG_LABEL and node in rolled)}
            if kept:
                out[node] = kept
        return out


def derive(settings: Settings) -> Derived:
    sharing = build_sharing(settings)
    mig = build_mig(settings)
    dcgm = build_dcgm(settings)
    labels: dict[str, dict[str, str]] = {}
    for node, key in sharing.node_labels.items():
        labels.setdefault(node, {})[SHARING_LABEL] = key
    for node, key in mig.node_labels.items():
        labels.setdefault(node, {})[MIG_LABEL] = key
    return Derived(
        sharing=sharing,
        mig=mig,
        dcgm=dcgm,
        values=build_values(settings, sharing, mig, dcgm),
        node_labels=labels,
        rollout=build_rollout(settings),
    )


def build_stack(settings: Settings) -> dict[str, Any]:
    """Register every resource of the stack; returns the stack outputs."""
    derived = derive(settings)
    validation_plan = build_validation(settings, derived.sharing, derived.mig)
    # Generated objects Kubernetes would refuse (a ConfigMap over 1 MiB, two Jobs of one name):
    # refused here, before the first resource is registered.
    problems = stack_problems(settings, derived, validation_plan)
    if problems:
        raise pulumi.RunError(str(SettingsError(problems)))
    # The SSH key first: without one (and nodes to prepare) `pulumi preview` stops here, with one
    # line and before anything is registered; the offline plan shows a placeholder instead.
    commands = node_commands(settings) if settings.host_managed else []
    private_key: pulumi.Output[str] | None = None
    if commands:
        if settings.ssh.private_key is not None:
            private_key = pulumi.Output.secret(settings.ssh.private_key.get_secret_value())
        elif is_offline():
            private_key = pulumi.Output.secret(OFFLINE_SSH_KEY)
            pulumi.log.warn(
                "gpu-stack:ssh.privateKey is not set: the node commands are planned with a placeholder key "
                f"([secret]); `pulumi up` needs the real one: {SSH_KEY_COMMAND}"
            )
        else:
            raise pulumi.RunError(missing_ssh_key_message())
    for advice in advisories(settings):
        pulumi.log.warn(advice)
    alerts, dashboard = build_alerts(settings), build_dashboard(settings)
    for warning in alerts.warnings:
        pulumi.log.warn(warning)
    provider = k8s.Provider(
        "k8s",
        # A secret context (`pulumi config set --secret`) stays one in the provider's inputs.
        context=pulumi.Output.secret(settings.kubernetes.context)
        if settings.kubernetes.context is not None and settings.is_secret("kubernetes.context")
        else settings.kubernetes.context,
        # A kubeconfig may be the file's content, with credentials: always a Pulumi secret. Unset,
        # "" keeps the SDK from copying $KUBECONFIG (a path that differs per machine) into the
        # inputs; the provider then loads $KUBECONFIG or ~/.kube/config itself.
        kubeconfig="" if settings.kubernetes.kubeconfig is None else pulumi.Output.secret(settings.kubernetes.kubeconfig),
        # The cluster's identity: the provider (and so every resource) is replaced only when this
        # changes, never because a kubeconfig or context differs between a laptop and CI.
        cluster_identifier=settings.kubernetes.cluster_identifier or f"{pulumi.get_project()}-{pulumi.get_stack()}",
        # The default, but pinned: the SDK would otherwise take PULUMI_K8S_ENABLE_SERVER_SIDE_APPLY
        # from the machine it runs on.
        enable_server_side_apply=True,
    )
    with_provider = pulumi.ResourceOptions(providers={"kubernetes": provider})

    prepared: list[pulumi.Resource] = []
    preflight: dict[str, Any] = {}
    if commands and private_key is not None:
        prep = NodePreparation("node-prep", NodePreparationArgs(commands=commands, private_key=private_key))
        prepared.extend(prep.commands.values())
        preflight.update(prep.preflight)

    labels = NodeLabels(
        "node-labels",
        NodeLabelsArgs(labels=derived.patched_labels, nodes=[n.name for n in settings.nodes]),
        opts=with_provider,
    )
    operator = GpuOperator(
        "gpu-operator",
        GpuOperatorArgs(
            operator=settings.operator,
            values=derived.values,
            sharing=derived.sharing,
            mig=derived.mig,
            dcgm=derived.dcgm,
            depends_on=[*prepared, *labels.patches],
        ),
        opts=with_provider,
    )

    if alerts.groups or dashboard.enabled:
        GpuMonitoring(
            "gpu-monitoring",
            GpuMonitoringArgs(namespace=settings.operator.namespace, alerts=alerts, dashboard=dashboard, depends_on=[operator.namespace]),
            opts=with_provider,
        )
    after_release: list[pulumi.Resource] = [operator.release]
    if derived.rollout is not None:
        rollout = MigRollout(
            "mig-rollout", MigRolloutArgs(plan=derived.rollout, depends_on=[operator.release]), opts=with_provider
        )
        # Validation of a reconfigured node runs after its rollout (which waits for the release).
        after_release = [rollout.job]

    validation_jobs: dict[str, Any] = {}
    if validation_plan is not None:
        ValidationSuite(
            "validation",
            # The release already waits for every node label and preparation: depending on it
            # alone orders the Jobs after them, without N edges per Job (N^2 for N nodes).
            ValidationSuiteArgs(plan=validation_plan, depends_on=after_release),
            opts=with_provider,
        )
        validation_jobs = job_names(validation_plan)

    return {
        "operatorNamespace": settings.operator.namespace,
        "releaseName": operator.release.name,
        "chartVersion": settings.operator.chart_version,
        "sharingConfigMap": derived.sharing.configmap_name,
        "migConfigMap": derived.mig.configmap_name,
        "nodeLabels": derived.node_labels,
        "capacity": capacity_table(settings),
        "validationJobs": validation_jobs,
        "nodePreflight": preflight,
        "alertRules": list(alerts.alerts),
        "dashboardConfigMap": dashboard.configmap_name if dashboard.enabled else None,
        "migRolloutJob": derived.rollout.job_name if derived.rollout is not None else None,
    }
