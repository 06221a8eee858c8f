"""The device plugin <-> DRA rollout in the design: which nodes its table holds and how, its waves
kept small enough for the capacity floor (and a floor no wave can keep refused), its
least-privilege RBAC, and a Job name that changes exactly when a node's target does."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_stack.config import SettingsError, load_settings
from gpu_stack.config.facts import all_profiles
from gpu_stack.config.rules.dra_rollout import floor_gpus, plan_wave_size
from gpu_stack.design.capacity import node_facts
from gpu_stack.design.dra_rollout import DraRolloutPlan, build_dra_rollout, table_lines

from ..helpers import dev_config


def _config(allocations: list[str | None], *, count: int = 8, **rollout: Any) -> dict[str, Any]:
    """A stack of H200 nodes (`count` GPUs each), on Kubernetes 1.34, one per allocation given."""
    cfg = dev_config()
    cfg["kubernetes"]["version"] = "1.34"
    cfg["sharing"] = {"mode": "none"}
    cfg["nodes"] = [
        {"name": f"gpu-{i + 1}", "address": f"10.20.0.{i + 11}", "gpu": {"model": "H200-141GB", "count": count},
         **({"allocation": a} if a else {})}
        for i, a in enumerate(allocations)
    ]
    if rollout:
        cfg["dra"] = {"rollout": rollout}
    return cfg


def _plan(cfg: dict[str, Any]) -> DraRolloutPlan | None:
    settings = load_settings(cfg)
    nodes = node_facts(settings, all_profiles(settings))
    return build_dra_rollout(settings.dra.rollout, nodes, None, namespace="gpu-operator", ttl=3600, pull_secrets=())


def _env(plan: DraRolloutPlan) -> dict[str, str]:
    (container,) = plan.job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in container["env"]}


def test_no_job_while_no_node_uses_dra_or_sets_its_allocation():
    assert _plan(_config([None, None])) is None


def test_the_table_holds_every_node_with_its_target_once_dra_is_in_play():
    plan = _plan(_config(["dra", None, "devicePlugin"]))
    assert plan is not None
    assert plan.nodes == ("gpu-1", "gpu-2", "gpu-3")
    assert plan.table["data"]["nodes"].splitlines() == [
        "gpu-1 dra 8 8 gpu.nvidia.com=8",
        "gpu-2 device-plugin 8 8 nvidia.com/gpu=8",
        "gpu-3 device-plugin 8 8 nvidia.com/gpu=8",
    ]
    # The way back alone (no node on DRA any more, one set back explicitly) still runs the Job.
    back = _plan(_config(["devicePlugin", None]))
    assert back is not None and table_lines(back.rows) == ["gpu-1 device-plugin 8 8 nvidia.com/gpu=8",
                                                           "gpu-2 device-plugin 8 8 nvidia.com/gpu=8"]


def test_the_job_name_changes_exactly_when_a_target_does():
    one = _plan(_config(["dra", None]))
    same = _plan(_config(["dra", None]))
    other = _plan(_config([None, "dra"]))
    assert one is not None and same is not None and other is not None
    assert one.job_name == same.job_name != other.job_name
    assert one.job_name.startswith("dra-rollout-")


def test_least_privilege_rbac():
    plan = _plan(_config(["dra", None]))
    assert plan is not None
    assert plan.cluster_role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"], "resourceNames": ["gpu-1", "gpu-2"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["list"]},
    ]
    assert plan.role["metadata"]["namespace"] == "gpu-operator"
    assert plan.role["rules"] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["create", "delete"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "delete"]},
    ]
    spec = plan.job["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == plan.service_account["metadata"]["name"] == "gpu-stack-dra-rollout"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert plan.job["spec"]["backoffLimit"] == 0


def test_the_job_carries_the_labels_and_driver_the_script_switches():
    plan = _plan(_config(["dra", None]))
    assert plan is not None
    env = _env(plan)
    assert env["DRA_LABEL"] == "gpu-stack/allocation=dra"
    assert env["PLUGIN_LABEL"] == "nvidia.com/gpu.deploy.device-plugin"
    assert env["DRIVER"] == "gpu.nvidia.com" and env["PLUGIN_NAMESPACE"] == "gpu-operator"
    assert env["TIMEOUT_SECONDS"] == "900" and env["PLUGIN_TIMEOUT_SECONDS"] == "600" and env["EVICT"] == "true"


@pytest.mark.parametrize(("floor", "max_unavailable", "size", "min_gpus"), [
    (0, 3, 3, 0),          # no floor: maxUnavailable alone
    (16, 3, 2, 16),        # 32 GPUs, 16 kept: two nodes of 8 at once
    ("75%", 3, 1, 24),     # 75% of 32 = 24 kept: one node at a time
    ("50%", "100%", 2, 16),
])
def test_the_floor_bounds_the_wave_size(floor, max_unavailable, size, min_gpus):
    plan = _plan(_config(["dra", "dra", "dra", "dra"], minSchedulableGpus=floor, maxUnavailable=max_unavailable))
    assert plan is not None
    assert (plan.wave_size, plan.min_gpus) == (size, min_gpus)
    assert (_env(plan)["WAVE_SIZE"], _env(plan)["MIN_GPUS"]) == (str(size), str(min_gpus))


def test_the_largest_nodes_bound_the_wave_size():
    assert plan_wave_size(3, [8, 8, 2, 2], 8) == 1   # two 8-GPU nodes at once would leave 4
    assert plan_wave_size(3, [8, 2, 2, 2], 4) == 2   # 8 + 2 leaves 4; a third node would leave 2
    assert floor_gpus("50%", 7) == 4 and floor_gpus(5, 7) == 5


def test_a_floor_no_wave_can_keep_is_refused():
    with pytest.raises(SettingsError) as info:
        load_settings(_config(["dra", None], minSchedulableGpus=9))
    (problem,) = [p.render() for p in info.value.problems]
    assert problem == (
        "dra.rollout.minSchedulableGpus = 9: moving node gpu-1 (8 GPU(s)) between the device plugin and DRA would "
        "leave 8 of the stack's 16 GPU(s) schedulable, fewer than the floor of 9; lower the floor or add GPU nodes")
    # The same floor with no node that may move is no problem.
    load_settings(_config([None, None], minSchedulableGpus=9))


def test_the_probe_claims_one_device_on_the_cordoned_node_it_is_pinned_to():
    plan = _plan(_config(["dra", None]))
    assert plan is not None
    claim = json.loads(plan.table["data"]["probe-claim.json"])
    job = json.loads(plan.table["data"]["probe-job.json"])
    assert claim["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": "__CLASS__", "allocationMode": "ExactCount", "count": 1}}]
    pod = job["spec"]["template"]["spec"]
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["__NODE__"]}]}]
    assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "__CLAIM__"}]
    (container,) = pod["containers"]
    assert container["resources"]["claims"] == [{"name": "gpu"}] and pod["securityContext"]["runAsUser"] == 65534
    assert job["spec"]["backoffLimit"] == 0 and job["metadata"]["generateName"] == "dra-probe-"
    env = _env(plan)
    assert env["PROBE_JOB_FILE"] == "/rollout-nodes/probe-job.json" and env["PROBE_CLAIM_FILE"] == "/rollout-nodes/probe-claim.json"
