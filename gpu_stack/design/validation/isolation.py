"""The negative check: a pod that requests no GPU, with NVIDIA_VISIBLE_DEVICES=all, sees no GPU.

One pod per sampled node (one per node class with `coverage: sample`), under the `nvidia` runtime
class (the operator creates it on every path: assets/pre-requisites/0200_runtime_class.yaml), so
the toolkit itself is asked, as on a node where nvidia is the default runtime. It holds no GPU, so
the free-capacity gate counts nothing for it; it waits for the gate with the other pinned pods.
"""

from __future__ import annotations

from ...config.cluster import ToolkitSettings
from ..capacity import NodeFacts
from .manifests import SMALL, JobContext, ValidationJob, container_spec, job_manifest, job_name, pod_spec

RUNTIME_CLASS = "nvidia"


def no_gpu_job(
    ctx: JobContext, facts: NodeFacts, configmap: str, node_class: tuple[str, ...], toolkit: ToolkitSettings
) -> ValidationJob:
    node = facts.name
    described = " / ".join(node_class)
    validates = {
        "check": "no-gpu",
        "image": ctx.validation.images.cuda,
        "node": node,
        "class": list(node_class),
        "toolkit": toolkit.model_dump(mode="json"),
    }
    env = {"NODE_CLASS": described, "NVIDIA_VISIBLE_DEVICES": "all"}
    container = container_spec("no-gpu", ctx.validation.images.cuda, "no-gpu.sh", env, resources=SMALL)
    pod = pod_spec(configmap, container, node=node)
    pod["runtimeClassName"] = RUNTIME_CLASS
    return ValidationJob(
        key=f"no-gpu-{node}",
        check="no-gpu",
        node=node,
        manifest=job_manifest(ctx, job_name("no-gpu", validates, node), "no-gpu", node, pod),
        gpu_resource=None,
        validates=validates,
        after=("free-capacity",),
    )
