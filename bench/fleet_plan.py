"""`fleet plan` of 20 stacks against one stack's `plan` and `diff`: wall time and peak RSS.

A temporary git repository holds the project's files with 20 stacks (dev, staging and prod, and
17 more made from them, the default order), committed; then every stack is edited (its
`sharing.replicas` doubled, or, where it shares nothing, its operator timeout raised), so each of
the 20 has a change. The 17 are `--distinct` by default, as a real fleet's stacks are: each its own
kube context, node names, node addresses and GPU counts, so no two stack files are the same and the
fleet plan cannot share one stack's program run with another; `--copies` makes them plain copies
of the three (the measurement of issue 34, where 5 program runs served 40 plans). Each command runs
as a fresh process, once per round for `--runs` rounds (interleaved: a load that comes and goes
weighs on every row alike), its peak RSS from `os.wait4` (the largest of the process and the
workers it waited for). Prints a Markdown table with the best and the median wall time and their
ratios to one stack's `plan`. The chart is rendered
from `--chart-dir` (default: the reference chart `make reference` keeps, when there), never pulled.

    .venv/bin/python bench/fleet_plan.py [--stacks 20] [--runs 2] [--jobs 2] [--chart-dir DIR] [--copies]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

PROJECT_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_DIR))

from sandbox import reference  # noqa: E402

REFERENCE_CHART = reference.path(reference.CHART)
BASES = ("dev", "staging", "prod")


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@example.invalid",
           "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@example.invalid"}
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


def distinct(doc: dict[str, Any], i: int) -> dict[str, Any]:
    """Stack file `doc` as another cluster's: its own context, node names, addresses and GPU
    counts (1 to 8, within what each model's nodes hold), so no two stacks plan alike."""
    cfg = doc["config"]
    k8s = cfg.setdefault("gpu-stack:kubernetes", {})
    k8s["context"] = f"{k8s.get('context', 'cluster')}-{i:02d}"
    for j, node in enumerate(cfg.get("gpu-stack:nodes") or []):
        node["name"] = f"{node['name']}-r{i:02d}"
        if "address" in node:
            node["address"] = f"10.{60 + i}.{j}.{11 + j}"
        gpu = node.get("gpu") or {}
        if "count" in gpu:
            gpu["count"] = 1 + (i + j) % 8
    return doc


def _change(text: str) -> str:
    """The change every stack gets: `sharing.replicas` doubled, or its first timeout (the
    operator's Helm timeout) raised where the stack shares nothing (prod)."""
    doubled = re.sub(r"(\n    replicas: )(\d+)\n", lambda m: f"{m.group(1)}{int(m.group(2)) * 2}\n", text, count=1)
    if doubled != text:
        return doubled
    return re.sub(r"(\n    timeoutSeconds: )(\d+)\n", lambda m: f"{m.group(1)}{int(m.group(2)) + 60}\n", text, count=1)


def make_repo(dest: Path, stacks: int, copies: bool = False) -> list[str]:
    files = subprocess.run(["git", "-C", str(PROJECT_DIR), "ls-files", "-z"], capture_output=True, check=True).stdout.decode()
    for rel in filter(None, files.split("\0")):
        src = PROJECT_DIR / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    (dest / "fleet.yaml").unlink(missing_ok=True)  # the default order takes every stack
    names = list(BASES)
    for i in range(stacks - len(BASES)):
        name = f"{BASES[i % 3]}-{i:02d}"
        source = dest / f"Pulumi.{BASES[i % 3]}.yaml"
        if copies:
            shutil.copy2(source, dest / f"Pulumi.{name}.yaml")
        else:
            doc = distinct(yaml.safe_load(source.read_text()), i)
            (dest / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        names.append(name)
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-qm", "base")
    for name in names:
        path = dest / f"Pulumi.{name}.yaml"
        path.write_text(_change(path.read_text()))
    return names


def measure(cmds: list[list[str]], cwd: Path, runs: int, out: Path) -> list[dict[str, float]]:
    """Per command: best and median wall seconds, peak RSS MiB, least CPU seconds over `runs`
    rounds, each round running every command once as a fresh process (interleaved, so a change in
    the machine's load between commands shifts every row alike, not one). CPU: user + system of
    the process and the children it waited for (its workers, the Helm child). The last command's
    stdout of the last round is in `out`."""
    walls: list[list[float]] = [[] for _ in cmds]
    peaks, cpus = [0.0] * len(cmds), [float("inf")] * len(cmds)
    env = {**os.environ, "PYTHONPATH": str(PROJECT_DIR), "GPU_STACK_CHART_PULL": "off"}
    for _ in range(runs):
        for i, cmd in enumerate(cmds):
            start = time.monotonic()
            with out.open("wb") as sink:
                proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=sink, stderr=subprocess.PIPE)
                _, status, usage = os.wait4(proc.pid, 0)
            walls[i].append(time.monotonic() - start)
            if os.waitstatus_to_exitcode(status) not in (0, 1):
                raise SystemExit(f"{' '.join(cmd)} failed: {proc.stderr.read().decode()[-2000:] if proc.stderr else ''}")
            peaks[i] = max(peaks[i], usage.ru_maxrss / 1024)
            cpus[i] = min(cpus[i], usage.ru_utime + usage.ru_stime)
    return [{"best": min(w), "median": statistics.median(w), "rss": peak, "cpu": cpu}
            for w, peak, cpu in zip(walls, peaks, cpus, strict=True)]


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--stacks", type=int, default=20)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--copies", action="store_true", help="the 17 stacks as copies of dev, staging and prod")
    parser.add_argument("--chart-dir", type=Path, default=REFERENCE_CHART if (REFERENCE_CHART / "Chart.yaml").exists() else None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gpu-stack-fleet-bench-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        names = make_repo(repo, args.stacks, copies=args.copies)
        files = {(repo / f"Pulumi.{n}.yaml").read_bytes() for n in names}
        py = [sys.executable, "-m", "gpu_stack", "--project-dir", str(repo)]
        chart = ["--chart-dir", str(args.chart_dir)] if args.chart_dir else []
        rows = [
            ("plan --stack dev (one stack)", py + ["plan", "--stack", "dev", "--format", "json"]),
            ("diff --stack dev --base HEAD (one stack)", py + ["diff", "--stack", "dev", "--base", "HEAD", *chart]),
            (f"fleet plan --base HEAD --jobs {args.jobs} ({len(names)} stacks)",
             py + ["fleet", "plan", "--base", "HEAD", "--format", "json", "--jobs", str(args.jobs), *chart]),
        ]
        out = Path(tmp) / "stdout.txt"
        results = measure([cmd for _, cmd in rows], PROJECT_DIR, args.runs, out)
        doc = json.loads(out.read_text())  # the fleet plan's, the last row
        work = (f"{len(files)} distinct stack files; program runs: {doc.get('programRuns', 'not reported')}, "
                f"chart renders: {doc.get('chartRenders')}, stacks with changes: "
                f"{len(doc.get('stacks', {})) - len(doc.get('unchanged', []))}")
    base = results[0]
    print(f"chart: {args.chart_dir or 'none (effects without the object diff)'}; fleet plan: {work}; "
          f"{args.runs} interleaved rounds; load average {os.getloadavg()[0]:.1f} at the end; {os.cpu_count()} CPUs")
    print("| command | best wall (s) | median wall (s) | CPU (s) | peak RSS (MiB) | best / plan | median / plan | CPU / plan | RSS / plan |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (label, _), r in zip(rows, results, strict=True):
        print(f"| `{label}` | {r['best']:.2f} | {r['median']:.2f} | {r['cpu']:.2f} | {r['rss']:.0f} | "
              f"{r['best'] / base['best']:.2f}x | {r['median'] / base['median']:.2f}x | {r['cpu'] / base['cpu']:.2f}x | "
              f"{r['rss'] / base['rss']:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
