"""`pulumi preview --json` of a fresh stack, by the real engine against the simulated cluster,
has the same resources as the offline plan of the same stack file: types, names, parents,
dependencies and inputs (secrets and preview-unknowns aside)."""

from __future__ import annotations

import json

import pytest

from sandbox.compare import differences, preview_resources
from sandbox.harness import Sandbox

from .conftest import sandbox_for

STACKS = ["staging", "k3s"]


def offline_plan(sandbox: Sandbox) -> dict:
    return json.loads(sandbox.pulumi.run_offline_plan())


@pytest.mark.parametrize("stack", STACKS)
def test_preview_of_a_fresh_stack_equals_the_offline_plan(stack, tools, e2e_tmp):
    with sandbox_for(stack, tools, e2e_tmp / f"preview-{stack}") as sandbox:
        preview = sandbox.pulumi.preview_json()
        plan = offline_plan(sandbox)
    ops = {r["op"] for r in preview_resources(preview).values()}
    assert ops <= {"create", "read"}, ops
    assert differences(plan, preview) == []
