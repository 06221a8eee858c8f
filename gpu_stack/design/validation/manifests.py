"""Manifest pieces every validation Job shares: constants, the Job and plan types, names, pod specs,
and `JobContext`: what every Job's manifest takes from the stack, derived once per plan."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ...config.package_data import config_path
from ...config.validation import ValidationSettings
from ..labels import part_of, pod_security
from ..naming import content_hash

PAYLOAD_DIR = config_path("validation")
PAYLOAD_FILES = (
    "common.sh",
    "gpu-common.sh",
    "gpu-devices.sh",
    "cuda-smoke.sh",
    "node-capacity.sh",
    "mig-state.sh",
    "shared-gpu.sh",
    "dcgm-metrics.sh",
    "free-capacity.sh",
    "sharing-bench.sh",
    "sharing-cost.sh",
    "no-gpu.sh",
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
VALIDATION_LABELS = part_of("gpu-validation")
RESTRICTED_NAMESPACE_LABELS = pod_security("restricted")
SMALL = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "250m", "memory": "128Mi"}}
CUDA = {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}


@dataclass(frozen=True)
class JobContext:
    """What every validation Job's manifest takes from the stack: `validation.*` (images already
    mirrored: design.images.mirrored_settings) and the pull secrets (images.pull_secret_names),
    each derived once."""

    validation: ValidationSettings
    pull_secrets: tuple[str, ...] = ()


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
    collects: bool = False
    """The sharing benchmark's collector: runs as its ServiceAccount (ValidationPlan.collector)."""
    claim_template: dict[str, Any] | None = None
    """The `resource.k8s.io/v1` ResourceClaimTemplate its pod claims a device through (the DRA
    check, validation/dra.py), created before the Job; None for the other checks."""


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
    collector: dict[str, dict[str, Any]] | None = None
    """The sharing benchmark collector's ServiceAccount, Role and RoleBinding (validation/benchmark.py)."""
    results_configmap: str | None = None
    """The ConfigMap the collector writes the benchmark's results to; the stack reads it back."""


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


def security_context() -> dict[str, Any]:
    """The container's part; non-root user and seccomp come from the pod's (one place, same effect)."""
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def script_shell(script: str) -> str:
    """The shell a payload is started with: `sh` for the POSIX ones (`#!/bin/sh`, which run on the
    GPU Operator image's busybox), `bash` for the CUDA images' payloads."""
    return "sh" if (PAYLOAD_DIR / script).read_text().startswith("#!/bin/sh\n") else "bash"


def container_spec(
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
    variables: list[dict[str, Any]] = [{"name": "CHECK_NAME", "value": check}]
    variables += [{"name": k, "value": str(v)} for k, v in env.items()]
    for k, path in (field_env or {}).items():
        variables.append({"name": k, "valueFrom": {"fieldRef": {"fieldPath": path}}})
    return {
        "name": check,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": [script_shell(script), f"{PAYLOAD_MOUNT}/{script}"],
        "env": variables,
        "resources": {"requests": requests, "limits": limits},
        "securityContext": security_context(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "payloads", "mountPath": PAYLOAD_MOUNT, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }


def pod_spec(
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


def job_labels(check: str, node: str | None) -> dict[str, str]:
    labels = {**VALIDATION_LABELS, "gpu-stack/check": check}
    if node is not None and len(node) <= 63:
        labels["gpu-stack/node"] = node
    return labels


def job_manifest(
    ctx: JobContext,
    name: str,
    check: str,
    node: str | None,
    pod: dict[str, Any],
    *,
    indexed: int | None = None,
    backoff_limit: int = 0,
    pod_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    v = ctx.validation
    labels = job_labels(check, node)
    secrets = ctx.pull_secrets
    if secrets:
        pod = {**pod, "imagePullSecrets": [{"name": n} for n in secrets]}
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


def table_configmap(ctx: JobContext, name: str, check: str, lines: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ctx.validation.namespace, "labels": job_labels(check, None)},
        "data": {TABLE_KEY: "".join(f"{line}\n" for line in lines)},
        "immutable": True,
    }


def cluster_job(
    ctx: JobContext, configmap: str, check: str, script: str, validates: dict[str, Any], lines: list[str]
) -> ValidationJob:
    """One Job for the whole cluster that reads each listed node through the API (`get` only)."""
    v = ctx.validation
    name = job_name(check, validates)
    container = container_spec(
        check,
        v.images.kubectl,
        script,
        # kubectl keeps its discovery cache under $HOME: the writable /tmp.
        {"HOME": "/tmp", "EXPECTED_FILE": f"{TABLE_MOUNT}/{TABLE_KEY}", "DEADLINE_SECONDS": payload_deadline(v.timeout_seconds)},
        resources=SMALL,
    )
    pod = pod_spec(configmap, container, service_account=NODE_READER, table=name)
    return ValidationJob(
        key=check,
        check=check,
        node=None,
        manifest=job_manifest(ctx, name, check, None, pod),
        gpu_resource=None,
        validates=validates,
        table=table_configmap(ctx, name, check, lines),
        reads_nodes=True,
    )


def final_name(job: ValidationJob) -> ValidationJob:
    """Rename the Job (and its table) for a hash of what it validates and of its whole manifest:
    a change of any field (TTL, labels, annotations, pod spec) gives a new name, so the Job is
    replaced, never updated in place (an update reads the live Job, gone after its TTL)."""
    provisional = job.manifest["metadata"]["name"]
    text = json.dumps({"manifest": job.manifest, "table": job.table}, sort_keys=True).replace(provisional, NAME_TOKEN)
    name = f"{provisional[: -HASH_LENGTH]}{content_hash({'validates': job.validates, 'text': text}, HASH_LENGTH)}"
    doc = json.loads(text.replace(NAME_TOKEN, name))
    return ValidationJob(**{**job.__dict__, "manifest": doc["manifest"], "table": doc["table"]})


def job_names(plan: ValidationPlan) -> dict[str, str]:
    """Job key -> Kubernetes name (fixed by the plan, so exported as plain strings)."""
    return {job.key: job.manifest["metadata"]["name"] for job in plan.jobs}


def footprint(plan: ValidationPlan) -> dict[str, int]:
    """What one `pulumi up` of this plan starts: validation pods and GPU replicas they request."""
    pods = sum(j.pods for j in plan.jobs)
    gpu = sum(j.pods for j in plan.jobs if j.gpu_resource is not None)
    return {"jobs": len(plan.jobs), "pods": pods, "gpu_pods": gpu, "gpu_replicas": gpu}
