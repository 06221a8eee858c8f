"""`GpuPlatform` composed from a program outside the project: its own provider, next to other
resources; a bad mapping registers nothing; and the stacks made before the component keep every
resource (the offline diff matches resources by URN, as the engine does)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpu_stack.config.stack_files import StackConfig
from gpu_stack.offline.diff import diff_plans
from gpu_stack.offline.runner import PlanError, run_program

from ..helpers import plan_stack_file

PROGRAM = '''
import pulumi
import pulumi_kubernetes as k8s

from gpu_stack import GpuPlatform

cluster = k8s.Provider("my-cluster", context="prod-east")
team = k8s.core.v1.Namespace("team-a", metadata={"name": "team-a"}, opts=pulumi.ResourceOptions(provider=cluster))
platform = GpuPlatform(
    "gpus",
    {
        "nodes": [{"name": "gpu-1", "gpu": {"model": "H100-80GB", "count": 8}, "sharing": "none"}],
        "sharing": {"mode": "time-slicing", "replicas": 2},
        "dcgmExporter": {"serviceMonitor": {"enabled": False}},
        "alerts": {"enabled": False},
        "validation": {"enabled": %(validation)s},
    },
    provider=cluster,
)
pulumi.export("capacity", platform.outputs["capacity"])
'''


def _project(tmp_path: Path, validation: str = "True", name: str = "platform-team") -> Path:
    project = tmp_path / name
    project.mkdir()
    (project / "Pulumi.yaml").write_text(f"name: {name}\nruntime: python\n")
    (project / "__main__.py").write_text(textwrap.dedent(PROGRAM % {"validation": validation}))
    return project


def test_a_program_of_its_own_composes_the_platform_with_its_own_provider(tmp_path):
    plan = run_program(StackConfig(project="platform-team", stack="prod"), _project(tmp_path))
    by_name = {r.name: r for r in plan.resources}
    # everything the stack registers sits under the one component; the program's own resources beside it
    assert by_name["gpus"].type == "gpu-stack:index:GpuPlatform" and by_name["gpus"].parent is None
    assert by_name["team-a"].parent is None
    tops = {r.name for r in plan.resources if r.parent == "gpus"}
    assert {"gpu-operator", "node-labels", "validation"} <= tops
    # no provider of its own: every Kubernetes resource is on the caller's
    assert not [r for r in plan.resources if r.type == "pulumi:providers:kubernetes" and r.name != "my-cluster"]
    k8s_resources = [r for r in plan.resources if r.type.startswith("kubernetes:")]
    assert k8s_resources and {r.options.get("provider") for r in k8s_resources} == {"my-cluster"}
    release = by_name["gpu-operator-release"]
    assert release.inputs["chart"] == "gpu-operator" and release.inputs["version"] == "v25.10.1"
    assert plan.capacity and plan.capacity[0]["node"] == "gpu-1"


def test_a_bad_mapping_registers_nothing_not_even_the_component(tmp_path):
    with pytest.raises(PlanError) as info:
        run_program(StackConfig(project="platform-team", stack="prod"), _project(tmp_path, validation="'sometimes'"))
    assert "gpu-stack:validation.enabled = 'sometimes'" in str(info.value)
    # the program's own provider and namespace came first; nothing of the platform did
    assert info.value.registered <= 2


def test_the_committed_stacks_keep_every_resource_under_the_component():
    """Against the plan of the program before GpuPlatform (every component a child of the stack):
    aliases make each the same resource, so nothing is replaced or deleted."""
    for stack in ("dev", "prod"):
        head = plan_stack_file(stack).to_json()
        before = _unparented(head)
        changes = diff_plans(before, head).changes
        assert [(c.action, c.type) for c in changes] == [("create", "gpu-stack:index:GpuPlatform")], changes


def test_without_the_aliases_the_engine_would_replace_everything():
    head = plan_stack_file("dev").to_json()
    before = _unparented(head)
    for r in head["resources"]:
        (r.get("options") or {}).pop("aliases", None)
    changes = diff_plans(before, head).changes
    replaced = {c.name for c in changes if c.action == "replace"}
    assert {"gpu-operator-release", "k8s", "validation-payloads"} <= replaced
    release = next(c for c in changes if c.name == "gpu-operator-release")
    assert "no alias names the old one" in release.reasons[0]


def _unparented(doc: dict) -> dict:
    """The plan as the program made it before the component: its children children of the stack."""
    import copy

    old = copy.deepcopy(doc)
    old["resources"] = [r for r in old["resources"] if r["type"] != "gpu-stack:index:GpuPlatform"]
    for r in old["resources"]:
        if r.get("parent") == "gpu-stack":
            r["parent"] = None
        (r.get("options") or {}).pop("aliases", None)
    return old
