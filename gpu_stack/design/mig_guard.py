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
from . import kubectl_manifests as manifests
from .labels import part_of
from .mig import MigConfig, layouts_text
from .mig_rollout import KUBECTL_JOB_TOLERATIONS, kubectl_pod, script_data
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
    pod["tolerations"] = [dict(t) for t in KUBECTL_JOB_TOLERATIONS]
    # Every spec input is in the name (the pod names the content-named script): a new layout, node
    # list or script re-runs it, nothing else does.
    own_labels = part_of("gpu-mig-layout-guard")
    name = f"mig-layout-guard-{content_hash({'pod': pod, 'labels': own_labels, 'ttl': ttl}, 10)}"
    return GuardPlan(
        service_account=manifests.service_account(ACCOUNT, own_labels, ns),
        # The labels of the stack's own nodes, by name: read-only.
        cluster_role=manifests.role("ClusterRole", ACCOUNT, own_labels, ns, [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"], "resourceNames": list(nodes)},
        ]),
        cluster_role_binding=manifests.binding("ClusterRole", ACCOUNT, own_labels, ns),
        role=manifests.role("Role", ACCOUNT, own_labels, ns, [
            {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"], "resourceNames": [MIG_MANAGER_DAEMONSET]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
        ]),
        role_binding=manifests.binding("Role", ACCOUNT, own_labels, ns),
        script=manifests.config_map(script_name, own_labels, ns, script),
        job=manifests.job(name, own_labels, ns, pod, backoff_limit=0, deadline=DEADLINE_SECONDS, ttl=ttl),
        timeout_seconds=DEADLINE_SECONDS + 60,
    )
