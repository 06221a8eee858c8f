"""The stack outputs: what each one says (OUTPUTS, the table docs/configuration.md shows) and the
values the design gives them. `stack_outputs()` returns them in the table's order; the three that
only registered resources know (the release's name, each node's preflight line, the sharing cost
read back after `up`) come from the program (components/stack.py), everything else from the
StackDesign."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .derive import StackDesign

OUTPUTS: dict[str, str] = {
    "operatorNamespace": "The GPU Operator's namespace (`operator.namespace`): its ConfigMaps, the alert rules and the dashboard live there too.",
    "releaseName": "The Helm release of the GPU Operator (`operator.releaseName`), as the provider reports it once the release exists.",
    "chartVersion": "The GPU Operator chart version installed (`operator.chartVersion`).",
    "sharingConfigMap": "The device plugin's sharing ConfigMap in the operator namespace (its name carries a hash of its content, so an edit rolls the device plugin); null without sharing.",
    "migConfigMap": "The custom mig-parted ConfigMap in the operator namespace; null when only the built-in MIG configs are used.",
    "nodeLabels": "Node -> the labels the stack decides for it (`nvidia.com/device-plugin.config`, `nvidia.com/mig.config`).",
    "capacity": "The capacity table: per node its GPUs, sharing profile, MIG config and the resources it advertises, then a TOTAL row.",
    "validationJobs": "Validation Job key (the check, with the node for a per-node check) -> the Kubernetes name of its Job in the validation namespace; empty when validation is off.",
    "nodePreflight": "Node -> its `GPU_STACK_PREFLIGHT {json}` line from its last preparation run (driver, GPUs, MIG mode, runtime, toolkit, OS); only nodes prepared over SSH.",
    "alertRules": "The names of the alerts in the stack's PrometheusRule; empty when alerts are off.",
    "dashboardConfigMap": "The Grafana dashboard's ConfigMap in the operator namespace; null when the dashboard is off.",
    "migRolloutJob": "The Job that drains each MIG node and sets its `nvidia.com/mig.config` label, wave by wave; null when no node has or may need a MIG config.",
    "sharingCost": "GPU model -> sharing mode -> what sharing cost (throughput and p99 against one pod alone), read back after `up` (`validation.sharingBenchmark`); null when the benchmark is off.",
}
"""Output key -> what it says, in the order the stack exports them."""
FROM_RESOURCES = ("releaseName", "nodePreflight", "sharingCost")
"""The outputs only registered resources know; the program passes them to stack_outputs()."""


def design_outputs(design: StackDesign) -> dict[str, Any]:
    """Every output but FROM_RESOURCES, from the design alone."""
    settings, dashboard, rollout = design.settings, design.dashboard, design.rollout
    return {
        "operatorNamespace": settings.operator.namespace,
        "chartVersion": settings.operator.chart_version,
        "sharingConfigMap": design.sharing.configmap_name,
        "migConfigMap": design.mig.configmap_name,
        "nodeLabels": design.node_labels,
        "capacity": design.capacity,
        "validationJobs": design.validation_jobs,
        "alertRules": list(design.alerts.alerts),
        "dashboardConfigMap": dashboard.configmap_name if dashboard.enabled else None,
        "migRolloutJob": rollout.job_name if rollout is not None else None,
    }


def stack_outputs(design: StackDesign, from_resources: dict[str, Any]) -> dict[str, Any]:
    """Every output, in OUTPUTS order: the design's and `from_resources` (the FROM_RESOURCES keys)."""
    if set(from_resources) != set(FROM_RESOURCES):
        raise ValueError(f"the program gives {sorted(from_resources)}, the table expects {sorted(FROM_RESOURCES)}")
    values = {**design_outputs(design), **from_resources}
    return {key: values[key] for key in OUTPUTS}
