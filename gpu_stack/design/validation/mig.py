"""The MIG checks: every MIG node reaches nvidia.com/mig.config.state=success (one cluster Job),
and a pod requesting a node's MIG resource sees one MIG device. Both read the node facts and the
derived mig-parted document, and the MIG strategy."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...config.nodes import NodeSettings
from ..capacity import NodeFacts
from .manifests import SMALL, JobContext, ValidationJob, cluster_job, container_spec, job_manifest, job_name, pod_spec


def _mig_validates(strategy: str, node: NodeSettings, document: dict[str, Any]) -> dict[str, Any]:
    return {
        "config": node.mig,
        "parted": (document.get("mig-configs") or {}).get(node.mig),
        "strategy": strategy,
    }


def mig_state_job(
    ctx: JobContext, configmap: str, document: dict[str, Any], mig_nodes: Sequence[NodeFacts], strategy: str
) -> ValidationJob | None:
    """`mig_nodes`: the facts of the nodes with a MIG config, in `nodes` order."""
    nodes = [f.node for f in mig_nodes]
    if not nodes:
        return None
    validates = {
        "check": "mig-state",
        "nodes": {n.name: _mig_validates(strategy, n, document) for n in nodes},
        "image": ctx.validation.images.kubectl,
    }
    lines = [f"{n.name} {n.mig}" for n in nodes]
    return cluster_job(ctx, configmap, "mig-state", "mig-state.sh", validates, lines)


def mig_device_job(
    ctx: JobContext, node: NodeSettings, configmap: str, document: dict[str, Any], resource: str, strategy: str
) -> ValidationJob:
    v = ctx.validation
    validates = {
        "check": "mig-device",
        "node": node.name,
        **_mig_validates(strategy, node, document),
        "resource": resource,
        "image": v.images.toolbox,
    }
    name = job_name("mig-device", validates, node.name)
    container = container_spec(
        "mig-device", v.images.toolbox, "gpu-devices.sh", {"EXPECTED_MIG_DEVICES": 1}, resources=SMALL, gpu=resource
    )
    return ValidationJob(
        key=f"mig-device-{node.name}",
        check="mig-device",
        node=node.name,
        manifest=job_manifest(ctx, name, "mig-device", node.name, pod_spec(configmap, container, node=node.name)),
        gpu_resource=resource,
        validates=validates,
        # A pod requesting a MIG resource is unschedulable until mig-manager succeeded: the cluster
        # state Job (which fails at once on `failed`) goes first, so a failure says why.
        after=("mig-state",),
    )
