"""Validation Jobs as plain manifests: what `pulumi up` runs after the release to prove the platform.

Each Job runs a payload from config/validation/ (mounted from a ConfigMap). At most one Job
per node; what can be checked through the API for all nodes at once is one Job for the cluster:
  cuda-smoke        one pod, one GPU, NVIDIA's vectorAdd sample must print "Test PASSED"
  sharing-capacity  cluster: every node's allocatable equals the capacity table (API read)
  sharing-pods      per shared node: R x G pods, one shared GPU each, all running at once
                    (on a shared MIG node each pod also must see one MIG device)
  mig-state         cluster: every MIG node's nvidia.com/mig.config.state reaches success
  mig-device        per MIG node not shared: a pod requesting the MIG resource sees one MIG device
  dcgm-metrics      the exporter serves DCGM_FI_DEV_GPU_UTIL for every watched GPU (framebuffer use
                    on an all-MIG cluster, whose GPUs report no utilisation)
  free-capacity     cluster: before any pod pinned to a node starts, that node has the GPU
                    resources the sample needs free (allocatable minus what pods there request)

Footprint (`validation.coverage`): `sample` (default) runs the GPU pods on one node of each class
(GPU model x sharing profile x MIG config), at most `podBudget` GPU pods in all, whatever the node
count; each sharing sample has one pod more than the node's physical devices of that resource, so
at least two pods share one device at once. `full` runs them on every node, R x G pods each (at
most `maxSharingPods`), for an acceptance run on an idle cluster. The capacity and MIG-state Jobs
read every node through the API either way.

The cluster Jobs read their per-node table from a ConfigMap of their own. The sharing pods of
all nodes find their peers through one headless Service (`sharing-barrier`). A Job's name ends
in a hash of the config it validates and of its whole manifest (TTL, labels, annotations
included), so any edit renames (replaces, re-runs) that Job and no other. Nothing here imports Pulumi.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from .capacity import NodeFacts
from .config.nodes import NodeSettings
from .config.root import Settings
from .dcgm import SERVICE_NAME as DCGM_SERVICE, SERVICE_PORT as DCGM_PORT
from .dcgm_csv import metric_names
from .gpu_models import ALL_DISABLED
from .mig import MigConfig
from .naming import content_hash, content_name
from .sharing import SharingConfig

PAYLOAD_DIR = Path(__file__).resolve().parents[1] / "config" / "validation"
PAYLOAD_FILES = (
    "common.sh",
    "gpu-devices.sh",
    "cuda-smoke.sh",
    "node-capacity.sh",
    "mig-state.sh",
    "shared-gpu.sh",
    "dcgm-metrics.sh",
    "free-capacity.sh",
)
NAME_TOKEN = "@gpu-stack-job-name@"
PAYLOAD_MOUNT = "/payloads"
TABLE_MOUNT = "/expected"
TABLE_KEY = "nodes"
BARRIER_SERVICE = "sharing-barrier"
BARRIER_LABEL = "gpu-stack/barrier"
NODE_READER = "node-reader"
UTIL_METRIC = "DCGM_FI_DEV_GPU_UTIL"
MIG_METRIC = "DCGM_FI_DEV_FB_USED"
NOBODY = 65534
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists"}
"""Tolerates the usual `nvidia.com/gpu` taint of GPU nodes, whatever its value and effect."""
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-stack", "app.kubernetes.io/part-of": "gpu-validation"}
RESTRICTED_NAMESPACE_LABELS = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
    "pod-security.kubernetes.io/warn": "restricted",
}
SMALL = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "250m", "memory": "128Mi"}}
CUDA = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


@dataclass(frozen=True)
class ValidationJob:
    key: str
    """Stable suffix of the Pulumi resource name (the Kubernetes name carries the hash)."""
    check: str
    node: str | None
    manifest: dict[str, Any]
    gpu_resource: str | None
    """The resource each pod requests (one of it), None for API-only checks."""
    validates: dict[str, Any]
    """Exactly the config the Job proves; its hash is in the Job's name."""
    after: tuple[str, ...] = ()
    """Keys of Jobs that must complete before this one is created (they wait for the release)."""
    table: dict[str, Any] | None = None
    """ConfigMap with the per-node table a cluster Job checks (mounted at TABLE_MOUNT)."""
    barrier: bool = False
    """The pods find their peers through the shared headless Service (the sharing barrier)."""
    reads_nodes: bool = False
    pods: int = 1
    """How many pods the Job runs at once (each requests one `gpu_resource`)."""


@dataclass(frozen=True)
class ValidationPlan:
    namespace: dict[str, Any]
    configmap: dict[str, Any]
    jobs: tuple[ValidationJob, ...]
    timeout_seconds: int
    """How long Pulumi waits for each Job (customTimeouts), a little over activeDeadlineSeconds."""
    service_account: dict[str, Any] | None = None
    cluster_role: dict[str, Any] | None = None
    cluster_role_binding: dict[str, Any] | None = None
    barrier_service: dict[str, Any] | None = None
    """One headless Service giving every sharing pod a DNS name; stable across edits."""
    notes: tuple[str, ...] = field(default_factory=tuple)


def payload_data() -> dict[str, str]:
    """The payload scripts, file name -> text, as the ConfigMap holds them."""
    return {name: (PAYLOAD_DIR / name).read_text() for name in PAYLOAD_FILES}


def payload_deadline(timeout_seconds: int) -> int:
    """How long a payload polls before printing FAIL: well inside activeDeadlineSeconds."""
    return max(30, timeout_seconds - max(30, timeout_seconds // 5))


def node_slug(node: str, length: int = 20) -> str:
    """A node name shortened into a DNS-label fragment (dots become dashes)."""
    slug = node.replace(".", "-")[:length].strip("-")
    return slug or "node"


HASH_LENGTH = 10


def job_name(check: str, validates: dict[str, Any], node: str | None = None) -> str:
    """`<check>[-<node>]-<hash>`: a DNS label short enough for Indexed pod hostnames (the final
    hash also covers the whole manifest: `_final_name`)."""
    middle = f"-{node_slug(node)}" if node else ""
    return f"{check}{middle}-{content_hash(validates, HASH_LENGTH)}"


# --------------------------------------------------------------------------- pod pieces
def _security_context() -> dict[str, Any]:
    """The container's part; non-root user and seccomp come from the pod's (one place, same effect)."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def _container(
    check: str,
    image: str,
    script: str,
    env: dict[str, Any],
    *,
    resources: dict[str, Any],
    gpu: str | None = None,
    field_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    requests = dict(resources["requests"])
    limits = dict(resources["limits"])
    if gpu is not None:
        requests[gpu] = "1"
        limits[gpu] = "1"
    variables = [{"name": "CHECK_NAME", "value": check}]
    variables += [{"name": k, "value": str(v)} for k, v in env.items()]
    for k, path in (field_env or {}).items():
        variables.append({"name": k, "valueFrom": {"fieldRef": {"fieldPath": path}}})
    return {
        "name": check,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["bash", f"{PAYLOAD_MOUNT}/{script}"],
        "env": variables,
        "resources": {"requests": requests, "limits": limits},
        "securityContext": _security_context(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "payloads", "mountPath": PAYLOAD_MOUNT, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }


def _pod_spec(
    configmap: str,
    container: dict[str, Any],
    *,
    node: str | None = None,
    service_account: str | None = None,
    subdomain: str | None = None,
    table: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": service_account is not None,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NOBODY,
            "runAsGroup": NOBODY,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "tolerations": [dict(GPU_TOLERATION)],
        "containers": [container],
        "volumes": [
            {"name": "payloads", "configMap": {"name": configmap, "defaultMode": 0o444}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}},
        ],
    }
    if service_account is not None:
        spec["serviceAccountName"] = service_account
    if node is not None:
        # Pinned by node name through the scheduler (so GPU capacity is respected).
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
                }
            }
        }
    if subdomain is not None:
        spec["subdomain"] = subdomain
    if table is not None:
        spec["volumes"].append({"name": "expected", "configMap": {"name": table, "defaultMode": 0o444}})
        container["volumeMounts"].append({"name": "expected", "mountPath": TABLE_MOUNT, "readOnly": True})
    return spec


def _labels(check: str, node: str | None) -> dict[str, str]:
    labels = {**MANAGED_BY, "gpu-stack/check": check}
    if node is not None and len(node) <= 63:
        labels["gpu-stack/node"] = node
    return labels


def _job(
    settings: Settings,
    name: str,
    check: str,
    node: str | None,
    pod: dict[str, Any],
    *,
    indexed: int | None = None,
    backoff_limit: int = 0,
    pod_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    v = settings.validation
    labels = _labels(check, node)
    spec: dict[str, Any] = {
        "backoffLimit": backoff_limit,
        "activeDeadlineSeconds": v.timeout_seconds,
        "ttlSecondsAfterFinished": v.ttl_seconds_after_finished,
        "template": {"metadata": {"labels": {**labels, **(pod_labels or {})}}, "spec": pod},
    }
    if indexed is not None:
        spec.update({"completionMode": "Indexed", "completions": indexed, "parallelism": indexed})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": v.namespace,
            "labels": labels,
            # A Job that failed is replaced (re-run) by the next `pulumi up` instead of re-awaited.
            "annotations": {"pulumi.com/replaceUnready": "true"},
        },
        "spec": spec,
    }


# --------------------------------------------------------------------------- checks
def _cuda_resource(nodes: Sequence[NodeFacts]) -> str:
    """The resource a plain one-GPU pod asks for: nvidia.com/gpu unless every node renames it."""
    advertised = {r for f in nodes for r in f.advertised}
    if not advertised or "nvidia.com/gpu" in advertised:
        return "nvidia.com/gpu"
    return sorted(advertised)[0]


def _cuda_smoke(settings: Settings, configmap: str, nodes: Sequence[NodeFacts]) -> ValidationJob:
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
    container = _container(
        "cuda-smoke", settings.validation.images.cuda, "cuda-smoke.sh", {"EXPECTED_GPUS": 1}, resources=CUDA, gpu=resource
    )
    pod = _pod_spec(configmap, container)
    return ValidationJob(
        key="cuda-smoke",
        check="cuda-smoke",
        node=None,
        manifest=_job(settings, name, "cuda-smoke", None, pod, backoff_limit=1),
        gpu_resource=resource,
        validates=validates,
    )


def _shared_resource(facts: NodeFacts) -> str:
    """The resource the sharing pods request: one the profile really shares (more than physical),
    the node's MIG resource first when it is shared (so the pods prove the MIG device too)."""
    physical, capacity, mig_device = facts.physical, facts.advertised, facts.mig_resource
    shared = {r for r, n in capacity.items() if r.endswith(".shared") or n != physical.get(r)}
    candidates = ([mig_device, f"{mig_device}.shared"] if mig_device else []) + ["nvidia.com/gpu.shared", "nvidia.com/gpu"]
    for name in candidates:
        if name in shared:
            return name
    return sorted(shared or capacity)[0]


def _table_configmap(settings: Settings, name: str, check: str, lines: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": settings.validation.namespace, "labels": _labels(check, None)},
        "data": {TABLE_KEY: "".join(f"{line}\n" for line in lines)},
        "immutable": True,
    }


def _cluster_job(
    settings: Settings, configmap: str, check: str, script: str, validates: dict[str, Any], lines: list[str]
) -> ValidationJob:
    """One Job for the whole cluster that reads each listed node through the API (`get` only)."""
    v = settings.validation
    name = job_name(check, validates)
    container = _container(
        check,
        v.images.kubectl,
        script,
        # kubectl keeps its discovery cache under $HOME: the writable /tmp.
        {"HOME": "/tmp", "EXPECTED_FILE": f"{TABLE_MOUNT}/{TABLE_KEY}", "DEADLINE_SECONDS": payload_deadline(v.timeout_seconds)},
        resources=SMALL,
    )
    pod = _pod_spec(configmap, container, service_account=NODE_READER, table=name)
    return ValidationJob(
        key=check,
        check=check,
        node=None,
        manifest=_job(settings, name, check, None, pod),
        gpu_resource=None,
        validates=validates,
        table=_table_configmap(settings, name, check, lines),
        reads_nodes=True,
    )


def _capacity_table(nodes: Sequence[NodeFacts]) -> dict[str, dict[str, int]]:
    """Node -> what it must advertise, for every node (shared, MIG or whole GPUs)."""
    return {f.name: f.advertised for f in nodes if f.advertised}


def _sharing_capacity(settings: Settings, configmap: str, table: dict[str, dict[str, int]]) -> ValidationJob | None:
    """One Job reading every node's advertised capacity through the API (the key keeps its name)."""
    if not table:
        return None
    validates = {"check": "sharing-capacity", "capacity": table, "image": settings.validation.images.kubectl}
    lines = [f"{node} " + " ".join(f"{r}={n}" for r, n in sorted(cap.items())) for node, cap in table.items()]
    return _cluster_job(settings, configmap, "sharing-capacity", "node-capacity.sh", validates, lines)


def _sharing_pods(
    settings: Settings,
    facts: NodeFacts,
    configmap: str,
    files: dict[str, Any],
    after: tuple[str, ...],
    pods_cap: int | None = None,
) -> ValidationJob:
    v = settings.validation
    node, key, capacity, mig_device = facts.node, facts.profile_key, facts.advertised, facts.mig_resource
    assert key is not None
    resource = _shared_resource(facts)
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
        validates["mig"] = {"config": node.mig, "strategy": settings.mig.strategy}
        env["EXPECTED_MIG_DEVICES"] = 1
    name = job_name("sharing-pods", validates, node.name)
    container = _container(
        "sharing-pods",
        v.images.cuda,
        "shared-gpu.sh",
        {"PEER_PREFIX": name, **env},
        resources=SMALL | {"limits": {"cpu": "500m", "memory": "512Mi"}},
        gpu=resource,
        field_env={"NODE_NAME": "spec.nodeName"},
    )
    pod = _pod_spec(configmap, container, node=node.name, subdomain=BARRIER_SERVICE)
    return ValidationJob(
        key=f"sharing-pods-{node.name}",
        check="sharing-pods",
        node=node.name,
        manifest=_job(
            settings, name, "sharing-pods", node.name, pod, indexed=pods, pod_labels={BARRIER_LABEL: BARRIER_SERVICE}
        ),
        gpu_resource=resource,
        validates=validates,
        after=after,
        barrier=True,
        pods=pods,
    )


def _barrier_service(settings: Settings) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": BARRIER_SERVICE,
            "namespace": settings.validation.namespace,
            "labels": _labels("sharing-pods", None),
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


def _mig_validates(settings: Settings, node: NodeSettings, document: dict[str, Any]) -> dict[str, Any]:
    return {
        "config": node.mig,
        "parted": (document.get("mig-configs") or {}).get(node.mig),
        "strategy": settings.mig.strategy,
    }


def _mig_state(settings: Settings, configmap: str, document: dict[str, Any]) -> ValidationJob | None:
    nodes = [n for n in settings.nodes if n.mig is not None]
    if not nodes:
        return None
    validates = {
        "check": "mig-state",
        "nodes": {n.name: _mig_validates(settings, n, document) for n in nodes},
        "image": settings.validation.images.kubectl,
    }
    lines = [f"{n.name} {n.mig}" for n in nodes]
    return _cluster_job(settings, configmap, "mig-state", "mig-state.sh", validates, lines)


def _mig_device(
    settings: Settings, node: NodeSettings, configmap: str, document: dict[str, Any], resource: str
) -> ValidationJob:
    v = settings.validation
    validates = {
        "check": "mig-device",
        "node": node.name,
        **_mig_validates(settings, node, document),
        "resource": resource,
        "image": v.images.toolbox,
    }
    name = job_name("mig-device", validates, node.name)
    container = _container(
        "mig-device", v.images.toolbox, "gpu-devices.sh", {"EXPECTED_MIG_DEVICES": 1}, resources=SMALL, gpu=resource
    )
    return ValidationJob(
        key=f"mig-device-{node.name}",
        check="mig-device",
        node=node.name,
        manifest=_job(settings, name, "mig-device", node.name, _pod_spec(configmap, container, node=node.name)),
        gpu_resource=resource,
        validates=validates,
        # A pod requesting a MIG resource is unschedulable until mig-manager succeeded: the cluster
        # state Job (which fails at once on `failed`) goes first, so a failure says why.
        after=("mig-state",),
    )


def _whole_gpus(settings: Settings) -> int:
    return sum(n.gpu.count for n in settings.nodes if n.mig in (None, ALL_DISABLED))


def dcgm_expected_gpus(settings: Settings) -> int:
    """GPUs that must report the Job's metric: every GPU of nodes without MIG; on a cluster whose
    GPUs are all in MIG mode, every GPU (its instances report under the parent GPU's UUID)."""
    whole = _whole_gpus(settings)
    if whole == 0:
        return max(1, sum(n.gpu.count for n in settings.nodes))
    return whole


def dcgm_metric(settings: Settings) -> str:
    """The metric the DCGM Job looks for: GPU utilisation where whole GPUs report it; on an
    all-MIG cluster (MIG GPUs do not report DCGM_FI_DEV_GPU_UTIL) framebuffer use, which MIG
    instances do report. A custom list that leaves the metric out: its first other metric."""
    wanted = UTIL_METRIC if _whole_gpus(settings) > 0 or not settings.nodes else MIG_METRIC
    custom = settings.dcgm_exporter.metrics
    if custom is None:
        return wanted
    names = metric_names(custom)
    if wanted in names or not names:
        return wanted
    others = [n for n in names if n != UTIL_METRIC or wanted == UTIL_METRIC]
    return others[0] if others else names[0]


def _dcgm(settings: Settings, configmap: str) -> ValidationJob | None:
    if not settings.dcgm_exporter.enabled:
        return None
    v = settings.validation
    host = f"{DCGM_SERVICE}.{settings.operator.namespace}.svc"
    expected = dcgm_expected_gpus(settings)
    metric = dcgm_metric(settings)
    validates = {
        "check": "dcgm-metrics",
        "dcgm": settings.dcgm_exporter.model_dump(mode="json"),
        "service": f"{host}:{DCGM_PORT}",
        "metric": metric,
        "expected_gpus": expected,
        "image": v.images.toolbox,
    }
    name = job_name("dcgm-metrics", validates)
    container = _container(
        "dcgm-metrics",
        v.images.toolbox,
        "dcgm-metrics.sh",
        {
            "METRICS_HOST": host,
            "METRICS_PORT": DCGM_PORT,
            "METRICS_PATH": "/metrics",
            "METRIC": metric,
            "EXPECTED_GPUS": expected,
            "DEADLINE_SECONDS": payload_deadline(v.timeout_seconds),
        },
        resources=SMALL,
    )
    return ValidationJob(
        key="dcgm-metrics",
        check="dcgm-metrics",
        node=None,
        manifest=_job(settings, name, "dcgm-metrics", None, _pod_spec(configmap, container)),
        gpu_resource=None,
        validates=validates,
    )


# --------------------------------------------------------------------------- the plan
def job_names(plan: ValidationPlan) -> dict[str, str]:
    """Job key -> Kubernetes name (fixed by the plan, so exported as plain strings)."""
    return {job.key: job.manifest["metadata"]["name"] for job in plan.jobs}


def node_class(facts: NodeFacts) -> tuple[str, str, str]:
    """What makes two nodes interchangeable for validation: GPU model, sharing profile, MIG config."""
    return (facts.node.gpu.model, facts.profile_key or "-", facts.node.mig or "-")


def sample_nodes(settings: Settings, nodes: Sequence[NodeFacts]) -> dict[str, tuple[str, str, str]]:
    """Node name -> class of the nodes whose GPU pods run: the first declared node of each class
    (`coverage: sample`), or every node (`coverage: full`)."""
    out: dict[str, tuple[str, str, str]] = {}
    seen: set[tuple[str, str, str]] = set()
    for facts in nodes:
        cls = node_class(facts)
        if settings.validation.coverage == "full" or cls not in seen:
            seen.add(cls)
            out[facts.name] = cls
    return out


def _physical_of(facts: NodeFacts, resource: str) -> int:
    """Physical devices behind a shared resource on the node (GPUs, or MIG instances)."""
    return facts.physical.get(resource.removesuffix(".shared")) or facts.node.gpu.count


def _free_capacity(settings: Settings, configmap: str, needs: dict[str, dict[str, int]], after: tuple[str, ...]) -> ValidationJob:
    """The gate before the pinned GPU pods: each node has what its pods request free."""
    validates = {"check": "free-capacity", "needs": needs, "image": settings.validation.images.kubectl}
    lines = [f"{node} " + " ".join(f"{r}={n}" for r, n in sorted(res.items())) for node, res in needs.items()]
    job = _cluster_job(settings, configmap, "free-capacity", "free-capacity.sh", validates, lines)
    return ValidationJob(**{**job.__dict__, "after": after})


def _final_name(job: ValidationJob) -> ValidationJob:
    """Rename the Job (and its table) for a hash of what it validates and of its whole manifest:
    a change of any field (TTL, labels, annotations, pod spec) gives a new name, so the Job is
    replaced, never updated in place (an update reads the live Job, gone after its TTL)."""
    provisional = job.manifest["metadata"]["name"]
    text = json.dumps({"manifest": job.manifest, "table": job.table}, sort_keys=True).replace(provisional, NAME_TOKEN)
    name = f"{provisional[: -HASH_LENGTH]}{content_hash({'validates': job.validates, 'text': text}, HASH_LENGTH)}"
    doc = json.loads(text.replace(NAME_TOKEN, name))
    return ValidationJob(**{**job.__dict__, "manifest": doc["manifest"], "table": doc["table"]})


def footprint(plan: "ValidationPlan") -> dict[str, int]:
    """What one `pulumi up` of this plan starts: validation pods and GPU replicas they request."""
    pods = sum(j.pods for j in plan.jobs)
    gpu = sum(j.pods for j in plan.jobs if j.gpu_resource is not None)
    return {"jobs": len(plan.jobs), "pods": pods, "gpu_pods": gpu, "gpu_replicas": gpu}


def build_validation(
    settings: Settings, nodes: Sequence[NodeFacts], sharing: SharingConfig, mig: MigConfig
) -> ValidationPlan | None:
    """Every validation resource as a manifest; None when `validation.enabled` is false.

    `nodes`, `sharing` and `mig` are the stack's derived node facts and configs (design.derive).
    """
    v = settings.validation
    if not v.enabled:
        return None
    data = payload_data()
    configmap_name = content_name("validation-payloads", data)
    files = sharing.files
    document = mig.document
    sampled = sample_nodes(settings, nodes)
    jobs: list[ValidationJob] = [_cuda_smoke(settings, configmap_name, nodes)]
    capacity_table = _capacity_table(nodes)
    capacity = _sharing_capacity(settings, configmap_name, capacity_table)
    mig_state = _mig_state(settings, configmap_name, document)
    jobs += [j for j in (capacity, mig_state) if j is not None]
    cluster_keys = tuple(j.key for j in (capacity, mig_state) if j is not None)

    # The pinned GPU pods: sharing samples, then MIG devices not proven by a sharing sample.
    sharing_samples = [f for f in nodes if f.shares and f.name in sampled]
    mig_candidates = [f for f in nodes if f.name in sampled and f.mig_resource is not None]
    budget = None if v.coverage == "full" else v.pod_budget
    notes: list[str] = []
    pinned: list[ValidationJob] = []
    mig_proven = set()  # nodes whose sharing pods request (and so prove) the MIG resource
    left = None if budget is None else budget - 1  # the smoke pod
    for facts in sharing_samples:
        node = facts.node
        cap = None
        if budget is not None:
            cap = _physical_of(facts, _shared_resource(facts)) + 1
        job = _sharing_pods(settings, facts, configmap_name, files, ("free-capacity",), cap)
        if left is not None:
            if job.pods > left:
                notes.append(f"{node.name} ({', '.join(sampled[node.name])}): {job.pods} sharing pods")
                continue
            left -= job.pods
        if "mig" in job.validates:
            mig_proven.add(node.name)
        pinned.append(job)
    for facts in mig_candidates:
        node = facts.node
        if node.name in mig_proven:
            continue
        if left is not None:
            if left < 1:
                notes.append(f"{node.name} ({', '.join(sampled[node.name])}): 1 MIG-device pod")
                continue
            left -= 1
        job = _mig_device(settings, node, configmap_name, document, facts.mig_resource or "")
        pinned.append(ValidationJob(**{**job.__dict__, "after": ("free-capacity",)}))
    if pinned:
        needs: dict[str, dict[str, int]] = {}
        for job in pinned:
            assert job.node is not None and job.gpu_resource is not None
            needs.setdefault(job.node, {})
            needs[job.node][job.gpu_resource] = needs[job.node].get(job.gpu_resource, 0) + job.pods
        jobs.append(_free_capacity(settings, configmap_name, needs, cluster_keys))
        jobs += pinned
    dcgm = _dcgm(settings, configmap_name)
    if dcgm is not None:
        jobs.append(dcgm)
    jobs = [_final_name(j) for j in jobs]
    if notes:
        notes = [
            f"validation.podBudget ({budget}) leaves {len(notes)} node class(es) without GPU pods: "
            + "; ".join(notes[:5])
            + (f"; and {len(notes) - 5} more" if len(notes) > 5 else "")
            + " (their capacity and MIG state are still read through the API; raise "
            "gpu-stack:validation.podBudget, or set validation.coverage full for an acceptance run)"
        ]

    ns_meta = {"labels": {**RESTRICTED_NAMESPACE_LABELS, **MANAGED_BY}}
    plan = ValidationPlan(
        namespace={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": v.namespace, **ns_meta}},
        configmap={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": configmap_name, "namespace": v.namespace, "labels": dict(MANAGED_BY)},
            "data": data,
            "immutable": True,
        },
        jobs=tuple(jobs),
        timeout_seconds=v.timeout_seconds + 60,
        barrier_service=_barrier_service(settings) if any(j.barrier for j in jobs) else None,
        notes=tuple(notes),
    )
    readers = sorted(
        set(capacity_table if capacity is not None else ())
        | ({n.name for n in settings.nodes if n.mig is not None} if mig_state else set())
        | {j.node for j in jobs if j.node is not None}
    )
    if not readers:
        return plan
    role_name = f"{v.namespace}-{NODE_READER}"
    return ValidationPlan(
        namespace=plan.namespace,
        configmap=plan.configmap,
        jobs=plan.jobs,
        timeout_seconds=plan.timeout_seconds,
        barrier_service=plan.barrier_service,
        notes=plan.notes,
        service_account={
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": NODE_READER, "namespace": v.namespace, "labels": dict(MANAGED_BY)},
            "automountServiceAccountToken": False,
        },
        cluster_role={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role_name, "labels": dict(MANAGED_BY)},
            # Only `get`, only on the nodes the checks read: no list, no watch, no other object;
            # and, for the free-capacity gate, `list` of pods (their requests per node).
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"], "resourceNames": readers}]
            + ([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}] if any(j.check == "free-capacity" for j in jobs) else []),
        },
        cluster_role_binding={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role_name, "labels": dict(MANAGED_BY)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": NODE_READER, "namespace": v.namespace}],
        },
    )
