"""MIG rollout: the in-cluster Job that changes nodes' MIG configs safely, as plain manifests.

MIG manager reconfigures a node when its `nvidia.com/mig.config` label changes, and needs the
GPUs idle to do it. So the stack never sets that label itself (the NodePatch leaves it out):
one Job, created after the operator release, runs config/mig-rollout/mig-rollout.sh, which for
each node whose label differs from its config refuses a wave with GPU pods a drain cannot evict
(unless `mig.rollout.ignoreUnevictable`), waits until the node's MIG manager pod is ready and
mounts the release's mig-parted ConfigMap (`mig.rollout.managerTimeout`: the operator rolls the
MIG manager onto a new ConfigMap node by node, and an old pod would fail a new config), cordons
it, evicts its GPU pods through the Eviction API (PodDisruptionBudgets hold it back up to
`mig.rollout.evictionTimeout`), sets the label, waits for `nvidia.com/mig.config.state=success`
and the capacity table's resources, and uncordons it, in waves of `mig.rollout.maxUnavailable`
nodes, a wave only after the previous one succeeded. A MIG-capable node without `mig` is in the
table as "restore": if the rollout set its config earlier (annotation `gpu-stack/mig-config`)
it goes back to whole GPUs (all-disabled) the same way; a config set by anyone else stays.
A MIG manager that gave up half-way (k8s-mig-manager v0.13.1 returns early, e.g. when an operand
pod is slow to go, leaving `pending` or `rebooting` with the operands paused and waiting for a new
label value) is read from its own log: in a wave that fails the wave at once with its error line,
and a later run restarts it (deletes its pod), as it does for a config that failed.
A node whose label already selects its config (and succeeded) is left alone, so the Job is a
no-op where nothing changed; the Job's name carries a hash of every node's target config, so an
edit replaces (re-runs) it and an unchanged config never runs it again. The Job's pod keeps off
the nodes of its table (a node it reboots would kill it mid-wave).

Least privilege: `get`/`patch` on the listed nodes only, `list` pods (to find the GPU pods on a
node and the MIG manager's pod), `create` evictions, and in the operator's namespace `get` the
MIG manager's pod and log and `delete` its pod (to retry a config whose last try failed or
that its manager gave up on).
Nothing here imports Pulumi.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config.gpu_models import ALL_DISABLED
from ..config.mig import MigSettings
from ..config.package_data import config_path
from . import kubectl_manifests as manifests
from .capacity import NodeFacts
from .labels import CONTROL_PLANE_TOLERATION, GPU_NODE_TOLERATION, part_of
from .mig import MigConfig
from .naming import content_hash, content_name

SCRIPT_DIR = config_path("mig-rollout")
SCRIPT = "mig-rollout.sh"
COMMON = "common.sh"
"""The validation payloads' helpers (config/validation/common.sh), which the script sources from
its own directory."""
COMMON_PATH = SCRIPT_DIR.parent / "validation" / COMMON
DRAIN = "drain.sh"
"""The drain the MIG and DRA rollouts share (config/validation/drain.sh), sourced the same way."""
HELPERS = {COMMON: COMMON_PATH, DRAIN: SCRIPT_DIR.parent / "validation" / DRAIN}
ACCOUNT = "gpu-stack-mig-rollout"
CORDON_MARK = "gpu-stack/mig-rollout-cordoned"
SET_MARK = "gpu-stack/mig-config"
"""The MIG config the rollout set on a node: only such a node is restored to whole GPUs."""
MIG_MANAGER_SELECTOR = "app=nvidia-mig-manager"
SCRIPT_MOUNT = "/rollout"
TABLE_MOUNT = "/rollout-nodes"
TABLE_KEY = "nodes"
NOBODY = 65534
ROLLOUT_LABELS = part_of("gpu-mig-rollout")
SMALL = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "250m", "memory": "128Mi"}}
WAVE_SLACK_SECONDS = 120
"""Per wave, on top of its waits (the MIG manager twice, the eviction, the state): cordon,
labels, log reads."""
KUBECTL_JOB_TOLERATIONS = [CONTROL_PLANE_TOLERATION, GPU_NODE_TOLERATION]
"""The kubectl Jobs (label Job, MIG layout guard, MIG rollout) use no GPU, but may have to run
on a control-plane node (in a cluster of GPU workers, the one place off the nodes the rollout
changes) or on a GPU node: managed clusters have no control-plane Node, and GPU node pools carry the
`nvidia.com/gpu` NoSchedule taint (GKE and AKS set it, many sites do). Where it runs among those
is the affinity's choice (off the nodes the rollout changes)."""


@dataclass(frozen=True)
class RolloutNode:
    name: str
    config: str
    """The MIG config its `nvidia.com/mig.config` label selects."""
    expected: dict[str, int]
    """What it advertises once applied (the capacity table's row)."""
    restore: bool = False
    """No `mig`: back to all-disabled only if the rollout set its MIG config earlier."""


@dataclass(frozen=True)
class RolloutPlan:
    nodes: tuple[RolloutNode, ...]
    wave_size: int
    evict: bool
    service_account: dict[str, Any]
    cluster_role: dict[str, Any]
    cluster_role_binding: dict[str, Any]
    role: dict[str, Any]
    role_binding: dict[str, Any]
    script: dict[str, Any]
    table: dict[str, Any]
    job: dict[str, Any]
    timeout_seconds: int
    """How long Pulumi waits for the Job (customTimeouts): a little over its activeDeadlineSeconds."""

    @property
    def job_name(self) -> str:
        return str(self.job["metadata"]["name"])


def rollout_nodes(mig: MigSettings, facts: Sequence[NodeFacts]) -> list[RolloutNode]:
    """The nodes whose MIG config the rollout sets: every node with `mig` (the rules refuse one
    under mig.strategy none or without the MIG manager), and every MIG-capable node without it
    (restored to whole GPUs where the rollout set its config earlier)."""
    if mig.strategy == "none" or not mig.manager.enabled:
        return []
    out = []
    for f in facts:
        if f.node.mig is not None:
            out.append(RolloutNode(f.name, f.node.mig, f.advertised))
        elif f.model is not None and f.model.mig_capable:
            out.append(RolloutNode(f.name, ALL_DISABLED, f.advertised, restore=True))
    return out


def wave_size(max_unavailable: int | str, nodes: int) -> int:
    """Nodes per wave: a count as given, a percentage of `nodes` rounded down; at least 1."""
    if isinstance(max_unavailable, str):
        return max(1, nodes * int(max_unavailable.rstrip("%")) // 100)
    return max(1, max_unavailable)


def waves(names: list[str], size: int) -> list[list[str]]:
    """The nodes in order, `size` at a time: the waves the rollout Job forms from the nodes that change."""
    return [names[i : i + size] for i in range(0, len(names), size)]


def table_lines(nodes: tuple[RolloutNode, ...]) -> list[str]:
    """`<node> set|restore <config> [<resource>=<count> ...]`, one per node."""
    return [
        " ".join([n.name, "restore" if n.restore else "set", n.config, *(f"{r}={c}" for r, c in sorted(n.expected.items()))])
        for n in nodes
    ]


def parse_table(text: str) -> dict[str, tuple[str, str]]:
    """Node -> (set | restore, MIG config) from the Job's node table."""
    out: dict[str, tuple[str, str]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            out[parts[0]] = (parts[1], parts[2])
    return out


def keep_off(names: list[str], required: bool) -> dict[str, Any]:
    """A node affinity that keeps a pod off `names` (by `metadata.name`, which the scheduler
    matches exactly: hostname labels may differ): required, or preferred with the highest weight.
    kube-scheduler honours `matchFields` on metadata.name in both (k8s.io/component-helpers
    v0.34.4, scheduling/corev1/nodeaffinity/nodeaffinity.go: extractNodeFields). The API server
    allows one value per node field requirement, so each node is one `NotIn` of the term (the
    requirements of a term are ANDed)."""
    term = {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [n]} for n in names]}
    if required:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": term}]}}


def kubectl_pod(account: str, image: str, script: str, script_configmap: str, env: dict[str, Any],
                extra_volumes: Sequence[tuple[str, str, str]] = (),
                pull_secrets: Sequence[str] = ()) -> dict[str, Any]:
    """The pod of a Job that runs one POSIX sh script of config/mig-rollout with kubectl, as
    `nobody` on a read-only root: the script ConfigMap at /rollout, each (volume, ConfigMap,
    mount path) of `extra_volumes`, a small writable /tmp; it pulls with `pull_secrets`."""
    mounts = [{"name": "script", "mountPath": SCRIPT_MOUNT, "readOnly": True}]
    volumes: list[dict[str, Any]] = [{"name": "script", "configMap": {"name": script_configmap, "defaultMode": 0o444}}]
    for volume, configmap, path in extra_volumes:
        mounts.append({"name": volume, "mountPath": path, "readOnly": True})
        volumes.append({"name": volume, "configMap": {"name": configmap, "defaultMode": 0o444}})
    mounts.append({"name": "tmp", "mountPath": "/tmp"})
    volumes.append({"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}})
    container = {
        "name": script.removesuffix(".sh"),
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        # `sh` by PATH, as the chart's own hooks start it on the operator image (busybox's: no bash there)
        "command": ["sh", f"{SCRIPT_MOUNT}/{script}"],
        "env": [{"name": k, "value": str(v)} for k, v in env.items()],
        "resources": SMALL,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": mounts,
    }
    return {
        "restartPolicy": "Never",
        "serviceAccountName": account,
        "automountServiceAccountToken": True,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NOBODY,
            "runAsGroup": NOBODY,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        **({"imagePullSecrets": [{"name": n} for n in pull_secrets]} if pull_secrets else {}),
        "volumes": volumes,
    }


def with_helpers(script: str, text: str) -> dict[str, str]:
    """A script ConfigMap's files: the script (its TEXT) and the helpers (HELPERS) it sources from
    its own directory, side by side."""
    return {script: text, **{name: path.read_text() for name, path in HELPERS.items()
                             if f'"$(dirname "$0")/{name}"' in text}}


def script_data(script: str = SCRIPT) -> dict[str, str]:
    """A script ConfigMap's files: the script and the helpers it sources, side by side."""
    return with_helpers(script, (SCRIPT_DIR / script).read_text())


def build_rollout(
    settings: MigSettings,
    facts: Sequence[NodeFacts],
    mig: MigConfig,
    *,
    namespace: str,
    ttl: int,
    pull_secrets: Sequence[str],
) -> RolloutPlan | None:
    """Every rollout resource as a manifest; None when no node has or may need a MIG config.

    `settings`: `mig.*` (rollout image already mirrored); `namespace`: the operator's; `ttl`:
    validation.ttlSecondsAfterFinished; `pull_secrets`: images.pull_secret_names, derived once."""
    nodes = tuple(rollout_nodes(settings, facts))
    if not nodes:
        return None
    r = settings.rollout
    ns = namespace
    size = wave_size(r.max_unavailable, len(nodes))
    lines = table_lines(nodes)
    script = script_data()
    table_data = {TABLE_KEY: "".join(f"{line}\n" for line in lines)}
    script_name = content_name("mig-rollout-script", script)
    table_name = content_name("mig-rollout-nodes", table_data)
    most_waves = len(waves([n.name for n in nodes], size))
    # Per wave: the MIG manager waits (before the cordon, before the label), the drain, the state.
    deadline = most_waves * (2 * r.manager_timeout + r.eviction_timeout + r.timeout + WAVE_SLACK_SECONDS)
    env = {
        "NODES_FILE": f"{TABLE_MOUNT}/{TABLE_KEY}",
        "WAVE_SIZE": size,
        "EVICT": "true" if r.evict else "false",
        "IGNORE_UNEVICTABLE": "true" if r.ignore_unevictable else "false",
        "EVICTION_TIMEOUT_SECONDS": r.eviction_timeout,
        "MANAGER_TIMEOUT_SECONDS": r.manager_timeout,
        "TIMEOUT_SECONDS": r.timeout,
        "OPERATOR_NAMESPACE": ns,
        "MIG_MANAGER_SELECTOR": MIG_MANAGER_SELECTOR,
        "MIG_CONFIGMAP": mig.mounted_name,
        # kubectl keeps its discovery cache under $HOME, the script its scratch files under
        # $TMPDIR: the writable /tmp.
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
    }
    node_names = [n.name for n in nodes]
    pod = kubectl_pod(ACCOUNT, r.image, SCRIPT, script_name, env, [("nodes", table_name, TABLE_MOUNT)], pull_secrets)
    # Off the nodes it changes: with reboots on, a node's reboot would kill the Job mid-wave, so
    # that is required (the Job needs a node outside its table; a control-plane node will do);
    # without, a preference (a one-node cluster still runs it, and nothing there stops it).
    pod["affinity"] = keep_off(node_names, required=settings.manager.with_reboot)
    pod["tolerations"] = [dict(t) for t in KUBECTL_JOB_TOLERATIONS]
    # Named for exactly what it does: a change of any node's target, the waves or the script
    # renames (replaces, re-runs) it (the pod names the content-named script and table); nothing
    # changed, nothing runs. Every spec input is in the hash: a changed spec renames (replaces) the
    # Job, never updates one that ttlSecondsAfterFinished may have removed already.
    name = f"mig-rollout-{content_hash({'pod': pod, 'labels': ROLLOUT_LABELS, 'deadline': deadline, 'ttl': ttl}, 10)}"
    # One try (backoffLimit 0): a second pod would cordon and evict again on its own. Kept as long
    # as the validation Jobs (their log says what each wave did); a later MIG edit replaces the Job
    # by name, so a Job already gone is never read back.
    job = manifests.job(name, ROLLOUT_LABELS, ns, pod, backoff_limit=0, deadline=deadline, ttl=ttl)
    return RolloutPlan(
        nodes=nodes,
        wave_size=size,
        evict=r.evict,
        service_account=manifests.service_account(ACCOUNT, ROLLOUT_LABELS, ns),
        cluster_role=manifests.role("ClusterRole", ACCOUNT, ROLLOUT_LABELS, ns, [
            # Cordon, label, annotate: only the nodes of the table.
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"], "resourceNames": node_names},
            # The GPU pods on a node, in any namespace (a field selector narrows a list, not a grant).
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
            {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        ]),
        cluster_role_binding=manifests.binding("ClusterRole", ACCOUNT, ROLLOUT_LABELS, ns),
        role=manifests.role("Role", ACCOUNT, ROLLOUT_LABELS, ns, [
            # The MIG manager's log for a failure message (`kubectl logs` reads the pod first), its
            # pod restarted to retry a config whose last try failed.
            {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]},
        ]),
        role_binding=manifests.binding("Role", ACCOUNT, ROLLOUT_LABELS, ns),
        script=manifests.config_map(script_name, ROLLOUT_LABELS, ns, script),
        table=manifests.config_map(table_name, ROLLOUT_LABELS, ns, table_data),
        job=job,
        timeout_seconds=deadline + 60,
    )
