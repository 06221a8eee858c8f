"""The opt-in sharing benchmark: in the plan only when enabled, on one node of each GPU model and
mode, filling it behind the free-capacity gate and within the pod budget; its collector's least
privilege; and the two payloads run for real with bash against stubs (the n-body sample, kubectl)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
from pulumi.runtime.rpc import UNKNOWN

from gpu_stack.config import load_settings
from gpu_stack.design.sharing_cost import parse_results
from gpu_stack.design.validation import PAYLOAD_DIR

from ..helpers import assert_refused, dev_config, plan_of, set_path
from .test_validation_jobs import container, env, jobs, schema_version, table_of, validation_resources

JOB = "kubernetes:batch/v1:Job"


def bench_config(**extra) -> dict:
    cfg = dev_config()
    cfg["nodes"].append({"name": "gpu-mps-1", "address": "10.20.0.14", "gpu": {"model": "L4", "count": 1}, "sharing": "mps2"})
    cfg["nodes"].append({"name": "gpu-mps-2", "address": "10.20.0.15", "gpu": {"model": "L4", "count": 1}, "sharing": "mps2"})
    cfg["sharing"]["profiles"] = {"mps2": {"mode": "mps", "replicas": 2}}
    cfg["validation"]["sharingBenchmark"] = {"enabled": True, **extra}
    return cfg


@pytest.fixture(scope="module")
def bench_plan():
    return plan_of(bench_config())


def test_off_by_default_nothing_of_it_is_planned():
    plan = plan_of(dev_config())
    names = {r.name for r in plan.resources}
    assert not any("sharing-bench" in n or "sharing-cost" in n for n in names)
    assert plan.outputs["sharingCost"] is None
    assert not any("sharing-cost" in str(r) for r in plan.reads)


def test_one_job_per_gpu_model_and_mode_filling_its_node(bench_plan):
    found = jobs(bench_plan)
    benches = {n: j for n, j in found.items() if n.startswith("validation-sharing-bench-")}
    # dev's two time-sliced L4 nodes are one class per model and mode; the MPS nodes another.
    assert set(benches) == {"validation-sharing-bench-gpu-dev-1", "validation-sharing-bench-gpu-mps-1"}
    ts, mps = benches["validation-sharing-bench-gpu-dev-1"], benches["validation-sharing-bench-gpu-mps-1"]
    # gpu-dev-1: 2 GPUs x 4 replicas = 8 pods, so the device plugin puts 4 on each GPU.
    assert ts.inputs["spec"]["completions"] == ts.inputs["spec"]["parallelism"] == 8
    assert (env(ts)["REPLICAS"], env(ts)["GPUS"], env(ts)["SHARING_MODE"], env(ts)["GPU_MODEL"]) == ("4", "2", "time-slicing", "L4")
    assert (env(mps)["REPLICAS"], env(mps)["GPUS"], env(mps)["SHARING_MODE"]) == ("2", "1", "mps")
    assert env(ts)["SIZES"] == "small:4096:5000 medium:32768:600 large:262144:14"
    assert container(ts)["image"] == "nvcr.io/nvidia/k8s/cuda-sample:nbody-cuda11.6.0-ubuntu18.04"
    assert container(ts)["resources"]["limits"]["nvidia.com/gpu"] == "1"
    # The image keeps the sample in /tmp: the scratch emptyDir goes elsewhere, and bash's here-strings follow TMPDIR.
    mounts = {m["mountPath"] for m in container(ts)["volumeMounts"]}
    assert "/tmp" not in mounts and "/scratch" in mounts and env(ts)["TMPDIR"] == "/scratch"
    assert env(ts)["NBODY"] == "/tmp/nbody"


def test_it_runs_after_everything_else_on_its_node_behind_the_gate(bench_plan):
    found = jobs(bench_plan)
    bench = found["validation-sharing-bench-gpu-dev-1"]
    assert "validation-sharing-pods-gpu-dev-1" in bench.depends_on
    assert "validation-sharing-barrier" in bench.depends_on
    gate = found["validation-free-capacity"]
    lines = dict(line.split(" ", 1) for line in table_of(bench_plan, gate).splitlines())
    # It runs after the node's sharing pods, so it needs its own 8 replicas free, not 8 more.
    assert lines["gpu-dev-1"] == "nvidia.com/gpu=8"
    assert lines["gpu-mps-1"] == "nvidia.com/gpu=2"


def test_the_collector_reads_pod_logs_writes_one_configmap_and_feeds_the_output(bench_plan):
    found = jobs(bench_plan)
    collector = found["validation-sharing-cost"]
    assert {"validation-sharing-bench-gpu-dev-1", "validation-sharing-bench-gpu-mps-1"} <= set(collector.depends_on)
    names = {j.inputs["metadata"]["name"] for n, j in found.items() if n.startswith("validation-sharing-bench-")}
    assert set(env(collector)["BENCH_JOBS"].split()) == names
    pod = collector.inputs["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "sharing-cost" and pod["automountServiceAccountToken"] is True
    (role,) = [r for r in bench_plan.resources if r.type == "kubernetes:rbac.authorization.k8s.io/v1:Role"]
    rules = role.inputs["rules"]
    assert {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]} in rules
    writes = [r for r in rules if r["resources"] == ["configmaps"] and "update" in r["verbs"]]
    assert writes == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"], "resourceNames": ["sharing-cost"]}]
    assert not any(v in r["verbs"] for r in rules for v in ("delete", "watch", "*"))
    assert role.inputs["metadata"]["namespace"] == "gpu-validation"
    # E13: the results are read once the collector ran (its status known): in the preview of a
    # fresh stack the read's id is unknown, so the engine does not run it (step.go, ReadStep.Apply)
    # and a ConfigMap that does not exist yet cannot fail the preview
    (read,) = [r for r in bench_plan.reads if "sharing-cost" in str(r)]
    assert read["id"] == UNKNOWN
    assert "sharingCost" in bench_plan.outputs


def test_its_manifests_are_valid_kubernetes(bench_plan):
    version = schema_version(load_settings(bench_config()).kubernetes.version)
    for resource in validation_resources(bench_plan):
        kubernetes_validate.validate(resource.inputs, version, strict=True)


def test_the_pod_budget_leaves_it_out_with_a_note():
    cfg = set_path(bench_config(), "validation.coverage", "sample")
    cfg["validation"]["podBudget"] = 12  # smoke 1 + sharing pods 3 + 2 + bench 2 = 8; the 8-pod bench does not fit
    plan = plan_of(cfg)
    found = jobs(plan)
    assert "validation-sharing-bench-gpu-mps-1" in found and "validation-sharing-bench-gpu-dev-1" not in found
    (note,) = [w for w in plan.warnings if "sharing benchmark" in w]
    assert "gpu-dev-1 (L4, time-slicing): 8 pods" in note and "validation.podBudget (12)" in note


def test_mig_shared_nodes_are_not_benchmarked():
    cfg = bench_config()
    cfg["nodes"] = [{"name": "gpu-mig-1", "address": "10.20.0.13", "gpu": {"model": "H100-80GB", "count": 1}, "mig": "halves"}]
    cfg["mig"] = {"strategy": "mixed", "profiles": {"halves": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]}}
    cfg["sharing"] = {"mode": "time-slicing", "resources": [{"name": "nvidia.com/mig-3g.40gb", "replicas": 2}]}
    names = set(jobs(plan_of(cfg)))
    assert not any("sharing-bench" in n or "sharing-cost" in n for n in names)


def test_windows_that_outlast_the_job_deadline_are_refused():
    cfg = bench_config(secondsPerWindow=60)
    assert_refused(cfg, "gpu-stack:validation.sharingBenchmark.secondsPerWindow = 60: 3 rounds x 3 size(s) x 60s + 120s = 660s "
                        "does not fit validation.timeoutSeconds (600)")
    cfg["validation"]["timeoutSeconds"] = 900
    assert "validation-sharing-cost" in jobs(plan_of(cfg))


# --------------------------------------------------------------------------- the payloads
NBODY = """#!/usr/bin/env bash
# The n-body sample's benchmark lines; STUB_MS is the time of one batch.
[[ $1 == -benchmark ]] || exit 2
n=${2#-numbodies=}; i=${3#-i=}
[[ -n ${STUB_NBODY_FAIL:-} ]] && { echo "CUDA error at bodysystemcuda_impl.h:160 code=2(cudaErrorMemoryAllocation)"; exit 1; }
sleep "${STUB_SLEEP:-0.2}"
echo "> Compute 9.0 CUDA device: [NVIDIA H200]"
echo "$n bodies, total time for $i iterations: ${STUB_MS:-200.000} ms"
"""
SMI = """#!/usr/bin/env bash
echo "GPU 0: NVIDIA H200 (UUID: ${STUB_UUID:-GPU-00000000-aaaa-bbbb-cccc-dddddddddddd})"
"""
GETENT = """#!/usr/bin/env bash
[[ $1 == hosts && -e "$STUB_STARTED/${2%%.*}" ]]
"""


@pytest.fixture
def bench_stubs(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("nbody", NBODY), ("nvidia-smi", SMI), ("getent", GETENT)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp_path / "started").mkdir()
    return tmp_path


def start_pod(stubs: Path, index: int, **env) -> subprocess.Popen:
    (stubs / "started" / f"bench-{index}").touch()
    full = {
        "PATH": f"{stubs / 'bin'}:/usr/bin:/bin",
        "TERMINATION_LOG": str(stubs / f"term-{index}"),
        "STUB_STARTED": str(stubs / "started"),
        "NBODY": str(stubs / "bin" / "nbody"),
        "PEERS": "2", "PEER_PREFIX": "bench", "PEER_DOMAIN": "sharing-barrier", "BARRIER_SECONDS": "20",
        "JOB_COMPLETION_INDEX": str(index), "GPU_MODEL": "H200", "SHARING_MODE": "time-slicing", "REPLICAS": "2",
        "SIZES": "small:4096:100 large:65536:10", "SECONDS_PER_WINDOW": "2", "SETTLE_SECONDS": "0",
        **{k: str(v) for k, v in env.items()},
    }
    return subprocess.Popen(["bash", str(PAYLOAD_DIR / "sharing-bench.sh")], env=full, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def test_two_pods_meet_then_measure_rounds_and_sizes(bench_stubs):
    pods = [start_pod(bench_stubs, i) for i in range(2)]
    out = [p.communicate(timeout=60)[0] for p in pods]
    assert [p.returncode for p in pods] == [0, 0], out
    results = parse_results("".join(out))
    # Pod 0 computes in rounds K=1 and K=2, pod 1 only in K=2; two sizes each.
    assert sorted((w.k, w.pod, w.size) for w in results.windows) == [
        (1, 0, "large"), (1, 0, "small"), (2, 0, "large"), (2, 0, "small"), (2, 1, "large"), (2, 1, "small")
    ]
    w = next(w for w in results.windows if w.size == "small")
    # 4096^2 x 100 interactions in 200 ms; iteration time 2 ms.
    assert w.rate == 4096 * 4096 * 100 * 5 and w.p50_us == w.p99_us == 2000
    assert w.uuid == "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"
    assert "PASS sharing-bench: pod 0 of 2 measured 2 round(s) x 2 size(s)" in out[0]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SHARING_MODE": "mps"}, "the node shares its GPU through MPS but this pod has no CUDA_MPS_PIPE_DIRECTORY"),
        ({"STUB_NBODY_FAIL": "1"}, "n-body (small, 4096 bodies) exited with status 1: CUDA error"),
        ({"STUB_SLEEP": "2.5"}, "round K=1, size small: no batch of 100 iterations finished within 2s"),
        ({"ROUNDS": "1 3"}, "round K=3 is outside 1..2"),
        ({"NBODY": "/nonexistent/nbody"}, "no n-body sample at '/nonexistent/nbody'"),
    ],
)
def test_a_pod_fails_with_one_line_saying_why(bench_stubs, env, message):
    (bench_stubs / "started" / "bench-1").touch()
    pod = start_pod(bench_stubs, 0, **env)
    out = pod.communicate(timeout=60)[0]
    assert pod.returncode == 1
    assert f"FAIL sharing-bench: {message}" in out
    assert message in (bench_stubs / "term-0").read_text()


KUBECTL = """#!/usr/bin/env bash
# get pods -l job-name=J -> $STUB_DIR/J.pods; logs POD -> $STUB_DIR/POD.log; configmaps in $STUB_DIR/cm-*
case "$1" in
  get)
    if [[ $2 == pods ]]; then cat "$STUB_DIR/${6#job-name=}.pods" 2>/dev/null; exit 0; fi
    [[ -e $STUB_DIR/cm-exists ]];;
  logs) cat "$STUB_DIR/$4.log";;
  create)
    if [[ $* == *--dry-run=client* ]]; then echo "from-file: ${6#--from-file=results=}"; exit 0; fi
    cat > "$STUB_DIR/cm-created";;
  replace) cat > "$STUB_DIR/cm-replaced";;
esac
"""


def run_collector(tmp_path: Path, jobs_: dict[str, dict[str, str]], exists: bool = False):
    (tmp_path / "kubectl").write_text(KUBECTL)
    (tmp_path / "kubectl").chmod(0o755)
    for job, pods in jobs_.items():
        (tmp_path / f"{job}.pods").write_text("".join(f"{p}\n" for p in pods))
        for pod, log in pods.items():
            (tmp_path / f"{pod}.log").write_text(log)
    if exists:
        (tmp_path / "cm-exists").touch()
    env = {
        "PATH": "/usr/bin:/bin", "KUBECTL": str(tmp_path / "kubectl"), "STUB_DIR": str(tmp_path), "TMPDIR": str(tmp_path),
        "TERMINATION_LOG": str(tmp_path / "term"), "BENCH_JOBS": " ".join(jobs_), "NAMESPACE": "gpu-validation",
        "RESULTS_CONFIGMAP": "sharing-cost",
    }
    return subprocess.run(["bash", str(PAYLOAD_DIR / "sharing-cost.sh")], env=env, capture_output=True, text=True, timeout=60)


def result(k: int, pod: int, rate: int, uuid: str = "GPU-a") -> str:
    return (f"RESULT gpu=L4 mode=time-slicing replicas=2 k={k} pod={pod} size=small bodies=4096 batches=3 rate={rate} "
            f"p50_us=100 p99_us={100 + pod} uuid={uuid}\n")


def test_collector_gathers_every_pods_lines_and_prints_the_cost(tmp_path):
    logs = {"pod-0": "noise\n" + result(1, 0, 1000000000) + result(2, 0, 450000000), "pod-1": result(2, 1, 450000000) + "PASS\n"}
    done = run_collector(tmp_path, {"bench-a": logs})
    assert done.returncode == 0, done.stderr
    assert "bench-a: 3 RESULT line(s) from 2 pod(s)" in done.stdout
    assert "L4 time-slicing x2, size small, 2 pod(s) per GPU: 900 M interactions/s (0.90x of one pod alone), worst p99 101 us" in done.stdout
    assert (tmp_path / "sharing-cost-results").read_text().count("RESULT ") == 3
    assert "sharing-cost-results" in (tmp_path / "cm-created").read_text()
    assert (tmp_path / "cm-created").exists() and not (tmp_path / "cm-replaced").exists()
    again = run_collector(tmp_path, {"bench-a": logs}, exists=True)
    assert again.returncode == 0 and (tmp_path / "cm-replaced").exists()


def test_collector_fails_when_a_job_left_nothing_to_read(tmp_path):
    done = run_collector(tmp_path, {"bench-a": {"pod-0": result(1, 0, 5)}, "bench-b": {}})
    assert done.returncode == 1
    assert "FAIL sharing-cost: benchmark Job bench-b has no pods left to read" in done.stderr
