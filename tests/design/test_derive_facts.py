"""derive() computes each shared fact once and hands it on: no builder asks for it again.

Every fact function is spied on wherever a design module holds it (its own module and every module
that imported it), then one derive() of a stack that uses every feature is counted.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

import gpu_stack.design.derive  # noqa: F401  (loads every design module)
from gpu_stack.config import load_settings
from gpu_stack.design.derive import derive

CSV = (
    "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization\n"
    "DCGM_FI_DEV_FB_USED, gauge, framebuffer used\n"
    "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature\n"
    "DCGM_FI_DEV_XID_ERRORS, gauge, last XID\n"
)


def every_feature() -> dict[str, Any]:
    """Host-managed nodes, a mirror with its login and pull secrets, per-node sharing profiles,
    custom MIG configs with the manager (so the rollout and the layout guard), a custom DCGM list,
    alerts, dashboard, validation in full with the sharing benchmark."""
    l4 = [{"name": f"l4-{i}", "address": f"10.0.0.{i}", "gpu": {"model": "L4", "count": 2}, "runtime": "containerd",
           **({"sharing": "ts-8"} if i % 2 else {})} for i in range(4)]
    h100 = [{"name": f"h100-{i}", "address": f"10.0.1.{i}", "gpu": {"model": "H100-80GB", "count": 2},
             "runtime": "containerd", "mig": "halves"} for i in range(2)]
    return {
        "driver": {"placement": "host"},
        "toolkit": {"placement": "host"},
        "ssh": {"user": "ubuntu"},
        "images": {
            "mirror": "registry.example.internal/gpu",
            "registryCredentials": {"username": "puller", "password": "not-a-real-password"},
            "pullSecrets": ["site-pull"],
        },
        "nodes": l4 + h100,
        "sharing": {"mode": "time-slicing", "replicas": 4, "profiles": {"ts-8": {"mode": "time-slicing", "replicas": 8}}},
        "mig": {
            "strategy": "mixed",
            "manager": {"enabled": True},
            "profiles": {"halves": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]},
        },
        "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": True}, "metrics": CSV},
        "alerts": {"enabled": True, "dashboard": {"enabled": True}},
        "validation": {"enabled": True, "coverage": "full", "podBudget": 1000, "sharingBenchmark": {"enabled": True}},
    }


# module (where the function is defined), function -> how often one derive() may call it
# (None: once per node of the stack).
FACTS: dict[tuple[str, str], int | None] = {
    ("gpu_stack.design.images", "mirrored_settings"): 1,
    ("gpu_stack.config.facts", "all_profiles"): 1,
    ("gpu_stack.config.facts", "cluster_profile"): 1,
    ("gpu_stack.design.capacity", "node_facts"): 1,
    ("gpu_stack.config.facts", "node_layout"): None,
    ("gpu_stack.design.images", "pull_secret_names"): 1,
    ("gpu_stack.design.dcgm", "configured_fields"): 1,
    ("gpu_stack.config.dcgm_csv", "go_csv_records"): 1,
    ("gpu_stack.config.dcgm_csv", "default_fields"): 0,
    ("gpu_stack.config.dcgm_csv", "csv_fields"): 0,
    ("gpu_stack.config.dcgm_csv", "metric_names"): 0,
    ("gpu_stack.design.dcgm", "build_dcgm"): 1,
    ("gpu_stack.design.sharing", "build_sharing"): 1,
    ("gpu_stack.design.mig", "build_mig"): 1,
    ("gpu_stack.design.mig", "parted_document"): 1,
    ("gpu_stack.design.helm_values", "build_values"): 1,
    ("gpu_stack.design.images", "chart_image_values"): 1,
    ("gpu_stack.design.node_prep", "node_commands"): 1,
    ("gpu_stack.design.node_prep", "host_values"): 1,
    ("gpu_stack.design.node_prep", "phases_for"): 1,
    ("gpu_stack.design.node_prep", "script_hash"): 1,
    ("gpu_stack.design.node_prep", "node_values"): None,
    ("gpu_stack.design.capacity", "capacity_table"): 1,
    ("gpu_stack.design.mig_rollout", "build_rollout"): 1,
    ("gpu_stack.design.mig_rollout", "rollout_nodes"): 1,
    ("gpu_stack.design.mig_guard", "build_guard"): 1,
    ("gpu_stack.design.alerts", "build_alerts"): 1,
    ("gpu_stack.design.alerts", "alerts_enabled"): 1,
    ("gpu_stack.design.alerts", "declared_gpus_expr"): 1,
    ("gpu_stack.design.alerts", "rule_labels"): 1,
    ("gpu_stack.design.dashboard", "build_dashboard"): 1,
    ("gpu_stack.design.dashboard", "dashboard_enabled"): 1,
    ("gpu_stack.design.validation.plan", "build_validation"): 1,
    ("gpu_stack.design.validation.plan", "sample_nodes"): 1,
    ("gpu_stack.design.validation.manifests", "payload_data"): 1,
    ("gpu_stack.design.validation.dcgm", "whole_gpus"): 1,
    ("gpu_stack.design.validation.dcgm", "dcgm_expected_gpus"): 1,
    ("gpu_stack.design.validation.dcgm", "dcgm_metric"): 1,
    ("gpu_stack.design.generated_limits", "stack_problems"): 1,
}
PER_NODE: set[tuple[str, str]] = {
    ("gpu_stack.design.validation.sharing", "shared_resource"),
}
"""Called at most once for each node (the first argument's node)."""


def _spy(monkeypatch: pytest.MonkeyPatch, key: tuple[str, str], record: Callable[[tuple[Any, ...]], None]) -> None:
    module, name = key
    original = getattr(sys.modules[module], name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        record(args)
        return original(*args, **kwargs)

    holders = [m for n, m in list(sys.modules.items()) if n.startswith("gpu_stack.") and getattr(m, name, None) is original]
    assert holders, key
    for holder in holders:
        monkeypatch.setattr(holder, name, spy)


def test_one_derive_computes_each_fact_once(monkeypatch):
    settings = load_settings(every_feature())
    calls: Counter[tuple[str, str]] = Counter()
    per_node: Counter[tuple[tuple[str, str], str]] = Counter()
    for key in FACTS:
        _spy(monkeypatch, key, lambda args, key=key: calls.update([key]))
    for key in PER_NODE:
        _spy(monkeypatch, key, lambda args, key=key: per_node.update([(key, args[0].name)]))

    design = derive(settings)

    # Every feature is on: each builder had something to build.
    assert design.rollout is not None and design.guard is not None and design.validation is not None
    assert design.alerts.groups and design.dashboard.enabled and design.dcgm.configmap_name is not None
    assert len(design.commands) == len(settings.nodes)
    assert any(j.check == "sharing-bench" for j in design.validation.jobs)
    nodes = len(settings.nodes)
    expected = {key: nodes if n is None else n for key, n in FACTS.items()}
    assert {key: calls[key] for key in FACTS} == expected
    assert per_node and max(per_node.values()) == 1, per_node


def test_the_builders_read_no_whole_settings():
    """No builder's signature takes the whole Settings: only derive() and the node facts do."""
    import inspect

    from gpu_stack.config import Settings

    takers = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("gpu_stack.design."):
            continue
        for fname, fn in vars(module).items():
            if inspect.isfunction(fn) and fn.__module__ == name:
                hints = [p.annotation for p in inspect.signature(fn).parameters.values()]
                if any(h in (Settings, "Settings") for h in hints):
                    takers.append(f"{name}.{fname}")
    assert sorted(takers) == [
        "gpu_stack.design.capacity.node_capacity",
        "gpu_stack.design.capacity.node_facts",
        "gpu_stack.design.capacity.physical_resources",
        "gpu_stack.design.derive.derive",
        "gpu_stack.design.images.docker_config_json",
        "gpu_stack.design.images.mirrored_settings",
    ]
