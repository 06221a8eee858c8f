"""The prod stack through the real engine, node preparation included: the driver ships with the
node image and the operator installs the toolkit, so each node's command is the read-only
preflight over SSH (the real command provider, one sshd per node); MIG mixed with two node
profiles; the operator namespace and release protected.

The tier's one realistic first `up`: the nodes come up as on a real cluster with the driver on the
host (sandbox/gpu_nodes.py BringUp: GFD's labels, the device plugin and the MIG manager only a
minute after the operator is installed), at the program's default timeouts (Helm's, the
validation Jobs', the MIG rollout's), not the stack file's longer ones. Then a MIG manager that
gives up half-way (k8s-mig-manager v0.13.1's early return) fails `up` at once with its error, and
the next `up` restarts it and the node recovers.

Every Node is tainted `nvidia.com/gpu=present:NoSchedule` and none is a control-plane Node, as in a
managed cluster's GPU node pools: the Jobs that use no GPU and the chart's own pods must still run."""

from __future__ import annotations

import json

import pytest

from gpu_stack.config.cluster import OperatorSettings
from gpu_stack.config.validation import ValidationSettings
from sandbox.gpu_nodes import BringUp
from sandbox.harness import GPU_POOL_TAINT

from .conftest import sandbox_for

STACK = "prod"
NODES = ("gpu-prod-h200-1", "gpu-prod-h200-2", "gpu-prod-h200-3")


def _out(proc) -> str:
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def box(tools, e2e_tmp):
    defaults = {"validation": {"timeoutSeconds": ValidationSettings().timeout_seconds},
                "operator": {"timeoutSeconds": OperatorSettings().timeout_seconds}}
    with sandbox_for(STACK, tools, e2e_tmp / "prod", gpu_taint=True, bring_up=BringUp(), **defaults) as sandbox:
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


def test_where_every_node_is_a_tainted_gpu_node_the_api_jobs_and_the_operator_still_run(box, first_up):
    proc, _before = first_up
    assert proc.returncode == 0, _out(proc)[-6000:]
    nodes = box.cluster.get_json("nodes")["items"]
    # a managed control plane: no Node but the GPU nodes, each tainted
    assert sorted(n["metadata"]["name"] for n in nodes) == sorted(NODES)
    assert all(n["spec"].get("taints") == [GPU_POOL_TAINT] for n in nodes)
    ns = box.pulumi.outputs()["operatorNamespace"]
    # the label Job, the MIG layout guard and the rollout ran for real (sandbox/pod_runner.py: their
    # image's kubectl, as nobody, under their memory limit) and passed
    runs = dict(box.runner.runs)
    assert box.runner.refused == {}
    for job in ("node-labels-", "mig-layout-guard-", "mig-rollout-"):
        ran = {k: r for k, r in runs.items() if k.startswith(f"{ns}/{job}")}
        assert ran and all(r.returncode == 0 for r in ran.values()), (job, {k: r.stdout[-400:] + r.stderr[-400:] for k, r in ran.items()})
    # the chart's operator, NFD's master and garbage collector: scheduled on a tainted node, not Pending
    pods = box.cluster.get_json("pods", "-n", ns)["items"]
    names = [p["metadata"]["name"] for p in pods]
    for part in ("gpu-operator-", "node-feature-discovery-master-", "node-feature-discovery-gc-"):
        assert any(part in n for n in names), (part, names)
    pending = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Pending" or not p["spec"].get("nodeName")]
    assert pending == []


def test_a_second_up_changes_nothing_and_runs_nothing(box, first_up):
    assert first_up[0].returncode == 0
    counts = {name: box.nodes[name].preparations() for name in NODES}
    proc = box.pulumi.run("up", "--yes", "--expect-no-changes", check=False)
    assert proc.returncode == 0, _out(proc)[-4000:]
    assert {name: box.nodes[name].preparations() for name in NODES} == counts


def test_the_first_up_waited_for_the_realistic_bring_up(box, first_up):
    """No GPU label came before the simulated driver and toolkit; the MIG manager started after
    GFD's labels; the rollout and the checks waited for them within the default timeouts."""
    assert first_up[0].returncode == 0
    assert box.agents.bring_up == BringUp() and box.agents.bring_up.host_driver_seconds >= 60
    for name in NODES:
        labels = box.cluster.get_json("node", name)["metadata"]["labels"]
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200" and labels["nvidia.com/mig.capable"] == "true"
        assert labels["nvidia.com/gpu.deploy.mig-manager"] == "true" and labels["nvidia.com/mig.config.state"] == "success"
        # the simulated driver and toolkit took their minute during this `up`
        assert box.agents.ready_since[name] - box.agents.operator_since[name] >= box.agents.bring_up.host_driver_seconds


def test_a_mig_manager_that_gives_up_fails_up_at_once_and_the_next_up_recovers(box, first_up):
    assert first_up[0].returncode == 0
    node = NODES[2]
    box.agents.give_up[node] = "pending"  # its next reconfiguration returns early, once
    box.pulumi.config_set("gpu-stack:nodes[2].mig", "inference-balanced")
    failed = box.pulumi.up(check=False)
    out = _out(failed)
    assert failed.returncode != 0
    # the wave failed at its first look after the label (mig.rollout.timeout is 30 minutes), and
    # the manager's own error reached the user
    assert f"node {node}: its MIG manager gave up applying MIG config 'inference-balanced'" in out, out[-6000:]
    assert "device-plugin pod did not shutdown: context deadline exceeded" in out
    labels = box.cluster.get_json("node", node)["metadata"]["labels"]
    assert labels["nvidia.com/mig.config.state"] == "pending"
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "paused-for-mig-change"
    again = box.pulumi.up(check=False)
    assert again.returncode == 0, _out(again)[-6000:]
    after = box.cluster.get_json("node", node)
    labels = after["metadata"]["labels"]
    assert labels["nvidia.com/mig.config.state"] == "success" and labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert not after["spec"].get("unschedulable")
    assert after["status"]["allocatable"].get("nvidia.com/mig-3g.71gb") == "8"
    (restarted,) = [run for key, run in box.runner.runs.items() if "/mig-rollout-" in key and "gave up on" in run.stdout]
    assert f"node {node}: its MIG manager" in restarted.stdout and "restarting it" in restarted.stdout
