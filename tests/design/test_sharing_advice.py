"""The sharing advisor: results lines -> cells -> a recommended mode and replica count per goal,
on synthetic tables (the shape of the issue's GEMM measurements) and on the real H200 run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_stack.design.advise import advise, advise_one, config_lines
from gpu_stack.design.sharing_cost import ResultsError, cells, cost_table, parse_results, results_from_table

ROOT = Path(__file__).resolve().parents[2]
H200_RUN = ROOT / "docs" / "gpu-runs" / "sharing-bench-h200.txt"


def lines(gpu: str, mode: str, replicas: int, size: str, table: dict[int, tuple[float, int, int]], uuid: str = "") -> str:
    """RESULT lines for one run: K -> (aggregate rate in billions, p50 us, p99 us), split over K pods."""
    out = []
    for k, (billions, p50, p99) in table.items():
        for pod in range(k):
            rate = int(billions * 1e9 / k)
            out.append(
                f"RESULT gpu={gpu} mode={mode} replicas={replicas} k={k} pod={pod} size={size} bodies=4096 batches=5 "
                f"rate={rate} p50_us={p50} p99_us={p99}" + (f" uuid={uuid}" if uuid else "")
            )
    return "\n".join(out) + "\n"


# The table, as aggregate TFLOP/s read as billions: small kernels gain 5x under MPS and
# lose under time-slicing; large ones are the same either way. Per-pod latency grows ~N x 1.4 under
# time-slicing; under MPS a pod alone gets 1/R of the threads.
SYNTHETIC = (
    lines("A100", "time-slicing", 8, "small", {1: (21.5, 100, 100), 2: (15.1, 280, 290), 4: (15.1, 560, 580), 8: (15.1, 1120, 1180)})
    + lines("A100", "time-slicing", 8, "large", {1: (667, 1000, 1000), 2: (619, 2800, 2900), 4: (619, 5600, 5800), 8: (619, 11200, 11500)})
    + lines("A100", "mps", 8, "small", {1: (19.0, 110, 110), 2: (38.0, 110, 112), 8: (98.2, 120, 130)})
    + lines("A100", "mps", 8, "large", {1: (84, 8000, 8000), 2: (168, 8000, 8100), 8: (667, 8000, 8300)})
)


def test_lines_with_prefixes_comments_and_other_output_are_read():
    text = "== run\n[process 3] " + lines("H200", "mps", 2, "small", {1: (1, 10, 12)}).strip() + "  # note\nPASS x\n"
    text += "MEMORY gpu=H200 mode=mps replicas=4 pod=0 asked_mib=9 share_mib=5 result=refused  # cudaMalloc failed\n"
    results = parse_results(text)
    assert [(w.gpu, w.mode, w.k, w.rate, w.uuid) for w in results.windows] == [("H200", "mps", 1, 1_000_000_000, "-")]
    assert [(m.pod, m.result) for m in results.memory] == [(0, "refused")]


@pytest.mark.parametrize(
    ("line", "wanted"),
    [
        ("RESULT gpu=H200 mode=mps replicas=2 k=1 pod=0 size=small bodies=1 batches=1 rate=x p50_us=1 p99_us=1", "line 2: RESULT rate='x'"),
        ("RESULT gpu=H200 mode=exclusive replicas=2 k=1 pod=0 size=small bodies=1 batches=1 rate=1 p50_us=1 p99_us=1", "mode='exclusive'"),
        ("RESULT gpu=H200 mode=mps replicas=2 k=1", "lacks pod, size, bodies"),
        ("RESULT gpu=H200 mode=mps replicas=2 k=3 pod=0 size=small bodies=1 batches=1 rate=1 p50_us=1 p99_us=1", "k=3 replicas=2"),
    ],
)
def test_a_bad_results_line_is_refused_naming_its_line(line, wanted):
    with pytest.raises(ResultsError, match=wanted.replace("(", r"\(")):
        parse_results("header\n" + line + "\n")


def test_pods_spread_over_two_gpus_count_as_the_pods_that_shared_each_gpu():
    # Round K=2 on a 2-GPU node: pods 0-3 computed, but three landed on GPU-a and one on GPU-b.
    text = lines("H200", "time-slicing", 4, "small", {1: (10, 100, 100)}, uuid="GPU-a")
    for pod, uuid in enumerate(["GPU-a", "GPU-a", "GPU-a", "GPU-b"]):
        text += (f"RESULT gpu=H200 mode=time-slicing replicas=4 k=2 pod={pod} size=small bodies=4096 batches=3 "
                 f"rate={3_000_000_000 if uuid == 'GPU-a' else 9_000_000_000} p50_us=300 p99_us={400 + pod} uuid={uuid}\n")
    by_k = {c.k: c for c in cells(parse_results(text).windows)}
    assert by_k[1].rate == 9_000_000_000 // 2 + 10_000_000_000 // 2  # the K=1 window and GPU-b's lone pod, averaged
    assert by_k[3].rate == 9_000_000_000 and by_k[3].p99_us == 402
    assert 2 not in by_k


def test_the_cost_table_reads_back_to_the_same_cells():
    results = parse_results(SYNTHETIC)
    table = cost_table(results)
    assert json.loads(json.dumps(table)) == table
    assert cost_table(results_from_table(table)) == table
    row = next(r for r in table["A100"]["mps"] if r["size"] == "small" and r["k"] == 8)
    assert row["vsSolo"] == pytest.approx(98.2 / 21.5, abs=0.01)  # against one pod with the whole GPU


def test_most_throughput_small_kernels_take_mps_large_ones_either_mode():
    results = parse_results(SYNTHETIC)
    small = advise_one(results, "A100", "small")
    assert small.modes == ("mps",) and small.replicas == 8
    large = advise_one(results, "A100", "large")
    # 619 vs 667 is within 10%: both modes, each with the fewest replicas that are as good.
    assert large.modes == ("time-slicing", "mps")
    assert [(o.mode, o.replicas) for o in large.chosen] == [("time-slicing", 2), ("mps", 8)]
    assert large.headline == "either mode: time-slicing with 2 replicas or MPS with 8 replicas"
    assert advise_one(results, "A100", "large", tolerance=0.05).modes == ("mps",)


def test_a_latency_bound_picks_the_most_replicas_that_meet_it():
    results = parse_results(SYNTHETIC)
    # Time-slicing: p99 2.9x solo at 2 pods, 5.8x at 4; MPS x8: 8.3x (a pod gets 1/8 of the threads).
    assert (advise_one(results, "A100", "large", "latency", max_slowdown=3).replicas,
            advise_one(results, "A100", "large", "latency", max_slowdown=3).modes) == (2, ("time-slicing",))
    assert advise_one(results, "A100", "large", "latency", max_slowdown=6).replicas == 4
    nothing = advise_one(results, "A100", "large", "latency", max_slowdown=1.5)
    assert nothing.replicas is None and "do not share" in nothing.headline
    with pytest.raises(ValueError, match="--max-slowdown"):
        advise_one(results, "A100", "large", "latency")


def test_memory_per_replica_needs_mps_and_bounds_the_replicas():
    memory = "".join(
        f"MEMORY gpu=A100 mode={mode} replicas=4 pod={pod} asked_mib={64000 if pod == 0 else 17000} share_mib=20000 "
        f"result={'allocated' if (mode == 'time-slicing') == (pod == 0) else 'refused'}\n"
        for mode in ("time-slicing", "mps") for pod in range(4)
    )
    results = parse_results(SYNTHETIC + memory + lines("A100", "mps", 4, "large", {1: (160, 4000, 4000), 4: (660, 4100, 4200)}))
    advice = advise_one(results, "A100", "large", "memory", memory_gib=15)
    # 80000 MiB (share x replicas) / 15 GiB: at most 5 replicas; only MPS enforces the share.
    assert advice.modes == ("mps",) and advice.replicas == 4
    assert "time-slicing x4: a pod asking for more than its 1/4 share got it; 0 of 3" in advice.memory_note
    assert "mps x4: a pod asking for more than its 1/4 share was refused; 3 of 3" in advice.memory_note
    with pytest.raises(ValueError, match="unknown"):
        advise_one(parse_results(SYNTHETIC), "A100", "large", "memory", memory_gib=15)


def test_the_recorded_h200_run_gets_the_right_advice():
    results = parse_results(H200_RUN.read_text())
    by_size = {a.size: a for a in advise(results)}
    assert by_size["small"].modes == ("mps",) and by_size["small"].replicas == 8
    assert by_size["large"].modes == ("time-slicing", "mps")
    strict = {a.size: a for a in advise(results, "latency", max_slowdown=2.5)}
    assert strict["large"].modes == ("time-slicing",) and strict["large"].replicas == 2
    assert strict["small"].modes == ("mps",) and strict["small"].replicas == 8
    protect = advise(results, "memory", sizes=["large"], memory_gib=30)
    assert [(a.modes, a.replicas) for a in protect] == [(("mps",), 4)]


def test_config_lines_set_the_default_or_a_profile_for_the_model():
    results = parse_results(SYNTHETIC)
    small = advise_one(results, "A100", "small")
    assert config_lines(small, [0, 1], 2) == [
        "pulumi config set --path 'gpu-stack:sharing.mode' mps",
        "pulumi config set --path 'gpu-stack:sharing.replicas' 8",
    ]
    lines_ = config_lines(advise_one(results, "A100", "large"), [2], 3)
    assert "pulumi config set --path 'gpu-stack:sharing.profiles.a100-ts2.mode' time-slicing" in lines_
    assert "pulumi config set --path 'gpu-stack:nodes[2].sharing' a100-mps8" in lines_
    assert "# or" in lines_


def cli(*args: str, path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": path or os.environ["PATH"]}
    return subprocess.run(
        [sys.executable, "-m", "gpu_stack", "advise", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_cli_advises_from_a_results_file_with_the_prod_nodes_config_lines():
    done = cli("--stack", "prod", "--results", str(H200_RUN), "--size", "small")
    assert done.returncode == 0, done.stderr
    assert "H200, size small (4096 bodies), goal throughput: MPS, 8 replicas" in done.stdout
    # prod's H200-141GB nodes are the results' "H200" (an alias in the GPU catalog); only the node
    # without MIG (nodes[2]) takes the profile.
    assert "pulumi config set --path 'gpu-stack:sharing.profiles.h200-mps8.mode' mps" in done.stdout
    assert "pulumi config set --path 'gpu-stack:nodes[2].sharing' h200-mps8" in done.stdout
    assert "nodes[0]" not in done.stdout


def test_cli_reads_the_stack_output_through_the_pulumi_cli(tmp_path):
    table = cost_table(parse_results(SYNTHETIC))
    fake = tmp_path / "pulumi"
    fake.write_text(f"#!/bin/sh\n[ \"$1 $2 $3\" = 'stack output sharingCost' ] || exit 3\necho '{json.dumps(table)}'\n")
    fake.chmod(0o755)
    done = cli("--stack", "dev", "--size", "small", path=f"{tmp_path}:{os.environ['PATH']}")
    assert done.returncode == 0, done.stderr
    assert "A100, size small (4096 bodies), goal throughput: MPS, 8 replicas" in done.stdout


@pytest.mark.parametrize(
    ("args", "pulumi", "message"),
    [
        (["--goal", "latency"], None, "goal latency needs --max-slowdown"),
        ([], "echo null", "has no sharingCost results: set gpu-stack:validation.sharingBenchmark.enabled true"),
        ([], "echo 'error: no stack named dev' >&2; exit 255", "failed: error: no stack named dev"),
    ],
)
def test_cli_refusals_say_what_to_do(tmp_path, args, pulumi, message):
    path = os.environ["PATH"]
    extra = ["--results", str(H200_RUN)]
    if pulumi is not None:
        (tmp_path / "pulumi").write_text(f"#!/bin/sh\n{pulumi}\n")
        (tmp_path / "pulumi").chmod(0o755)
        path, extra = f"{tmp_path}:{path}", []
    done = cli("--stack", "dev", *extra, *args, path=path)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
