"""What `diff` tells a reviewer about an allocation change: each node the rollout Job drains and
moves between the device plugin and DRA, which way, in which wave, what it waits for, and the
capacity floor; an effect on running work naming the nodes and what their pods must change;
nothing when no node moves."""

from __future__ import annotations

import copy
from typing import Any

from gpu_stack.offline.diff import diff_plans, plan_dict, render_markdown, render_text
from gpu_stack.offline.diff.dra_rollout import dra_rollout
from gpu_stack.offline.effects import annotate

from ..helpers import dev_config, plan_of


def _config(allocations: list[str | None], **rollout: Any) -> dict[str, Any]:
    cfg = dev_config()
    cfg["kubernetes"]["version"] = "1.34"
    cfg["sharing"] = {"mode": "none"}
    cfg["nodes"] = [
        {"name": f"gpu-{i + 1}", "address": f"10.20.0.{i + 11}", "gpu": {"model": "H200-141GB", "count": 8},
         **({"allocation": a} if a else {})}
        for i, a in enumerate(allocations)
    ]
    if rollout:
        cfg["dra"] = {"rollout": rollout}
    return cfg


def test_moving_nodes_to_dra_lists_each_node_by_wave_with_the_floor():
    base = plan_of(_config(["dra", None, None, None], minSchedulableGpus=16, maxUnavailable=3))
    head_cfg = _config(["dra", "dra", "dra", None], minSchedulableGpus=16, maxUnavailable=3)
    text = render_text(diff_plans(base, plan_of(head_cfg))).splitlines()
    # 32 GPUs, 16 kept: the plan's waves hold two 8-GPU nodes, although maxUnavailable allows 3.
    assert ("DRA rollout: 2 node(s) in 1 wave(s) of at most 2 (dra.rollout.maxUnavailable, made smaller where needed "
            "to keep 16 GPU(s) schedulable (dra.rollout.minSchedulableGpus)); a wave starts only when the previous one "
            "succeeded, and a node never advertises its GPUs through both the device plugin and DRA:") in text
    assert "wave 1 of 1: node gpu-2 will be drained and moved from the device plugin to DRA" in text
    assert ("wave 1 of 1: node gpu-2 drain: refuse the wave if a DaemonSet's or static pod holds GPUs there, cordon, "
            "evict its GPU pods (PodDisruptionBudgets respected, up to 600s)") in text
    assert ("wave 1 of 1: node gpu-2 switch: nvidia.com/gpu.deploy.device-plugin=false, wait until it advertises no "
            "nvidia.com/ resource (up to 900s); only then gpu-stack/allocation=dra, wait for its DRA kubelet plugin pod "
            "(up to 600s) and its ResourceSlices with 8 device(s) (up to 900s); then uncordon") in text
    assert not any("node gpu-1 " in line or "node gpu-4 " in line for line in text if line.startswith("wave "))


def test_the_way_back_and_a_first_move_without_a_base_table():
    back = dra_rollout(diff_plans(plan_of(_config(["dra", "dra"])), plan_of(_config(["devicePlugin", "dra"]))))
    assert back is not None and [(m.node, m.to_dra, m.expected) for m in back.moves] == [("gpu-1", False, "nvidia.com/gpu=8")]
    diff = diff_plans(plan_of(_config(["dra", "dra"])), plan_of(_config(["devicePlugin", "dra"])))
    assert ("wave 1 of 1: node gpu-1 switch: remove gpu-stack/allocation, wait until its ResourceSlices are gone (up to "
            "900s); only then nvidia.com/gpu.deploy.device-plugin=true, wait until it advertises nvidia.com/gpu=8 (up to "
            "900s); then uncordon") in render_text(diff)
    assert "DRA rollout: 1 node(s)" in render_markdown(diff)
    # A stack that never used DRA: every node was on the device plugin.
    first = dra_rollout(diff_plans(plan_of(_config([None, None])), plan_of(_config([None, "dra"]))))
    assert first is not None and [(m.node, m.to_dra, m.wave) for m in first.moves] == [("gpu-2", True, 1)]


def test_taking_dra_off_by_deleting_the_setting_warns_that_the_nodes_would_advertise_no_gpu():
    """docs/dra.md, the way back: with no node on DRA and no `allocation` set, the rollout Job and
    the driver go, and the nodes that were on DRA keep its labels: the diff says so, in both views,
    where it used to show the deletes alone. The way back that works shows the move, no warning."""
    base = plan_of(_config(["dra", "dra", None]))
    diff = diff_plans(base, plan_of(_config([None, None, None])))
    warning = ("DRA rollout: WARNING: gpu-1, gpu-2 would advertise no GPU at all: with no node on DRA and no "
               "nodes[i].allocation set, the rollout Job and the DRA driver go, and nothing takes DRA's labels off these "
               "nodes. Set nodes[i].allocation: devicePlugin on them, and keep it until an `up` has moved them "
               "(docs/dra.md, the way back).")
    assert warning in render_text(diff).splitlines()
    assert "gpu-1, gpu-2 would advertise no GPU at all" in render_markdown(diff)
    back = diff_plans(base, plan_of(_config(["devicePlugin", "devicePlugin", None])))
    assert "WARNING" not in render_text(back) and "from DRA back to the device plugin" in render_text(back)


def test_no_lines_when_no_node_moves():
    cfg = _config(["dra", None])
    other = copy.deepcopy(cfg)
    other["dra"] = {"rollout": {"timeout": 1200}}
    diff = diff_plans(plan_of(cfg), plan_of(other))
    assert diff.has_changes and dra_rollout(diff) is None
    assert "DRA rollout:" not in render_text(diff)


def test_the_effects_lead_with_the_nodes_moved_and_what_their_pods_must_change():
    base, head = plan_of(_config(["dra", "dra", None])), plan_of(_config(["devicePlugin", "dra", "dra"]))
    diff = diff_plans(base, head)
    (line,) = annotate(diff, plan_dict(base), plan_dict(head), [])
    assert line == (
        "moves 2 nodes (gpu-1, gpu-3) between the device plugin and DRA, in drained waves: GPU pods there are evicted, "
        "and each node's old advertiser is gone before the new one is placed; to DRA: gpu-3, where pods then get GPUs "
        "through ResourceClaims only (a pod that requests nvidia.com/gpu runs there only on a cluster with "
        "DRAExtendedResource, dra.extendedResource); back to the device plugin: gpu-1, where pods then request "
        "nvidia.com/gpu again")
    assert "moves nodes between the device plugin and DRA" in diff.get("kubernetes:batch/v1:Job", "dra-rollout-job").effects
