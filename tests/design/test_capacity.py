"""Capacity: what each node will advertise, as the `capacity` stack output and the plan show it."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_stack.config import load_settings
from gpu_stack.design.capacity import capacity_table, node_capacity, node_facts

from ..helpers import dev_config, plan_of, plan_stack_file, set_path


def _node(name: str, model: str, count: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "gpu": {"model": model, "count": count}, **extra}


def _advertised(config: dict[str, Any]) -> dict[str, dict[str, int]]:
    settings = load_settings(config)
    return {n.name: node_capacity(settings, n) for n in settings.nodes}


def test_dev_time_slicing_is_gpus_times_replicas_in_the_stack_output():
    plan = plan_stack_file("dev")
    rows = {r["node"]: r for r in plan.capacity}
    assert rows["gpu-dev-1"]["advertises"] == {"nvidia.com/gpu": 8}
    assert rows["gpu-dev-1"]["gpus"] == "2x L4" and rows["gpu-dev-1"]["sharing"] == "default"
    assert rows["gpu-dev-2"]["advertises"] == {"nvidia.com/gpu": 4}
    assert rows["TOTAL"]["advertises"] == {"nvidia.com/gpu": 12} and rows["TOTAL"]["gpus"] == 3


def test_replicas_edit_shows_in_capacity():
    rows = {r["node"]: r for r in plan_of(set_path(dev_config(), "sharing.replicas", 8)).capacity}
    assert rows["gpu-dev-1"]["advertises"] == {"nvidia.com/gpu": 16}
    assert rows["TOTAL"]["advertises"] == {"nvidia.com/gpu": 24}


def test_time_slicing_rename_profiles_and_opt_out():
    got = _advertised({
        "mig": {"strategy": "none"},
        "sharing": {"mode": "time-slicing", "replicas": 3, "renameByDefault": True,
                    "profiles": {"big": {"replicas": 10}}},
        "nodes": [_node("a", "L4", 2), _node("b", "L40S", 4, sharing="big"), _node("c", "T4", 1, sharing="none")],
    })
    assert got == {
        "a": {"nvidia.com/gpu.shared": 6},
        "b": {"nvidia.com/gpu": 40},
        "c": {"nvidia.com/gpu": 1},
    }


def test_mps_is_gpus_times_replicas():
    got = _advertised({"mig": {"strategy": "none"}, "sharing": {"mode": "mps", "replicas": 10},
                       "nodes": [_node("h", "H100-80GB", 8)]})
    assert got == {"h": {"nvidia.com/gpu": 80}}


def test_mig_single_advertises_instances_as_gpus():
    config = {"mig": {"strategy": "single"}, "nodes": [
        _node("a100", "A100-80GB", 2, mig="all-1g.10gb"),
        _node("h200", "H200-141GB", 4, mig="all-3g.71gb"),
        _node("off", "H200-141GB", 4, mig="all-disabled"),
        _node("untouched", "H200-141GB", 4),
    ]}
    assert _advertised(config) == {
        "a100": {"nvidia.com/gpu": 14},
        "h200": {"nvidia.com/gpu": 8},
        "off": {"nvidia.com/gpu": 4},
        "untouched": {"nvidia.com/gpu": 4},
    }
    # Time-slicing on top: every instance is shared R ways.
    config["sharing"] = {"mode": "time-slicing", "replicas": 2}
    assert _advertised(config)["a100"] == {"nvidia.com/gpu": 28}


def test_mig_mixed_with_replicas_per_mig_resource():
    config = {
        "mig": {"strategy": "mixed", "profiles": {
            "inference": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}}],
            "half": [{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.18gb": 7}},
                     {"devices": [2, 3], "mig-enabled": False}],
        }},
        "sharing": {"mode": "time-slicing", "replicas": 2, "resources": [
            {"name": "nvidia.com/mig-1g.18gb", "replicas": 4}]},
        "nodes": [_node("inf", "H200-141GB", 8, mig="inference"), _node("half", "H200-141GB", 4, mig="half")],
    }
    assert _advertised(config) == {
        "inf": {"nvidia.com/mig-1g.18gb": 8 * 2 * 4, "nvidia.com/mig-2g.35gb": 8, "nvidia.com/mig-3g.71gb": 8},
        "half": {"nvidia.com/gpu": 2 * 2, "nvidia.com/mig-1g.18gb": 2 * 7 * 4},
    }
    rows = capacity_table(node_facts(load_settings(config)))
    assert rows[-1] == {"node": "TOTAL", "gpus": 12, "sharing": "", "mig": "", "advertises": {
        "nvidia.com/mig-1g.18gb": 64 + 56, "nvidia.com/mig-2g.35gb": 8, "nvidia.com/mig-3g.71gb": 8, "nvidia.com/gpu": 4}}


def test_mig_mixed_builtin_and_me_profiles():
    got = _advertised({"mig": {"strategy": "mixed"}, "nodes": [
        _node("bal", "A100-40GB", 2, mig="all-balanced"), _node("me", "H100-80GB", 1, mig="all-1g.10gb.me")]})
    assert got == {
        "bal": {"nvidia.com/mig-1g.5gb": 4, "nvidia.com/mig-2g.10gb": 2, "nvidia.com/mig-3g.20gb": 2},
        "me": {"nvidia.com/mig-1g.10gb.me": 1},
    }


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_plan_capacity_rows_cover_every_node(stack):
    try:
        plan = plan_stack_file(stack)
    except FileNotFoundError:
        pytest.skip(f"no Pulumi.{stack}.yaml in this tree")
    rows = plan.capacity
    nodes = [r for r in rows if r["node"] != "TOTAL"]
    totals: dict[str, int] = {}
    for r in nodes:
        assert set(r) == {"node", "gpus", "sharing", "mig", "advertises"}
        for k, v in r["advertises"].items():
            totals[k] = totals.get(k, 0) + v
    assert rows[-1]["node"] == "TOTAL" and rows[-1]["advertises"] == totals
