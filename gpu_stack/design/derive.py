"""`derive(settings) -> StackDesign`: every decision of the stack, made once, with pure builders.

The order is the data flow: the shared facts first, each computed once here (the images mapped
to the mirror, the sharing profiles, the per-node facts: GPU, MIG layout, sharing profile,
physical and advertised capacity, MIG resource; the pull secrets; the DCGM configs with the
fields the exporter reports); then what is built on them (the sharing and MIG configs, the Helm
values, the DRA driver's release, node labels and the Job that sets them, node commands, capacity table,
validation plan, MIG rollout and layout guard, alerts and dashboard); then what is checked on the result (generated-limit problems) and
said about it (warnings). Each builder gets the parts of the settings it reads (`settings.mig`,
`settings.validation`, ...) and the facts it builds on, never the whole Settings, so none can
compute again what another derived (tests/design/test_derive_facts.py counts). stack.py only
turns a StackDesign into resources. No Pulumi here.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..config import Problem, Settings, advisories
from ..config.facts import all_profiles
from .alerts import AlertsConfig, build_alerts
from .capacity import NodeFacts, capacity_table, node_facts
from .dashboard import DashboardConfig, build_dashboard
from .dcgm import DcgmMetricsConfig, build_dcgm
from .dra import SWITCH_LABELS, DraPlan, build_dra, operator_validator_warning
from .dra_rollout import DraRolloutPlan, build_dra_rollout
from .driver import DriverFiles, build_driver_files
from .generated_limits import stack_problems
from .helm_values import build_values
from .images import (
    chart_image_values,
    docker_config_json,
    merge_values,
    mirrored_settings,
    pull_secret,
    pull_secret_names,
)
from .mig import NODE_LABEL as MIG_LABEL, MigConfig, build_mig
from .mig_guard import GuardPlan, build_guard
from .mig_rollout import RolloutPlan, build_rollout
from .monitoring import MonitoringPlan, build_monitoring
from .node_label_job import LabelJobPlan, build_label_job
from .node_prep import NodeCommand, node_commands, one_driver_os
from .operator import OperatorPlan, build_operator
from .sharing import NODE_LABEL as SHARING_LABEL, SharingConfig, build_sharing
from .validation import ValidationPlan, build_validation, job_names


@dataclass(frozen=True)
class StackDesign:
    """Everything the pure core decides for one stack, before any resource exists."""

    settings: Settings
    nodes: tuple[NodeFacts, ...]
    """Per-node facts, in `nodes` order."""
    sharing: SharingConfig
    mig: MigConfig
    dcgm: DcgmMetricsConfig
    driver_files: DriverFiles
    """The driver container's package sources and CA certificates (ConfigMaps), if any."""
    values: dict[str, Any]
    """The GPU Operator chart's values."""
    node_labels: dict[str, dict[str, str]]
    """Node -> every label the stack decides for it (sharing profile, MIG config)."""
    patched_labels: dict[str, dict[str, str]]
    """The labels the label Job sets: all but the MIG config of the nodes the rollout Job
    relabels (a label set before the drain would reconfigure a busy node)."""
    label_job: LabelJobPlan | None
    """The Job that sets `patched_labels` from one table (every node of the stack); None without nodes."""
    commands: tuple[NodeCommand, ...]
    """One node preparation command per node when the driver or toolkit lives on the host."""
    one_driver_os: bool
    """Whether the prepared nodes' preflight reports must name one OS (the operator's driver)."""
    capacity: list[dict[str, Any]]
    """The capacity table: one row per node, then the cluster total."""
    validation: ValidationPlan | None
    rollout: RolloutPlan | None
    """The Job that sets each node's MIG label after draining it; None without MIG nodes."""
    guard: GuardPlan | None
    """The Job that refuses a MIG layout edited under a name in use, before the release; None
    without custom MIG configs."""
    alerts: AlertsConfig
    dashboard: DashboardConfig
    operator: OperatorPlan
    """The GpuOperator component's objects: namespace, ConfigMaps, pull Secret, release inputs."""
    monitoring: MonitoringPlan | None
    """The GpuMonitoring component's objects; None without alert rules and dashboard."""
    problems: tuple[Problem, ...] = ()
    """Generated objects Kubernetes would refuse (a ConfigMap over 1 MiB, two Jobs of one name)."""
    warnings: tuple[str, ...] = field(default_factory=tuple)
    """What the config allows but weakens, and alerts that would get no data."""
    validation_pull_secret: dict[str, Any] | None = field(default=None, repr=False)
    """The mirror login's pull Secret in the validation namespace; None without a login or validation."""
    dra: DraPlan | None = None
    """NVIDIA's DRA driver release and the DRA nodes (design/dra.py); None when no node uses DRA."""
    dra_rollout: DraRolloutPlan | None = None
    """The Job that moves nodes between the device plugin and DRA in drained waves, switching their
    allocation labels (design/dra_rollout.py); None when DRA is not in play."""

    @property
    def validation_jobs(self) -> dict[str, str]:
        """Job key -> Kubernetes name of every validation Job."""
        return job_names(self.validation) if self.validation is not None else {}


def _labels(sharing: SharingConfig, mig: MigConfig, dra: DraPlan | None) -> dict[str, dict[str, str]]:
    labels: dict[str, dict[str, str]] = {}
    for node, key in sharing.node_labels.items():
        labels.setdefault(node, {})[SHARING_LABEL] = key
    for node, key in mig.node_labels.items():
        labels.setdefault(node, {})[MIG_LABEL] = key
    for node, own in (dra.node_labels if dra is not None else {}).items():
        labels.setdefault(node, {}).update(own)
    return labels


def _patched(labels: dict[str, dict[str, str]], rolled: set[str], switched: frozenset[str] = frozenset()) -> dict[str, dict[str, str]]:
    """The labels the label Job sets: all but the MIG config of the nodes the MIG rollout relabels
    (`rolled`) and the allocation switch of the nodes the DRA rollout moves (`switched`)."""
    out: dict[str, dict[str, str]] = {}
    for node, node_labels in labels.items():
        kept = {
            k: v for k, v in node_labels.items()
            if not (k == MIG_LABEL and node in rolled) and not (k in SWITCH_LABELS and node in switched)
        }
        if kept:
            out[node] = kept
    return out


def derive(settings: Settings) -> StackDesign:
    """Every decision for `settings`, each made once."""
    # Images first: every builder below reads the validation and rollout images already mirrored.
    settings = mirrored_settings(settings)
    profiles = all_profiles(settings)
    nodes = node_facts(settings, profiles)
    secrets = pull_secret_names(settings.images)
    dcgm = build_dcgm(settings.dcgm_exporter)
    driver_files = build_driver_files(settings.driver)
    sharing = build_sharing(profiles, settings.mig.strategy, nodes)
    mig = build_mig(settings.mig, nodes)
    op_ns, ttl = settings.operator.namespace, settings.validation.ttl_seconds_after_finished
    dra = build_dra(
        settings.dra, nodes, namespace=op_ns, host_driver=settings.driver.placement == "host",
        images=settings.images, pull_secrets=secrets,
    )
    labels = _labels(sharing, mig, dra)
    rollout = build_rollout(settings.mig, nodes, mig, namespace=op_ns, ttl=ttl, pull_secrets=secrets)
    rolled = [n.name for n in rollout.nodes] if rollout is not None else []
    validation = build_validation(
        settings.validation, nodes, sharing, mig, dcgm,
        pull_secrets=secrets, mig_strategy=settings.mig.strategy, driver=settings.driver, toolkit=settings.toolkit,
        operator=settings.operator, exporter=settings.dcgm_exporter,
    )
    alerts = build_alerts(settings.alerts, settings.dcgm_exporter, dcgm.fields, nodes, mig_manager=settings.mig.manager.enabled)
    values = build_values(
        sharing, mig, dcgm,
        operator_settings=settings.operator, driver_settings=settings.driver, toolkit_settings=settings.toolkit,
        mig_settings=settings.mig, exporter=settings.dcgm_exporter,
        runtime=settings.nodes[0].runtime if settings.nodes else None, driver_files=driver_files,
    )
    dra_rollout = build_dra_rollout(settings.dra.rollout, nodes, dra, namespace=op_ns, ttl=ttl, pull_secrets=secrets)
    # The allocation switch of a node the DRA rollout moves is its Job's, after the drain.
    patched = _patched(labels, set(rolled), frozenset(dra_rollout.nodes) if dra_rollout is not None else frozenset())
    dashboard = build_dashboard(settings.alerts.dashboard, settings.dcgm_exporter, dcgm.fields)
    values = merge_values(values, chart_image_values(settings.images, secrets))
    guard = build_guard(settings.mig, mig, rolled, namespace=op_ns, ttl=ttl, pull_secrets=secrets)
    label_job = build_label_job(
        [n.name for n in settings.nodes], patched, namespace=op_ns, image=settings.mig.rollout.image,
        ttl=ttl, pull_secrets=secrets,
    )
    login = docker_config_json(settings)
    operator = build_operator(
        settings.operator, values, sharing, mig, dcgm, guard, pull_secret(login, op_ns), label_job, driver_files,
    )
    design = StackDesign(
        settings=settings,
        nodes=nodes,
        sharing=sharing,
        mig=mig,
        dcgm=dcgm,
        driver_files=driver_files,
        values=values,
        node_labels=labels,
        patched_labels=patched,
        label_job=label_job,
        commands=tuple(node_commands(nodes, settings.toolkit, settings.driver, settings.ssh)),
        one_driver_os=one_driver_os(settings.driver),
        capacity=capacity_table(nodes),
        validation=validation,
        rollout=rollout,
        guard=guard,
        alerts=alerts,
        dashboard=dashboard,
        operator=operator,
        monitoring=build_monitoring(op_ns, alerts, dashboard),
        warnings=(
            *advisories(settings), *alerts.warnings,
            *(dra.workload_changes if dra is not None else ()), *operator_validator_warning(nodes),
        ),
        validation_pull_secret=pull_secret(login, validation.namespace["metadata"]["name"]) if validation is not None else None,
        dra=dra,
        dra_rollout=dra_rollout,
    )
    problems = stack_problems(op_ns, design)
    return replace(design, problems=tuple(problems)) if problems else design
