"""MIG rollout: the in-cluster Job that changes nodes' MIG configs safely, as plain manifests.

MIG manager reconfigures a node when its `nvidia.com/mig.config` label changes, and needs the
GPUs idle to do it. So the stack never sets that label itself (the NodePatch leaves it out):
one Job, created after the operator release, runs config/mig-rollout/mig-rollout.sh, which for
each node whose label differs from its config cordons it, evicts its GPU pods through the
Eviction API (PodDisruptionBudgets hold it back up to `mig.rollout.evictionTimeout`), sets the
label, waits for `nvidia.com/mig.config.state=success` and the capacity table's resources, and
uncordons it, in waves of `mig.rollout.maxUnavailable` nodes, a wave only after the previous
one succeeded. A node whose label already selects its config (and succeeded) is left alone, so
the Job is a no-op where nothing changed; the Job's name carries a hash of every node's target
config, so an edit replaces (re-runs) it and an unchanged config never runs it again.

Least privilege: `get`/`patch` on the listed nodes only, `list` pods (to find the GPU pods on a
node), `create` evictions, and in the operator's namespace `get` the MIG manager's pod and log
and `delete` its pod (to retry a config whose last try failed). Nothing here imports Pulumi.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from .capacity import NodeFacts
from .naming import content_hash, content_name
from .config import NodeSettings, Settings
from .images import pull_secret_names

SCRIPT_DIR = Path(__file__).resolve().parents[1] / "config" / "mig-rollout"
SCRIPT = "mig-rollout.sh"
COMMON = "common.sh"
"""The validation payloads' helpers (config/validation/common.sh), which the script sources from
its own directory."""
COMMON_PATH = SCRIPT_DIR.parent / "validation" / COMMON
ACCOUNT = "gpu-stack-mig-rollout"
CORDON_MARK = "gpu-stack/mig-rollout-cordoned"
MIG_MANAGER_SELECTOR = "app=nvidia-mig-manager"
SCRIPT_MOUNT = "/rollout"
TABLE_MOUNT = "/rollout-nodes"
TABLE_KEY = "nodes"
NOBODY = 65534
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-stack", "app.kubernetes.io/part-of": "gpu-mig-rollout"}
SMALL = {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"cpu": "250m", "memory": "128Mi"}}
WAVE_SLACK_SECONDS = 120
"""Per wave, on top of the eviction timeout and the timeout: cordon, labels, log reads."""


@dataclass(frozen=True)
class RolloutNode:
    name: str
    config: str
    """The MIG config its `nvidia.com/mig.config` label selects."""
    expected: dict[str, int]
    """What it advertises once applied (the capacity table's row)."""


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
        return self.job["metadata"]["name"]


def rollout_nodes(settings: Settings) -> list[NodeSettings]:
    """The nodes whose MIG config the rollout sets: every node with `mig` (the rules refuse one
    under mig.strategy none or without the MIG manager)."""
    if settings.mig.strategy == "none" or not settings.mig.manager.enabled:
        return []
    return [n for n in settings.nodes if n.mig is not None]


def wave_size(max_unavailable: int | str, nodes: int) -> int:
    """Nodes per wave: a count as given, a percentage of `nodes` rounded down; at least 1."""
    if isinstance(max_unavailable, str):
        return max(1, nodes * int(max_unavailable.rstrip("%")) // 100)
    return max(1, max_unavailable)


def waves(names: list[str], size: int) -> list[list[str]]:
    """The nodes in order, `size` at a time: the waves the rollout Job forms from the nodes that change."""
    return [names[i : i + size] for i in range(0, len(names), size)]


def table_lines(nodes: tuple[RolloutNode, ...]) -> list[str]:
    return [
        " ".join([n.name, n.config, *(f"{r}={c}" for r, c in sorted(n.expected.items()))]) for n in nodes
    ]


def parse_table(text: str) -> dict[str, str]:
    """Node -> MIG config from the Job's node table (what the diff reads back from a plan)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            out[parts[0]] = parts[1]
    return out


def script_data() -> dict[str, str]:
    """The script ConfigMap's files: the script and the helpers it sources, side by side."""
    return {SCRIPT: (SCRIPT_DIR / SCRIPT).read_text(), COMMON: COMMON_PATH.read_text()}


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(MANAGED_BY)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def build_rollout(settings: Settings, facts: Sequence[NodeFacts]) -> RolloutPlan | None:
    """Every rollout resource as a manifest; None when no node has a MIG config."""
    chosen = rollout_nodes(settings)
    if not chosen:
        return None
    r = settings.mig.rollout
    ns = settings.operator.namespace
    advertised = {f.name: f.advertised for f in facts}
    nodes = tuple(RolloutNode(n.name, n.mig or "", advertised[n.name]) for n in chosen)
    size = wave_size(r.max_unavailable, len(nodes))
    lines = table_lines(nodes)
    script = script_data()
    table_data = {TABLE_KEY: "".join(f"{line}\n" for line in lines)}
    script_name = content_name("mig-rollout-script", script)
    table_name = content_name("mig-rollout-nodes", table_data)
    most_waves = len(waves([n.name for n in nodes], size))
    deadline = most_waves * (r.eviction_timeout + r.timeout + WAVE_SLACK_SECONDS)
    env = {
        "NODES_FILE": f"{TABLE_MOUNT}/{TABLE_KEY}",
        "WAVE_SIZE": size,
        "EVICT": "true" if r.evict else "false",
        "EVICTION_TIMEOUT_SECONDS": r.eviction_timeout,
        "TIMEOUT_SECONDS": r.timeout,
        "OPERATOR_NAMESPACE": ns,
        "MIG_MANAGER_SELECTOR": MIG_MANAGER_SELECTOR,
        # kubectl keeps its discovery cache under $HOME: the writable /tmp.
        "HOME": "/tmp",
    }
    # Named for exactly what it does: a change of any node's target, the waves or the script
    # renames (replaces, re-runs) it; nothing changed, nothing runs.
    ttl = settings.validation.ttl_seconds_after_finished
    # Every spec input is in the hash: a changed spec renames (replaces) the Job, never updates
    # one that ttlSecondsAfterFinished may have removed already.
    hashed: dict[str, Any] = {'nodes': lines, 'env': env, 'image': r.image, 'script': script, 'ttl': ttl}
    secrets = pull_secret_names(settings)
    if secrets:
        hashed["pullSecrets"] = secrets  # only when set: names of existing stacks stay as they are
    name = f"mig-rollout-{content_hash(hashed, 10)}"
    container = {
        "name": "mig-rollout",
        "image": r.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["bash", f"{SCRIPT_MOUNT}/{SCRIPT}"],
        "env": [{"name": k, "value": str(v)} for k, v in env.items()],
        "resources": SMALL,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [
            {"name": "script", "mountPath": SCRIPT_MOUNT, "readOnly": True},
            {"name": "nodes", "mountPath": TABLE_MOUNT, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    pod = {
        "restartPolicy": "Never",
        "serviceAccountName": ACCOUNT,
        "automountServiceAccountToken": True,
        "enableServiceLinks": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": NOBODY,
            "runAsGroup": NOBODY,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        **({"imagePullSecrets": [{"name": n} for n in secrets]} if secrets else {}),
        "volumes": [
            {"name": "script", "configMap": {"name": script_name, "defaultMode": 0o444}},
            {"name": "nodes", "configMap": {"name": table_name, "defaultMode": 0o444}},
            {"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}},
        ],
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            **_meta(name, ns),
            # A failed rollout is re-run (replaced) by the next `pulumi up`, after the cause is fixed.
            "annotations": {"pulumi.com/replaceUnready": "true"},
        },
        "spec": {
            # One try: a second pod would cordon and evict again on its own.
            "backoffLimit": 0,
            "activeDeadlineSeconds": deadline,
            # Kept as long as the validation Jobs (their log says what each wave did); a later
            # MIG edit replaces the Job by name, so a Job already gone is never read back.
            "ttlSecondsAfterFinished": ttl,
            "template": {"metadata": {"labels": dict(MANAGED_BY)}, "spec": pod},
        },
    }
    node_names = [n.name for n in nodes]
    return RolloutPlan(
        nodes=nodes,
        wave_size=size,
        evict=r.evict,
        service_account={
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _meta(ACCOUNT, ns),
            "automountServiceAccountToken": False,
        },
        cluster_role={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(ACCOUNT),
            "rules": [
                # Cordon, label, annotate: only the nodes of the table.
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"], "resourceNames": node_names},
                # The GPU pods on a node, in any namespace (a field selector narrows a list, not a grant).
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
                {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
            ],
        },
        cluster_role_binding={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": _meta(ACCOUNT),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": ns}],
        },
        role={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(ACCOUNT, ns),
            "rules": [
                # The MIG manager's log for a failure message (`kubectl logs` reads the pod first), its
                # pod restarted to retry a config whose last try failed.
                {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]},
            ],
        },
        role_binding={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": _meta(ACCOUNT, ns),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": ns}],
        },
        script={"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(script_name, ns), "data": script, "immutable": True},
        table={"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(table_name, ns), "data": table_data, "immutable": True},
        job=job,
        timeout_seconds=deadline + 60,
    )
