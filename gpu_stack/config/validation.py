"""Settings of the validation Jobs that `pulumi up` runs after the release."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .safe_input import Flag, WholeNumber
from .types import ConfigModel, ImageRef, StackNamespace

# --------------------------------------------------------------------------- validation
class ValidationImages(ConfigModel):
    cuda: ImageRef = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
    """Runs the CUDA vectorAdd sample (bash and /cuda-samples/vectorAdd): the smoke Job and the shared-GPU pods."""
    toolbox: ImageRef = "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04"
    """Runs the MIG-device and metrics payloads (bash, coreutils; nvidia-smi when a GPU is attached)."""
    kubectl: ImageRef = "registry.k8s.io/kubectl:v1.31.4"
    """Reads node status through the API for the capacity and MIG-state checks (bash and kubectl)."""


class ValidationSettings(ConfigModel):
    enabled: Flag = True
    """Run the validation Jobs after the release (false: none is created)."""
    namespace: StackNamespace = "gpu-validation"
    """Namespace of the validation Jobs (pod-security restricted); must differ from operator.namespace."""
    timeout_seconds: WholeNumber = Field(600, ge=60, le=7200)
    """How long each validation Job may run (activeDeadlineSeconds); `pulumi up` waits 60 s more."""
    ttl_seconds_after_finished: WholeNumber = Field(86400, ge=60, le=2592000)
    """How long a finished Job (and its pods' logs) stays in the cluster before Kubernetes deletes it."""
    max_sharing_pods: WholeNumber = Field(64, ge=2, le=256)
    """At most this many concurrent pods per shared node (R x G is capped here; mind the node's pod limit)."""
    coverage: Literal["sample", "full"] = "sample"
    """Which nodes run GPU pods. sample: one node of each class (GPU model x sharing profile x MIG
    config), within `podBudget`, so a busy production cluster needs only a few free GPUs; full:
    every node, R x G pods each (capped by maxSharingPods), for an acceptance run on an idle cluster.
    Every node's advertised capacity and MIG state are read through the API either way."""
    pod_budget: WholeNumber = Field(32, ge=2, le=4096)
    """coverage sample: at most this many GPU pods in one `pulumi up`, whatever the node count."""
    images: ValidationImages = ValidationImages()
    """The images the validation Jobs run."""
