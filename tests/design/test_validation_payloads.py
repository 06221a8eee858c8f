"""The validation payloads run for real, each under the shell of the image it runs on (bash for the
CUDA images' payloads; for the GPU Operator image's, the real busybox `sh` with only busybox's
applets and the stub kubectl on PATH), against stubs: `nvidia-smi -L` with G GPUs, a
fake node served by a stub kubectl, a fake DCGM metrics endpoint on 127.0.0.1, and peers that
have or have not started. Each passes on the right input and fails with one FAIL line (also its
termination message, which `pulumi up` prints) on the wrong one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from gpu_stack.design.validation import PAYLOAD_DIR, PAYLOAD_FILES

from ..busybox_image import image_bin, run_sh
from ..helpers import dev_config, plan_of

SHELLCHECK = Path(sys.executable).parent / "shellcheck"
UUID = "GPU-{i}0000000-aaaa-bbbb-cccc-dddddddddddd"

NVIDIA_SMI = """#!/usr/bin/env bash
if [[ -n ${STUB_SMI_FAIL:-} ]]; then
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
  exit 9
fi
[[ $1 == -L ]] || exit 2
for (( i = 0; i < ${STUB_GPUS:-1}; i++ )); do
  echo "GPU $i: NVIDIA H200 (UUID: GPU-${i}0000000-aaaa-bbbb-cccc-dddddddddddd)"
  for (( m = 0; m < ${STUB_MIG:-0}; m++ )); do
    echo "  MIG 3g.71gb     Device  $m: (UUID: MIG-${i}${m}000000-1111-2222-3333-444444444444)"
  done
done
"""

# kubectl get node NAME... -o jsonpath=TEMPLATE, as the real one answers it: one name gives the
# node itself, several a List (so the template must `range .items`); maps print as compact JSON
# (sorted keys); a name that does not exist gives `Error from server (NotFound)` on stderr and
# exit 1 while the others still print. FAKE_NODES lists snapshots (JSON lists of nodes) served
# one per call, the last one repeating, so a test can make nodes change between reads; every
# call's names are appended to <first snapshot>.calls, one line per call.
KUBECTL = r"""#!{python}
import json, os, re, sys
args = sys.argv[1:]
files = os.environ["FAKE_NODES"].split(os.pathsep)
log = files[0] + ".calls"
n = len(open(log).read().splitlines()) if os.path.exists(log) else 0
if args[:2] != ["get", "node"] or args[-2] != "-o":
    sys.exit(2)
names = args[2:-2]
with open(log, "a") as f:
    f.write(" ".join(names) + "\n")
nodes = {node["metadata"]["name"]: node for node in json.load(open(files[min(n, len(files) - 1)]))}
m = re.fullmatch(r'jsonpath=(\{range \.items\[\*\]\})?\{\.metadata\.name\}\{"\\t"\}\{(\.[a-z.]+)\}\{"\\n"\}(\{end\})?', args[-1])
if not m or bool(m.group(1)) != bool(m.group(3)):
    sys.exit(3)
if bool(m.group(1)) != (len(names) > 1):
    print("error: error executing jsonpath: %s is not found" % ("items" if m.group(1) else "metadata"), file=sys.stderr)
    sys.exit(1)
status = 0
for name in names:
    if name not in nodes:
        print('Error from server (NotFound): nodes "%s" not found' % name, file=sys.stderr)
        status = 1
        continue
    value = nodes[name]
    for part in m.group(2).strip(".").split("."):
        value = value[part]
    print(name + "\t" + json.dumps(value, separators=(",", ":"), sort_keys=True))
sys.exit(status)
"""

# getent hosts <pod>.<service>: resolves once the marker for <pod> exists (the pod "started").
GETENT = """#!/usr/bin/env bash
[[ $1 == hosts ]] || exit 2
[[ -e "$STUB_STARTED/${2%%.*}" ]] || exit 2
echo "10.0.0.1        $2"
"""

VECTOR_ADD = """#!/usr/bin/env bash
if [[ -n ${STUB_CUDA_FAIL:-} ]]; then
  echo "Failed to allocate device vector A (error code no CUDA-capable device is detected)!"
  exit 1
fi
echo "[Vector addition of 50000 elements]"
echo "Test PASSED"
"""


@pytest.fixture
def stubs(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (
        ("nvidia-smi", NVIDIA_SMI),
        ("kubectl", KUBECTL.replace("{python}", sys.executable, 1)),
        ("getent", GETENT),
        ("vectorAdd", VECTOR_ADD),
    ):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "started").mkdir()
    return tmp_path


def runs_under_sh(path: Path) -> bool:
    """A payload for the GPU Operator image (POSIX sh, `#!/bin/sh`), not a CUDA image's bash one."""
    return path.read_text().startswith("#!/bin/sh\n")


def run(stubs: Path, script: str, env: dict, payloads: Path = PAYLOAD_DIR, timeout: int = 120):
    """Run a payload as its image would; returns (exit status, stdout+stderr, termination message)."""
    term = stubs / "termination-log"
    if term.exists():
        term.unlink()
    full = {
        "PATH": f"{stubs / 'bin'}:/usr/bin:/bin",
        "TERMINATION_LOG": str(term),
        "STUB_STARTED": str(stubs / "started"),
        "VECTOR_ADD": str(stubs / "bin" / "vectorAdd"),
        **{k: str(v) for k, v in env.items()},
    }
    if runs_under_sh(payloads / script):
        image = image_bin(stubs / "image-bin", {"kubectl": stubs / "bin" / "kubectl"})
        proc = run_sh(payloads / script, full, image, timeout=timeout)
    else:
        proc = subprocess.run(
            ["bash", str(payloads / script)], env=full, capture_output=True, text=True, timeout=timeout
        )
    return proc.returncode, proc.stdout + proc.stderr, term.read_text() if term.exists() else ""


def fake_nodes(stubs: Path, *snapshots: dict[str, tuple[dict, dict]]) -> str:
    """Write snapshots {node: (allocatable, labels)} served in order; returns FAKE_NODES."""
    files = []
    for i, snapshot in enumerate(snapshots):
        path = stubs / f"nodes-{i}.json"
        nodes = [{"metadata": {"name": name, "labels": labels}, "status": {"allocatable": alloc}} for name, (alloc, labels) in snapshot.items()]
        path.write_text(json.dumps(nodes))
        files.append(str(path))
    return os.pathsep.join(files)


def fake_node(stubs: Path, *states: tuple[dict, dict], name: str = "gpu-dev-1") -> str:
    """One node whose (allocatable, labels) change from read to read; returns FAKE_NODES."""
    return fake_nodes(stubs, *({name: state} for state in states))


def calls(fake: str) -> list[list[str]]:
    """The node names of each kubectl call the stub answered."""
    log = Path(fake.split(os.pathsep)[0] + ".calls")
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def table(stubs: Path, *lines: str) -> str:
    """The per-node table a cluster Job reads (its ConfigMap, mounted); returns EXPECTED_FILE."""
    path = stubs / "expected"
    path.write_text("".join(f"{line}\n" for line in lines))
    return str(path)


def verdict(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith(("PASS ", "FAIL "))]
    assert len(lines) == 1, output
    return lines[0]


# --------------------------------------------------------------------------- shellcheck
def test_payloads_pass_shellcheck():
    scripts = sorted(str(p) for p in PAYLOAD_DIR.glob("*.sh"))
    assert {Path(s).name for s in scripts} >= set(PAYLOAD_FILES)
    proc = subprocess.run([str(SHELLCHECK), "-x", "-S", "warning", *scripts], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# --------------------------------------------------------------------------- GPU listing
def test_gpu_devices_passes_with_the_expected_gpus_and_prints_their_uuids(stubs):
    status, out, term = run(stubs, "gpu-devices.sh", {"STUB_GPUS": 2, "EXPECTED_GPUS": 2})
    assert status == 0, out
    assert UUID.format(i=0) in out and UUID.format(i=1) in out
    assert verdict(out).startswith("PASS gpu-devices: 2 GPU(s)")
    assert term == ""


def test_gpu_devices_fails_on_a_wrong_gpu_count(stubs):
    status, out, term = run(stubs, "gpu-devices.sh", {"STUB_GPUS": 1, "EXPECTED_GPUS": 2})
    assert status == 1
    assert verdict(out) == "FAIL gpu-devices: nvidia-smi -L lists 1 GPU(s), expected 2"
    assert term == "FAIL gpu-devices: nvidia-smi -L lists 1 GPU(s), expected 2\n"


def test_gpu_devices_reports_a_broken_driver(stubs):
    status, _out, term = run(stubs, "gpu-devices.sh", {"STUB_SMI_FAIL": 1, "EXPECTED_GPUS": 1})
    assert status == 1
    assert term.startswith("FAIL gpu-devices: 'nvidia-smi -L' failed: NVIDIA-SMI has failed")


def test_mig_device_seen_or_missing(stubs):
    status, out, _ = run(stubs, "gpu-devices.sh", {"STUB_GPUS": 1, "STUB_MIG": 1, "EXPECTED_MIG_DEVICES": 1, "CHECK_NAME": "mig-device"})
    assert status == 0, out
    assert "sees MIG device MIG-00000000-1111-2222-3333-444444444444" in out
    status, out, term = run(stubs, "gpu-devices.sh", {"STUB_GPUS": 1, "STUB_MIG": 0, "EXPECTED_MIG_DEVICES": 1, "CHECK_NAME": "mig-device"})
    assert status == 1
    assert term == "FAIL mig-device: nvidia-smi -L lists 0 MIG device(s), expected 1\n"


def test_gpu_devices_refuses_to_check_nothing(stubs):
    status, _out, term = run(stubs, "gpu-devices.sh", {})
    assert status == 1 and "set EXPECTED_GPUS or EXPECTED_MIG_DEVICES" in term


# --------------------------------------------------------------------------- CUDA smoke
def test_cuda_smoke_passes_when_vectoradd_passes(stubs):
    status, out, _ = run(stubs, "cuda-smoke.sh", {"EXPECTED_GPUS": 1})
    assert status == 0, out
    assert verdict(out) == "PASS cuda-smoke: vectorAdd computed on the GPU and verified its result"


def test_cuda_smoke_fails_with_vectoradds_own_error(stubs):
    status, _out, term = run(stubs, "cuda-smoke.sh", {"STUB_CUDA_FAIL": 1})
    assert status == 1
    assert term == (
        "FAIL cuda-smoke: vectorAdd exited with status 1: Failed to allocate device vector A "
        "(error code no CUDA-capable device is detected)!\n"
    )


def test_cuda_smoke_fails_when_the_pod_sees_the_wrong_gpu_count(stubs):
    status, _out, term = run(stubs, "cuda-smoke.sh", {"STUB_GPUS": 0, "EXPECTED_GPUS": 1})
    assert status == 1 and term == "FAIL cuda-smoke: nvidia-smi -L lists 0 GPU(s), expected 1\n"


def test_cuda_smoke_names_a_wrong_image(stubs):
    status, _out, term = run(stubs, "cuda-smoke.sh", {"VECTOR_ADD": "/cuda-samples/vectorAdd"})
    assert status == 1 and "is images.cuda the vectorAdd sample?" in term


# --------------------------------------------------------------------------- node capacity
def test_node_capacity_passes_when_the_node_advertises_the_table(stubs):
    nodes = fake_node(stubs, ({"cpu": "16", "nvidia.com/gpu": "8", "pods": "110"}, {}))
    expected = table(stubs, "gpu-dev-1 nvidia.com/gpu=8")
    status, out, _ = run(stubs, "node-capacity.sh", {"FAKE_NODES": nodes, "EXPECTED_FILE": expected, "DEADLINE_SECONDS": 0})
    assert status == 0, out
    assert verdict(out) == "PASS node-capacity: node gpu-dev-1 advertises nvidia.com/gpu=8 as the capacity table says"
    assert calls(nodes) == [["gpu-dev-1"]]


def test_node_capacity_fails_when_fewer_are_advertised(stubs):
    nodes = fake_node(stubs, ({"nvidia.com/gpu": "4"}, {}))
    expected = table(stubs, "gpu-dev-1 nvidia.com/gpu=8")
    status, _out, term = run(
        stubs, "node-capacity.sh", {"FAKE_NODES": nodes, "EXPECTED_FILE": expected, "DEADLINE_SECONDS": 0, "CHECK_NAME": "sharing-capacity"}
    )
    assert status == 1
    assert term == "FAIL sharing-capacity: node gpu-dev-1 advertises 4 nvidia.com/gpu, expected 8 (waited 0s)\n"


def test_node_capacity_names_a_missing_resource(stubs):
    nodes = fake_node(stubs, ({"nvidia.com/gpu": "2"}, {}))
    expected = table(stubs, "gpu-dev-1 nvidia.com/gpu.shared=8")
    status, _out, term = run(stubs, "node-capacity.sh", {"FAKE_NODES": nodes, "EXPECTED_FILE": expected, "DEADLINE_SECONDS": 0})
    assert status == 1 and "node gpu-dev-1 advertises no nvidia.com/gpu.shared, expected 8" in term


def test_node_capacity_waits_for_the_device_plugin_to_catch_up(stubs):
    nodes = fake_node(stubs, ({"nvidia.com/gpu": "4"}, {}), ({"nvidia.com/gpu": "4"}, {}), ({"nvidia.com/gpu": "8"}, {}))
    expected = table(stubs, "gpu-dev-1 nvidia.com/gpu=8")
    status, out, _ = run(stubs, "node-capacity.sh", {"FAKE_NODES": nodes, "EXPECTED_FILE": expected, "DEADLINE_SECONDS": 3600, "POLL_SECONDS": 0})
    assert status == 0, out
    assert "node gpu-dev-1 advertises 4 nvidia.com/gpu, expected 8 (waiting up to 3600s)" in out
    assert len(calls(nodes)) == 3


def test_node_capacity_reports_an_api_error(stubs):
    nodes = fake_node(stubs, ({"nvidia.com/gpu": "8"}, {}), name="other-node")
    expected = table(stubs, "gpu-dev-1 nvidia.com/gpu=8")
    status, _out, term = run(stubs, "node-capacity.sh", {"FAKE_NODES": nodes, "EXPECTED_FILE": expected, "DEADLINE_SECONDS": 0})
    assert status == 1
    assert term == 'FAIL node-capacity: node gpu-dev-1 cannot be read: Error from server (NotFound): nodes "gpu-dev-1" not found (waited 0s)\n'


def test_a_long_failure_is_cut_to_4000_bytes_in_the_termination_message(stubs):
    name = "n" * 5000
    nodes = fake_node(stubs, ({"nvidia.com/gpu": "8"}, {}), name="other-node")
    expected = table(stubs, f"{name} nvidia.com/gpu=8")
    status, out, term = run(stubs, "node-capacity.sh", {"FAKE_NODES": nodes, "EXPECTED_FILE": expected, "DEADLINE_SECONDS": 0})
    assert status == 1
    line = verdict(out)
    assert line.startswith(f"FAIL node-capacity: node {name} cannot be read: ") and len(line) > 4000
    assert term == line[:4000] + "\n"


def test_node_capacity_checks_every_node_of_the_table_in_one_job(stubs):
    """120 nodes, read 50 per kubectl call; the one that lags is read again alone until it is right."""
    good = {f"n{i}": ({"nvidia.com/gpu": str(4 * (1 + i % 2))}, {}) for i in range(120)}
    lagging = dict(good, n7=({"nvidia.com/gpu": "4"}, {}))
    nodes = fake_nodes(stubs, lagging, good)
    expected = table(stubs, *(f"n{i} nvidia.com/gpu={4 * (1 + i % 2)}" for i in range(120)))
    status, out, _ = run(stubs, "node-capacity.sh", {"FAKE_NODES": nodes, "EXPECTED_FILE": expected, "DEADLINE_SECONDS": 3600, "POLL_SECONDS": 0})
    assert status == 0, out
    assert verdict(out) == "PASS node-capacity: all 120 nodes advertise what the capacity table says"
    assert "node n7 advertises 4 nvidia.com/gpu, expected 8 (waiting up to 3600s)" in out
    assert [len(c) for c in calls(nodes)] == [50, 50, 20, 1]
    assert calls(nodes)[-1] == ["n7"]


def test_node_capacity_names_the_first_wrong_nodes_and_counts_the_rest(stubs):
    snapshot = {f"n{i}": ({"nvidia.com/gpu": "4" if i < 7 else "8"}, {}) for i in range(10)}
    nodes = fake_nodes(stubs, snapshot)
    expected = table(stubs, *(f"n{i} nvidia.com/gpu=8" for i in range(10)))
    status, _out, term = run(stubs, "node-capacity.sh", {"FAKE_NODES": nodes, "EXPECTED_FILE": expected, "DEADLINE_SECONDS": 0, "CHECK_NAME": "sharing-capacity"})
    assert status == 1
    wrong = "; ".join(f"node n{i} advertises 4 nvidia.com/gpu, expected 8" for i in range(5))
    assert term == f"FAIL sharing-capacity: {wrong}; and 2 more node(s) (waited 0s)\n"


def test_node_capacity_refuses_a_malformed_table(stubs):
    nodes = fake_node(stubs, ({"nvidia.com/gpu": "8"}, {}))
    for line, message in (("gpu-dev-1", "lists no resource=count"), ("gpu-dev-1 nvidia.com/gpu=eight", "is not resource=count")):
        status, _out, term = run(stubs, "node-capacity.sh", {"FAKE_NODES": nodes, "EXPECTED_FILE": table(stubs, line), "DEADLINE_SECONDS": 0})
        assert status == 1 and message in term
    status, _out, term = run(stubs, "node-capacity.sh", {"FAKE_NODES": nodes, "EXPECTED_FILE": table(stubs), "DEADLINE_SECONDS": 0})
    assert status == 1 and "lists no node" in term
    assert calls(nodes) == []


# --------------------------------------------------------------------------- MIG state
def mig_env(stubs: Path, nodes: str, *lines: str, **extra) -> dict:
    return {"FAKE_NODES": nodes, "EXPECTED_FILE": table(stubs, *(lines or ("gpu-dev-1 halves",))), **extra}


def test_mig_state_passes_on_success(stubs):
    nodes = fake_node(stubs, ({}, {"nvidia.com/mig.config": "halves", "nvidia.com/mig.config.state": "success"}))
    status, out, _ = run(stubs, "mig-state.sh", mig_env(stubs, nodes, DEADLINE_SECONDS=0))
    assert status == 0, out
    assert verdict(out) == "PASS mig-state: node gpu-dev-1 applied MIG config 'halves'"


def test_mig_state_fails_at_once_on_a_failed_state(stubs):
    nodes = fake_node(
        stubs,
        ({}, {"nvidia.com/mig.config": "halves", "nvidia.com/mig.config.state": "pending"}),
        ({}, {"nvidia.com/mig.config": "halves", "nvidia.com/mig.config.state": "failed"}),
    )
    status, _out, term = run(stubs, "mig-state.sh", mig_env(stubs, nodes, DEADLINE_SECONDS=3600, POLL_SECONDS=0))
    assert status == 1
    assert term == (
        "FAIL mig-state: mig-manager could not apply MIG config 'halves' on node gpu-dev-1 "
        "(nvidia.com/mig.config.state=failed; is every profile valid for this GPU?)\n"
    )


def test_mig_state_gives_up_while_pending(stubs):
    nodes = fake_node(stubs, ({}, {"nvidia.com/mig.config": "halves", "nvidia.com/mig.config.state": "pending"}))
    status, _out, term = run(stubs, "mig-state.sh", mig_env(stubs, nodes, DEADLINE_SECONDS=0))
    assert status == 1
    assert term == (
        "FAIL mig-state: node gpu-dev-1 did not reach MIG config 'halves' state success: "
        "nvidia.com/mig.config=halves nvidia.com/mig.config.state=pending (waited 0s)\n"
    )


def test_mig_state_of_another_config_does_not_count(stubs):
    nodes = fake_node(stubs, ({}, {"nvidia.com/mig.config": "all-disabled", "nvidia.com/mig.config.state": "success"}))
    status, _out, term = run(stubs, "mig-state.sh", mig_env(stubs, nodes, DEADLINE_SECONDS=0))
    assert status == 1 and "nvidia.com/mig.config=all-disabled" in term


def test_mig_state_waits_for_every_node_and_fails_on_anyone_failing(stubs):
    ok = {"nvidia.com/mig.config": "halves", "nvidia.com/mig.config.state": "success"}
    pending = {"nvidia.com/mig.config": "sevenths", "nvidia.com/mig.config.state": "pending"}
    done = {"nvidia.com/mig.config": "sevenths", "nvidia.com/mig.config.state": "success"}
    lines = ("gpu-a halves", "gpu-b sevenths")
    nodes = fake_nodes(stubs, {"gpu-a": ({}, ok), "gpu-b": ({}, pending)}, {"gpu-a": ({}, ok), "gpu-b": ({}, done)})
    status, out, _ = run(stubs, "mig-state.sh", mig_env(stubs, nodes, *lines, DEADLINE_SECONDS=3600, POLL_SECONDS=0))
    assert status == 0, out
    assert verdict(out) == "PASS mig-state: all 2 nodes applied their MIG configs"
    assert calls(nodes) == [["gpu-a", "gpu-b"], ["gpu-b"]]
    failed = {"nvidia.com/mig.config": "sevenths", "nvidia.com/mig.config.state": "failed"}
    (stubs / "nodes-0.json.calls").unlink()
    nodes = fake_nodes(stubs, {"gpu-a": ({}, ok), "gpu-b": ({}, failed)})
    status, out, term = run(stubs, "mig-state.sh", mig_env(stubs, nodes, *lines, DEADLINE_SECONDS=3600, POLL_SECONDS=0))
    assert status == 1 and term.startswith("FAIL mig-state: mig-manager could not apply MIG config 'sevenths' on node gpu-b")


# --------------------------------------------------------------------------- shared GPU barrier
SHARED = {"PEERS": 3, "PEER_PREFIX": "sharing-pods-x", "PEER_DOMAIN": "sharing-barrier", "HOLD_SECONDS": 0, "POLL_SECONDS": 0}


def test_shared_gpu_passes_when_every_peer_started(stubs):
    for i in range(3):
        (stubs / "started" / f"sharing-pods-x-{i}").touch()
    status, out, _ = run(stubs, "shared-gpu.sh", {**SHARED, "JOB_COMPLETION_INDEX": 1, "BARRIER_SECONDS": 0, "NODE_NAME": "gpu-dev-1"})
    assert status == 0, out
    assert f"pod 1 of 3 on node gpu-dev-1 sees physical GPU {UUID.format(i=0)}" in out
    assert verdict(out) == f"PASS shared-gpu: pod 1 of 3 ran concurrently with its peers on GPU {UUID.format(i=0)}"


def test_shared_gpu_fails_when_a_peer_cannot_start(stubs):
    for i in range(2):
        (stubs / "started" / f"sharing-pods-x-{i}").touch()
    status, _out, term = run(stubs, "shared-gpu.sh", {**SHARED, "JOB_COMPLETION_INDEX": 0, "BARRIER_SECONDS": 0, "CHECK_NAME": "sharing-pods"})
    assert status == 1
    assert term == (
        "FAIL sharing-pods: only 2 of 3 pods sharing the GPUs started within 0s (never started: 2); "
        "they cannot run concurrently\n"
    )


def test_shared_gpu_on_a_mig_node_also_requires_one_mig_device(stubs):
    for i in range(3):
        (stubs / "started" / f"sharing-pods-x-{i}").touch()
    env = {**SHARED, "JOB_COMPLETION_INDEX": 2, "BARRIER_SECONDS": 0, "EXPECTED_MIG_DEVICES": 1, "CHECK_NAME": "sharing-pods"}
    status, out, _ = run(stubs, "shared-gpu.sh", {**env, "STUB_MIG": 1})
    assert status == 0, out
    assert "pod 2 of 3 sees MIG device MIG-00000000-1111-2222-3333-444444444444" in out
    status, out, term = run(stubs, "shared-gpu.sh", {**env, "STUB_MIG": 0})
    assert status == 1
    assert term == "FAIL sharing-pods: pod 2 of 3 sees 0 MIG device(s) through nvidia-smi -L, expected 1\n"


def test_shared_gpu_fails_when_a_pod_sees_more_than_one_gpu(stubs):
    status, _out, term = run(stubs, "shared-gpu.sh", {**SHARED, "STUB_GPUS": 2, "JOB_COMPLETION_INDEX": 0, "BARRIER_SECONDS": 0})
    assert status == 1 and "sees 2 GPU(s) through nvidia-smi -L, expected exactly 1 shared GPU" in term


def test_shared_gpu_fails_when_the_workload_fails(stubs):
    for i in range(3):
        (stubs / "started" / f"sharing-pods-x-{i}").touch()
    env = {**SHARED, "JOB_COMPLETION_INDEX": 0, "BARRIER_SECONDS": 0, "WORKLOAD": stubs / "bin" / "vectorAdd", "STUB_CUDA_FAIL": 1}
    status, _out, term = run(stubs, "shared-gpu.sh", env)
    assert status == 1 and "exited with status 1: Failed to allocate device vector A" in term


def test_shared_gpu_barrier_holds_every_process_until_the_last_one_starts(stubs):
    """Three real processes: each starts, registers, and none passes before all three exist."""
    base = {
        "PATH": f"{stubs / 'bin'}:/usr/bin:/bin",
        "STUB_STARTED": str(stubs / "started"),
        **{k: str(v) for k, v in SHARED.items()},
        "BARRIER_SECONDS": "60",
        "POLL_SECONDS": "1",
    }
    procs = []
    for i in range(3):
        env = {**base, "JOB_COMPLETION_INDEX": str(i), "TERMINATION_LOG": str(stubs / f"term-{i}")}
        procs.append(subprocess.Popen(["bash", str(PAYLOAD_DIR / "shared-gpu.sh")], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        (stubs / "started" / f"sharing-pods-x-{i}").touch()
        first = procs[-1].stdout.readline()
        assert "sees physical GPU" in first
        if i < 2:
            # Everyone so far has reported its GPU and waits at the barrier for the third.
            assert all(p.poll() is None for p in procs)
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], outputs
    assert all("all 3 pods started" in o for o in outputs)


# --------------------------------------------------------------------------- DCGM metrics
def metrics(node: str, uuids: list[str], metric: str = "DCGM_FI_DEV_GPU_UTIL") -> str:
    lines = [f"# HELP {metric} GPU utilization (in %).", f"# TYPE {metric} gauge"]
    for i, uuid in enumerate(uuids):
        lines.append(
            f'{metric}{{gpu="{i}",UUID="{uuid}",pci_bus_id="00000000:1{i}:00.0",device="nvidia{i}",'
            f'modelName="NVIDIA L4",Hostname="{node}",DCGM_FI_DRIVER_VERSION="580.105.08"}} {7 * i}'
        )
    lines.append(f'DCGM_FI_DEV_FB_USED{{gpu="0",UUID="{uuids[0] if uuids else "GPU-x"}",Hostname="{node}"}} 1024')
    return "\n".join(lines) + "\n"


@pytest.fixture
def exporter():
    """A fake dcgm-exporter behind a Service: serves `bodies` in turn, one per connection."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            server = self.server
            body = server.bodies[server.hits % len(server.bodies)].encode()
            server.hits += 1
            server.paths.append(self.path)
            self.send_response(server.status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.bodies, server.hits, server.status, server.paths = [""], 0, 200, []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def dcgm_env(server, **extra):
    return {"METRICS_HOST": "127.0.0.1", "METRICS_PORT": server.server_address[1], "POLL_SECONDS": 0, **extra}


def test_dcgm_passes_when_every_gpu_reports_utilisation(stubs, exporter):
    exporter.bodies = [metrics("gpu-dev-1", ["GPU-a", "GPU-b"])]
    status, out, _ = run(stubs, "dcgm-metrics.sh", dcgm_env(exporter, EXPECTED_GPUS=2, DEADLINE_SECONDS=0))
    assert status == 0, out
    assert "GPU GPU-a on gpu-dev-1 reports DCGM_FI_DEV_GPU_UTIL" in out
    assert exporter.paths == ["/metrics"]


def test_dcgm_collects_gpus_across_exporters_behind_the_service(stubs, exporter):
    exporter.bodies = [metrics("gpu-dev-1", ["GPU-a", "GPU-b"]), metrics("gpu-dev-2", ["GPU-c"])]
    status, out, _ = run(stubs, "dcgm-metrics.sh", dcgm_env(exporter, EXPECTED_GPUS=3, DEADLINE_SECONDS=60))
    assert status == 0, out
    assert "GPU GPU-c on gpu-dev-2" in out and exporter.hits == 2


def test_dcgm_fails_on_a_missing_metric(stubs, exporter):
    exporter.bodies = [metrics("gpu-dev-1", ["GPU-a"], metric="DCGM_FI_DEV_SM_CLOCK")]
    status, _out, term = run(stubs, "dcgm-metrics.sh", dcgm_env(exporter, EXPECTED_GPUS=1, DEADLINE_SECONDS=0))
    assert status == 1
    port = exporter.server_address[1]
    assert term == (
        f"FAIL dcgm-metrics: http://127.0.0.1:{port}/metrics serves no DCGM_FI_DEV_GPU_UTIL "
        "(is it in dcgmExporter.metrics?) (waited 0s)\n"
    )


def test_dcgm_fails_when_fewer_gpus_report(stubs, exporter):
    exporter.bodies = [metrics("gpu-dev-1", ["GPU-a"])]
    status, _out, term = run(stubs, "dcgm-metrics.sh", dcgm_env(exporter, EXPECTED_GPUS=2, DEADLINE_SECONDS=0))
    assert status == 1
    assert term == "FAIL dcgm-metrics: DCGM_FI_DEV_GPU_UTIL seen for 1 GPU(s), expected 2 (waited 0s)\n"


def test_dcgm_reports_an_http_error(stubs, exporter):
    exporter.status = 503
    status, _out, term = run(stubs, "dcgm-metrics.sh", dcgm_env(exporter, EXPECTED_GPUS=1, DEADLINE_SECONDS=0))
    assert status == 1 and "answered 'HTTP/1.0 503 Service Unavailable'" in term


def test_dcgm_reports_an_unreachable_exporter(stubs, exporter):
    port = exporter.server_address[1]
    exporter.shutdown()
    exporter.server_close()
    status, _out, term = run(stubs, "dcgm-metrics.sh", {"METRICS_HOST": "127.0.0.1", "METRICS_PORT": port, "EXPECTED_GPUS": 1, "DEADLINE_SECONDS": 0})
    assert status == 1 and term.startswith(f"FAIL dcgm-metrics: cannot fetch http://127.0.0.1:{port}/metrics")


# --------------------------------------------------------------------------- the plan's own Jobs
@pytest.fixture(scope="module")
def dev_jobs():
    plan = plan_of(dev_config())
    cm = plan.by_name("validation-payloads").inputs["data"]
    jobs = {r.name: r.inputs for r in plan.of_type("kubernetes:batch/v1:Job") if r.parent == "validation"}
    configmaps = {r.inputs["metadata"]["name"]: r.inputs["data"] for r in plan.of_type("kubernetes:core/v1:ConfigMap")}
    return cm, jobs, configmaps


def with_table(stubs: Path, job: dict, configmaps: dict[str, dict[str, str]]) -> dict[str, str]:
    """The job's env with its table ConfigMap mounted as the pod would see it (EXPECTED_FILE)."""
    pod = job["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "expected"]
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "expected"]
    root = stubs / "expected-mount"
    root.mkdir(exist_ok=True)
    for key, text in configmaps[volume["configMap"]["name"]].items():
        (root / key).write_text(text)
    env = job_env(job)
    assert env["EXPECTED_FILE"].startswith(mount["mountPath"] + "/")
    return {**env, "EXPECTED_FILE": str(root / env["EXPECTED_FILE"][len(mount["mountPath"]) + 1:])}


def job_env(job: dict) -> dict[str, str]:
    (c,) = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e["value"] for e in c["env"] if "value" in e}


def mounted(stubs: Path, data: dict[str, str]) -> Path:
    """The ConfigMap as the pod sees it under /payloads."""
    root = stubs / "payloads"
    root.mkdir(exist_ok=True)
    for name, text in data.items():
        (root / name).write_text(text)
    return root


def script_of(job: dict) -> str:
    (c,) = job["spec"]["template"]["spec"]["containers"]
    return c["command"][-1].rsplit("/", 1)[-1]


def test_the_dev_capacity_job_passes_on_the_right_nodes_and_fails_on_a_short_one(stubs, dev_jobs):
    data, jobs, configmaps = dev_jobs
    job = jobs["validation-sharing-capacity"]
    root = mounted(stubs, data)
    env = {**with_table(stubs, job, configmaps), "DEADLINE_SECONDS": 0}
    good = fake_nodes(stubs, {"gpu-dev-1": ({"nvidia.com/gpu": "8"}, {}), "gpu-dev-2": ({"nvidia.com/gpu": "4"}, {})})
    status, out, _ = run(stubs, script_of(job), {**env, "FAKE_NODES": good}, payloads=root)
    assert status == 0, out
    assert verdict(out) == "PASS sharing-capacity: all 2 nodes advertise what the capacity table says"
    assert calls(good) == [["gpu-dev-1", "gpu-dev-2"]]
    Path(good.split(os.pathsep)[0] + ".calls").unlink()
    short = fake_nodes(stubs, {"gpu-dev-1": ({"nvidia.com/gpu": "2"}, {}), "gpu-dev-2": ({"nvidia.com/gpu": "4"}, {})})
    status, out, term = run(stubs, script_of(job), {**env, "FAKE_NODES": short}, payloads=root)
    assert status == 1
    assert term == "FAIL sharing-capacity: node gpu-dev-1 advertises 2 nvidia.com/gpu, expected 8 (waited 0s)\n"


def test_the_dev_sharing_pods_pass_once_all_eight_started(stubs, dev_jobs):
    data, jobs, _ = dev_jobs
    job = jobs["validation-sharing-pods-gpu-dev-1"]
    root = mounted(stubs, data)
    env = {**job_env(job), "JOB_COMPLETION_INDEX": 7, "BARRIER_SECONDS": 0, "HOLD_SECONDS": 0, "WORKLOAD": stubs / "bin" / "vectorAdd"}
    status, out, term = run(stubs, script_of(job), env, payloads=root)
    assert status == 1 and "only 0 of 8 pods" in term
    for i in range(8):
        (stubs / "started" / f"{env['PEER_PREFIX']}-{i}").touch()
    status, out, _ = run(stubs, script_of(job), env, payloads=root)
    assert status == 0, out
    assert "all 8 pods started" in out and "workload on shared GPU" in out


def test_the_dev_dcgm_job_counts_all_three_dev_gpus(stubs, dev_jobs, exporter):
    data, jobs, _ = dev_jobs
    job = jobs["validation-dcgm-metrics"]
    root = mounted(stubs, data)
    env = {**job_env(job), **dcgm_env(exporter), "DEADLINE_SECONDS": 0}
    exporter.bodies = [metrics("gpu-dev-1", ["GPU-a", "GPU-b"])]
    status, _out, term = run(stubs, script_of(job), env, payloads=root)
    assert status == 1 and "seen for 2 GPU(s), expected 3" in term
    exporter.bodies = [metrics("gpu-dev-1", ["GPU-a", "GPU-b", "GPU-c"])]
    assert run(stubs, script_of(job), env, payloads=root)[0] == 0


def test_the_dev_cuda_smoke_job_runs_vectoradd(stubs, dev_jobs):
    data, jobs, _ = dev_jobs
    job = jobs["validation-cuda-smoke"]
    status, out, _ = run(stubs, script_of(job), job_env(job), payloads=mounted(stubs, data))
    assert status == 0, out


# --------------------------------------------------------------------------- no-gpu (the negative check)
def test_no_gpu_passes_when_the_pod_sees_no_gpu(stubs, tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "null").touch()
    status, out, _ = run(stubs, "no-gpu.sh", {"NODE_CLASS": "L4 / default / -", "DEV_ROOT": tmp_path / "dev",
                                              "NVIDIA_SMI": "/nonexistent/nvidia-smi", "NVIDIA_VISIBLE_DEVICES": "all"})
    assert status == 0, out
    assert verdict(out) == "PASS no-gpu: node class L4 / default / -: a pod that requested no GPU sees none (NVIDIA_VISIBLE_DEVICES=all ignored)"


@pytest.mark.parametrize("leak", ["device node", "nvidia-smi"])
def test_no_gpu_fails_naming_the_node_class_when_a_gpu_leaks(stubs, tmp_path, leak):
    (tmp_path / "dev").mkdir()
    env = {"NODE_CLASS": "H200-141GB / - / inference", "DEV_ROOT": tmp_path / "dev", "STUB_GPUS": 2}
    if leak == "device node":
        (tmp_path / "dev" / "nvidia0").touch()
        env["NVIDIA_SMI"] = "/nonexistent/nvidia-smi"
    status, _out, term = run(stubs, "no-gpu.sh", env)
    assert status == 1
    seen = "nvidia0" if leak == "device node" else f"{UUID.format(i=0)} {UUID.format(i=1)}"
    assert term.startswith(f"FAIL no-gpu: node class H200-141GB / - / inference: a pod that requested no GPU sees {seen} ")
    assert "gpu-stack:toolkit.acceptEnvvarWhenUnprivileged false" in term


def test_no_gpu_pod_asks_the_nvidia_runtime_without_a_gpu_behind_the_gate():
    plan = plan_of(dev_config())
    # dev's coverage is full: one per node (W5), each on its node
    found = [r for r in plan.of_type("kubernetes:batch/v1:Job") if r.name.startswith("validation-no-gpu-")]
    assert [j.name for j in found] == ["validation-no-gpu-gpu-dev-1", "validation-no-gpu-gpu-dev-2"]
    job = found[0]
    pod = job.inputs["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["runtimeClassName"] == "nvidia"
    assert not any(k.startswith("nvidia.com/") for k in c["resources"]["limits"]) and "nvidia.com/gpu" not in c["resources"]["requests"]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NODE_CLASS"] == "L4 / default / -"
    assert c["securityContext"]["allowPrivilegeEscalation"] is False and "privileged" not in c["securityContext"]
    gate = next(r for r in plan.of_type("kubernetes:batch/v1:Job") if r.name == "validation-free-capacity")
    assert gate.name in job.depends_on
