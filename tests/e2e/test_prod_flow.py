"""The prod stack through the real engine, node preparation included: the driver ships with the
node image and the operator installs the toolkit, so each node's command is the read-only
preflight over SSH (the real command provider, one sshd per node); MIG mixed with two node
profiles; the operator namespace and release protected."""

from __future__ import annotations

import json

import pytest

from .conftest import sandbox_for

STACK = "prod"
NODES = ("gpu-prod-h200-1", "gpu-prod-h200-2", "gpu-prod-h200-3")


def _out(proc) -> str:
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def box(tools, e2e_tmp):
    with sandbox_for(STACK, tools, e2e_tmp / "prod", validation={"timeoutSeconds": 300}) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def first_up(box):
    assert box.nodes is not None
    before = {name: box.nodes[name].fake.snapshot() for name in NODES}
    return box.pulumi.run("up", "--yes", check=False), before


def test_up_checks_every_node_over_ssh_and_changes_nothing_on_it(box, first_up):
    proc, before = first_up
    assert proc.returncode == 0, _out(proc)[-6000:]
    outputs = box.pulumi.outputs()
    for name in NODES:
        node = box.nodes[name]
        # the preflight only: read-only, whatever it found
        assert node.preparations() == 1
        assert node.fake.snapshot() == before[name], f"the preflight changed files on {name}"
        assert node.restarts() == [] and not node.fake.calls("apt-get")
        report = json.loads(outputs["nodePreflight"][name].split(" ", 1)[1])
        assert report["node"] == name and report["ok"] is True and report["count"] == 8
        assert report["gpus"] == ["NVIDIA H200"] * 8
    secrets = box.cluster.get_json("secrets", "-n", outputs["operatorNamespace"], "-l", "owner=helm")["items"]
    assert [s["metadata"]["labels"]["status"] for s in secrets] == ["deployed"]
    jobs = box.cluster.get_json("jobs", "-n", "gpu-validation")["items"]
    assert jobs and all(j["status"].get("succeeded") == j["spec"]["completions"] for j in jobs)


def test_a_second_up_changes_nothing_and_runs_nothing(box, first_up):
    assert first_up[0].returncode == 0
    counts = {name: box.nodes[name].preparations() for name in NODES}
    proc = box.pulumi.run("up", "--yes", "--expect-no-changes", check=False)
    assert proc.returncode == 0, _out(proc)[-4000:]
    assert {name: box.nodes[name].preparations() for name in NODES} == counts
