"""Node labels from one Job: the labels the stack decides for its nodes (sharing profile, a MIG
config the rollout does not set) as one ConfigMap table, applied by one Job before the operator
release, instead of one Pulumi NodePatch per node.

Why a Job: a NodePatch keeps in the state the whole Node it patched (the server-side apply's
answer: images, conditions, every label, managed fields), tens of KB per GPU node (issue 23,
BENCHMARKS.md "State per node"). The table holds a line per node, `<node> [<key>=<value> ...]`,
for every node of the stack (a node without labels too, so that a profile removed from a node
removes its label). config/mig-rollout/node-labels.sh applies each node server-side as field
manager `gpu-stack-node-labels`: what the manager applied before and the line no longer sets is
removed by the API server; labels set by anyone else stay. A node missing from the cluster is
never applied (that would create a Node) and fails the Job, named. The table and Job are named
for their content: a changed line renames (replaces, re-runs) the Job, an unchanged table never
runs it again.

What the Job does not do: on `pulumi destroy` nothing runs in the cluster, so the labels stay on
the nodes (the device plugin that read them goes with the release); a node removed from the stack
keeps its labels too (the Job may only touch the table's nodes). docs/upgrades-and-destroy.md says
how to remove them.

Least privilege: `get` and `patch` on the table's nodes, by name; nothing in any namespace.
Nothing here imports Pulumi.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import kubectl_manifests as manifests
from .labels import part_of
from .mig_rollout import KUBECTL_JOB_TOLERATIONS, kubectl_pod, script_data
from .naming import content_hash, content_name

SCRIPT = "node-labels.sh"
ACCOUNT = "gpu-stack-node-labels"
FIELD_MANAGER = "gpu-stack-node-labels"
"""The field manager of the Job's server-side apply: it owns the labels the stack set."""
TABLE_MOUNT = "/node-labels"
TABLE_KEY = "nodes"
PART_OF = "gpu-node-labels"
DEADLINE_SECONDS = 300
"""The image pull, a read per 50 nodes and one apply; plus PER_NODE_SECONDS per node."""
PER_NODE_SECONDS = 0.2


@dataclass(frozen=True)
class LabelJobPlan:
    labels: dict[str, dict[str, str]]
    """Node -> the labels the Job sets on it (every node of the stack, maybe none)."""
    service_account: dict[str, Any]
    cluster_role: dict[str, Any]
    cluster_role_binding: dict[str, Any]
    script: dict[str, Any]
    table: dict[str, Any]
    job: dict[str, Any]
    timeout_seconds: int
    role: dict[str, Any] | None = None
    """No namespaced grant: the Job only reads and patches nodes."""
    role_binding: dict[str, Any] | None = None

    @property
    def job_name(self) -> str:
        return str(self.job["metadata"]["name"])


def table_lines(labels: Mapping[str, Mapping[str, str]], nodes: Sequence[str]) -> list[str]:
    """`<node> [<key>=<value> ...]`, one per node of `nodes` (labels sorted by key)."""
    return [" ".join([n, *(f"{k}={v}" for k, v in sorted((labels.get(n) or {}).items()))]) for n in nodes]


def parse_table(text: str) -> dict[str, dict[str, str]]:
    """Node -> labels from the Job's table (the inverse of table_lines)."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        node, *pairs = line.split()
        out[node] = dict(p.split("=", 1) for p in pairs)
    return out


def build_label_job(
    nodes: Sequence[str], labels: Mapping[str, Mapping[str, str]], *,
    namespace: str, image: str, ttl: int, pull_secrets: Sequence[str],
) -> LabelJobPlan | None:
    """The Job's manifests for the stack's `nodes` (names, in order) and `labels` (node -> labels),
    run with the rollout's kubectl `image` in `namespace`; None without nodes."""
    nodes = list(nodes)
    if not nodes:
        return None
    ns = namespace
    table_data = {TABLE_KEY: "".join(f"{line}\n" for line in table_lines(labels, nodes))}
    script = script_data(SCRIPT)
    script_name = content_name("node-labels-script", script)
    table_name = content_name("node-labels-table", table_data)
    env = {"NODES_FILE": f"{TABLE_MOUNT}/{TABLE_KEY}", "FIELD_MANAGER": FIELD_MANAGER, "HOME": "/tmp"}
    deadline = DEADLINE_SECONDS + int(len(nodes) * PER_NODE_SECONDS)
    pod = kubectl_pod(ACCOUNT, image, SCRIPT, script_name, env,
                      [("nodes", table_name, TABLE_MOUNT)], list(pull_secrets))
    pod["tolerations"] = [dict(t) for t in KUBECTL_JOB_TOLERATIONS]
    # Every spec input is in the name (the pod names the content-named table and script): a
    # changed line re-runs it, nothing else does.
    own_labels = part_of(PART_OF)
    name = f"node-labels-{content_hash({'pod': pod, 'labels': own_labels, 'deadline': deadline, 'ttl': ttl}, 10)}"
    return LabelJobPlan(
        labels={n: dict(labels.get(n) or {}) for n in nodes},
        service_account=manifests.service_account(ACCOUNT, own_labels, ns),
        # Read (to never apply a node that is not there) and label the stack's nodes, by name.
        cluster_role=manifests.role("ClusterRole", ACCOUNT, own_labels, ns, [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"], "resourceNames": nodes},
        ]),
        cluster_role_binding=manifests.binding("ClusterRole", ACCOUNT, own_labels, ns),
        script=manifests.config_map(script_name, own_labels, ns, script),
        table=manifests.config_map(table_name, own_labels, ns, table_data),
        job=manifests.job(name, own_labels, ns, pod, backoff_limit=1, deadline=deadline, ttl=ttl),
        timeout_seconds=deadline + 60,
    )
