"""The sharing checks: every node's advertised capacity (one cluster Job reading the API), and
R x G pods sharing one node's GPUs at once (one Job per sampled shared node, met at a barrier)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..capacity import NodeFacts
from .manifests import (
    BARRIER_LABEL,
    BARRIER_SERVICE,
    SMALL,
    JobContext,
    ValidationJob,
    cluster_job,
    container_spec,
    job_labels,
    job_manifest,
    job_name,
    payload_deadline,
    pod_spec,
)


def shared_resource(facts: NodeFacts) -> str:
    """The resource the sharing pods request: one the profile really shares (more than physical),
    the node's MIG resource first when it is shared (so the pods prove the MIG device too)."""
    physical, capacity, mig_device = facts.physical, facts.advertised, facts.mig_resource
    shared = {r for r, n in capacity.items() if r.endswith(".shared") or n != physical.get(r)}
    candidates = ([mig_device, f"{mig_device}.shared"] if mig_device else []) + ["nvidia.com/gpu.shared", "nvidia.com/gpu"]
    for name in candidates:
        if name in shared:
            return name
    return sorted(shared or capacity)[0]


def capacity_expected(nodes: Sequence[NodeFacts]) -> dict[str, dict[str, int]]:
    """Node -> what it must advertise, for every node (shared, MIG or whole GPUs)."""
    return {f.name: f.advertised for f in nodes if f.advertised}


def sharing_capacity(ctx: JobContext, configmap: str, table: dict[str, dict[str, int]]) -> ValidationJob | None:
    """One Job reading every node's advertised capacity through the API (the key keeps its name)."""
    if not table:
        return None
    validates = {"check": "sharing-capacity", "capacity": table, "image": ctx.validation.images.kubectl}
    lines = [f"{node} " + " ".join(f"{r}={n}" for r, n in sorted(cap.items())) for node, cap in table.items()]
    return cluster_job(ctx, configmap, "sharing-capacity", "node-capacity.sh", validates, lines)


def sharing_pods(
    ctx: JobContext,
    facts: NodeFacts,
    resource: str,
    configmap: str,
    files: dict[str, Any],
    after: tuple[str, ...],
    pods_cap: int | None = None,
    *,
    mig_strategy: str,
) -> ValidationJob:
    """`resource`: the node's `shared_resource` (the plan computes it once per node)."""
    v = ctx.validation
    node, key, capacity, mig_device = facts.node, facts.profile_key, facts.advertised, facts.mig_resource
    assert key is not None
    proves_mig = mig_device is not None and resource.removesuffix(".shared") == mig_device
    pods = min(capacity[resource], v.max_sharing_pods, pods_cap or capacity[resource])
    validates = {
        "check": "sharing",
        "node": node.name,
        "profile": key,
        "deviceplugin": files[key],
        "capacity": capacity,
        "resource": resource,
        "pods": pods,
        "image": v.images.cuda,
    }
    env: dict[str, Any] = {
        "PEERS": pods,
        "PEER_DOMAIN": BARRIER_SERVICE,
        "BARRIER_SECONDS": payload_deadline(v.timeout_seconds),
        "WORKLOAD": "/cuda-samples/vectorAdd",
    }
    if proves_mig:
        validates["mig"] = {"config": node.mig, "strategy": mig_strategy}
        env["EXPECTED_MIG_DEVICES"] = 1
    name = job_name("sharing-pods", validates, node.name)
    container = container_spec(
        "sharing-pods",
        v.images.cuda,
        "shared-gpu.sh",
        {"PEER_PREFIX": name, **env},
        resources=SMALL | {"limits": {"cpu": "500m", "memory": "512Mi"}},
        gpu=resource,
        field_env={"NODE_NAME": "spec.nodeName"},
    )
    pod = pod_spec(configmap, container, node=node.name, subdomain=BARRIER_SERVICE)
    return ValidationJob(
        key=f"sharing-pods-{node.name}",
        check="sharing-pods",
        node=node.name,
        manifest=job_manifest(
            ctx, name, "sharing-pods", node.name, pod, indexed=pods, pod_labels={BARRIER_LABEL: BARRIER_SERVICE}
        ),
        gpu_resource=resource,
        validates=validates,
        after=after,
        barrier=True,
        pods=pods,
    )


def barrier_service(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": BARRIER_SERVICE,
            "namespace": namespace,
            "labels": job_labels("sharing-pods", None),
            # Headless, no endpoints until sharing pods run: nothing for Pulumi to wait for.
            "annotations": {"pulumi.com/skipAwait": "true"},
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {BARRIER_LABEL: BARRIER_SERVICE},
            "ports": [{"name": "peer", "port": 9, "protocol": "TCP"}],
        },
    }
