"""The MIG rollout in the plan: the Job that relabels nodes after draining them, its least-privilege
RBAC, its waves, its ordering between the operator release and the validation Jobs, its settings,
and what `diff` tells a reviewer about a MIG edit."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from gpu_stack.design.mig_rollout import wave_size, waves
from gpu_stack.offline.diff import diff_plans, mig_rollout, render_markdown, render_text
from gpu_stack.offline.effects import add_objects_and_effects
from gpu_stack.offline.runner import PROJECT_DIR

from ..helpers import assert_refused, committed_project_copy, plan_of, plan_stack_file, set_path
from .test_validation_jobs import closure, schema_version

JOB = "kubernetes:batch/v1:Job"
NODE_PATCH = "kubernetes:core/v1:NodePatch"
ROLLOUT = "mig-rollout-job"


def _nodes(*specs: tuple[str, str | None]) -> list[dict]:
    return [{"name": name, "gpu": {"model": "H200-141GB", "count": 8}, **({"mig": mig} if mig else {})} for name, mig in specs]


def mig_config(*specs: tuple[str, str | None], **rollout) -> dict:
    cfg: dict[str, Any] = {
        "mig": {
            "strategy": "mixed",
            "profiles": {"inference": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}}]},
        },
        "nodes": _nodes(*specs),
    }
    if rollout:
        cfg["mig"]["rollout"] = rollout
    return cfg


def env(job) -> dict[str, str]:
    (container,) = job.inputs["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def table(plan) -> list[list[str]]:
    return [line.split() for line in plan.by_name("mig-rollout-nodes").inputs["data"]["nodes"].splitlines()]


@pytest.fixture(scope="module")
def prod():
    return plan_stack_file("prod")


# --------------------------------------------------------------------------- the Job
def test_the_rollout_job_sets_every_mig_label_and_the_node_patch_none(prod):
    job = prod.by_name(ROLLOUT)
    assert table(prod) == [
        ["gpu-prod-h200-1", "set", "inference-balanced", "nvidia.com/mig-1g.18gb=16", "nvidia.com/mig-2g.35gb=8", "nvidia.com/mig-3g.71gb=8"],
        ["gpu-prod-h200-2", "set", "inference-balanced", "nvidia.com/mig-1g.18gb=16", "nvidia.com/mig-2g.35gb=8", "nvidia.com/mig-3g.71gb=8"],
        ["gpu-prod-h200-3", "set", "all-disabled", "nvidia.com/gpu=8"],
    ]
    # The expected resources are the capacity table's rows.
    rows = {r["node"]: r["advertises"] for r in prod.capacity}
    for node, _how, _config, *pairs in table(prod):
        assert dict(p.split("=") for p in pairs) == {k: str(v) for k, v in rows[node].items()}
    assert not any("nvidia.com/mig.config" in p.inputs["metadata"].get("labels", {}) for p in prod.of_type(NODE_PATCH))
    assert env(job) == {
        "NODES_FILE": "/rollout-nodes/nodes",
        "WAVE_SIZE": "1",
        "EVICT": "true",
        "IGNORE_UNEVICTABLE": "false",
        "EVICTION_TIMEOUT_SECONDS": "600",
        "MANAGER_TIMEOUT_SECONDS": "900",
        "TIMEOUT_SECONDS": "1800",
        "OPERATOR_NAMESPACE": "gpu-operator",
        "MIG_MANAGER_SELECTOR": "app=nvidia-mig-manager",
        # The ConfigMap the release points the MIG manager at: its pods must mount it before a relabel.
        "MIG_CONFIGMAP": prod.by_name("gpu-operator-mig-config").inputs["metadata"]["name"],
        "HOME": "/tmp",
        # the script's scratch files (each eviction's body) in the pod's own /tmp
        "TMPDIR": "/tmp",
    }
    spec = job.inputs["spec"]
    assert spec["backoffLimit"] == 0
    assert spec["ttlSecondsAfterFinished"] == 86400  # validation.ttlSecondsAfterFinished
    # Three nodes in waves of one: each may wait twice for the MIG manager, then the eviction
    # timeout, the timeout and 120 s.
    assert spec["activeDeadlineSeconds"] == 3 * (2 * 900 + 600 + 1800 + 120)
    assert job.options["customTimeouts"] == {"create": "13020s", "update": "13020s"}
    # A failed rollout (init error) is replaced on the next `up`, never retried as an update that
    # reads the Job its TTL removed; the old Job of the same name goes first.
    assert job.options["replaceOnChanges"] == ["*"] and job.options["deleteBeforeReplace"] is True
    assert job.inputs["metadata"]["namespace"] == "gpu-operator"
    script = prod.by_name("mig-rollout-script").inputs["data"]
    assert script == {
        "mig-rollout.sh": (PROJECT_DIR / "config/mig-rollout/mig-rollout.sh").read_text(),
        "common.sh": (PROJECT_DIR / "config/validation/common.sh").read_text(),
        "drain.sh": (PROJECT_DIR / "config/validation/drain.sh").read_text(),
    }


def test_the_rollout_runs_after_the_release_and_validation_after_the_rollout(prod):
    assert "gpu-operator-release" in prod.by_name(ROLLOUT).depends_on
    validation_jobs = [r for r in prod.of_type(JOB) if r.parent == "validation"]
    assert validation_jobs
    for job in validation_jobs:
        assert ROLLOUT in closure(prod, job.name), job.name


def test_rbac_is_least_privilege(prod):
    cluster_role = prod.by_name("mig-rollout-cluster-role").inputs
    assert cluster_role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"],
         "resourceNames": ["gpu-prod-h200-1", "gpu-prod-h200-2", "gpu-prod-h200-3"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    ]
    role = prod.by_name("mig-rollout-role").inputs
    assert role["metadata"]["namespace"] == "gpu-operator"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]},
    ]
    account = prod.by_name("mig-rollout-account").inputs
    pod = prod.by_name(ROLLOUT).inputs["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == account["metadata"]["name"]
    for binding in ("mig-rollout-cluster-role-binding", "mig-rollout-role-binding"):
        assert prod.by_name(binding).inputs["subjects"] == [
            {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "gpu-operator"}
        ]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}
    }


@pytest.mark.parametrize("minor", ["1.29", "1.31", "1.34"])
def test_rollout_manifests_are_valid_kubernetes(minor):
    cfg = mig_config(("a", "inference"), ("b", "all-disabled"))
    cfg["kubernetes"] = {"version": minor}
    plan = plan_of(cfg)
    for parent in ("mig-rollout", "gpu-operator-mig-layout-guard"):
        resources = [r for r in plan.resources if r.parent == parent and r.custom]
        assert {r.type.rsplit(":", 1)[-1] for r in resources} == {
            "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Job"
        }
    resources = [r for r in plan.resources if r.parent in ("mig-rollout", "gpu-operator-mig-layout-guard") and r.custom]
    for resource in resources:
        kubernetes_validate.validate(resource.inputs, schema_version(minor), strict=True)


def test_no_mig_capable_node_no_rollout():
    plan = plan_of({"nodes": [{"name": "a", "gpu": {"model": "L40S", "count": 4}}]})
    assert not [r for r in plan.resources if r.name.startswith("mig-rollout")]


def test_a_mig_capable_node_without_mig_is_restored_to_whole_gpus_if_the_rollout_set_it():
    # Removing nodes[1].mig: the node's row expects whole GPUs, and so does its table line.
    plan = plan_of(mig_config(("a", "inference"), ("b", None)))
    assert table(plan) == [
        ["a", "set", "inference", "nvidia.com/mig-1g.18gb=16", "nvidia.com/mig-2g.35gb=8", "nvidia.com/mig-3g.71gb=8"],
        ["b", "restore", "all-disabled", "nvidia.com/gpu=8"],
    ]
    assert {r["node"]: r["advertises"] for r in plan.capacity}["b"] == {"nvidia.com/gpu": 8}
    # The rollout exists even when no node has mig left (the last one's mig removed).
    assert table(plan_of(mig_config(("b", None)))) == [["b", "restore", "all-disabled", "nvidia.com/gpu=8"]]


# --------------------------------------------------------------------------- off the nodes it changes
def _affinity(plan) -> dict:
    return plan.by_name(ROLLOUT).inputs["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]


def test_with_reboots_the_job_may_not_run_on_a_node_of_its_table():
    cfg = mig_config(("a", "inference"), ("b", None))
    cfg["mig"]["manager"] = {"withReboot": True}
    plan = plan_of(cfg)
    # metadata.name, not the hostname label (which may differ from the node's name); one value per
    # requirement, the only form the API server accepts for a node field (ANDed within the term).
    assert _affinity(plan) == {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["a"]},
                         {"key": "metadata.name", "operator": "NotIn", "values": ["b"]}]}]}}
    pod = plan.by_name(ROLLOUT).inputs["spec"]["template"]["spec"]
    # a control-plane node, or a GPU node off the table (GPU pools carry the nvidia.com/gpu taint)
    assert pod["tolerations"] == [
        {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]


def test_every_kubectl_job_tolerates_the_gpu_taint_of_gpu_node_pools():
    # Issue 32: in a managed cluster (no control-plane Node) whose nodes carry nvidia.com/gpu
    # NoSchedule, a Job that tolerates only the control-plane taint is never scheduled, and the
    # release that waits for it is never installed.
    plan = plan_of(mig_config(("a", "inference"), ("b", None)))
    jobs = [r for r in plan.resources if r.type == "kubernetes:batch/v1:Job" and r.parent in ("gpu-operator-node-labels", "mig-rollout", "gpu-operator-mig-layout-guard")]
    assert len(jobs) == 3
    for job in jobs:
        tolerations = job.inputs["spec"]["template"]["spec"]["tolerations"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations, job.name


def test_without_reboots_the_job_prefers_the_nodes_outside_its_table():
    plan = plan_of(mig_config(("a", "inference"), ("b", "inference")))
    assert _affinity(plan) == {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "preference": {
        "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["a"]},
                        {"key": "metadata.name", "operator": "NotIn", "values": ["b"]}]}}]}


# --------------------------------------------------------------------------- the layout guard
GUARD = "gpu-operator-mig-layout-guard-job"


def test_the_release_waits_for_the_layout_guard_which_knows_every_layout(prod):
    guard = prod.by_name(GUARD)
    assert GUARD in prod.by_name("gpu-operator-release").depends_on
    cm = prod.by_name("gpu-operator-mig-config").inputs
    assert "gpu-operator-mig-config" in guard.depends_on
    fingerprints = cm["metadata"]["annotations"]["gpu-stack/mig-layouts"]
    assert [p.split("=")[0] for p in fingerprints.split()] == ["all-disabled", "inference-balanced"]
    assert env(guard) == {
        "NEW_CONFIGMAP": cm["metadata"]["name"],
        "NEW_LAYOUTS": fingerprints,
        "NODES": "gpu-prod-h200-1 gpu-prod-h200-2 gpu-prod-h200-3",
        "OPERATOR_NAMESPACE": "gpu-operator",
        "MIG_MANAGER_DAEMONSET": "nvidia-mig-manager",
        "HOME": "/tmp",
    }
    assert prod.by_name("gpu-operator-mig-layout-guard-role").inputs["rules"] == [
        {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"], "resourceNames": ["nvidia-mig-manager"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]},
    ]
    assert prod.by_name("gpu-operator-mig-layout-guard-cluster-role").inputs["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"],
         "resourceNames": ["gpu-prod-h200-1", "gpu-prod-h200-2", "gpu-prod-h200-3"]}]
    script = prod.by_name("gpu-operator-mig-layout-guard-script").inputs["data"]
    assert script["mig-layout-guard.sh"] == (PROJECT_DIR / "config/mig-rollout/mig-layout-guard.sh").read_text()
    # Like every Job (components/jobs.py): a failed or interrupted guard is replaced on the next
    # `up`, the old Job of the same name deleted first, never updated after its TTL removed it.
    assert guard.options["replaceOnChanges"] == ["*"] and guard.options["deleteBeforeReplace"] is True


def test_a_layout_edit_changes_only_that_fingerprint_and_reruns_the_guard():
    cfg = mig_config(("a", "inference"))
    cfg["mig"]["profiles"]["training"] = [{"devices": "all", "mig-enabled": True, "mig-devices": {"7g.141gb": 1}}]
    before = plan_of(copy.deepcopy(cfg))
    cfg["mig"]["profiles"]["inference"][0]["mig-devices"] = {"1g.18gb": 7}
    after = plan_of(cfg)
    old, new = (dict(p.split("=") for p in env(plan.by_name(GUARD))["NEW_LAYOUTS"].split()) for plan in (before, after))
    assert old.keys() == new.keys() == {"all-disabled", "inference", "training"}
    assert [k for k in old if old[k] != new[k]] == ["inference"]
    assert before.by_name(GUARD).inputs["metadata"]["name"] != after.by_name(GUARD).inputs["metadata"]["name"]


def test_without_custom_configs_there_is_no_guard():
    plan = plan_of({"mig": {"strategy": "mixed"}, "nodes": _nodes(("a", "all-balanced"))})
    assert not [r for r in plan.resources if "layout-guard" in r.name]
    assert env(plan.by_name(ROLLOUT))["MIG_CONFIGMAP"] == "default-mig-parted-config"


# --------------------------------------------------------------------------- re-runs
def test_only_a_mig_edit_renames_the_job():
    cfg = mig_config(("a", "inference"), ("b", "all-disabled"))
    before = plan_of(copy.deepcopy(cfg)).by_name(ROLLOUT).inputs["metadata"]["name"]
    unrelated = set_path(copy.deepcopy(cfg), "validation.timeoutSeconds", 900)
    assert plan_of(unrelated).by_name(ROLLOUT).inputs["metadata"]["name"] == before
    edited = set_path(copy.deepcopy(cfg), "nodes[1].mig", "inference")
    assert plan_of(edited).by_name(ROLLOUT).inputs["metadata"]["name"] != before


def test_an_unrelated_edit_of_the_rollout_job_is_a_replacement_that_deletes_first():
    # Without replaceOnChanges a changed (or failed) rollout Job would be updated in place, and the
    # provider's update reads a Job its TTL may have removed; replaced, the same name goes first.
    cfg = mig_config(("a", "inference"))
    before = plan_of(copy.deepcopy(cfg))
    after = plan_of(set_path(copy.deepcopy(cfg), "validation.ttlSecondsAfterFinished", 3600))
    change = diff_plans(before, after).get(JOB, ROLLOUT)
    assert change is not None and change.action == "replace"
    assert "replaceOnChanges: *" in change.reasons
    assert "deleted before its replacement is created (deleteBeforeReplace)" in change.notes
    assert "! deleted before its replacement is created" in render_text(diff_plans(before, after))


# --------------------------------------------------------------------------- waves
@pytest.mark.parametrize("value,nodes,size", [(1, 100, 1), (3, 2, 3), ("25%", 100, 25), ("10%", 5, 1), ("50%", 3, 1), ("100%", 4, 4)])
def test_wave_size_from_max_unavailable(value, nodes, size):
    assert wave_size(value, nodes) == size


def test_waves_keep_the_node_order():
    assert waves(["a", "b", "c", "d", "e"], 2) == [["a", "b"], ["c", "d"], ["e"]]


def test_percent_max_unavailable_reaches_the_job():
    cfg = mig_config(*((f"n{i}", "inference") for i in range(4)), maxUnavailable="50%", evict=False, evictionTimeout="2m", timeout="1h")
    e = env(plan_of(cfg).by_name(ROLLOUT))
    assert (e["WAVE_SIZE"], e["EVICT"], e["EVICTION_TIMEOUT_SECONDS"], e["TIMEOUT_SECONDS"]) == ("2", "false", "120", "3600")
    cfg = mig_config(("n0", "inference"), managerTimeout="20m", ignoreUnevictable=True)
    e = env(plan_of(cfg).by_name(ROLLOUT))
    assert (e["MANAGER_TIMEOUT_SECONDS"], e["IGNORE_UNEVICTABLE"]) == ("1200", "true")


@pytest.mark.parametrize("key,value,message", [
    ("maxUnavailable", 0, "gpu-stack:mig.rollout.maxUnavailable = 0: must be a node count of at least 1 (e.g. 2) or a percentage from 1% to 100% (e.g. 25%)"),
    ("maxUnavailable", "0%", "gpu-stack:mig.rollout.maxUnavailable = '0%': must be a node count"),
    ("maxUnavailable", "half", "gpu-stack:mig.rollout.maxUnavailable = 'half': must be a node count"),
    ("evictionTimeout", "soon", "gpu-stack:mig.rollout.evictionTimeout = 'soon': must be whole seconds or a duration such as 90s, 10m or 1h30m, from 10s to 24h"),
    ("timeout", 30, "gpu-stack:mig.rollout.timeout = 30: must be whole seconds or a duration such as 90s, 10m or 1h30m, from 60s to 24h"),
    ("evict", "sometimes", "gpu-stack:mig.rollout.evict = 'sometimes': must be true or false"),
    ("managerTimeout", "5s", "gpu-stack:mig.rollout.managerTimeout = '5s': must be whole seconds or a duration such as 90s, 10m or 1h30m, from 30s to 24h"),
    ("ignoreUnevictable", "maybe", "gpu-stack:mig.rollout.ignoreUnevictable = 'maybe': must be true or false"),
    ("maxUnavailble", 2, "gpu-stack:mig.rollout.maxUnavailble: unknown key; did you mean 'maxUnavailable'?"),
])
def test_bad_rollout_settings_are_refused_naming_the_key(key, value, message):
    assert_refused(mig_config(("a", "inference"), **{key: value}), message)


# --------------------------------------------------------------------------- diff
def test_diff_names_the_nodes_drained_and_reconfigured_by_wave():
    nodes = [("a", "all-disabled"), ("b", "all-disabled"), ("c", "inference"), ("d", "all-disabled")]
    before = plan_of(mig_config(*nodes, maxUnavailable=2))
    moved = [("a", "inference"), ("b", "inference"), ("c", "inference"), ("d", "inference"), ("e", "inference")]
    after = plan_of(mig_config(*moved, maxUnavailable=2))
    diff = diff_plans(before, after)
    summary = mig_rollout(diff)
    assert [(m.node, m.old, m.new, m.wave) for m in summary.moves] == [
        ("a", "all-disabled", "inference", 1),
        ("b", "all-disabled", "inference", 1),
        ("d", "all-disabled", "inference", 2),
        ("e", None, "inference", 2),
    ]
    text = render_text(diff).splitlines()
    assert "MIG rollout: 4 node(s) in 2 wave(s) of at most 2 (mig.rollout.maxUnavailable); a wave starts only when the previous one succeeded:" in text
    assert "wave 1 of 2: node a will be drained and reconfigured: MIG config all-disabled -> inference" in text
    line = next(t for t in text if t.startswith("wave 1 of 2: node a steps: "))
    assert line.startswith(
        "wave 1 of 2: node a steps: refuse the wave if a "
        "DaemonSet's or static pod holds GPUs there, wait for its MIG manager to be ready on mig-parted-config-"
    )
    assert "(up to 900s), cordon, evict its GPU pods" in line
    assert "wait for nvidia.com/mig.config.state=success and the resources below (up to 1800s)" in line
    assert line.endswith("uncordon") and len(line) <= 400
    done = text[text.index(line) + 1]
    assert done.startswith("wave 1 of 2: node a is done when it advertises ") and "nvidia.com/mig-1g.18gb=16" in done
    assert any(t.startswith("wave 2 of 2: node e is new to the stack") and "no GPU pods to drain" in t for t in text)
    assert not any(" node c " in t for t in text if t.startswith("wave "))
    md = render_markdown(diff)
    assert "- wave 2 of 2: node d will be drained and reconfigured: MIG config all-disabled -&gt; inference\n" in md


def test_a_mig_edit_without_eviction_says_so():
    before = plan_of(mig_config(("a", "all-disabled"), evict=False))
    after = plan_of(mig_config(("a", "inference"), evict=False))
    text = render_text(diff_plans(before, after))
    assert ("wave 1 of 1: node a will be reconfigured without a drain (mig.rollout.evict false): MIG config all-disabled -> "
            "inference\nwave 1 of 1: node a steps: wait for its MIG manager to be ready on") in text


def _with_effects(before, after):
    """The diff with its effects, from the Helm values (no chart rendered)."""
    diff = diff_plans(before, after)
    add_objects_and_effects(diff, before, after, Path("/nonexistent-chart"))
    return diff


def test_a_layout_edit_under_a_name_nodes_select_is_shown_refused_first():
    cfg = mig_config(("a", "inference"), ("b", "inference"), ("c", "all-disabled"))
    before = plan_of(copy.deepcopy(cfg))
    cfg["mig"]["profiles"]["inference"][0]["mig-devices"] = {"1g.18gb": 7}
    diff = _with_effects(before, plan_of(cfg))
    text = render_text(diff)
    refused = ("MIG config inference changes its layout under the same name while node(s) a, b select it: refused: "
               "`pulumi up` fails at the layout guard Job (gpu-operator-mig-layout-guard-job) before the operator release "
               "changes, since the MIG manager would re-partition those nodes without a drain; give the new layout a new "
               "name and point the nodes at it")
    assert refused in text.splitlines()
    assert diff.effects[0] == f"refuses a MIG layout edit: {refused}"
    assert "refuses a MIG layout edit" in diff.get(JOB, "gpu-operator-mig-layout-guard-job").effects
    # The same edit under a new name is a relabel through the rollout, not a refusal.
    cfg = mig_config(("a", "inference"), ("b", "inference"), ("c", "all-disabled"))
    cfg["mig"]["profiles"]["inference-v2"] = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}]
    cfg["nodes"][0]["mig"] = "inference-v2"
    renamed = _with_effects(before, plan_of(cfg))
    assert not any(e.startswith("refuses") for e in renamed.effects)
    assert "wave 1 of 1: node a will be drained and reconfigured: MIG config inference -> inference-v2\n" in render_text(renamed)


def test_removing_a_nodes_mig_rolls_it_back_to_whole_gpus_in_the_diff():
    before = plan_of(mig_config(("a", "inference"), ("b", "inference")))
    diff = _with_effects(before, plan_of(mig_config(("a", "inference"), ("b", None))))
    text = render_text(diff).splitlines()
    assert ("wave 1 of 1: node b goes back to whole GPUs (nodes[].mig removed): MIG config inference -> all-disabled, if the "
            "rollout set inference (a config set by anyone else stays as it is)") in text
    line = next(t for t in text if t.startswith("wave 1 of 1: node b steps: "))
    assert line.startswith("wave 1 of 1: node b steps: refuse the wave if a DaemonSet's or static pod")
    assert "wait for nvidia.com/mig.config.state=success and the resources below (up to 1800s), uncordon" in line
    assert "wave 1 of 1: node b is done when it advertises nvidia.com/gpu=8" in text
    (effect,) = [e for e in diff.effects if e.startswith("reconfigures MIG")]
    assert effect.startswith("reconfigures MIG on 1 node (b): GPU pods there are evicted while the GPUs are repartitioned; "
                             "before each relabel the rollout waits for the node's MIG manager to be ready on mig-parted-config-")
    assert effect.endswith("(mig.rollout.managerTimeout, 900s) and fails the wave, before the cordon, on a DaemonSet's or "
                           "static pod that holds GPUs; back to whole GPUs (all-disabled, nodes[].mig removed), where the "
                           "rollout set their MIG config: b")


def test_no_mig_edit_no_rollout_lines():
    cfg = mig_config(("a", "inference"))
    before = plan_of(copy.deepcopy(cfg))
    after = plan_of(set_path(cfg, "validation.timeoutSeconds", 900))
    assert "MIG rollout" not in render_text(diff_plans(before, after))


def test_done_when_prod_moves_a_node_to_inference_balanced(tmp_path: Path):
    repo = committed_project_copy(tmp_path)
    stack = repo / "Pulumi.prod.yaml"
    text = stack.read_text()
    old = "    - name: gpu-prod-h200-3\n      address: 10.40.0.13\n      gpu:\n        model: H200-141GB\n        count: 8\n      runtime: containerd\n      mig: all-disabled\n"
    assert old in text
    stack.write_text(text.replace(old, old.replace("mig: all-disabled", "mig: inference-balanced")))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG")}
    environ["PYTHONPATH"] = str(repo)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gpu_stack", *args], cwd=repo, env=environ,
                              capture_output=True, text=True, timeout=300)

    out = cli("diff", "--stack", "prod", "--base", "HEAD")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "wave 1 of 1: node gpu-prod-h200-3 will be drained and reconfigured: MIG config all-disabled -> inference-balanced" in lines
    assert any(
        line.startswith("wave 1 of 1: node gpu-prod-h200-3 steps: refuse the wave if a DaemonSet's or static "
                        "pod holds GPUs there, wait for its MIG manager to be ready on mig-parted-config-")
        and ", cordon, evict its GPU pods" in line
        for line in lines
    ), out.stdout
    assert not any("node gpu-prod-h200-1" in line or "node gpu-prod-h200-2" in line for line in lines if line.startswith("wave "))
    assert any(line.startswith("+- replace kubernetes:batch/v1:Job mig-rollout-job") for line in lines)
    plan = cli("plan", "--stack", "prod", "--format", "json")
    assert plan.returncode == 0, plan.stderr
    doc = json.loads(plan.stdout)
    by_name = {r["name"]: r for r in doc["resources"]}
    assert by_name["mig-rollout-job"]["type"] == JOB
    rows = by_name["mig-rollout-nodes"]["inputs"]["data"]["nodes"].splitlines()
    assert rows[2].split()[:3] == ["gpu-prod-h200-3", "set", "inference-balanced"]
    volumes = by_name["mig-rollout-job"]["inputs"]["spec"]["template"]["spec"]["volumes"]
    assert {"name": "nodes", "configMap": {"name": by_name["mig-rollout-nodes"]["inputs"]["metadata"]["name"], "defaultMode": 292}} in volumes
