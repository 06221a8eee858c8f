"""MIG layout guard: the Job that refuses a layout edited under a config name nodes select.

MIG manager re-applies its node's current `nvidia.com/mig.config` whenever its pod starts, and
the operator restarts every MIG manager pod when the ClusterPolicy names a new mig-parted
ConfigMap; a config whose layout changed under the same name would so re-partition its nodes
without cordon or drain. The release waits for this Job, which runs
config/mig-rollout/mig-layout-guard.sh: it reads the ConfigMap the MIG manager DaemonSet mounts,
compares its layout fingerprints (annotation `gpu-stack/mig-layouts`, see mig.py) with the new
ones and fails, naming the configs and the nodes, when a changed layout is in use. `pulumi up`
then stops before the release changes. Only with custom configs (`mig.profiles`); the Job is
named for the new fingerprints, so it runs again only when a layout changes.

Least privilege: `get` the MIG manager DaemonSet and ConfigMaps in the operator's namespace,
`get` the stack's MIG-capable nodes by name (the nodes whose label counts; a node outside the
stack that selects a stack config is not seen). Nothing here imports Pulumi.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..config.mig import MigSettings
from .labels import part_of
from .mig import MigConfig, layouts_text
from .mig_rollout import CONTROL_PLANE_TOLERATION, kubectl_pod, script_data
from .naming import content_hash, content_name

SCRIPT = "mig-layout-guard.sh"
ACCOUNT = "gpu-stack-mig-layout-guard"
MIG_MANAGER_DAEMONSET = "nvidia-mig-manager"
DEADLINE_SECONDS = 300
"""A handful of reads; the image pull is most of it."""


@dataclass(frozen=True)
class GuardPlan:
    service_account: dict[str, Any]
    cluster_role: dict[str, Any]
    cluster_role_binding: dict[str, Any]
    role: dict[str, Any]
    role_binding: dict[str, Any]
    script: dict[str, Any]
    job: dict[str, Any]
    timeout_seconds: int

    @property
    def job_name(self) -> str:
        return str(self.job["metadata"]["name"])


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    labels = part_of("gpu-mig-layout-guard")
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def _binding(kind: str, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": f"{kind}Binding",
        "metadata": _meta(ACCOUNT, ns if kind == "Role" else None),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": ACCOUNT},
        "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": ns}],
    }


def build_guard(
    settings: MigSettings, mig: MigConfig, nodes: Sequence[str], *, namespace: str, ttl: int, pull_secrets: Sequence[str]
) -> GuardPlan | None:
    """The guard's manifests for the stack's MIG-capable `nodes` (the rollout's table); None
    without custom MIG configs, without the MIG manager or without such nodes. `settings`:
    `mig.*` (rollout image already mirrored); `namespace`: the operator's; `ttl`:
    validation.ttlSecondsAfterFinished; `pull_secrets`: images.pull_secret_names, derived once."""
    if mig.configmap_name is None or not mig.layouts or not settings.manager.enabled or not nodes:
        return None
    ns = namespace
    image = settings.rollout.image
    script = script_data(SCRIPT)
    script_name = content_name("mig-layout-guard-script", script)
    env = {
        "NEW_CONFIGMAP": mig.configmap_name,
        "NEW_LAYOUTS": layouts_text(mig.layouts),
        "NODES": " ".join(nodes),
        "OPERATOR_NAMESPACE": ns,
        "MIG_MANAGER_DAEMONSET": MIG_MANAGER_DAEMONSET,
        "HOME": "/tmp",
    }
    pod = kubectl_pod(ACCOUNT, image, SCRIPT, script_name, env, pull_secrets=pull_secrets)
    pod["tolerations"] = [CONTROL_PLANE_TOLERATION]
    # Every spec input is in the name (the pod names the content-named script): a new layout, node
    # list or script re-runs it, nothing else does.
    name = f"mig-layout-guard-{content_hash({'pod': pod, 'labels': _meta('')['labels'], 'ttl': ttl}, 10)}"
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {**_meta(name, ns), "annotations": {"pulumi.com/replaceUnready": "true"}},
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "ttlSecondsAfterFinished": ttl,
            "template": {"metadata": {"labels": _meta(name)["labels"]}, "spec": pod},
        },
    }
    return GuardPlan(
        service_account={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(ACCOUNT, ns),
                         "automountServiceAccountToken": False},
        cluster_role={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": _meta(ACCOUNT),
            # The labels of the stack's own nodes, by name: read-only.
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"], "resourceNames": list(nodes)}],
        },
        cluster_role_binding=_binding("ClusterRole", ns),
        role={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(ACCOUNT, ns),
            "rules": [
                {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"], "resourceNames": [MIG_MANAGER_DAEMONSET]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
            ],
        },
        role_binding=_binding("Role", ns),
        script={"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(script_name, ns), "data": script, "immutable": True},
        job=job,
        timeout_seconds=DEADLINE_SECONDS + 60,
    )
