"""Settings of the validation Jobs that `pulumi up` runs after the release."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .safe_input import Flag, PlainStr, WholeNumber
from .types import KUBECTL_IMAGE, ConfigModel, JobImageRef, StackNamespace


# --------------------------------------------------------------------------- validation
class ValidationImages(ConfigModel):
    cuda: JobImageRef = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
    """Runs the CUDA vectorAdd sample (bash and /cuda-samples/vectorAdd): the smoke Job and the shared-GPU pods."""
    toolbox: JobImageRef = "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04"
    """Runs the MIG-device and metrics payloads (bash, coreutils; nvidia-smi when a GPU is attached)."""
    kubectl: JobImageRef = KUBECTL_IMAGE
    """Reads node status through the API for the capacity and MIG-state checks and collects the
    benchmark, with sh and kubectl: the operator's own image v25.10.1 by default (busybox's sh and
    kubectl 1.34; `registry.k8s.io/kubectl` has no shell). Another image needs a row in
    config/job-images.yaml or a declaration under images.jobImages."""


class BenchmarkSize(ConfigModel):
    """One problem size of the sharing benchmark: the n-body sample's bodies and iterations per batch."""

    name: PlainStr = Field(pattern=r"^[a-z]{1,20}$")
    """The size's name in the results (small, medium, large)."""
    bodies: WholeNumber = Field(ge=256, le=4194304)
    """Bodies of the n-body problem (threads in blocks of 256: 4096 bodies keep 16 multiprocessors busy)."""
    iterations: WholeNumber = Field(ge=1, le=1000000)
    """Iterations per batch (one run of the sample): about one second alone on the GPU is right."""


DEFAULT_BENCHMARK_SIZES = (
    BenchmarkSize(name="small", bodies=4096, iterations=5000),
    BenchmarkSize(name="medium", bodies=32768, iterations=600),
    BenchmarkSize(name="large", bodies=262144, iterations=14),
)


class SharingBenchmarkSettings(ConfigModel):
    """The opt-in sharing benchmark: what time-slicing or MPS costs on one node of each GPU model."""

    enabled: Flag = False
    """Measure sharing on one sampled shared node of each GPU model and sharing mode (off: no Job)."""
    image: JobImageRef = "nvcr.io/nvidia/k8s/cuda-sample:nbody-cuda11.6.0-ubuntu18.04"
    """NVIDIA's n-body CUDA sample (bash, the sample at `nbody`), or your mirror of it."""
    nbody: PlainStr = Field("/tmp/nbody", pattern=r"^/[A-Za-z0-9._/-]{1,200}$")
    """Where the image keeps the sample (the cuda11.6.0 tags: /tmp/nbody; newer ones: /cuda-samples/nbody)."""
    seconds_per_window: WholeNumber = Field(30, ge=5, le=600)
    """Length of one measurement window (one round of K pods at one size)."""
    sizes: tuple[BenchmarkSize, ...] = Field(DEFAULT_BENCHMARK_SIZES, min_length=1, max_length=6)
    """The problem sizes, each measured with K = 1, 2 and the replica count of pods busy."""


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
    sharing_benchmark: SharingBenchmarkSettings = SharingBenchmarkSettings()
    """Opt-in: measure what sharing costs (results in the stack output `sharingCost`)."""
