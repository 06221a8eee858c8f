"""derive(settings) -> StackDesign: every decision made once, in milliseconds, no Pulumi."""

from __future__ import annotations

from gpu_stack.config import load_settings
from gpu_stack.design.derive import derive

SHARING = "nvidia.com/device-plugin.config"
MIG = "nvidia.com/mig.config"


def _two_l4_nodes():
    return load_settings({
        "nodes": [
            {"name": "a", "gpu": {"model": "L4", "count": 2}},
            {"name": "b", "gpu": {"model": "L4", "count": 1}, "sharing": "none"},
        ],
        "sharing": {"mode": "time-slicing", "replicas": 4},
        "mig": {"strategy": "none"},
    })


def test_node_facts_hold_profile_physical_and_advertised_capacity():
    design = derive(_two_l4_nodes())
    a, b = design.nodes
    assert (a.name, a.index, a.profile_key, a.physical, a.advertised) == ("a", 0, "default", {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 8})
    assert a.shares and a.model is not None and a.model.name == "L4" and a.layout is None
    assert (b.profile_key, b.profile, b.advertised, b.shares) == ("none", None, {"nvidia.com/gpu": 1}, False)
    assert design.capacity[-1] == {"node": "TOTAL", "gpus": 3, "sharing": "", "mig": "", "advertises": {"nvidia.com/gpu": 9}}
    assert design.node_labels == {"b": {SHARING: "none"}} == design.patched_labels


def test_the_validation_plan_checks_the_capacity_the_facts_hold():
    design = derive(_two_l4_nodes())
    assert design.validation is not None
    (table,) = [j.table for j in design.validation.jobs if j.check == "sharing-capacity"]
    assert table["data"]["nodes"] == "a nvidia.com/gpu=8\nb nvidia.com/gpu=1\n"
    # Only node a shares: one sharing-pods Job, one pod more than its 2 physical GPUs.
    (pods,) = [j for j in design.validation.jobs if j.check == "sharing-pods"]
    assert (pods.node, pods.pods) == ("a", 3)
    assert set(design.validation_jobs) == {j.key for j in design.validation.jobs}


def test_mig_nodes_get_their_label_from_the_rollout_not_the_node_patch():
    design = derive(load_settings({
        "nodes": [{"name": "h", "gpu": {"model": "H100-80GB", "count": 2}, "mig": "all-1g.10gb"}],
        "mig": {"strategy": "single"},
    }))
    (h,) = design.nodes
    assert h.layout == [{"1g.10gb": 7}, {"1g.10gb": 7}]
    assert h.physical == {"nvidia.com/gpu": 14} and h.mig_resource == "nvidia.com/gpu"
    assert design.node_labels == {"h": {MIG: "all-1g.10gb"}}
    assert design.patched_labels == {}
    assert design.rollout is not None and [n.name for n in design.rollout.nodes] == ["h"]
    assert design.rollout.nodes[0].expected == {"nvidia.com/gpu": 14}


def test_generated_limit_problems_are_part_of_the_design():
    many = {f"p{i}": {"mode": "time-slicing", "replicas": 2} for i in range(6000)}
    design = derive(load_settings({"nodes": [{"name": "a", "gpu": {"model": "L4", "count": 1}}], "sharing": {"mode": "time-slicing", "profiles": many}}))
    assert [p.key for p in design.problems] == ["gpu-stack:sharing"]
    assert "over Kubernetes' 1 MiB limit" in design.problems[0].message
