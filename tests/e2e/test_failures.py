"""What a user sees when something is wrong, with the real engine: a check pod that fails, a
node that advertises fewer GPUs than declared, a misspelt node name, a missing SSH key."""

from __future__ import annotations

from .conftest import sandbox_for
from .test_preview_equals_plan import offline_plan

FAST = {"timeoutSeconds": 120}


def _output(proc) -> str:
    return proc.stdout + proc.stderr


def _diagnostic(out: str, head: str) -> str:
    """The block of the Diagnostics section that starts with `head` (a resource's type and name)."""
    diagnostics = out[out.index("Diagnostics:"):] if "Diagnostics:" in out else ""
    if head not in diagnostics:
        return ""
    block = diagnostics[diagnostics.index(head) + len(head):]
    following = [i for i in (block.find("\n  kubernetes:"), block.find("\n  command:"), block.find("\n  pulumi:")) if i >= 0]
    return block[: min(following)] if following else block


def test_a_check_pod_that_fails_fails_up_naming_the_check(tools, e2e_tmp):
    with sandbox_for("k3s", tools, e2e_tmp / "fail-check", failing_checks=("cuda-smoke",), validation=FAST) as box:
        jobs = {(r["inputs"].get("metadata", {}).get("labels") or {}).get("gpu-stack/check"): r["name"]
                for r in offline_plan(box)["resources"] if r["type"] == "kubernetes:batch/v1:Job"}
        proc = box.pulumi.up(check=False)
    assert proc.returncode != 0
    out = _output(proc)
    # the failing Job's own diagnostic carries the pod's termination message (the payload's FAIL
    # line; here the simulated kubelet's), and no other check is reported as failed
    block = _diagnostic(out, f"kubernetes:batch/v1:Job ({jobs['cuda-smoke']}):")
    assert "FAIL simulated: the simulated kubelet failed this check pod" in block, out[-4000:]
    others = [check for check, name in jobs.items() if check != "cuda-smoke" and _diagnostic(out, f"kubernetes:batch/v1:Job ({name}):")]
    assert others == [], others


def test_a_node_with_fewer_gpus_than_declared_fails_up_naming_node_and_counts(tools, e2e_tmp):
    with sandbox_for("k3s", tools, e2e_tmp / "fail-capacity", validation=FAST) as box:
        node = box.agents.hardware[0]
        box.agents.missing_gpus[node.name] = 1  # one GPU fell off the bus before the first up
        proc = box.pulumi.up(check=False)
        runs = dict(box.runner.runs)
    assert proc.returncode != 0
    out = _output(proc)
    assert node.name in out, out[-3000:]
    assert any(r.returncode != 0 and node.name in r.stdout for r in runs.values()), "the capacity check ran for real and failed"


def test_a_misspelt_node_name_fails_preview_in_one_line(tools, e2e_tmp):
    with sandbox_for("k3s", tools, e2e_tmp / "misspelt") as box:
        first = box.agents.hardware[0].name
        box.pulumi.config_set("gpu-stack:nodes[0].name", first + "x")
        proc = box.pulumi.run("preview", check=False)
    assert proc.returncode != 0
    errors = [line for line in _output(proc).splitlines() if "error:" in line and first + "x" in line and "does not exist" in line]
    assert errors, _output(proc)[-3000:]


def test_a_missing_ssh_key_fails_preview_with_the_documented_line(tools, e2e_tmp):
    from gpu_stack.components.engine import missing_ssh_key_message

    with sandbox_for("dev", tools, e2e_tmp / "no-key") as box:
        # the sandbox set its nodes' key: a user who has not set one yet
        box.pulumi.run("config", "rm", "--path", "gpu-stack:ssh.privateKey")
        proc = box.pulumi.run("preview", check=False)
    assert proc.returncode != 0
    assert missing_ssh_key_message() in " ".join(_output(proc).split()), _output(proc)[-3000:]




def test_a_node_whose_driver_check_fails_fails_up_naming_it_before_changing_it(tools, e2e_tmp):
    with sandbox_for("dev", tools, e2e_tmp / "wrong-gpu") as box:
        assert box.nodes is not None
        wrong = box.nodes["gpu-dev-2"]
        wrong.fake.set_gpus("NVIDIA H200, 580.105.08, Disabled")  # not the declared L4
        wrong.fake.set_toolkit(None)
        before = wrong.fake.snapshot()
        proc = box.pulumi.up(check=False)
        calls = wrong.fake.calls()
        after = wrong.fake.snapshot()
    assert proc.returncode != 0
    out = _output(proc)
    # the failing resource's own diagnostic: its name, then what the node's check saw
    block = _diagnostic(out, "command:remote:Command (node-prep-gpu-dev-2):")
    assert "GPU 0 is 'NVIDIA H200', but the gpu of node gpu-dev-2 in gpu-stack:nodes declares model 'L4'" in block, out[-4000:]
    # nothing changed on that node: no package, no runtime edit, no restart
    assert after == before
    assert not [c for c in calls if (c.split(" ", 1)[0] in ("apt-get", "dnf", "systemctl") and " install" in c) or "restart" in c], calls


def test_operator_driver_nodes_of_two_oses_fail_up_before_the_release_is_installed(tools, e2e_tmp):
    # Issue 33 item 10 (W6): the operator's ClusterPolicy driver is one DaemonSet whose image is
    # tagged with the first GPU node's OS; nodes of another OS would fail their driver install.
    # The nodes' preflight reports (node preparation over SSH, the toolkit on the host) are
    # checked together before the release.
    with sandbox_for("dev", tools, e2e_tmp / "mixed-os", driver={"placement": "operator"}) as box:
        assert box.nodes is not None
        box.nodes["gpu-dev-2"].fake.set_os("rocky")  # gpu-dev-1 keeps the fake's Debian
        proc = box.pulumi.up(check=False)
        releases = box.cluster.get_json("secrets", "-A", "-l", "owner=helm")["items"]
        ran = {name: bool(node.fake.calls()) for name, node in box.nodes.nodes.items()}
    assert proc.returncode != 0
    out = _output(proc)
    assert "gpu-stack:driver.placement = 'operator', but the node preflight finds 2 OSes on the GPU nodes" in out, out[-4000:]
    assert "rocky9.4: gpu-dev-2" in out and "gpu-dev-1" in out, out[-4000:]
    assert "the operator release was not installed" in out
    # the script ran on every node (the reports come from the runs), and the release never started
    assert ran == {"gpu-dev-1": True, "gpu-dev-2": True}, ran
    assert releases == [], [r["metadata"]["name"] for r in releases]
