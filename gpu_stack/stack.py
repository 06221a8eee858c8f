"""Compose the whole GPU platform from Settings: pure builders first, then thin components."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from .capacity import capacity_table
from .checks import advisories
from .components.node_labels import NodeLabels, NodeLabelsArgs
from .components.node_preparation import NodePreparation, NodePreparationArgs
from .components.operator import GpuOperator, GpuOperatorArgs
from .components.validation import ValidationSuite, ValidationSuiteArgs
from .dcgm import DcgmMetricsConfig, build_dcgm
from .engine import OFFLINE_SSH_KEY, SSH_KEY_COMMAND, is_offline, missing_ssh_key_message
from .helm_values import build_values
from .mig import NODE_LABEL as MIG_LABEL, MigConfig, build_mig
from .node_prep import node_commands
from .settings import Settings
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
    )


def build_stack(settings: Settings) -> dict[str, Any]:
    """Register every resource of the stack; returns the stack outputs."""
    derived = derive(settings)
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
    provider = k8s.Provider(
        "k8s",
        context=settings.kubernetes.context,
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
        NodeLabelsArgs(labels=derived.node_labels, nodes=[n.name for n in settings.nodes]),
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

    validation_jobs: dict[str, Any] = {}
    validation_plan = build_validation(settings, derived.sharing, derived.mig)
    if validation_plan is not None:
        ValidationSuite(
            "validation",
            # The release already waits for every node label and preparation: depending on it
            # alone orders the Jobs after them, without N edges per Job (N^2 for N nodes).
            ValidationSuiteArgs(plan=validation_plan, depends_on=[operator.release]),
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
    }
