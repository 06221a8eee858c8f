"""The cuda-smoke check: one pod, one GPU, NVIDIA's vectorAdd sample must print "Test PASSED"."""

from __future__ import annotations

from collections.abc import Sequence

from ...config.cluster import DriverSettings, OperatorSettings, ToolkitSettings
from ..capacity import NodeFacts
from .manifests import CUDA, JobContext, ValidationJob, container_spec, job_manifest, job_name, pod_spec


def _cuda_resource(nodes: Sequence[NodeFacts]) -> str:
    """The resource a plain one-GPU pod asks for: nvidia.com/gpu unless every node renames it."""
    advertised = {r for f in nodes for r in f.advertised}
    if not advertised or "nvidia.com/gpu" in advertised:
        return "nvidia.com/gpu"
    return sorted(advertised)[0]


DRIVER_SOURCES = ("use_precompiled", "repo_config", "cert_config")
"""Recorded only when set: a stack that sets none of them keeps its smoke Job's name."""


def driver_record(driver: DriverSettings) -> dict[str, object]:
    """The driver settings the smoke Job validates (a change of them re-runs it)."""
    record = driver.model_dump(mode="json")
    for key in DRIVER_SOURCES:
        if not record.get(key):
            record.pop(key, None)
    return record


def cuda_smoke(
    ctx: JobContext,
    configmap: str,
    nodes: Sequence[NodeFacts],
    on: NodeFacts | None = None,
    *,
    driver: DriverSettings,
    toolkit: ToolkitSettings,
    operator: OperatorSettings,
) -> ValidationJob:
    """The smoke Job; `on` pins its pod to that node (the free-capacity gate then counts its GPU and
    the Job waits for the gate), else the scheduler picks any node with the resource."""
    resource = _cuda_resource([on] if on is not None else nodes)
    node = on.name if on is not None else None
    validates = {
        "check": "cuda-smoke",
        "image": ctx.validation.images.cuda,
        "resource": resource,
        "driver": driver_record(driver),
        "toolkit": toolkit.model_dump(mode="json"),
        "chart": operator.chart_version,
    }
    if node is not None:
        validates["node"] = node
    name = job_name("cuda-smoke", validates)
    container = container_spec(
        "cuda-smoke", ctx.validation.images.cuda, "cuda-smoke.sh", {"EXPECTED_GPUS": 1}, resources=CUDA, gpu=resource
    )
    pod = pod_spec(configmap, container, node=node)
    return ValidationJob(
        key="cuda-smoke",
        check="cuda-smoke",
        node=node,
        manifest=job_manifest(ctx, name, "cuda-smoke", node, pod, backoff_limit=1),
        gpu_resource=resource,
        validates=validates,
        after=("free-capacity",) if node is not None else (),
    )
