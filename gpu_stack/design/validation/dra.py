"""The DRA check: on each sampled DRA node, one pod that gets a GPU through a ResourceClaimTemplate
(one device of the DRA driver's DeviceClass, allocated by the scheduler from the node's
ResourceSlice) and runs the CUDA smoke payload (config/validation/cuda-smoke.sh): the claim is
allocated, the kubelet plugin prepares the device, and vectorAdd computes on it.

The template is a `resource.k8s.io/v1` object (Kubernetes 1.34: GA, served with no flag), named for
its content; the pod names it under `spec.resourceClaims` and its container under
`resources.claims`. It requests no extended resource, so the free-capacity gate (which counts
extended resources) does not wait for it."""

from __future__ import annotations

from typing import Any

from ...config.dra import RESOURCE_API_VERSION
from ..capacity import GPU_CLASS, MIG_CLASS, NodeFacts
from ..naming import content_name
from .manifests import (
    CUDA,
    VALIDATION_LABELS,
    JobContext,
    ValidationJob,
    container_spec,
    job_manifest,
    job_name,
    pod_spec,
)

CHECK = "dra-claim"
CLAIM = "gpu"
"""The claim's name in the pod and the request's name in the template."""


def device_class(facts: NodeFacts) -> str:
    """The class a one-device claim on this node asks for: a whole GPU where the node has one, else
    a MIG device."""
    return GPU_CLASS if facts.dra_devices.get(GPU_CLASS) else MIG_CLASS


def claim_template(ctx: JobContext, cls: str) -> dict[str, Any]:
    """A ResourceClaimTemplate for one device of DeviceClass `cls`, named for its content."""
    spec = {"spec": {"devices": {"requests": [{"name": CLAIM, "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": 1}}]}}}
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": content_name(f"{CHECK}-{cls.split('.', 1)[0]}", spec), "namespace": ctx.validation.namespace,
                     "labels": dict(VALIDATION_LABELS)},
        "spec": spec,
    }


def dra_claim_job(ctx: JobContext, configmap: str, facts: NodeFacts) -> ValidationJob:
    """The Job that claims one device on `facts`' node and runs the CUDA smoke payload there."""
    cls = device_class(facts)
    template = claim_template(ctx, cls)
    validates = {
        "check": CHECK,
        "node": facts.name,
        "image": ctx.validation.images.cuda,
        "deviceClass": cls,
        "template": template["metadata"]["name"],
    }
    name = job_name(CHECK, validates, facts.name)
    container = container_spec(CHECK, ctx.validation.images.cuda, "cuda-smoke.sh", {"EXPECTED_GPUS": 1}, resources=CUDA)
    container["resources"]["claims"] = [{"name": CLAIM}]
    pod = pod_spec(configmap, container, node=facts.name)
    pod["resourceClaims"] = [{"name": CLAIM, "resourceClaimTemplateName": template["metadata"]["name"]}]
    return ValidationJob(
        key=f"{CHECK}-{facts.name}",
        check=CHECK,
        node=facts.name,
        manifest=job_manifest(ctx, name, CHECK, facts.name, pod, backoff_limit=1),
        gpu_resource=None,
        validates=validates,
        claim_template=template,
    )
