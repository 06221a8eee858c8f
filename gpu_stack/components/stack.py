"""Compose the whole GPU platform: derive the StackDesign (design/derive.py), then turn it into
resources through the thin components, under one parent (platform.py's GpuPlatform). No decision
is made here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ..config import Problem, Settings, SettingsError, config_key
from ..config.chart_source import ChartSource, chart_source, local_chart_problems, resolve_local
from ..config.dra import DRA_CHART
from ..config.pulumi_config import project_dir
from ..design.derive import StackDesign, derive
from ..design.outputs import stack_outputs
from .dra import DraDriver, DraDriverArgs
from .dra_rollout import DraRollout, DraRolloutArgs
from .engine import (
    OFFLINE_SSH_KEY,
    SSH_KEY_COMMAND,
    is_offline,
    missing_ssh_key_message,
    ssh_agent_problem,
    stale_agent_problem,
)
from .mig_rollout import MigRollout, MigRolloutArgs
from .monitoring import GpuMonitoring, GpuMonitoringArgs, refuse_missing_crds
from .node_labels import NodeLabels, NodeLabelsArgs
from .node_preparation import NodePreparation, NodePreparationArgs
from .operator import GpuOperator, GpuOperatorArgs, refuse_pending_release
from .program import trim_stack_traces
from .validation import ValidationSuite, ValidationSuiteArgs


@dataclass(frozen=True)
class Checked:
    """What `check_stack` found before anything is registered: the design, the chart, the key."""

    design: StackDesign
    chart: ChartSource
    private_key: pulumi.Output[str] | None


def check_stack(settings: Settings) -> Checked:
    """Every check that stops `pulumi preview` before the first resource is registered (the
    GpuPlatform component included): the design's problems, the chart source, the SSH key and
    agent; raises pulumi.RunError with the one-line problems."""
    # Each resource's stack trace in the state: the program's frames only (program.py).
    trim_stack_traces()
    design = derive(settings)
    # A local chart that is missing or is not this chart is refused with the generated objects
    # Kubernetes would refuse (a ConfigMap over 1 MiB, two Jobs of one name): before the first
    # resource is registered.
    chart, chart_problems = chart_source(settings.operator, project_dir())
    if design.dra is not None and design.dra.chart_path is not None:
        # The DRA driver's local chart, checked as the operator's is (it has no subchart).
        local = resolve_local(design.dra.chart_path, project_dir())
        chart_problems += [
            Problem(key=config_key(("dra", "chartPath")), value=design.dra.chart_path, message=m)
            for m in local_chart_problems(local, design.dra.version, name=DRA_CHART, subchart=None)
        ]
    if design.problems or chart_problems:
        raise pulumi.RunError(str(SettingsError([*chart_problems, *design.problems])))
    # The SSH key first: without one (and nodes to prepare) `pulumi preview` stops here, with one
    # line and before anything is registered; the offline plan shows a placeholder instead.
    commands = list(design.commands)
    private_key: pulumi.Output[str] | None = None
    agent = settings.ssh.agent_socket_path
    if commands and agent is not None:
        # The agent's keys instead of a key: nothing secret in the connection.
        problem = None if is_offline() else ssh_agent_problem(agent)
        if problem is not None:
            raise pulumi.RunError(problem)
    elif commands:
        if settings.ssh.private_key is not None:
            # The provider also dials SSH_AUTH_SOCK beside the key: a dead agent fails every node.
            problem = None if is_offline() else stale_agent_problem()
            if problem is not None:
                raise pulumi.RunError(problem)
            private_key = pulumi.Output.secret(settings.ssh.private_key.get_secret_value())
        elif is_offline():
            private_key = pulumi.Output.secret(OFFLINE_SSH_KEY)
            pulumi.log.warn(
                "gpu-stack:ssh.privateKey is not set: the node commands are planned with a placeholder key "
                f"([secret]); `pulumi up` needs the real one: {SSH_KEY_COMMAND}"
            )
        else:
            raise pulumi.RunError(missing_ssh_key_message())
    for warning in design.warnings:
        pulumi.log.warn(warning)
    return Checked(design, chart, private_key)


def build_stack(
    settings: Settings, parent: pulumi.Resource | None = None, provider: k8s.Provider | None = None,
    checked: Checked | None = None,
) -> dict[str, Any]:
    """Register every resource of the stack, under `parent` (the GpuPlatform; None: the stack
    itself), with `provider` for every Kubernetes resource (None: one of its own, from
    `kubernetes.*`); returns the stack outputs (design/outputs.py's OUTPUTS). `checked`:
    check_stack's result where the caller ran it already (before registering a parent)."""
    checked = checked or check_stack(settings)
    design, chart, private_key = checked.design, checked.chart, checked.private_key
    commands = list(design.commands)
    agent = settings.ssh.agent_socket_path
    # Stacks made before the GpuPlatform keep every resource: each child was a child of the stack.
    # A provider of the caller's: its connection is not ours to read (the pending-release check is off).
    callers_provider = provider is not None
    moved = pulumi.ResourceOptions(
        parent=parent, aliases=[pulumi.Alias(parent=pulumi.ROOT_STACK_RESOURCE)] if parent is not None else None,
    )
    provider = provider or k8s.Provider(
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
        opts=moved,
    )
    with_provider = pulumi.ResourceOptions.merge(moved, pulumi.ResourceOptions(providers={"kubernetes": provider}))

    prepared: list[pulumi.Input[pulumi.Resource]] = []
    preflight: dict[str, Any] = {}
    if commands:
        prep = NodePreparation(
            "node-prep",
            NodePreparationArgs(
                commands=commands, private_key=private_key, agent_socket_path=agent,
                one_driver_os=design.one_driver_os,
            ),
            opts=moved,
        )
        # Every command, and the check that their preflight reports name one OS where it matters.
        prepared.extend(prep.ready)
        preflight.update(prep.preflight)

    if not is_offline() and not callers_provider:
        refuse_pending_release(settings.kubernetes.kubeconfig, settings.kubernetes.context, design.operator)
        crds = [design.operator.servicemonitor_crd, design.monitoring.rule_crd if design.monitoring else None]
        refuse_missing_crds(settings.kubernetes.kubeconfig, settings.kubernetes.context, [c for c in crds if c])
    reads = NodeLabels("node-labels", NodeLabelsArgs(nodes=[n.name for n in settings.nodes]), opts=with_provider)
    operator = GpuOperator(
        "gpu-operator",
        GpuOperatorArgs(
            plan=design.operator, chart=chart, depends_on=prepared, label_after=list(reads.nodes.values()),
        ),
        opts=with_provider,
    )

    if design.monitoring is not None:
        GpuMonitoring(
            "gpu-monitoring",
            GpuMonitoringArgs(plan=design.monitoring, depends_on=[operator.namespace]),
            opts=with_provider,
        )
    after_release: list[pulumi.Resource] = [operator.release]
    if design.rollout is not None:
        rollout = MigRollout(
            "mig-rollout", MigRolloutArgs(plan=design.rollout, depends_on=[operator.release]), opts=with_provider
        )
        # Validation of a reconfigured node runs after its rollout (which waits for the release).
        after_release = [rollout.job]
    if design.dra is not None:
        # NVIDIA's DRA driver, only when a node uses DRA: after the operator's release (the driver
        # and toolkit its kubelet plugin uses).
        local = design.dra.chart_path
        dra = DraDriver(
            "dra-driver",
            DraDriverArgs(
                plan=design.dra, chart=str(resolve_local(local, project_dir())) if local is not None else design.dra.chart,
                depends_on=[operator.release],
            ),
            opts=with_provider,
        )
        after_release = [*after_release, dra.release]
    if design.dra_rollout is not None:
        # The drained waves between the device plugin and DRA: after the driver's release and the
        # MIG rollout (both cordon and drain nodes); the validation after it.
        migration = DraRollout("dra-rollout", DraRolloutArgs(plan=design.dra_rollout, depends_on=after_release), opts=with_provider)
        after_release = [migration.job]

    sharing_cost = None
    if design.validation is not None:
        suite = ValidationSuite(
            "validation",
            # The release already waits for every node label and preparation: depending on it
            # alone orders the Jobs after them, without N edges per Job (N^2 for N nodes).
            ValidationSuiteArgs(plan=design.validation, depends_on=after_release, pull_secret=design.validation_pull_secret),
            opts=with_provider,
        )
        sharing_cost = suite.sharing_cost

    # The outputs (design/outputs.py describes each): the design's and what only the resources know.
    return stack_outputs(
        design,
        {
            "releaseName": operator.release.name,
            "nodePreflight": preflight,
            # What sharing cost on each GPU model (validation.sharingBenchmark); None when it is off.
            "sharingCost": sharing_cost,
        },
    )
