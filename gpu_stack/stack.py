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
from .helm_values import build_values
from .mig import NODE_LABEL as MIG_LABEL, MigConfig, build_mig
from .node_prep import node_commands
from .generated_limits import stack_problems
from .settings import Settings, SettingsError
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
    validation_plan = build_validation(settings, derived.sharing, derived.mig)
    # Generated objects Kubernetes would refuse (a ConfigMap over 1 MiB, two Jobs of one name):
    # refused here, before the first resource is registered.
    problems = stack_problems(settings, derived, validation_plan)
    if problems:
        raise pulumi.RunError(str(SettingsError(problems)))
    for advice in advisories(settings):
        pulumi.log.warn(advice)
    provider = k8s.Provider(
        "k8s",
        # A secret context (`pulumi config set --secret`) stays one in the provider's inputs.
        context=pulumi.Output.secret(settings.kubernetes.context)
        if settings.kubernetes.context is not None and settings.is_secret("kubernetes.context")
        else settings.kubernetes.context,
        # A kubeconfig may be the file's content, with credentials: always a Pulumi secret.
        kubeconfig=None if settings.kubernetes.kubeconfig is None else pulumi.Output.secret(settings.kubernetes.kubeconfig),
        enable_server_side_apply=True,
    )
    with_provider = pulumi.ResourceOptions(providers={"kubernetes": provider})

    prepared: list[pulumi.Resource] = []
    preflight: dict[str, Any] = {}
    if settings.host_managed and settings.ssh.private_key is not None:
        private_key = pulumi.Output.secret(settings.ssh.private_key.get_secret_value())
        commands = node_commands(settings)
        if commands:
            prep = NodePreparation("node-prep", NodePreparationArgs(commands=commands, private_key=private_key))
            prepared.extend(prep.commands.values())
            preflight.update(prep.preflight)

    labels = NodeLabels(
        "node-labels",
        NodeLabelsArgs(labels=derived.node_labels),
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
