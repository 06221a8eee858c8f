"""End-to-end tests: the real Pulumi CLI and kubernetes provider against a real API server with
simulated GPU nodes (sandbox/). Run with `make e2e` (inside a network namespace with only
loopback). Without the toolchain they skip with one line saying how to build it; under CI
(CI=true) a missing toolchain, missing reference data (`make reference`) or a run outside the network namespace
fails instead."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from sandbox import reference
from sandbox.gpu_nodes import BRING_UP_ENV, BringUp
from sandbox.harness import CHART_DIR, Sandbox, host_managed, stack_document
from sandbox.ssh_nodes import unavailable_reason as ssh_unavailable_reason
from sandbox.toolchain import ToolchainMissing, find

IN_CI = os.environ.get("CI") == "true"
QUICK_BRING_UP_SECONDS = "3"
"""The tier's simulated driver and toolkit bring-up, so that the suite stays fast; the one test of
a realistic first `up` (tests/e2e/test_prod_flow.py) gives its sandbox the realistic figures."""
os.environ.setdefault(BRING_UP_ENV, QUICK_BRING_UP_SECONDS)


def _unavailable(reason: str):
    if IN_CI:
        pytest.fail(f"end-to-end tests must run under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def only_loopback() -> bool:
    """This process's network namespace has no interface but loopback (/proc/net/dev is per
    namespace; /sys/class/net is not, unless /sys is mounted anew)."""
    lines = Path("/proc/net/dev").read_text().splitlines()[2:]
    return [line.split(":", 1)[0].strip() for line in lines] == ["lo"]


@pytest.fixture(scope="session")
def tools():
    try:
        found = find()
    except ToolchainMissing as exc:
        _unavailable(str(exc))
    why = reference.unavailable(*reference.TEST_DATA)
    if why is not None:
        _unavailable(why)
    if not only_loopback():
        _unavailable("the harness runs in its own network namespace with only loopback: use `make e2e`")
    return found


@pytest.fixture(scope="session")
def e2e_tmp():
    """A folder of this run's own: pytest's rotating basetemp would be deleted under a running
    cluster by a third pytest run started meanwhile."""
    path = Path(tempfile.mkdtemp(prefix="gpu-stack-e2e-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def sandbox_for(
    stack: str, tools, workdir: Path, failing_checks: tuple[str, ...] = (), held_checks: tuple[str, ...] = (),
    gpu_taint: bool = False, bring_up: BringUp | None = None, **config
) -> Sandbox:
    """A sandbox of `stack` whose chart comes from the local reference copy (a stack that prepares
    its nodes over SSH skips, or fails under CI, where SSH nodes cannot be served); `gpu_taint`:
    every Node tainted as a managed cluster's GPU node pool (sandbox.harness.Sandbox.gpu_taint);
    `bring_up`: the nodes' driver and toolkit bring-up (default: the tier's short one)."""
    config.setdefault("operator", {})["chartPath"] = str(CHART_DIR)
    # NVIDIA's DRA driver chart from the reference copy (a stack with DRA nodes installs it)
    config.setdefault("dra", {})["chartPath"] = str(reference.path(reference.DRA_CHART))
    box = Sandbox(
        stack, workdir=workdir, tools=tools, config=config, failing_checks=failing_checks, held_checks=held_checks,
        gpu_taint=gpu_taint, bring_up=bring_up or BringUp.from_env(),
    )
    if host_managed(stack_document(stack)):
        reason = ssh_unavailable_reason()
        if reason:
            _unavailable(f"stack {stack} prepares its nodes over SSH: {reason}")
    return box
