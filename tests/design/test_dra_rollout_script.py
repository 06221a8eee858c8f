"""The device plugin <-> DRA rollout script runs for real, as the GPU Operator image runs it (from
its ConfigMap's files, under the real busybox `sh` with only busybox's applets on PATH:
tests/busybox_image.py), against a fake `kubectl` (tests/design/dra_fake_kubectl.py) whose device
plugin and DRA kubelet plugin answer the node labels late, as the kubelet does, and which samples
every node after every call: a node that advertises both ways, and the schedulable GPUs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_stack.design.dra_rollout import (
    CORDON_MARK,
    PROBE_CLAIM_KEY,
    PROBE_JOB_KEY,
    SCRIPT,
    SCRIPT_DIR,
    probe_templates,
    script_data,
)

from ..busybox_image import image_bin, require_busybox, run_sh

SHELLCHECK = Path(sys.executable).parent / "shellcheck"
PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
DRA_LABEL = "gpu-stack/allocation=dra"
DRA_KEY = "gpu-stack/allocation"
FAKE = Path(__file__).with_name("dra_fake_kubectl.py")
H100 = {"nvidia.com/gpu": "8"}


@pytest.fixture
def cluster(tmp_path):
    kubectl = tmp_path / "fake-kubectl"
    kubectl.write_text(f"#!{sys.executable}\n" + FAKE.read_text())
    kubectl.chmod(0o755)
    image_bin(tmp_path / "bin", stubs={"kubectl": kubectl})
    return tmp_path


def plugin_node(gpus: int = 8, unschedulable: bool = False, **hw) -> dict:
    """A node on the device plugin (its resources advertised since long ago)."""
    resources = {"nvidia.com/gpu": str(gpus)}
    return {"labels": {"kubernetes.io/hostname": "x"}, "annotations": {}, "unschedulable": unschedulable,
            "capacity": {"cpu": "64", **resources}, "allocatable": {"cpu": "64", **resources},
            "dp_want": True, "dp_since": -100, "dra_want": False, "dra_since": -100,
            "hw": {"gpus": gpus, "devices": gpus, "resources": resources, **hw}}


def dra_node(gpus: int = 8, **hw) -> tuple[dict, list[dict]]:
    """A node on DRA (device plugin off long ago, its slice published) and its slice."""
    zero = {"nvidia.com/gpu": "0"}
    node = {"labels": {"kubernetes.io/hostname": "x", PLUGIN: "false", DRA_KEY: "dra"}, "annotations": {},
            "unschedulable": False, "capacity": {"cpu": "64", **zero}, "allocatable": {"cpu": "64", **zero},
            "dp_want": False, "dp_since": -100, "dra_want": True, "dra_since": -100, "generation": 1,
            "hw": {"gpus": gpus, "devices": gpus, "resources": {"nvidia.com/gpu": str(gpus)}, **hw}}
    return node, [{"pool": "", "generation": 1, "count": 1, "devices": [f"gpu-{i}" for i in range(gpus)]}]


class Run:
    def __init__(self, status: int, output: str, termination: str, cluster: dict, calls: list, samples: list):
        self.status, self.output, self.termination, self.cluster = status, output, termination, cluster
        self.calls, self.samples = calls, samples

    def verdict(self) -> str:
        lines = [line for line in self.output.splitlines() if line.startswith(("PASS ", "FAIL "))]
        assert len(lines) == 1, self.output
        return lines[0]

    def index(self, *prefix: str) -> int:
        return next((i for i, c in enumerate(self.calls) if c[: len(prefix)] == list(prefix)), -1)

    def made(self, *prefix: str) -> bool:
        return self.index(*prefix) >= 0

    def both(self) -> list:
        """Every sample in which a node advertised both ways."""
        return [s for s in self.samples if s["both"]]


def configmap_files(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in script_data().items():
        (folder / name).write_text(text)
    return folder / SCRIPT


def rollout(cluster_dir: Path, nodes: dict, table: list[str], pods=(), env: dict | None = None,
            slices: dict | None = None, script: Path | None = None, probe: bool = True) -> Run:
    """Runs the script as its Job does (from its ConfigMap's files, with the probe's templates the
    design makes, unless `probe` is False)."""
    script = script or configmap_files(cluster_dir / "rollout")
    templates = probe_templates("nvcr.io/nvidia/gpu-operator:v25.10.1", "gpu-operator", 900, ())
    for key, text in templates.items():
        (cluster_dir / key).write_text(text)
    state_file = cluster_dir / "cluster.json"
    all_slices = [{**s, "node": n, "pool": n} for n, node_slices in (slices or {}).items() for s in node_slices]
    state_file.write_text(json.dumps({"tick": 0, "nodes": nodes, "slices": all_slices, "pods": list(pods)}))
    for suffix in (".calls", ".samples"):
        Path(str(state_file) + suffix).unlink(missing_ok=True)
    (cluster_dir / "nodes").write_text("".join(f"{line}\n" for line in table))
    term = cluster_dir / "termination-log"
    term.unlink(missing_ok=True)
    tmp = cluster_dir / "tmp"
    tmp.mkdir(exist_ok=True)
    full = {"FAKE_CLUSTER": str(state_file), "FAKE_DRA_LABEL": DRA_LABEL, "TERMINATION_LOG": str(term),
            "TMPDIR": str(tmp), "NODES_FILE": str(cluster_dir / "nodes"), "POLL_SECONDS": "0",
            "DRA_LABEL": DRA_LABEL,
            **({"PROBE_JOB_FILE": str(cluster_dir / PROBE_JOB_KEY), "PROBE_CLAIM_FILE": str(cluster_dir / PROBE_CLAIM_KEY)} if probe else {}),
            **{k: str(v) for k, v in (env or {}).items()}}
    proc = run_sh(script, full, cluster_dir / "bin")

    def lines(suffix: str) -> list:
        f = Path(str(state_file) + suffix)
        return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []

    return Run(proc.returncode, proc.stdout + proc.stderr, term.read_text() if term.exists() else "",
               json.loads(state_file.read_text()), lines(".calls"), lines(".samples"))


def pod(name: str, node: str, **kw) -> dict:
    return {"namespace": kw.pop("namespace", "team-a"), "name": name, "node": node, "gpu": True, **kw}


def to_dra(*names: str, gpus: int = 8) -> list[str]:
    return [f"{n} dra {gpus} {gpus} gpu.nvidia.com={gpus}" for n in names]


def to_plugin(*names: str, gpus: int = 8) -> list[str]:
    return [f"{n} device-plugin {gpus} {gpus} nvidia.com/gpu={gpus}" for n in names]


def in_dra(run: Run, name: str) -> bool:
    node = run.cluster["nodes"][name]
    slices = [s for s in run.cluster["slices"] if s["node"] == name]
    return (node["labels"].get(PLUGIN) == "false" and node["labels"].get(DRA_KEY) == "dra" and bool(slices)
            and all(v == "0" for k, v in {**node["capacity"], **node["allocatable"]}.items() if k.startswith("nvidia.com/")))


# --------------------------------------------------------------------------- shellcheck, busybox
def test_the_script_passes_shellcheck_for_busybox_and_posix_sh():
    root = SCRIPT_DIR.parents[1]
    for dialect in (["-s", "busybox", "-S", "style"], ["-s", "sh", "-e", "SC3043", "-S", "warning"]):
        proc = subprocess.run([str(SHELLCHECK), "-x", *dialect, f"config/dra-rollout/{SCRIPT}"],
                              capture_output=True, text=True, cwd=root)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_script_parses_in_the_real_busybox(tmp_path):
    proc = subprocess.run([require_busybox(), "sh", "-n", str(configmap_files(tmp_path))], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (SCRIPT_DIR / SCRIPT).read_text().startswith("#!/bin/sh\n")


# --------------------------------------------------------------------------- two waves to DRA
def test_two_waves_to_dra_never_show_a_node_advertising_both_ways(cluster):
    names = ("n1", "n2", "n3", "n4")
    nodes = {n: plugin_node(grace=3, dra_lag=1, slices=2) for n in names}
    pods = [pod("trainer", "n1", grace_reads=2), pod("web", "n1", gpu=False), pod("claimer", "n3", gpu=False, claims=["gpu"])]
    run = rollout(cluster, nodes, to_dra(*names), pods, env={"WAVE_SIZE": 2})
    assert run.status == 0, run.output
    assert run.verdict() == "PASS dra-rollout: 4 node(s) moved in 2 wave(s)"
    assert all(in_dra(run, n) for n in names)
    # Sampled after every kubectl call: never a node with the device plugin's resources and a slice.
    assert len(run.samples) == len(run.calls) > 40 and run.both() == []
    # Per node: the device plugin off, then (its capacity gone) the DRA kubelet plugin placed.
    for n in names:
        off = run.index("label", "node", n, f"{PLUGIN}=false")
        on = run.index("label", "node", n, DRA_LABEL)
        assert run.index("cordon", n) < off < on < run.index("uncordon", n)
        assert any(run.samples[i]["call"][:2] == ["get", "node"] for i in range(off, on))
    # Wave 1 (n1, n2) is uncordoned before wave 2 (n3, n4) is cordoned.
    assert max(run.index("uncordon", "n1"), run.index("uncordon", "n2")) < run.index("cordon", "n3")
    # GPU pods (by limit or by claim) were evicted; the CPU pod stays.
    evicted = sorted(c[2] for c in run.calls if c[:2] == ["create", "--raw"])
    assert evicted == ["/api/v1/namespaces/team-a/pods/claimer/eviction", "/api/v1/namespaces/team-a/pods/trainer/eviction"]
    assert [p["name"] for p in run.cluster["pods"]] == ["web"]
    assert all(not n["unschedulable"] and CORDON_MARK not in n["annotations"] for n in run.cluster["nodes"].values())


@pytest.mark.parametrize("way", ["to-dra", "back"])
def test_the_samples_catch_a_script_that_places_the_new_advertiser_before_the_old_is_gone(cluster, way):
    # The same runs with the wait for the old advertiser to go cut out of the script: the sampler
    # sees both on the wave's node (the kubelet keeps a stopped plugin's capacity, and a gone
    # driver's slices, a while), and the script's own look at the node stops the rollout there.
    broken = configmap_files(cluster / "broken")
    text = broken.read_text()
    wait = '  wait_until "the old advertiser is gone" old "$timeout" "the rollout\'s timeout" "$@"\n'
    assert wait in text
    broken.write_text(text.replace(wait, ""))
    if way == "to-dra":
        run = rollout(cluster, {n: plugin_node(grace=3) for n in ("n1", "n2")}, to_dra("n1", "n2"), script=broken)
    else:
        (n1, s1), (n2, s2) = dra_node(wipe=3), dra_node(wipe=3)
        run = rollout(cluster, {"n1": n1, "n2": n2}, to_plugin("n1", "n2"), slices={"n1": s1, "n2": s2}, script=broken)
    assert {n for s in run.both() for n in s["both"]} == {"n1"}, run.output
    assert run.status == 1 and run.termination.startswith(("FAIL dra-rollout: node n1: ", "FAIL dra-rollout: node n1 advertises")), run.termination
    assert not run.made("cordon", "n2")


def test_a_second_run_is_a_no_op(cluster):
    nodes = {n: plugin_node() for n in ("n1", "n2")}
    first = rollout(cluster, nodes, to_dra("n1", "n2"))
    assert first.status == 0, first.output
    state = json.loads((cluster / "cluster.json").read_text())
    slices = {n: [s for s in state["slices"] if s["node"] == n] for n in ("n1", "n2")}
    again = rollout(cluster, state["nodes"], to_dra("n1", "n2"), slices=slices)
    assert again.status == 0, again.output
    assert again.verdict() == "PASS dra-rollout: every node already allocates its GPUs as its table line says"
    assert {c[0] for c in again.calls} == {"get"}
    assert "node n1 already allocates its GPUs through DRA: nothing to do" in again.output


# --------------------------------------------------------------------------- the capacity floor
def test_the_floor_shrinks_the_waves_and_holds_throughout(cluster):
    names = ("n1", "n2", "n3", "n4")
    nodes = {n: plugin_node() for n in names}
    run = rollout(cluster, nodes, to_dra(*names), env={"WAVE_SIZE": 3, "MIN_GPUS": 16})
    assert run.status == 0, run.output
    # 32 GPUs, 16 to keep: at most 2 nodes of 8 at once, although WAVE_SIZE allows 3.
    assert run.verdict() == "PASS dra-rollout: 4 node(s) moved in 2 wave(s)"
    assert "wave 1: n1 n2 (16 schedulable GPU(s) out of 32 while it runs, floor 16)" in run.output
    assert min(s["schedulable"] for s in run.samples) == 16 and run.both() == []


def test_a_floor_that_cannot_hold_cordons_nothing(cluster):
    nodes = {"n1": plugin_node(), "n2": plugin_node(unschedulable=True)}
    run = rollout(cluster, nodes, to_dra("n1", "n2"), env={"MIN_GPUS": 8})
    assert run.status == 1
    assert run.termination == (
        "FAIL dra-rollout: the capacity floor cannot hold: 8 GPU(s) are schedulable on the table's nodes now and moving "
        "node n1 (8 GPU(s)) would leave fewer than the 8 to keep; nothing was cordoned and no later wave starts "
        "(uncordon or repair nodes, or lower the floor)\n")
    assert not run.made("cordon") and not run.made("label")


def test_a_node_someone_else_cordoned_costs_the_floor_nothing_and_stays_cordoned(cluster):
    nodes = {"n1": plugin_node(unschedulable=True), "n2": plugin_node(), "n3": plugin_node()}
    run = rollout(cluster, nodes, to_dra("n1", "n2", "n3"), env={"MIN_GPUS": 8, "WAVE_SIZE": 2})
    assert run.status == 0, run.output
    assert "wave 1: n1 n2 (8 schedulable GPU(s) out of 16 while it runs, floor 8)" in run.output
    assert "wave 2: n3 (8 schedulable GPU(s) out of 16 while it runs, floor 8)" in run.output
    assert run.cluster["nodes"]["n1"]["unschedulable"] is True and not run.made("uncordon", "n1")
    assert in_dra(run, "n1") and min(s["schedulable"] for s in run.samples) >= 8


def test_the_floor_is_read_again_before_each_wave(cluster):
    # n1, cordoned by someone else, gives nothing: after it moved, n2 alone would break the floor.
    nodes = {"n1": plugin_node(unschedulable=True), "n2": plugin_node()}
    run = rollout(cluster, nodes, to_dra("n1", "n2"), env={"MIN_GPUS": 8, "WAVE_SIZE": 2})
    assert run.status == 1
    assert "wave 1: n1 (0 schedulable GPU(s) out of 8 while it runs, floor 8)" in run.output
    assert run.termination.startswith("FAIL dra-rollout: the capacity floor cannot hold: 8 GPU(s) are schedulable "
                                      "on the table's nodes now and moving node n2 (8 GPU(s))")
    assert in_dra(run, "n1") and not run.made("cordon", "n2") and not run.made("label", "node", "n2")


# --------------------------------------------------------------------------- failures
def test_a_failure_in_wave_1_stops_wave_2_and_leaves_the_node_cordoned(cluster):
    nodes = {"n1": plugin_node(dra_never=True, plugin_lag=0, grace=0), "n2": plugin_node()}
    run = rollout(cluster, nodes, to_dra("n1", "n2"), env={"TIMEOUT_SECONDS": 1, "POLL_SECONDS": 1})
    assert run.status == 1
    assert run.termination.startswith(
        "FAIL dra-rollout: node n1: its ResourceSlices of gpu.nvidia.com show 0 device(s) (expected 8) after 1s "
        "(the rollout's timeout), waiting until the new advertiser is in place; the node stays cordoned and no later "
        "wave starts"), run.termination
    assert run.cluster["nodes"]["n1"]["unschedulable"] is True and not run.made("uncordon")
    assert not run.made("cordon", "n2") and not run.made("label", "node", "n2")
    assert run.both() == []


def test_a_device_plugin_that_does_not_go_keeps_dra_off(cluster):
    run = rollout(cluster, {"n1": plugin_node(plugin_stuck=True)}, to_dra("n1"), env={"TIMEOUT_SECONDS": 1, "POLL_SECONDS": 1})
    assert run.status == 1
    assert run.termination.startswith(
        "FAIL dra-rollout: node n1: the device plugin still advertises capacity {nvidia.com/gpu=8} allocatable "
        "{nvidia.com/gpu=8} after 1s (the rollout's timeout), waiting until the old advertiser is gone"), run.termination
    assert not run.made("label", "node", "n1", DRA_LABEL)


def test_a_pdb_that_refuses_eviction_stops_before_the_switch(cluster):
    run = rollout(cluster, {"n1": plugin_node()}, to_dra("n1"), [pod("guarded", "n1", pdb=True)],
                  env={"EVICTION_TIMEOUT_SECONDS": 1, "POLL_SECONDS": 1})
    assert run.status == 1
    assert "team-a/guarded (eviction refused: Error from server (TooManyRequests)" in run.termination
    assert not run.made("label") and run.cluster["nodes"]["n1"]["unschedulable"] is True


def test_a_node_that_does_not_exist_is_never_touched(cluster):
    run = rollout(cluster, {"n1": plugin_node()}, to_dra("n1", "gpu-typo"))
    assert run.status == 1
    assert run.termination.startswith('FAIL dra-rollout: node gpu-typo cannot be read: Error from server (NotFound)')
    assert {c[0] for c in run.calls} == {"get"}


def test_a_rerun_after_a_failure_finishes_the_node(cluster):
    nodes = {"n1": plugin_node(dra_never=True, plugin_lag=0, grace=0)}
    failed = rollout(cluster, nodes, to_dra("n1"), env={"TIMEOUT_SECONDS": 1, "POLL_SECONDS": 1})
    assert failed.status == 1
    state = json.loads((cluster / "cluster.json").read_text())
    state["nodes"]["n1"]["hw"]["dra_never"] = False  # the cause fixed
    again = rollout(cluster, state["nodes"], to_dra("n1"))
    assert again.status == 0, again.output
    assert in_dra(again, "n1") and again.cluster["nodes"]["n1"]["unschedulable"] is False
    assert CORDON_MARK not in again.cluster["nodes"]["n1"]["annotations"]


# --------------------------------------------------------------------------- the way back
def test_the_way_back_removes_dra_before_the_device_plugin_returns(cluster):
    nodes, slices = {}, {}
    for n in ("n1", "n2"):
        nodes[n], slices[n] = dra_node(wipe=3)
    run = rollout(cluster, nodes, to_plugin("n1", "n2"), [pod("claimer", "n2", gpu=False, claims=["gpu"])],
                  env={"WAVE_SIZE": 1}, slices=slices)
    assert run.status == 0, run.output
    assert run.verdict() == "PASS dra-rollout: 2 node(s) moved in 2 wave(s)"
    assert run.both() == [] and run.cluster["slices"] == []
    for n in ("n1", "n2"):
        node = run.cluster["nodes"][n]
        assert DRA_KEY not in node["labels"] and node["labels"][PLUGIN] == "true"
        assert node["allocatable"]["nvidia.com/gpu"] == "8" and node["unschedulable"] is False
        off = run.index("label", "node", n, f"{DRA_KEY}-")
        assert off < run.index("label", "node", n, f"{PLUGIN}=true")
    assert [c[2] for c in run.calls if c[:2] == ["create", "--raw"]] == ["/api/v1/namespaces/team-a/pods/claimer/eviction"]


# --------------------------------------------------------------------------- the plugin pod, slices, options
PLUGIN_POD = {"PLUGIN_SELECTOR": "dra-driver-nvidia-gpu-component=kubelet-plugin", "PLUGIN_NAMESPACE": "gpu-operator"}


def test_the_dra_kubelet_plugin_pod_is_waited_for_before_the_slices(cluster):
    run = rollout(cluster, {"n1": plugin_node(pod_lag=3)}, to_dra("n1"), env=PLUGIN_POD)
    assert run.status == 0, run.output
    assert ("waiting until the DRA kubelet plugin runs: node n1: its DRA kubelet plugin pod "
            "nvidia-dra-driver-gpu-kubelet-plugin-n1 is not ready") in run.output
    listing = run.index("get", "pods", "-n", "gpu-operator")
    assert run.index("label", "node", "n1", DRA_LABEL) < listing < run.index("uncordon", "n1")


def test_a_plugin_pod_that_never_gets_ready_fails_at_the_plugin_timeout(cluster):
    run = rollout(cluster, {"n1": plugin_node(pod_never=True, plugin_lag=0, grace=0)}, to_dra("n1"),
                  env={**PLUGIN_POD, "PLUGIN_TIMEOUT_SECONDS": 1, "POLL_SECONDS": 1})
    assert run.status == 1
    assert run.termination.startswith(
        "FAIL dra-rollout: node n1: its DRA kubelet plugin pod nvidia-dra-driver-gpu-kubelet-plugin-n1 is not ready "
        "after 1s (the rollout's pluginTimeout), waiting until the DRA kubelet plugin runs; the node stays cordoned"), run.termination


def test_a_pool_published_in_several_slices_is_waited_for_whole(cluster):
    run = rollout(cluster, {"n1": plugin_node(slices=2, slice_every=8)}, to_dra("n1"))
    assert run.status == 0, run.output
    assert "its ResourceSlices of pool(s) n1 are incomplete" in run.output
    uncordon = run.index("uncordon", "n1")
    published = [s for s in run.cluster["slices"] if s["node"] == "n1"]
    assert len(published) == 2 and sum(len(s["devices"]) for s in published) == 8
    # both slices were there before the node was let back
    assert run.samples[uncordon - 1]["schedulable"] == 0


def test_evict_false_switches_without_cordon_or_eviction_and_still_one_advertiser(cluster):
    run = rollout(cluster, {"n1": plugin_node(grace=2)}, to_dra("n1"), [pod("trainer", "n1")], env={"EVICT": "false"})
    assert run.status == 0, run.output
    assert not run.made("cordon") and not run.made("create", "--raw") and not run.made("uncordon")
    assert in_dra(run, "n1") and run.both() == []
    assert [p["name"] for p in run.cluster["pods"]] == ["trainer"]


def test_a_gpu_pod_the_drain_cannot_evict_refuses_the_wave_before_the_cordon(cluster):
    run = rollout(cluster, {"n1": plugin_node()}, to_dra("n1"), [pod("exporter", "n1", owner="DaemonSet")])
    assert run.status == 1
    assert run.termination.startswith(
        "FAIL dra-rollout: GPU pods the drain cannot evict hold GPUs on the wave's nodes: node n1: team-a/exporter "
        "(DaemonSet); so the allocation was not changed, nothing was cordoned"), run.termination
    assert not run.made("cordon") and not run.made("label")


def test_nodes_that_advertise_nothing_yet_move_whatever_the_floor(cluster):
    # A first install: the operator's device plugin has not advertised yet; nothing is taken away.
    nodes = {n: plugin_node() for n in ("n1", "n2")}
    for node in nodes.values():
        node["capacity"], node["allocatable"] = {"cpu": "64"}, {"cpu": "64"}
        node["hw"]["plugin_never"] = True
    run = rollout(cluster, nodes, to_dra("n1", "n2"), env={"MIN_GPUS": 16, "WAVE_SIZE": 2})
    assert run.status == 0, run.output
    assert "wave 1: n1 n2 (0 schedulable GPU(s) out of 0 while it runs, floor 16)" in run.output
    assert in_dra(run, "n1") and in_dra(run, "n2") and run.both() == []


# --------------------------------------------------------------------------- the probe
def test_a_probe_claims_a_device_on_each_node_moved_to_dra_before_the_uncordon(cluster):
    run = rollout(cluster, {n: plugin_node(probe_lag=3) for n in ("n1", "n2")}, to_dra("n1", "n2"), env={"WAVE_SIZE": 2})
    assert run.status == 0, run.output
    probes = run.cluster["probes"]
    claims = {k: v for k, v in probes.items() if v["kind"] == "ResourceClaim"}
    jobs = {k: v for k, v in probes.items() if v["kind"] == "Job"}
    assert len(claims) == len(jobs) == 2 and all(p["deleted"] for p in probes.values())
    for claim in claims.values():
        (request,) = claim["obj"]["spec"]["devices"]["requests"]
        assert request["exactly"] == {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}
    created = [i for i, c in enumerate(run.calls) if c[:2] == ["create", "-f"]]
    assert max(run.index("label", "node", n, DRA_LABEL) for n in ("n1", "n2")) < min(created)
    assert max(created) < run.index("get", "job") < min(run.index("uncordon", n) for n in ("n1", "n2"))
    assert "node n1 handed out a device through a ResourceClaim" in run.output


def test_a_failed_probe_stops_the_rollout_with_the_node_cordoned_and_cleans_up(cluster):
    nodes = {"n1": plugin_node(probe_fails=True), "n2": plugin_node()}
    run = rollout(cluster, nodes, to_dra("n1", "n2"))
    assert run.status == 1
    assert run.termination.startswith(
        "FAIL dra-rollout: node n1: its probe (one device through a ResourceClaim, Job dra-probe-00002) failed: Failed  "
        "no /dev/nvidia<N> in the container: the kubelet did not have the DRA driver prepare the claimed device; "
        "the DRA driver did not hand out a working device there; the node stays cordoned"), run.termination
    assert run.cluster["nodes"]["n1"]["unschedulable"] is True and not run.made("cordon", "n2")
    assert all(p["deleted"] for p in run.cluster["probes"].values())


def test_the_way_back_runs_no_probe(cluster):
    node, node_slices = dra_node()
    run = rollout(cluster, {"n1": node}, to_plugin("n1"), slices={"n1": node_slices})
    assert run.status == 0, run.output
    assert not run.made("create", "-f") and "probes" not in run.cluster


def test_a_node_switched_to_its_mode_is_left_alone_whatever_it_advertises(cluster):
    # A device-plugin node that advertises nothing yet (a first install) or one GPU less, and a DRA
    # node whose slice lost a device: switched already, nothing for the rollout to drain or move.
    short = plugin_node(plugin_never=True)
    short["allocatable"]["nvidia.com/gpu"] = short["capacity"]["nvidia.com/gpu"] = "7"
    empty = plugin_node(plugin_never=True)
    empty["capacity"], empty["allocatable"] = {"cpu": "64"}, {"cpu": "64"}
    lost, lost_slices = dra_node()
    lost_slices[0]["devices"] = lost_slices[0]["devices"][:7]
    run = rollout(cluster, {"n1": short, "n2": empty, "n3": lost}, to_plugin("n1", "n2") + to_dra("n3"),
                  slices={"n3": lost_slices})
    assert run.status == 0, run.output
    assert run.verdict() == "PASS dra-rollout: every node already allocates its GPUs as its table line says"
    assert {c[0] for c in run.calls} == {"get"}
    assert ("node n3 already allocates its GPUs through DRA: nothing to do (though its ResourceSlices of gpu.nvidia.com "
            "show 7 device(s) (expected 8): a switch would not change that)") in run.output


def test_stale_files_in_tmp_are_never_sent(cluster):
    # Another run's bodies left in TMPDIR where this run cannot write (under the sandbox's pod
    # runner /tmp is the host's: there a root-owned file; here a folder of the same name, which
    # root cannot write either): the script writes files of its own, never sends another's.
    tmp = cluster / "tmp"
    for name in ("probe.json", "eviction.json"):
        (tmp / name).mkdir(parents=True)
    run = rollout(cluster, {"n1": plugin_node()}, to_dra("n1"), [pod("trainer", "n1")],
                  env={"EVICTION_TIMEOUT_SECONDS": 2, "POLL_SECONDS": 1})
    assert run.status == 0, run.output
    assert [c[2] for c in run.calls if c[:2] == ["create", "--raw"]] == ["/api/v1/namespaces/team-a/pods/trainer/eviction"]
    assert in_dra(run, "n1") and len(run.cluster["probes"]) == 2
