"""How the offline diff scales: two 10,000-node stacks compared, next to the plan of one.

`.venv/bin/python bench/diff_scaling.py [--nodes 10000]` writes two synthetic stacks (the plan
bench's, bench/plan_scaling.py) into a temporary project: `base`, and `head` = base with what a
large pull request does (replicas 4 -> 8, every 100th node's address changed, one node removed,
one added, one host key pinned, the SSH key rotated: every node command's connection changes). Each measurement is a fresh process (wall, CPU, peak RSS by
`os.wait4`):

- plan:   `python -m gpu_stack plan --stack head --format json` (the plan of one stack);
- diff:   `python -m gpu_stack diff --stack head --against base` (plans both, compares, renders);
- diff step: the comparison and rendering alone, over the two plans' JSON (what the diff adds).

It prints one table, then what a reviewer reads: the output's line count, its longest line, and
its first lines (the summary before the details). Nothing in the test suite asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from plan_scaling import synthetic_config  # noqa: E402

from sandbox import reference  # noqa: E402

CHART = reference.path(reference.CHART)
"""The chart the object view renders (else the diff says it cannot pull one: no network here)."""
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG8hbLGXU6kkQ6eXmm3g4ZiDWVxk+74hSCSUtDmiA2Ns"


def head_config(nodes: int) -> dict:
    cfg = synthetic_config(nodes, validation=True)
    cfg["sharing"]["replicas"] = 8
    for i in range(0, nodes, 100):
        cfg["nodes"][i]["address"] = f"10.200.{i // 256 % 256}.{i % 256}"
    cfg["nodes"][1]["hostKey"] = HOST_KEY
    removed = cfg["nodes"].pop()
    cfg["nodes"].append({**removed, "name": "gpu-new-1", "address": "10.250.0.1"})
    return cfg


def write_project(nodes: int) -> Path:
    root = Path(tempfile.mkdtemp(prefix="gpu-stack-diff-bench-"))
    shutil.copy(ROOT / "Pulumi.yaml", root / "Pulumi.yaml")
    shutil.copy(ROOT / "__main__.py", root / "__main__.py")
    for stack, cfg in (("base", synthetic_config(nodes, validation=True)), ("head", head_config(nodes))):
        # The SSH key is rotated too: every node command's connection changes (a secret input).
        cfg["ssh"] = {**cfg["ssh"], "privateKey": {"secure": f"v1:{stack}-key-ciphertext"}}
        doc = {"config": {f"gpu-stack:{k}": v for k, v in cfg.items()}}
        (root / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return root


def measure(cmd: list[str], out_path: Path | None = None) -> dict:
    start = time.perf_counter()
    with open(out_path or os.devnull, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.PIPE, cwd=ROOT)
        err = proc.stderr.read()  # type: ignore[union-attr]
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) not in (0, 1):
        raise SystemExit(f"{' '.join(cmd[:6])} failed:\n{err.decode()[-3000:]}")
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss_mib": usage.ru_maxrss / 1024}


DIFF_STEP = """
import json, sys
from pathlib import Path
sys.path.insert(0, {root!r})
from gpu_stack.offline import diff
from gpu_stack.offline.effects import add_objects_and_effects
base, head = (json.load(open(p)) for p in sys.argv[1:3])
result = diff.diff_plans(base, head, "stack base", "stack head", same_stack=False)
add_objects_and_effects(result, base, head, {chart})
sys.stdout.write(diff.render(result, "text"))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    args = parser.parse_args(argv)
    root = write_project(args.nodes)
    py = [sys.executable, "-m", "gpu_stack", "--project-dir", str(root)]
    plans = {s: root / f"plan-{s}.json" for s in ("base", "head")}
    rows = {"plan (head)": measure([*py, "plan", "--stack", "head", "--format", "json"], plans["head"])}
    measure([*py, "plan", "--stack", "base", "--format", "json"], plans["base"])
    text_out = root / "diff.txt"
    chart = CHART if CHART.is_dir() else None
    chart_args = ["--chart-dir", str(chart)] if chart else []
    rows["diff --against (plans both)"] = measure([*py, "diff", "--stack", "head", "--against", "base", *chart_args], text_out)
    step = root / "diff_step.py"
    step.write_text(DIFF_STEP.format(root=str(ROOT), chart=f"Path({str(chart)!r})" if chart else "None"))
    rows["diff step alone (two plan JSONs in)"] = measure([sys.executable, str(step), str(plans["base"]), str(plans["head"])],
                                                          root / "diff-step.txt")
    resources = len(json.loads(plans["head"].read_text())["resources"])
    plan = rows["plan (head)"]
    print(f"{args.nodes} nodes, {resources} resources in the head plan; object view: {'chart ' + str(chart) if chart else 'no chart'}")
    print("| run | wall s | cpu s | RSS MiB | wall / plan | RSS / plan |")
    print("|-----|--------|-------|---------|-------------|------------|")
    for name, r in rows.items():
        print(f"| {name} | {r['wall']:.2f} | {r['cpu']:.2f} | {r['rss_mib']:.0f} | "
              f"{r['wall'] / plan['wall']:.2f} | {r['rss_mib'] / plan['rss_mib']:.2f} |")
    lines = text_out.read_text().splitlines()
    longest = max(lines, key=len)
    print(f"diff output: {len(lines)} lines, longest {len(longest)} characters")
    print("first lines:")
    for line in lines[:12]:
        print("    " + line[:160])
    shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
