"""The opt-in sharing benchmark (`validation.sharingBenchmark`): what time-slicing or MPS costs.

On one sampled shared node of each GPU model and sharing mode, one Job fills the node's G GPUs
with R x G pods (R replicas each: the device plugin spreads replicas evenly over the GPUs, so a
full node is what puts R pods on every GPU) and runs NVIDIA's n-body sample in rounds of K = 1, 2
and R busy pods per GPU at each problem size (config/validation/sharing-bench.sh). One collector
Job after them reads their logs, prints the cost table and keeps every RESULT line in the
ConfigMap `sharing-cost`, which the stack reads back for its `sharingCost` output.

The benchmark Jobs run after the node's sharing pods (their pods would otherwise compete for the
same replicas) and pass the free-capacity gate with them; their pods count against the pod budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...config.rules.monitoring import BENCHMARK_SLACK_SECONDS
from ..capacity import NodeFacts
from .manifests import (
    BARRIER_LABEL,
    BARRIER_SERVICE,
    SMALL,
    JobContext,
    ValidationJob,
    container_spec,
    job_labels,
    job_manifest,
    job_name,
    payload_deadline,
    pod_spec,
)

COLLECTOR = "sharing-cost"
RESULTS_CONFIGMAP = "sharing-cost"
"""The ConfigMap the collector writes (key `results`: every RESULT line) and the stack reads."""
RESULTS_KEY = "results"
SCRATCH = "/scratch"
"""The pods' writable emptyDir: not /tmp, where NVIDIA's cuda11.6.0 sample images keep the sample."""
WHOLE_GPU = ("nvidia.com/gpu", "nvidia.com/gpu.shared")


def benchmark_nodes(nodes: Sequence[NodeFacts], sampled: dict[str, Any], resource_of: Any) -> list[NodeFacts]:
    """The first sampled node of each (GPU model, sharing mode) whose whole GPUs are shared."""
    seen: set[tuple[str, str]] = set()
    out = []
    for f in nodes:
        if f.name not in sampled or not f.shares or f.profile is None or f.mig_resource is not None:
            continue
        if resource_of(f) not in WHOLE_GPU:
            continue
        key = (f.node.gpu.model.lower(), f.profile.mode)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def replicas_per_gpu(facts: NodeFacts, resource: str) -> int:
    return max(1, facts.advertised[resource] // max(1, facts.node.gpu.count))


def benchmark_job(ctx: JobContext, facts: NodeFacts, configmap: str, resource: str, after: tuple[str, ...]) -> ValidationJob:
    b = ctx.validation.sharing_benchmark
    node = facts.node
    assert facts.profile is not None
    replicas = replicas_per_gpu(facts, resource)
    pods = replicas * node.gpu.count
    sizes = " ".join(f"{s.name}:{s.bodies}:{s.iterations}" for s in b.sizes)
    validates = {
        "check": "sharing-bench",
        "node": node.name,
        "gpu": node.gpu.model,
        "mode": facts.profile.mode,
        "replicas": replicas,
        "gpus": node.gpu.count,
        "resource": resource,
        "pods": pods,
        "sizes": sizes,
        "seconds": b.seconds_per_window,
        "image": b.image,
        "nbody": b.nbody,
    }
    name = job_name("sharing-bench", validates, node.name)
    container = container_spec(
        "sharing-bench",
        b.image,
        "sharing-bench.sh",
        {
            "PEERS": pods,
            "PEER_PREFIX": name,
            "PEER_DOMAIN": BARRIER_SERVICE,
            # The rule on secondsPerWindow leaves BENCHMARK_SLACK_SECONDS besides the windows.
            "BARRIER_SECONDS": BENCHMARK_SLACK_SECONDS - 30,
            "NBODY": b.nbody,
            "GPU_MODEL": node.gpu.model,
            "SHARING_MODE": facts.profile.mode,
            "REPLICAS": replicas,
            "GPUS": node.gpu.count,
            "SIZES": sizes,
            "SECONDS_PER_WINDOW": b.seconds_per_window,
            # The image's /tmp holds the sample: scratch (bash here-strings, CUDA's JIT cache) elsewhere.
            "TMPDIR": SCRATCH,
            "HOME": SCRATCH,
            "CUDA_CACHE_PATH": f"{SCRATCH}/cuda-cache",
        },
        resources=SMALL | {"limits": {"cpu": "1", "memory": "1Gi"}},
        gpu=resource,
        field_env={"NODE_NAME": "spec.nodeName"},
    )
    container["volumeMounts"] = [
        m if m["name"] != "tmp" else {"name": "tmp", "mountPath": SCRATCH} for m in container["volumeMounts"]
    ]
    pod = pod_spec(configmap, container, node=node.name, subdomain=BARRIER_SERVICE)
    pod["volumes"] = [
        vol if vol["name"] != "tmp" else {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}} for vol in pod["volumes"]
    ]
    return ValidationJob(
        key=f"sharing-bench-{node.name}",
        check="sharing-bench",
        node=node.name,
        manifest=job_manifest(
            ctx, name, "sharing-bench", node.name, pod, indexed=pods, pod_labels={BARRIER_LABEL: BARRIER_SERVICE}
        ),
        gpu_resource=resource,
        validates=validates,
        after=after,
        barrier=True,
        pods=pods,
    )


def collector_job(ctx: JobContext, configmap: str, benches: Sequence[ValidationJob]) -> ValidationJob:
    """After every benchmark Job: their pods' RESULT lines into the ConfigMap and the cost table into its log."""
    v = ctx.validation
    names = [j.manifest["metadata"]["name"] for j in benches]
    validates = {"check": COLLECTOR, "jobs": names, "configmap": RESULTS_CONFIGMAP, "image": v.images.kubectl}
    name = job_name(COLLECTOR, validates)
    container = container_spec(
        COLLECTOR,
        v.images.kubectl,
        "sharing-cost.sh",
        {
            "HOME": "/tmp",
            "BENCH_JOBS": " ".join(names),
            "NAMESPACE": v.namespace,
            "RESULTS_CONFIGMAP": RESULTS_CONFIGMAP,
            "DEADLINE_SECONDS": payload_deadline(v.timeout_seconds),
        },
        resources=SMALL,
    )
    pod = pod_spec(configmap, container, service_account=COLLECTOR)
    return ValidationJob(
        key=COLLECTOR,
        check=COLLECTOR,
        node=None,
        manifest=job_manifest(ctx, name, COLLECTOR, None, pod),
        gpu_resource=None,
        validates=validates,
        after=tuple(j.key for j in benches),
        collects=True,
    )


def collector_rbac(ns: str) -> dict[str, dict[str, Any]]:
    """A ServiceAccount and a Role in the validation namespace `ns`: read the pods and their logs,
    and write the one results ConfigMap (create cannot be limited to a name; the others are)."""
    meta = {"namespace": ns, "labels": job_labels(COLLECTOR, None)}
    return {
        "service_account": {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": COLLECTOR, **meta},
            "automountServiceAccountToken": False,
        },
        "role": {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": COLLECTOR, **meta},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
                {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"], "resourceNames": [RESULTS_CONFIGMAP]},
            ],
        },
        "role_binding": {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": COLLECTOR, **meta},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": COLLECTOR},
            "subjects": [{"kind": "ServiceAccount", "name": COLLECTOR, "namespace": ns}],
        },
    }

