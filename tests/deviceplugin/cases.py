"""The sharing configs the stack generates, as the real device plugin is run with them on a GPU
machine of one H200 (docs/gpu-runs/device-plugin-h200.txt).

Each case is the dev stack with its nodes replaced by one node of one H200 and a few keys changed
(what a temporary stack file would hold), planned offline. From the plan come:
- the config file: the key of the sharing ConfigMap the node selects (its
  `nvidia.com/device-plugin.config` label, else the ClusterPolicy's `devicePlugin.config.default`);
- the plugin's environment as the GPU Operator v25.10.1 sets it from the Release values (its
  DaemonSet asset, then `TransformDevicePlugin`): `MIG_STRATEGY` from `mig.strategy`, with
  `cdi.enabled` the CDI device-list strategies and annotation prefix, `MPS_ROOT`;
- what the node must advertise: the capacity table's row of that node.

    python -m tests.deviceplugin.cases > cases.json     # what the GPU run reads
"""

from __future__ import annotations

import copy
import json
import sys
from dataclasses import dataclass, field
from typing import Any

from gpu_stack.design.sharing import NODE_LABEL
from tests.helpers import dev_config, plan_of, set_path

NODE = "h200-1"
OPERATOR_MPS_ROOT = "/run/nvidia/mps"
"""The device plugin DaemonSet's MPS_ROOT in the operator (its default mps root)."""
CDI_LIST_STRATEGY = "cdi-annotations,cdi-cri"
CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    changes: dict[str, Any] = field(default_factory=dict)
    """`pulumi config set --path` style keys of the dev stack and their values."""


CASES: tuple[Case, ...] = (
    Case("dev", "the dev stack's own sharing (time-slicing, 4 replicas; CDI on)"),
    Case("ts-2", "time-slicing, 2 replicas", {"sharing.replicas": 2}),
    Case("ts-4-shared", "time-slicing, 4 replicas, renamed", {"sharing.renameByDefault": True}),
    Case("ts-4-one", "time-slicing, 4 replicas, requests of more than one fail", {"sharing.failRequestsGreaterThanOne": True}),
    Case("ts-4-nocdi", "time-slicing, 4 replicas, CDI off", {"toolkit.cdi": False}),
    Case("ts-3-single", "time-slicing, 3 replicas, mig.strategy single on a GPU without MIG", {"sharing.replicas": 3, "mig.strategy": "single"}),
    Case(
        "ts-3-mixed-mig",
        "time-slicing, 3 replicas of the GPU and 2 of a MIG resource, mig.strategy mixed on a GPU without MIG",
        {"sharing.replicas": 3, "mig.strategy": "mixed", "sharing.resources": [{"name": "nvidia.com/mig-1g.18gb", "replicas": 2}]},
    ),
    Case("ts-1024", "time-slicing at the most replicas the settings accept", {"sharing.replicas": 1024}),
    Case("mps-2", "MPS, 2 replicas", {"sharing.mode": "mps", "sharing.replicas": 2}),
    Case("mps-4", "MPS, 4 replicas", {"sharing.mode": "mps", "sharing.replicas": 4}),
    Case("mps-4-shared", "MPS, 4 replicas, renamed", {"sharing.mode": "mps", "sharing.replicas": 4, "sharing.renameByDefault": True}),
    Case("mps-48", "MPS at the most replicas the settings accept", {"sharing.mode": "mps", "sharing.replicas": 48}),
    Case("mps-2-single", "MPS, 2 replicas, mig.strategy single on a GPU without MIG", {"sharing.mode": "mps", "sharing.replicas": 2, "mig.strategy": "single"}),
    Case("mps-4-nocdi", "MPS, 4 replicas, CDI off", {"sharing.mode": "mps", "sharing.replicas": 4, "toolkit.cdi": False}),
    Case(
        "profile-mps-8",
        "a node profile (MPS, 8 replicas) beside the default (time-slicing, 4)",
        {"sharing.profiles": {"mps-8": {"mode": "mps", "replicas": 8}}, "nodes[0].sharing": "mps-8"},
    ),
)


def stack_namespace(case: Case) -> dict[str, Any]:
    """The dev stack's config with one H200 node and the case's changes."""
    cfg = dev_config()
    node = copy.deepcopy(cfg["nodes"][0])
    node.update(name=NODE, gpu={"model": "H200", "count": 1})
    cfg["nodes"] = [node]
    for path, value in case.changes.items():
        set_path(cfg, path, copy.deepcopy(value))
    return cfg


def _release_values(plan: Any) -> dict[str, Any]:
    (release,) = [r for r in plan.resources if r.type == "kubernetes:helm.sh/v3:Release"]
    return release.inputs["values"]


def _node_label(plan: Any) -> str | None:
    """The node's label as the label Job's table sets it."""
    from gpu_stack.design.node_label_job import parse_table

    for r in plan.resources:
        if r.type == "kubernetes:core/v1:ConfigMap" and r.name == "gpu-operator-node-labels-table":
            return parse_table(r.inputs["data"]["nodes"]).get(NODE, {}).get(NODE_LABEL)
    return None


def plugin_env(values: dict[str, Any]) -> dict[str, str]:
    """The device plugin container's environment from the Release values (operator v25.10.1)."""
    env = {
        "MPS_ROOT": OPERATOR_MPS_ROOT,
        "NVIDIA_MIG_MONITOR_DEVICES": "all",
        "MIG_STRATEGY": values.get("mig", {}).get("strategy", "single"),
    }
    if values.get("cdi", {}).get("enabled", True):
        env |= {"CDI_ENABLED": "true", "DEVICE_LIST_STRATEGY": CDI_LIST_STRATEGY, "CDI_ANNOTATION_PREFIX": CDI_ANNOTATION_PREFIX}
    return env


def build(case: Case) -> dict[str, Any]:
    """What the GPU run needs for one case and what it must see."""
    plan = plan_of(stack_namespace(case))
    values = _release_values(plan)
    dp = values["devicePlugin"]["config"]
    key = _node_label(plan) or dp["default"]
    (configmap,) = [r for r in plan.resources if r.inputs.get("metadata", {}).get("name") == dp["name"]]
    (row,) = [row for row in plan.capacity if row["node"] == NODE]
    ((resource, count),) = row["advertises"].items()
    config_text = configmap.inputs["data"][key]
    mps = "mps:" in config_text
    return {
        "name": case.name,
        "what": case.what,
        "changes": case.changes,
        "configmap": dp["name"],
        "key": key,
        "config": config_text,
        "env": plugin_env(values),
        "expect": {
            "resource": resource,
            "count": count,
            "gpus": row["gpus"],
            "cdi": bool(values.get("cdi", {}).get("enabled", True)),
            "mps": mps,
            "one_at_most": mps or "failRequestsGreaterThanOne: true" in config_text,
        },
    }


def all_cases() -> list[dict[str, Any]]:
    return [build(c) for c in CASES]


if __name__ == "__main__":
    json.dump(all_cases(), sys.stdout, indent=1)
    sys.stdout.write("\n")
