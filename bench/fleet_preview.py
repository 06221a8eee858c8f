"""`fleet preview` of 4 sandbox stacks against one stack's real preview: wall and CPU time.

Starts the sandbox's FleetSandbox as tests/e2e/test_fleet.py does (four simulated clusters:
`staging`, `k3s` and two copies of k3s, one project folder and one backend), then, each a fresh
process, the best of `--runs`:

  pulumi preview --stack k3s           one stack's real preview, the Pulumi CLI alone
  fleet preview --wave one             the same stack through the fleet command (Automation API)
  fleet preview                        all four, `previewParallel` at once (the fleet file's 4)

and prints a Markdown table with the ratios to the first row, with the CPU seconds each used
(its process and every child it waited for), which say how much of a miss the cores explain:
four previews that each keep a core busy cannot take less than 4 x CPU / cores.

`--deployed` runs `fleet up` first, so the previews are of deployed stacks (a change: the DCGM
exporter turned on everywhere) instead of stacks with nothing in them yet.

Needs the toolchain, and runs where the end-to-end tests run: as root, in a network namespace with
only loopback, one at a time machine-wide, e.g.

    flock /tmp/e2e.lock unshare --net sh -c 'ip link set lo up && exec .venv/bin/python bench/fleet_preview.py'
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

PROJECT_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT_DIR))

from sandbox.fleet import FleetSandbox  # noqa: E402
from sandbox.toolchain import find  # noqa: E402

ONE = "k3s"
STACKS = ("k3s-canary", "staging", "k3s", "k3s-eu")
COPIES = {"k3s-canary": "k3s", "k3s-eu": "k3s"}


def fleet_file(parallel: int) -> dict:
    return {
        "waves": [
            {"name": "canary", "stacks": ["k3s-canary"]},
            {"name": "one", "stacks": [ONE]},
            {"name": "regions", "stacks": ["staging", "k3s-eu"], "parallel": 2},
        ],
        "previewParallel": parallel,
    }


def _children_cpu() -> float:
    """CPU seconds of every child this process waited for so far (with their own children)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(cmd: list[str], cwd: Path, env: dict[str, str], runs: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of the fastest of `runs` fresh processes of `cmd`."""
    best = (float("inf"), 0.0)
    for _ in range(runs):
        cpu, start = _children_cpu(), time.monotonic()
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
        wall = time.monotonic() - start
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}")
        best = min(best, (wall, _children_cpu() - cpu))
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--parallel", type=int, default=4, help="previewParallel of the fleet file")
    parser.add_argument("--deployed", action="store_true", help="`fleet up` first: preview a change of deployed stacks")
    args = parser.parse_args()
    tools = find()
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="gpu-stack-fleet-preview-") as tmp:
        start = time.monotonic()
        fleet = FleetSandbox(STACKS, Path(tmp) / "fleet", tools, copies=COPIES, config={"validation": {"timeoutSeconds": 180}},
                             fleet_file=fleet_file(args.parallel))
        with fleet:
            timings["sandboxes"] = time.monotonic() - start
            env = {**fleet.env(), "PYTHONPATH": str(PROJECT_DIR)}
            gpu_stack = [sys.executable, "-m", "gpu_stack", "--project-dir", str(fleet.project.project_dir)]
            cli = ["--pulumi", str(tools["pulumi"])]
            if args.deployed:
                start = time.monotonic()
                subprocess.run([*gpu_stack, "fleet", "up", *cli], cwd=PROJECT_DIR, env=env, check=True, capture_output=True)
                timings["fleet up (deploy first)"] = time.monotonic() - start
                for stack in STACKS:
                    path = fleet.project.project_dir / f"Pulumi.{stack}.yaml"
                    doc = yaml.safe_load(path.read_text())
                    cfg = doc["config"]
                    cfg["gpu-stack:dcgmExporter"] = {**(cfg.get("gpu-stack:dcgmExporter") or {}), "enabled": True}
                    path.write_text(yaml.safe_dump(doc, sort_keys=False))
            one_env = fleet.stack(ONE).env()
            rows = [
                (f"pulumi preview --stack {ONE} (one stack, the CLI)",
                 [str(tools["pulumi"]), "preview", "--stack", ONE, "--non-interactive", "--color", "never"],
                 fleet.project.project_dir, one_env),
                (f"fleet preview --wave one ({ONE} through the Automation API)", [*gpu_stack, "fleet", "preview", "--wave", "one", *cli],
                 PROJECT_DIR, env),
                (f"fleet preview ({len(STACKS)} stacks, previewParallel {args.parallel})", [*gpu_stack, "fleet", "preview", *cli],
                 PROJECT_DIR, env),
            ]
            results = [(label, *measure(cmd, cwd, e, args.runs)) for label, cmd, cwd, e in rows]
    base = results[0][1]
    load = os.getloadavg()[0]
    print(f"{len(STACKS)} sandbox stacks ({', '.join(STACKS)}); {os.cpu_count()} CPUs, load average {load:.1f}; "
          + ", ".join(f"{k} {v:.0f} s" for k, v in timings.items()))
    print("| command | wall (s) | CPU (s) | wall / one preview |")
    print("| --- | --- | --- | --- |")
    for label, wall, cpu in results:
        print(f"| `{label}` | {wall:.1f} | {cpu:.1f} | {wall / base:.1f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
