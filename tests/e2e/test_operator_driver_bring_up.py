"""A first `up` of the staging stack (the operator installs the driver and the toolkit; one A100
MIG-partitioned) with the realistic bring-up of the operator's driver: GFD's labels, the device
plugin and the MIG manager only five minutes after the operator is installed (sandbox/gpu_nodes.py
BringUp: the driver container's build and load of the kernel module), at the program's default
timeouts (Helm's, the validation Jobs', the MIG rollout's), not the stack file's.

It takes about six minutes (its `up` took 331 s on 2026-12-02), so it runs where
GPU_STACK_E2E_REALISTIC=1 is set (the tier's own realistic first `up`, with the driver on the host,
runs always: test_prod_flow.py)."""

from __future__ import annotations

import os
import time

import pytest

from gpu_stack.config.cluster import OperatorSettings
from gpu_stack.config.validation import ValidationSettings
from sandbox.gpu_nodes import BringUp

from .conftest import sandbox_for

pytestmark = pytest.mark.skipif(
    os.environ.get("GPU_STACK_E2E_REALISTIC") != "1",
    reason="the operator-driver bring-up takes about 6 minutes: set GPU_STACK_E2E_REALISTIC=1 to run it",
)


def test_a_first_up_with_the_operators_driver_passes_at_the_default_timeouts(tools, e2e_tmp):
    defaults = {"validation": {"timeoutSeconds": ValidationSettings().timeout_seconds},
                "operator": {"timeoutSeconds": OperatorSettings().timeout_seconds}}
    with sandbox_for("staging", tools, e2e_tmp / "operator-driver", bring_up=BringUp(), **defaults) as box:
        start = time.monotonic()
        proc = box.pulumi.run("up", "--yes", check=False, timeout=1800)
        took = time.monotonic() - start
        agents = box.agents
        labels = {hw.name: box.cluster.get_json("node", hw.name)["metadata"]["labels"] for hw in agents.hardware}
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert agents.bring_up.operator_driver_seconds >= 300
    for name, node_labels in labels.items():
        # each node's simulated driver took its five minutes during this `up`
        assert agents.ready_since[name] - agents.operator_since[name] >= agents.bring_up.operator_driver_seconds, name
        assert node_labels.get("nvidia.com/gpu.product"), (name, node_labels)  # GFD labelled it once up
    assert took >= agents.bring_up.operator_driver_seconds
    print(f"first up with the operator's driver: {took:.0f} s")
