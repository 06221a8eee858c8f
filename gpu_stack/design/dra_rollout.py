"""The device plugin <-> DRA rollout: the in-cluster Job that moves nodes between the operator's
device plugin and NVIDIA's DRA driver in drained waves, as plain manifests.

A node must never advertise its GPUs both ways (the scheduler would hand one GPU out twice). So
the stack never switches a node's allocation labels itself (the label Job leaves them out for the
nodes of this table): one Job, created after the DRA driver's release, runs
config/dra-rollout/dra-rollout.sh, which for each node not yet in its mode, in waves of at most
`dra.rollout.maxUnavailable` nodes made smaller where needed to keep
`dra.rollout.minSchedulableGpus` schedulable, cordons it, evicts its GPU pods through the
Eviction API (PodDisruptionBudgets hold it back up to `dra.rollout.evictionTimeout`), switches the
old advertiser off and waits until it is gone (no nvidia.com/ resource in the node's capacity and
allocatable; on the way back no ResourceSlice of the driver on the node), only then places the new
one and waits for it (the DRA kubelet plugin pod ready within `dra.rollout.pluginTimeout`, its
ResourceSlices complete with the devices the node's GPUs make; on the way back the device
plugin's resources), validates the node in its mode (below) and uncordons it; a wave only after the
previous one succeeded, stopping at the first failure with the failed node left cordoned. A node
already in its mode is left alone, so the Job is a no-op where nothing changed; the Job's name
carries a hash of every node's target, so an edit replaces (re-runs) it and an unchanged config
never runs it again. Its pod keeps off the nodes it moves (preferred).

The table holds every node of the stack whenever DRA is in play (a node uses DRA, or a node's
allocation is set explicitly): the nodes in their mode count towards the floor, and a node set back
to devicePlugin goes back even when no node uses DRA any more (the Job runs before Pulumi deletes
the driver's release, deletes coming last).

Validation before the uncordon, for a node moved to DRA: a probe, a ResourceClaim for one device of
the node's first DeviceClass with devices and a Job whose pod is pinned to the node, tolerates the
cordon, holds the claim and exits 0 only with the device injected into its container; both are
deleted once it succeeded.

Least privilege: `get`/`patch` on the listed nodes only, `list` pods (the GPU pods on a node, the
DRA kubelet plugin's pod, the probe's pod), `create` evictions, `list` ResourceSlices; in the
operator's namespace `create`/`delete` ResourceClaims and `create`/`get`/`delete` Jobs (the probe).
Nothing here imports Pulumi.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config.dra import DraRolloutSettings
from ..config.package_data import config_path
from ..config.rules.dra_rollout import floor_gpus, plan_wave_size
from . import kubectl_manifests as manifests
from .capacity import NodeFacts
from .dra import ALLOCATION_LABEL, DEVICE_PLUGIN_LABEL, DRA_VALUE, DRIVER, KUBELET_PLUGIN_SELECTOR, DraPlan
from .labels import GPU_NODE_TOLERATION, part_of
from .mig_rollout import KUBECTL_JOB_TOLERATIONS, NOBODY, SMALL, keep_off, kubectl_pod, with_helpers
from .naming import content_hash, content_name

SCRIPT_DIR = config_path("dra-rollout")
SCRIPT = "dra-rollout.sh"
ACCOUNT = "gpu-stack-dra-rollout"
CORDON_MARK = "gpu-stack/dra-rollout-cordoned"
ROLLOUT_LABELS = part_of("gpu-dra-rollout")
TABLE_MOUNT = "/rollout-nodes"
TABLE_KEY = "nodes"
DRA = "dra"
DEVICE_PLUGIN = "device-plugin"
"""A node's mode in the Job's table."""
PROBE_LABELS = part_of("gpu-dra-rollout-probe")
PROBE_CLAIM_KEY = "probe-claim.json"
PROBE_JOB_KEY = "probe-job.json"
PROBE_TTL_SECONDS = 600
UNSCHEDULABLE_TOLERATION = {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}
"""The probe's pod runs on the node while the rollout keeps it cordoned."""
PROBE_CHECK = (
    'for d in /dev/nvidia[0-9]*; do [ -e "$d" ] && exit 0; done; '
    'echo "no /dev/nvidia<N> in the container: the kubelet did not have the DRA driver prepare the claimed device" >&2; exit 1'
)
"""The probe's container: exit 0 only with the claimed GPU's device node injected (CDI)."""
WAVE_SLACK_SECONDS = 120
"""Per wave, on top of its waits (the drain, the old advertiser, the plugin pod, the new one):
cordon, labels, reads."""


@dataclass(frozen=True)
class DraRolloutNode:
    name: str
    mode: str
    """`dra` or `device-plugin`: how the node allocates its GPUs once moved."""
    gpus: int
    """Its physical GPUs: what it adds to the schedulable capacity the floor counts."""
    devices: int
    """The devices its ResourceSlices show under DRA: its whole GPUs and MIG instances."""
    expected: dict[str, int]
    """Under the device plugin what it advertises (the capacity table's row); under DRA its
    devices per DeviceClass (the probe claims one of the first class with devices)."""


@dataclass(frozen=True)
class DraRolloutPlan:
    rows: tuple[DraRolloutNode, ...]
    wave_size: int
    min_gpus: int
    """Schedulable GPUs of the table's nodes kept throughout (the floor, as a count)."""
    evict: bool
    service_account: dict[str, Any]
    cluster_role: dict[str, Any]
    cluster_role_binding: dict[str, Any]
    script: dict[str, Any]
    table: dict[str, Any]
    job: dict[str, Any]
    timeout_seconds: int
    """How long Pulumi waits for the Job (customTimeouts): a little over its activeDeadlineSeconds."""
    role: dict[str, Any]
    role_binding: dict[str, Any]

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes whose allocation labels the Job sets (the label Job leaves those out)."""
        return tuple(r.name for r in self.rows)

    @property
    def job_name(self) -> str:
        return str(self.job["metadata"]["name"])


def rollout_rows(nodes: Sequence[NodeFacts]) -> list[DraRolloutNode]:
    """One row per node of the stack, in `nodes` order; none when DRA is not in play."""
    if not any(f.uses_dra or f.node.allocation is not None for f in nodes):
        return []
    return [
        DraRolloutNode(
            name=f.name,
            mode=DRA if f.uses_dra else DEVICE_PLUGIN,
            gpus=f.node.gpu.count,
            devices=sum(f.dra_devices.values()) if f.uses_dra else sum(f.physical.values()),
            expected=dict(f.dra_devices) if f.uses_dra else dict(f.advertised),
        )
        for f in nodes
    ]


def table_lines(rows: Sequence[DraRolloutNode]) -> list[str]:
    """`<node> dra|device-plugin <gpus> <devices> [<resource>=<count> ...]`, one per node."""
    return [" ".join([r.name, r.mode, str(r.gpus), str(r.devices), *(f"{k}={v}" for k, v in sorted(r.expected.items()))])
            for r in rows]


def probe_templates(image: str, namespace: str, timeout: int, pull_secrets: Sequence[str]) -> dict[str, str]:
    """The probe's ResourceClaim and Job, as JSON with `__NODE__`, `__CLASS__` and `__CLAIM__` for
    the script to fill in: one device of the class; a pod pinned to the node (by `metadata.name`),
    tolerating the cordon and the GPU pool taint, holding the claim, as `nobody` on a read-only root."""
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"generateName": "dra-probe-", "namespace": namespace, "labels": dict(PROBE_LABELS)},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "__CLASS__", "allocationMode": "ExactCount", "count": 1}}]}},
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": NOBODY, "runAsGroup": NOBODY, "seccompProfile": {"type": "RuntimeDefault"}},
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["__NODE__"]}]}]}}},
        "tolerations": [dict(UNSCHEDULABLE_TOLERATION), dict(GPU_NODE_TOLERATION)],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": "__CLAIM__"}],
        "containers": [{
            "name": "probe", "image": image, "imagePullPolicy": "IfNotPresent", "command": ["sh", "-c", PROBE_CHECK],
            "resources": {**SMALL, "claims": [{"name": "gpu"}]},
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
            "terminationMessagePolicy": "FallbackToLogsOnError",
        }],
        **({"imagePullSecrets": [{"name": n} for n in pull_secrets]} if pull_secrets else {}),
    }
    job = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"generateName": "dra-probe-", "namespace": namespace, "labels": dict(PROBE_LABELS)},
        "spec": {"backoffLimit": 0, "activeDeadlineSeconds": timeout, "ttlSecondsAfterFinished": PROBE_TTL_SECONDS,
                 "template": {"metadata": {"labels": dict(PROBE_LABELS)}, "spec": pod}},
    }
    return {PROBE_CLAIM_KEY: json.dumps(claim, sort_keys=True), PROBE_JOB_KEY: json.dumps(job, sort_keys=True)}


def script_data() -> dict[str, str]:
    """The script ConfigMap's files: the script and the helpers it sources, side by side."""
    return with_helpers(SCRIPT, (SCRIPT_DIR / SCRIPT).read_text())


def build_dra_rollout(
    rollout: DraRolloutSettings,
    nodes: Sequence[NodeFacts],
    dra: DraPlan | None,
    *,
    namespace: str,
    ttl: int,
    pull_secrets: Sequence[str],
) -> DraRolloutPlan | None:
    """Every rollout resource as a manifest; None when DRA is not in play.

    `rollout`: `dra.rollout` (image already mirrored); `dra`: the DRA driver's plan (its release
    runs the kubelet plugin pods the Job waits for, in its namespace), None when no node uses DRA
    (the way back only); `namespace`: the operator's, where the Job runs; `ttl`:
    validation.ttlSecondsAfterFinished; `pull_secrets`: images.pull_secret_names."""
    rows = tuple(rollout_rows(nodes))
    if not rows:
        return None
    total = sum(r.gpus for r in rows)
    floor = floor_gpus(rollout.min_schedulable_gpus, total)
    size = plan_wave_size(rollout.max_unavailable, [r.gpus for r in rows], floor)
    lines = table_lines(rows)
    script = script_data()
    table_data = {TABLE_KEY: "".join(f"{line}\n" for line in lines),
                  **probe_templates(rollout.image, namespace, rollout.timeout, pull_secrets)}
    script_name = content_name("dra-rollout-script", script)
    table_name = content_name("dra-rollout-nodes", table_data)
    most_waves = -(-len(rows) // size)
    # Per wave: the drain, the old advertiser gone, the plugin pod, the new advertiser, the probe.
    deadline = most_waves * (rollout.eviction_timeout + 3 * rollout.timeout + rollout.plugin_timeout + WAVE_SLACK_SECONDS)
    env = {
        "NODES_FILE": f"{TABLE_MOUNT}/{TABLE_KEY}",
        "WAVE_SIZE": size,
        "MIN_GPUS": floor,
        "EVICT": "true" if rollout.evict else "false",
        "IGNORE_UNEVICTABLE": "true" if rollout.ignore_unevictable else "false",
        "EVICTION_TIMEOUT_SECONDS": rollout.eviction_timeout,
        "TIMEOUT_SECONDS": rollout.timeout,
        "PLUGIN_TIMEOUT_SECONDS": rollout.plugin_timeout,
        "PLUGIN_NAMESPACE": dra.namespace if dra is not None else namespace,
        "PLUGIN_SELECTOR": ",".join(f"{k}={v}" for k, v in sorted(KUBELET_PLUGIN_SELECTOR.items())),
        "PLUGIN_LABEL": DEVICE_PLUGIN_LABEL,
        "DRA_LABEL": f"{ALLOCATION_LABEL}={DRA_VALUE}",
        "DRIVER": DRIVER,
        "PROBE_JOB_FILE": f"{TABLE_MOUNT}/{PROBE_JOB_KEY}",
        "PROBE_CLAIM_FILE": f"{TABLE_MOUNT}/{PROBE_CLAIM_KEY}",
        "PROBE_NAMESPACE": namespace,
        # kubectl keeps its discovery cache under $HOME, the script its scratch files under
        # $TMPDIR: the writable /tmp.
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
    }
    names = [r.name for r in rows]
    pod = kubectl_pod(ACCOUNT, rollout.image, SCRIPT, script_name, env, [("nodes", table_name, TABLE_MOUNT)], pull_secrets)
    # Off the nodes it moves where it can: a drain of its own node would evict it mid-wave (it
    # requests no GPU, so it is no GPU pod, but a cordon keeps a retry off); a one-node cluster
    # still runs it.
    pod["affinity"] = keep_off(names, required=False)
    pod["tolerations"] = [dict(t) for t in KUBECTL_JOB_TOLERATIONS]
    # Named for exactly what it does: a change of any node's target, the waves or the script
    # renames (replaces, re-runs) it; nothing changed, nothing runs.
    name = f"dra-rollout-{content_hash({'pod': pod, 'labels': ROLLOUT_LABELS, 'deadline': deadline, 'ttl': ttl}, 10)}"
    # One try (backoffLimit 0): a second pod would cordon and evict again on its own.
    job = manifests.job(name, ROLLOUT_LABELS, namespace, pod, backoff_limit=0, deadline=deadline, ttl=ttl)
    return DraRolloutPlan(
        rows=rows,
        wave_size=size,
        min_gpus=floor,
        evict=rollout.evict,
        service_account=manifests.service_account(ACCOUNT, ROLLOUT_LABELS, namespace),
        cluster_role=manifests.role("ClusterRole", ACCOUNT, ROLLOUT_LABELS, namespace, [
            # Cordon, label, annotate: only the nodes of the table.
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"], "resourceNames": names},
            # The GPU pods on a node in any namespace, the DRA kubelet plugin's pod on it.
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
            # What each node publishes through DRA.
            {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]},
        ]),
        cluster_role_binding=manifests.binding("ClusterRole", ACCOUNT, ROLLOUT_LABELS, namespace),
        role=manifests.role("Role", ACCOUNT, ROLLOUT_LABELS, namespace, [
            # The probe of each node moved to DRA: its claim and its Job, made and deleted here.
            {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["create", "delete"]},
            {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "delete"]},
        ]),
        role_binding=manifests.binding("Role", ACCOUNT, ROLLOUT_LABELS, namespace),
        script=manifests.config_map(script_name, ROLLOUT_LABELS, namespace, script),
        table=manifests.config_map(table_name, ROLLOUT_LABELS, namespace, table_data),
        job=job,
        timeout_seconds=deadline + 60,
    )
