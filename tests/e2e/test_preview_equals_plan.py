"""`pulumi preview --json` of a fresh stack, by the real engine (the CLI starting the Python
language host, both provider plugins) against the simulated cluster and the stack's SSH nodes, is
the offline plan of the same stack file under the strict comparison of sandbox/compare.py: types,
names, parents, dependencies, resource options, read ids and inputs, node commands and copies
included; a secret is secret on both sides; the providers are the pinned ones. Every committed
stack and the three samples (the dra sample with its DRA release and untyped resource.k8s.io/v1
ResourceClaimTemplate)."""

from __future__ import annotations

import json

import pytest

from sandbox.compare import differences, preview_resources
from sandbox.harness import Sandbox

from .conftest import sandbox_for

STACKS = ["dev", "staging", "prod", "k3s", "airgap", "dra"]


def offline_plan(sandbox: Sandbox) -> dict:
    return json.loads(sandbox.pulumi.run_offline_plan())


def pinned(sandbox: Sandbox) -> dict[str, str]:
    tools = sandbox.tools
    assert tools is not None
    return {"kubernetes": tools.kubernetes_provider_version, "command": tools.command_provider_version}


@pytest.mark.parametrize("stack", STACKS)
def test_preview_of_a_fresh_stack_equals_the_offline_plan(stack, tools, e2e_tmp):
    with sandbox_for(stack, tools, e2e_tmp / f"preview-{stack}") as sandbox:
        preview, plan_file = sandbox.pulumi.preview_with_plan()
        plan = offline_plan(sandbox)
        versions = pinned(sandbox)
        host_prepared = sandbox.nodes is not None
        found = differences(plan, preview, plan_file, versions, sandbox.pulumi.project_dir)
    resources = preview_resources(preview)
    assert {r["op"] for r in resources.values()} <= {"create", "read"}
    assert found == []
    commands = [name for name, r in resources.items() if r["type"] == "command:remote:Command"]
    # the stacks that prepare nodes over SSH preview one command and one copy per node
    assert bool(commands) == host_prepared == (stack in ("dev", "prod", "airgap"))
