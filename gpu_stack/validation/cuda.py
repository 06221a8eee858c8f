"""The cuda-smoke check: one pod, one GPU, NVIDIA's vectorAdd sample must print "Test PASSED"."""

from __future__ import annotations

from typing import Sequence

from ..capacity import NodeFacts
from ..config.root import Settings
from .manifests import CUDA, ValidationJob, container_spec, job_manifest, job_name, pod_spec


def _cuda_resource(nodes: Sequence[NodeFacts]) -> str:
    """The resource a plain one-GPU pod asks for: nvidia.com/gpu unless every node renames it."""
    advertised = {r for f in nodes for r in f.advertised}
    if not advertised or "nvidia.com/gpu" in advertised:
        return "nvidia.com/gpu"
    return sorted(advertised)[0]


def cuda_smoke(settings: Settings, configmap: str, nodes: Sequence[NodeFacts]) -> ValidationJob:
    resource = _cuda_resource(nodes)
    validates = {
        "check": "cuda-smoke",
        "image": settings.validation.images.cuda,
        "resource": resource,
        "driver": settings.driver.model_dump(mode="json"),
        "toolkit": settings.toolkit.model_dump(mode="json"),
        "chart": settings.operator.chart_version,
    }
    name = job_name("cuda-smoke", validates)
    container = container_spec(
        "cuda-smoke", settings.validation.images.cuda, "cuda-smoke.sh", {"EXPECTED_GPUS": 1}, resources=CUDA, gpu=resource
    )
    pod = pod_spec(configmap, container)
    return ValidationJob(
        key="cuda-smoke",
        check="cuda-smoke",
        node=None,
        manifest=job_manifest(settings, name, "cuda-smoke", None, pod, backoff_limit=1),
        gpu_resource=resource,
        validates=validates,
    )
