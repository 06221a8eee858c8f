"""How the offline plan scales with the number of GPU nodes, next to a bare-SDK floor.

`make bench` (or `.venv/bin/python bench/plan_scaling.py`) plans synthetic stacks of 1, 10, 100
and 1000 GPU nodes through the real `__main__.py` under Pulumi's mock runtime
(`gpu_stack.offline.runner.run_program`) and, for each size, a floor: a bare Pulumi program that
registers the same number of resources (plain `pulumi.CustomResource`, minimal inputs) through the
same runner, mock runtime and recording monitor. Each run is a fresh Python process, so its wall
time and peak RSS (from `os.wait4`) belong to that size alone.

Targets: at most 3 resources per node, at most 1.2x the floor's wall time at 1000 nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = (1, 10, 100, 1000)
CANARY_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nbench-not-a-real-key\n-----END OPENSSH PRIVATE KEY-----\n"
MAX_PER_NODE = 3.0
MAX_RATIO = 1.2

FLOOR_MAIN = '''\
"""Floor: register `bench:types` ([type token, custom?, count]) with the SDK's own classes, minimal inputs."""
import json

import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s

FACTORIES = {
    "pulumi:providers:kubernetes": lambda n, o: k8s.Provider(n, opts=o),
    "kubernetes:core/v1:Namespace": lambda n, o: k8s.core.v1.Namespace(n, metadata={"name": n}, opts=o),
    "kubernetes:core/v1:ConfigMap": lambda n, o: k8s.core.v1.ConfigMap(n, data={"k": "v"}, opts=o),
    "kubernetes:core/v1:NodePatch": lambda n, o: k8s.core.v1.NodePatch(n, metadata={"name": n}, opts=o),
    "kubernetes:helm.sh/v3:Release": lambda n, o: k8s.helm.v3.Release(n, chart="c", opts=o),
    "kubernetes:batch/v1:Job": lambda n, o: k8s.batch.v1.Job(n, spec={"template": {"spec": {"containers": []}}}, opts=o),
    "command:remote:Command": lambda n, o: command.remote.Command(n, connection={"host": "h"}, create="true", opts=o),
}

for i, (token, custom, count) in enumerate(json.loads(pulumi.Config("bench").require("types"))):
    for j in range(count):
        name = f"floor-{i}-{j}"
        if token in FACTORIES:
            FACTORIES[token](name, None)
        elif custom:
            pulumi.CustomResource(token, name, {"value": str(j)})
        else:
            pulumi.ComponentResource(token, name)
'''


def synthetic_config(nodes: int, validation: bool = True) -> dict:
    """A host-managed stack of `nodes` L4 nodes, time-sliced, a few nodes on profiles of their own."""
    profiles = (None, "ts-2", None, "ts-8")
    return {
        "driver": {"placement": "host"},
        "toolkit": {"placement": "host"},
        "ssh": {"user": "ubuntu", "port": 22},
        "nodes": [
            {
                "name": f"gpu-{i:05d}",
                "address": f"10.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}",
                "gpu": {"model": "L4", "count": 1 + i % 4},
                "runtime": "containerd",
                **({"sharing": profiles[i % 4]} if profiles[i % 4] else {}),
            }
            for i in range(nodes)
        ],
        "sharing": {
            "mode": "time-slicing",
            "replicas": 4,
            "profiles": {
                "ts-2": {"mode": "time-slicing", "replicas": 2},
                "ts-8": {"mode": "time-slicing", "replicas": 8},
            },
        },
        "mig": {"strategy": "none"},
        "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": True}},
        "validation": {"enabled": validation},
    }


def _child(kind: str, nodes: int, types: str, validation: bool) -> None:
    sys.path.insert(0, str(ROOT))
    from gpu_stack.offline.runner import run_program
    from gpu_stack.stack_files import StackConfig

    if kind == "program":
        cfg = StackConfig(project="gpu-stack", stack="bench")
        for key, value in synthetic_config(nodes, validation).items():
            cfg.values[f"gpu-stack:{key}"] = value
        cfg.values["gpu-stack:ssh"] = {**cfg.values["gpu-stack:ssh"], "privateKey": CANARY_KEY}
        cfg.secret_keys.add("gpu-stack:ssh")
        cfg.secret_values.add(CANARY_KEY)
        project_dir = ROOT
        plan = run_program(cfg, project_dir)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="gpu-stack-floor-"))
        (tmp / "__main__.py").write_text(FLOOR_MAIN)
        cfg = StackConfig(project="bench", stack="floor", values={"bench:types": types})
        plan = run_program(cfg, tmp)
    histogram: dict[tuple[str, bool], int] = {}
    for r in plan.resources:
        histogram[(r.type, r.custom)] = histogram.get((r.type, r.custom), 0) + 1
    types_out = [[t, c, n] for (t, c), n in histogram.items()]
    print(json.dumps({"resources": len(plan.resources), "types": types_out}))


def _best_of(repeat: int, kind: str, nodes: int, types: str = "[]", validation: bool = True) -> dict:
    """The fastest of `repeat` fresh runs (wall time is noisy on a shared machine), largest RSS."""
    runs = [_measure(kind, nodes, types, validation) for _ in range(repeat)]
    best = min(runs, key=lambda r: r["wall"])
    return {**best, "rss_mib": max(r["rss_mib"] for r in runs)}


def _measure(kind: str, nodes: int, types: str = "[]", validation: bool = True) -> dict:
    """Run one size in a fresh interpreter; wall time and peak RSS of that process alone."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--nodes", str(nodes), "--types", types]
    if not validation:
        cmd.append("--no-validation")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    out, err = proc.stdout.read(), proc.stderr.read()  # type: ignore[union-attr]
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{kind} with {nodes} nodes failed:\n{err.decode()}")
    result = json.loads(out.decode().strip().splitlines()[-1])
    # ru_maxrss is KiB on Linux; CPU time says the same as wall time on a quiet machine, and
    # stays honest on a busy one.
    result.update(wall=wall, cpu=usage.ru_utime + usage.ru_stime, rss_mib=usage.ru_maxrss / 1024)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated node counts")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the fastest counts")
    parser.add_argument("--child", choices=("program", "floor"), help=argparse.SUPPRESS)
    parser.add_argument("--nodes", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--types", default="[]", help=argparse.SUPPRESS)
    parser.add_argument("--no-validation", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--validation", choices=("on", "off", "both"), default="both",
        help="plan the synthetic stacks with validation Jobs, without, or both (two tables)",
    )
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.nodes, args.types, not args.no_validation)
        return 0
    variants = {"on": (True,), "off": (False,), "both": (True, False)}[args.validation]
    for validation in variants:
        _table(args, validation)
    return 0


def _table(args: argparse.Namespace, validation: bool) -> None:
    header = (
        "nodes", "resources", "res/node", "wall s", "RSS MiB", "floor wall s", "floor RSS MiB",
        "ratio wall", "ratio RSS", "cpu s", "floor cpu s", "ratio cpu",
    )
    rows = []
    for nodes in (int(s) for s in args.sizes.split(",")):
        program = _best_of(args.repeat, "program", nodes, validation=validation)
        floor = _best_of(args.repeat, "floor", nodes, types=json.dumps(program["types"]))
        if floor["resources"] != program["resources"]:
            raise SystemExit(f"floor registered {floor['resources']}, program {program['resources']}")
        rows.append(
            (
                nodes,
                program["resources"],
                program["resources"] / nodes,
                program["wall"],
                program["rss_mib"],
                floor["wall"],
                floor["rss_mib"],
                program["wall"] / floor["wall"],
                program["rss_mib"] / floor["rss_mib"],
                program["cpu"],
                floor["cpu"],
                program["cpu"] / floor["cpu"],
            )
        )
    fmt = ("{}", "{}", "{:.2f}", "{:.2f}", "{:.0f}", "{:.2f}", "{:.0f}", "{:.2f}", "{:.2f}", "{:.2f}", "{:.2f}", "{:.2f}")
    what = "with validation Jobs (the default)" if validation else "validation.enabled: false"
    print(f"offline plan vs bare-SDK floor, {what}; best of {args.repeat} fresh processes per cell", flush=True)
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("-" * (len(h) + 2) for h in header) + "|")
    for row in rows:
        print("| " + " | ".join(f.format(v).rjust(len(h)) for f, v, h in zip(fmt, row, header)) + " |")
    last = rows[-1]
    print()
    print(
        f"targets at {last[0]} nodes: resources/node {last[2]:.2f} (at most {MAX_PER_NODE:g}), "
        f"wall ratio {last[7]:.2f}, cpu ratio {last[11]:.2f} (at most {MAX_RATIO:g}x the floor)"
    )
    print(flush=True)


if __name__ == "__main__":
    sys.exit(main())
