"""Validation that fits a busy production cluster: every node's capacity read through the API, GPU
pods on one node per class within a pod budget that does not grow with the node count, behind a
gate that waits for free capacity; `coverage: full` for an acceptance run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpu_stack.config import load_settings
from gpu_stack.design.capacity import node_facts
from gpu_stack.design.derive import derive
from gpu_stack.design.validation import footprint, sample_nodes

from ..helpers import plan_of

BENCH = "bench/plan_scaling.py"


def fleet(nodes: int, coverage: str = "sample", budget: int | None = None, models=("L4",)) -> dict:
    """`nodes` time-sliced nodes, GPU model and count varying, every other one on a profile of its own."""
    validation = {"coverage": coverage, **({"podBudget": budget} if budget else {})}
    return {
        "nodes": [
            {
                "name": f"gpu-{i:04d}",
                "gpu": {"model": models[(i // 2) % len(models)], "count": 1 + i % 8},
                **({"sharing": "ts-8"} if i % 2 else {}),
            }
            for i in range(nodes)
        ],
        "sharing": {"mode": "time-slicing", "replicas": 4, "profiles": {"ts-8": {"mode": "time-slicing", "replicas": 8}}},
        "mig": {"strategy": "none"},
        "validation": validation,
    }


def plan_for(cfg: dict):
    return derive(load_settings(cfg)).validation


@pytest.mark.parametrize("nodes", [10, 100, 1000])
def test_the_sample_does_not_grow_with_the_node_count(nodes):
    small, big = footprint(plan_for(fleet(4))), footprint(plan_for(fleet(nodes)))
    assert big == small
    assert big["gpu_pods"] <= 32  # the default podBudget


def test_full_coverage_runs_every_nodes_every_replica():
    plan = plan_for(fleet(10, "full"))
    per_node = {j.node: j.pods for j in plan.jobs if j.check == "sharing-pods"}
    assert len(per_node) == 10
    assert per_node["gpu-0000"] == 4 * 1 and per_node["gpu-0001"] == 8 * 2 and per_node["gpu-0007"] == min(8 * 8, 64)
    assert footprint(plan)["gpu_pods"] == 1 + sum(per_node.values())


def test_one_node_per_class_and_one_pod_more_than_its_devices():
    settings = load_settings(fleet(40, models=("L4", "L40S")))
    sampled = sample_nodes(settings.validation.coverage, node_facts(settings))
    # GPU model x sharing profile x MIG config: 2 models x 2 profiles here.
    assert sorted(sampled.values()) == [("L4", "default", "-"), ("L4", "ts-8", "-"), ("L40S", "default", "-"), ("L40S", "ts-8", "-")]
    assert sorted(sampled) == ["gpu-0000", "gpu-0001", "gpu-0002", "gpu-0003"]
    plan = derive(settings).validation
    pods = {j.node: j.pods for j in plan.jobs if j.check == "sharing-pods"}
    # G + 1 pods: at least two share one physical GPU, all running at once.
    assert pods == {"gpu-0000": 2, "gpu-0001": 3, "gpu-0002": 4, "gpu-0003": 5}
    # The API check still covers every shared node, not just the sample.
    (capacity,) = [j for j in plan.jobs if j.check == "sharing-capacity"]
    assert capacity.table["data"]["nodes"].count("\n") == 40


def test_pinned_pods_wait_for_free_capacity_sized_to_exactly_what_they_request():
    plan = plan_for(fleet(40, models=("L4", "L40S")))
    by_check = {j.check: j for j in plan.jobs}
    gate = by_check["free-capacity"]
    assert gate.after == ("sharing-capacity",)
    assert gate.table["data"]["nodes"] == (
        "gpu-0000 nvidia.com/gpu=2\ngpu-0001 nvidia.com/gpu=3\ngpu-0002 nvidia.com/gpu=4\ngpu-0003 nvidia.com/gpu=5\n"
    )
    for job in plan.jobs:
        if job.check == "sharing-pods":
            assert job.after == ("free-capacity",)
    assert plan.cluster_role["rules"][1] == {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}
    assert gate.manifest["spec"]["template"]["spec"]["containers"][0]["command"][-1].endswith("/free-capacity.sh")


def test_a_budget_too_small_for_every_class_is_said_and_still_reads_every_node():
    plan = plan_for(fleet(40, budget=4, models=("L4", "L40S")))
    assert footprint(plan)["gpu_pods"] <= 4
    assert len(plan.notes) == 2
    note = plan.notes[0]
    assert plan.notes[1].startswith("validation.podBudget (4) leaves 3 node class(es) without the no-GPU check "
                                    "(a pod that requests no GPU must see none): gpu-0001 (L4, ts-8, -)")
    assert note.startswith("validation.podBudget (4) leaves 3 node class(es) without GPU pods: gpu-0001 (L4, ts-8, -): 3 sharing pods")
    assert "gpu-stack:validation.podBudget" in note and "coverage full" in note
    warnings = plan_of(fleet(40, budget=4, models=("L4", "L40S"))).warnings
    assert note in warnings


def test_coverage_is_a_checked_setting():
    from ..helpers import assert_refused

    assert_refused(fleet(2, coverage="everything"), "gpu-stack:validation.coverage = 'everything': must be one of")
    assert_refused(fleet(2, budget=1), "gpu-stack:validation.podBudget = 1: must be at least 2")


def test_make_bench_reports_pods_and_gpu_replicas_at_each_size():
    proc = subprocess.run(
        [sys.executable, BENCH, "--footprint-only", "--sizes", "1,10"], capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    cells = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("|")]
    rows = [r for r in cells if r[0].strip().isdigit()]
    table = {(int(r[0]), r[1].strip()): [int(c) for c in r[2:]] for r in rows}
    assert set(table) == {(1, "sample"), (1, "full"), (10, "sample"), (10, "full")}
    assert table[(10, "full")][3] > table[(10, "sample")][3] > 0  # GPU replicas


def test_the_smoke_pod_runs_on_a_sampled_node_behind_the_gate():
    plan = plan_for(fleet(40, models=("L4", "L40S")))
    by_check = {j.check: j for j in plan.jobs}
    smoke = by_check["cuda-smoke"]
    assert smoke.node == "gpu-0000" and smoke.after == ("free-capacity",)
    affinity = smoke.manifest["spec"]["template"]["spec"]["affinity"]
    assert "gpu-0000" in str(affinity)
    # Listed after the gate it waits for; it can wait on the node for the sharing pods to finish,
    # so its GPU is not added on top of theirs (gpu-0000: 1 L4 x 4 replicas, 2 sharing pods).
    order = [j.check for j in plan.jobs]
    assert order.index("free-capacity") < order.index("cuda-smoke")
    assert by_check["free-capacity"].table["data"]["nodes"].startswith("gpu-0000 nvidia.com/gpu=2\n")


def test_on_a_node_without_sharing_the_gate_waits_for_the_smoke_pods_gpu():
    cfg = fleet(3)
    cfg["sharing"] = {"mode": "none"}
    for node in cfg["nodes"]:
        node.pop("sharing", None)
    plan = plan_for(cfg)
    by_check = {j.check: j for j in plan.jobs}
    assert by_check["cuda-smoke"].node == "gpu-0000"
    assert by_check["free-capacity"].table["data"]["nodes"] == "gpu-0000 nvidia.com/gpu=1\n"


def test_without_declared_nodes_the_smoke_pod_is_left_to_the_scheduler():
    plan = plan_for({"nodes": [], "mig": {"strategy": "none"}})
    (smoke,) = [j for j in plan.jobs if j.check == "cuda-smoke"]
    assert smoke.node is None and smoke.after == ()
    assert "affinity" not in smoke.manifest["spec"]["template"]["spec"]
    assert not [j for j in plan.jobs if j.check == "free-capacity"]
