"""Node preparation through the real engine, as a user runs it: the dev stack (driver on the host,
toolkit installed over SSH) with the real CLI, the Python language host and the real command
provider copying the script and running it over real sshd connections, one per node on its own
loopback address, each in front of a fake node root (the real nvidia-ctk and containerd).

The steps run in order on one sandbox: `pulumi up` with its preview, answering yes; a second `up`
that changes and runs nothing; a replicas edit and a key rotation that run nothing on any node; a
node moved to another host, prepared there only; a node whose sshd is down; a node removed."""

from __future__ import annotations

import json

import pytest
import yaml

from gpu_stack.offline.diff import diff_plans, render_text
from sandbox.compare import preview_resources

from .conftest import sandbox_for
from .test_preview_equals_plan import offline_plan

STACK = "dev"
NODES = ("gpu-dev-1", "gpu-dev-2")
RESTART = ["systemctl restart containerd"]


def _out(proc) -> str:
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def box(tools, e2e_tmp):
    with sandbox_for(STACK, tools, e2e_tmp / "node-prep", validation={"timeoutSeconds": 300}) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def first_up(box):
    # as a user runs it: the preview, then the update, answered yes (no --skip-preview)
    return box.pulumi.run("up", "--yes", check=False)


def _quiet(box) -> dict[str, tuple[int, dict[str, bytes]]]:
    """Per node: how often it was prepared and its root, with the tool call log emptied."""
    out = {}
    for name, node in box.nodes.nodes.items():
        node.fake.clear_calls()
        out[name] = (node.preparations(), node.fake.snapshot())
    return out


def _assert_nothing_ran(box, before) -> None:
    for name, (preparations, snapshot) in before.items():
        node = box.nodes[name]
        assert node.preparations() == preparations, f"node preparation ran again on {name}"
        assert node.fake.calls() == [], (name, node.fake.calls())
        assert node.fake.snapshot() == snapshot, f"files changed on {name}"


def _command_ops(preview) -> dict[str, str]:
    return {n: r["op"] for n, r in preview_resources(preview).items() if r["type"].startswith("command:")}


def test_up_prepares_every_node_over_ssh_then_installs_and_validates(box, first_up):
    assert first_up.returncode == 0, _out(first_up)[-6000:]
    # the preview ran before the update (a user's `pulumi up`), with both node commands in it
    assert "Previewing update" in first_up.stdout and "Updating" in first_up.stdout
    outputs = box.pulumi.outputs()
    for name in NODES:
        node = box.nodes[name]
        fake = node.fake
        assert node.preparations() == 1, name
        # the toolkit installed at the pin, the runtime configured with CDI, restarted once
        installs = [c for c in fake.calls("apt-get") if c.startswith("apt-get install")]
        assert len(installs) == 1 and " nvidia-container-toolkit=1.18.1-1" in installs[0], installs
        assert node.restarts() == RESTART, (name, node.restarts())
        dropin = fake.read("etc/containerd/conf.d/99-nvidia.toml") or ""
        assert "runtimes.nvidia]" in dropin and "enable_cdi = true" in dropin, dropin
        # isolation: only pods that request a GPU get one (docs/node-preparation.md)
        toolkit = fake.read("etc/nvidia-container-runtime/config.toml") or ""
        assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in toolkit, toolkit
        # the /dev/char links of a systemd-cgroup host and the udev rule that keeps them
        links = sorted(p.name for p in (fake.root / "dev/char").iterdir())
        gpus = 2 if name == "gpu-dev-1" else 1
        assert [f"195:{i}" for i in range(gpus)] + ["195:255"] == [x for x in links if x.startswith("195:")], links
        assert fake.read("lib/udev/rules.d/71-nvidia-dev-char.rules"), "the udev rule"
        # the copy is where CopyToRemote put it: the node's own folder, as the login user
        assert (fake.base / ".gpu-stack-node-prep.sh").read_bytes() == (box.pulumi.project_dir / "config/node-scripts/node-prep.sh").read_bytes()
        # what the node reported reaches the stack outputs
        line = outputs["nodePreflight"][name]
        report = json.loads(line.split(" ", 1)[1])
        assert report["node"] == name and report["ok"] is True and report["count"] == gpus, report
        assert report["gpus"] == ["NVIDIA L4"] * gpus
    # the release and validation after the nodes
    secrets = box.cluster.get_json("secrets", "-n", outputs["operatorNamespace"], "-l", "owner=helm")["items"]
    assert [s["metadata"]["labels"]["status"] for s in secrets] == ["deployed"]
    jobs = box.cluster.get_json("jobs", "-n", "gpu-validation")["items"]
    assert jobs and all(j["status"].get("succeeded") == j["spec"]["completions"] for j in jobs)


def test_a_second_up_changes_nothing_and_runs_nothing_on_any_node(box, first_up):
    assert first_up.returncode == 0
    before = _quiet(box)
    proc = box.pulumi.run("up", "--yes", "--expect-no-changes", check=False)
    assert proc.returncode == 0, _out(proc)[-4000:]
    _assert_nothing_ran(box, before)


def test_a_replicas_edit_runs_nothing_on_any_node(box, first_up):
    assert first_up.returncode == 0
    box.pulumi.config_set("gpu-stack:sharing.replicas", "8")
    preview = box.pulumi.preview_json("--diff")
    # the preview lists the steps that change something: the sharing config, no node command
    assert any(r["type"] == "kubernetes:core/v1:ConfigMap" for r in preview_resources(preview).values())
    assert _command_ops(preview) == {}
    before = _quiet(box)
    proc = box.pulumi.up(check=False)
    assert proc.returncode == 0, _out(proc)[-4000:]
    _assert_nothing_ran(box, before)


def test_a_rotated_ssh_key_runs_nothing_on_any_node(box, first_up):
    assert first_up.returncode == 0
    preflight = box.pulumi.outputs()["nodePreflight"]
    assert all(preflight[n] and preflight[n].startswith("GPU_STACK_PREFLIGHT ") for n in NODES), preflight
    new_key = box.nodes.new_key()
    box.pulumi.set_secret("gpu-stack:ssh.privateKey", new_key)
    box.nodes.revoke_all_but_newest()  # the old key no longer logs in: the update must use the new one
    ops = _command_ops(box.pulumi.preview_json("--diff"))
    assert ops == {f"node-prep-{n}{part}": "update" for n in NODES for part in ("", "-script")}, ops
    before = _quiet(box)
    proc = box.pulumi.up(check=False)
    assert proc.returncode == 0, _out(proc)[-4000:]
    _assert_nothing_ran(box, before)
    # the update printed the report the last run kept on the node: pulumi-command replaced each
    # command's stdout with it, and every node's preflight is what it was (audit 5, F2)
    assert box.pulumi.outputs()["nodePreflight"] == preflight
    assert "node preparation does not run again" in _out(proc), "the update's message is what is logged"
    # the state holds the new key: a second up is clean
    again = box.pulumi.run("up", "--yes", "--expect-no-changes", check=False)
    assert again.returncode == 0, _out(again)[-4000:]


def test_a_node_moved_to_another_host_is_prepared_there_only(box, first_up):
    assert first_up.returncode == 0
    declared = yaml.safe_load(box.pulumi.stack_file.read_text())["config"]["gpu-stack:nodes"]
    spec = next(n for n in declared if n["name"] == NODES[0])
    new_host = box.nodes.add_host("gpu-dev-1-new-host", spec)
    before_plan = offline_plan(box)
    box.pulumi.config_set("gpu-stack:nodes[0].address", new_host.address)
    box.pulumi.config_set("gpu-stack:nodes[0].hostKey", new_host.host_key)
    # the diff says so before the run, offline and in the engine's preview
    text = render_text(diff_plans(before_plan, offline_plan(box)))
    assert (
        f"node command re-runs on {NODES[0]}: node-prep-{NODES[0]} (its host changed: it is prepared on the new host; "
        "its pinned host key changed"
    ) in text, text
    ops = _command_ops(box.pulumi.preview_json("--diff"))
    assert ops == {f"node-prep-{NODES[0]}": "replace", f"node-prep-{NODES[0]}-script": "replace"}, ops
    before = _quiet(box)
    proc = box.pulumi.up(check=False)
    assert proc.returncode == 0, _out(proc)[-4000:]
    assert new_host.preparations() == 1 and new_host.restarts() == RESTART
    assert new_host.fake.read("etc/containerd/conf.d/99-nvidia.toml")
    del before[new_host.name]
    _assert_nothing_ran(box, before)  # the old host and the other node: nothing ran


def test_a_node_whose_sshd_is_down_fails_up_naming_it_and_the_next_up_finishes(box, first_up):
    assert first_up.returncode == 0
    # a new version of the node script: every node's preparation runs again
    script = box.pulumi.project_dir / "config/node-scripts/node-prep.sh"
    script.write_text(script.read_text() + "# gpu-stack: a new release of the node script\n")
    down = box.nodes[NODES[1]]
    down.stop()
    moved = box.nodes["gpu-dev-1-new-host"]
    before = (moved.preparations(), down.preparations())
    proc = box.pulumi.up(check=False)
    assert proc.returncode != 0
    # the failing resource's own diagnostic names the node (its URN) and the address it dialled
    out = _out(proc)
    diagnostic = out[out.index("Diagnostics:"):] if "Diagnostics:" in out else ""
    assert f"node-prep-{NODES[1]}" in diagnostic and f"{down.address}:{down.port}" in diagnostic, out[-4000:]
    # the engine stops at the first failure (its default); --continue-on-error prepares the rest
    # (docs/node-preparation.md): the other node is prepared, the release still waits for all
    proc = box.pulumi.up("--continue-on-error", check=False)
    assert proc.returncode != 0 and f"{down.address}:{down.port}" in _out(proc)
    assert moved.preparations() == before[0] + 1, "the other node is prepared"
    assert down.preparations() == before[1]
    down.start()
    again = box.pulumi.up(check=False)
    assert again.returncode == 0, _out(again)[-4000:]
    assert down.preparations() == before[1] + 1 and moved.preparations() == before[0] + 1


def test_a_node_removed_from_the_stack_runs_nothing_on_its_host(box, first_up):
    assert first_up.returncode == 0
    removed = box.nodes[NODES[1]]
    box.pulumi.run("config", "rm", "--path", "gpu-stack:nodes[1]")
    ops = _command_ops(box.pulumi.preview_json("--diff"))
    assert ops == {f"node-prep-{NODES[1]}": "delete", f"node-prep-{NODES[1]}-script": "delete"}, ops
    removed.stop()  # gone with the node: leaving the stack needs no connection to it
    before = _quiet(box)
    proc = box.pulumi.up(check=False)
    assert proc.returncode == 0, _out(proc)[-4000:]
    _assert_nothing_ran(box, before)
    # what the docs say stays on the host, stays
    assert removed.fake.read("etc/containerd/conf.d/99-nvidia.toml") and removed.fake.read("etc/nvidia-container-runtime/config.toml")
    state = box.pulumi.export()["deployment"]["resources"]
    assert not [r for r in state if r["urn"].endswith(f"node-prep-{NODES[1]}")]
