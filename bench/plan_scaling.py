"""How the offline plan scales with the number of GPU nodes, next to a bare-SDK floor.

`make bench` (or `.venv/bin/python bench/plan_scaling.py`) plans synthetic stacks of 1, 10, 100
and 1000 GPU nodes through the real `__main__.py` under Pulumi's mock runtime
(`gpu_stack.offline.runner.run_program`) and, for each size, a floor: a bare Pulumi program that
registers the same resources, type for type (the SDK's own classes, minimal inputs), through the
same runner, mock runtime and recording monitor. Each run is a fresh Python process, so its wall
time, CPU time and peak RSS (from `os.wait4`) belong to that size alone.

A second floor, "same inputs", registers every resource of the program's plan (same type, same
name) with the SDK's own classes and the very inputs the program registered (secrets as Pulumi
secrets where the program passed them, a file asset as a `FileAsset`), and reads every object the
program reads (`<Type>.get`, same name and id), without the program's logic, parents, providers or
dependencies. Its inputs come from a dump of an untimed program run and are put in keyword form
before it starts (that bookkeeping is taken off its time); the script checks that its recorded
inputs and reads equal the program's.

Targets: at most 3 resources per node, at most 1.2x the floor's wall time at 1000 nodes, at most
1.05x the same-inputs floor's (issue 26).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType as types_module
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SIZES = (1, 10, 100, 1000)
CANARY_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nbench-not-a-real-key\n-----END OPENSSH PRIVATE KEY-----\n"
MAX_PER_NODE = 3.0
MAX_RATIO = 1.2
MAX_SAME_INPUTS_RATIO = 1.05

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


FLOOR_INPUTS_MAIN = '''\
"""Floor with the program's inputs: bench_inputs.RESOURCES, prepared by the bench (see _prepared_inputs)."""
import inspect

import bench_inputs
import pulumi
import pulumi_command as command
import pulumi_kubernetes as k8s

CLASSES = {
    "pulumi:providers:kubernetes": k8s.Provider,
    "kubernetes:core/v1:Namespace": k8s.core.v1.Namespace,
    "kubernetes:core/v1:ConfigMap": k8s.core.v1.ConfigMap,
    "kubernetes:core/v1:Service": k8s.core.v1.Service,
    "kubernetes:core/v1:ServiceAccount": k8s.core.v1.ServiceAccount,
    "kubernetes:core/v1:NodePatch": k8s.core.v1.NodePatch,
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole": k8s.rbac.v1.ClusterRole,
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding": k8s.rbac.v1.ClusterRoleBinding,
    "kubernetes:rbac.authorization.k8s.io/v1:Role": k8s.rbac.v1.Role,
    "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding": k8s.rbac.v1.RoleBinding,
    "kubernetes:helm.sh/v3:Release": k8s.helm.v3.Release,
    "kubernetes:batch/v1:Job": k8s.batch.v1.Job,
    "command:remote:Command": command.remote.Command,
    "command:remote:CopyToRemote": command.remote.CopyToRemote,
}
READERS = {
    "kubernetes:coordination.k8s.io/v1:Lease": k8s.coordination.v1.Lease,
    "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition": k8s.apiextensions.v1.CustomResourceDefinition,
}
PARAMS = {cls: set(inspect.signature(cls._internal_init).parameters) - {"api_version", "kind"} for cls in CLASSES.values()}
ASSET = ("4dabf18193072939515e22adb298388d", "c44067f5952c0a294b673a41bacd8c17")  # pulumi.runtime.rpc

CONNECTION_SECRET = ("command:remote:Command", "command:remote:CopyToRemote")
"""Classes that make `connection` a secret themselves: the program passes them a plain connection
whose private key is one secret for every node, and so does the floor (wrapping the whole
connection again would make the SDK build every connection's outputs twice)."""
keys: dict = {}

for token, name, id_ in bench_inputs.READS:
    READERS[token].get(name, id_)
for token, custom, name, props, secret_paths in bench_inputs.RESOURCES:
    for key, value in props.items():  # a file asset (the node script's copy), as the program passes it
        if isinstance(value, dict) and value.get(ASSET[0]) == ASSET[1]:
            props[key] = pulumi.FileAsset(value["path"])
    if token in CONNECTION_SECRET and ("connection",) in secret_paths and "privateKey" in props["connection"]:
        secret_paths = [p for p in secret_paths if p != ("connection",)]
        key = props["connection"]["privateKey"]
        props["connection"]["privateKey"] = keys.setdefault(key, pulumi.Output.secret(key))
    for path in secret_paths:  # the few values the program's plan shows as [secret]
        parent = props
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = pulumi.Output.secret(parent[path[-1]])
    cls = CLASSES.get(token)
    if not custom:
        pulumi.ComponentResource(token, name)
    elif cls is None:
        pulumi.CustomResource(token, name, props)
    else:
        params = PARAMS[cls]
        cls(name, **{k: v for k, v in props.items() if k in params})
'''
SECRET_SIG_KEY, SECRET_SIG = "4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270"  # pulumi.runtime.rpc
CLASS_TOKENS = re.findall(r'^    "([^"]+)": ', FLOOR_INPUTS_MAIN, re.MULTILINE)


def _secret_paths(value: object, path: tuple = ()) -> list[tuple]:
    """Where the program passed a Pulumi secret (the wire's secret signature), innermost first."""
    if isinstance(value, dict):
        if value.get(SECRET_SIG_KEY) == SECRET_SIG:
            return [*_secret_paths(value.get("value"), path), path]
        return [p for k, v in value.items() for p in _secret_paths(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _secret_paths(v, (*path, i))]
    return []


def _unsigned(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(SECRET_SIG_KEY) == SECRET_SIG:
            return _unsigned(value.get("value"))
        return {k: _unsigned(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unsigned(v) for v in value]
    return value


def _prepared_inputs(dump: list) -> list:
    """[type, custom, name, kwargs or props, secret paths] for each resource of the program's plan:
    keyword names for the SDK's classes (camelCase to snake_case), a provider's JSON-encoded values
    decoded. Done before the floor runs: its time is the registrations alone."""
    out = []
    for token, custom, name, wire, _ in dump:
        secret_paths = _secret_paths(wire)
        raw = _unsigned(wire)
        if token.startswith("pulumi:providers:"):
            raw = {k: json.loads(v) if isinstance(v, str) and v and v[:1] in '[{tf0123456789"' else v for k, v in raw.items()}
        if token in CLASS_TOKENS:
            snake = {k: re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), k) for k in raw}
            raw = {snake[k]: v for k, v in raw.items()}
            secret_paths = [(snake[p[0]], *p[1:]) for p in secret_paths]
        out.append([token, custom, name, raw, secret_paths])
    return out


def footprint(plan_resources: list) -> dict:
    """What one `pulumi up` of a plan starts for validation, read from its Job inputs: Jobs, pods
    (Indexed Jobs run `parallelism` pods at once), GPU pods and the GPU replicas they request."""
    jobs = pods = gpu_pods = replicas = 0
    for r in plan_resources:
        if r.type != "kubernetes:batch/v1:Job":
            continue
        spec = r.inputs["spec"]
        n = int(spec.get("parallelism") or 1)
        per_pod = sum(
            int(v)
            for c in spec["template"]["spec"]["containers"]
            for k, v in c.get("resources", {}).get("limits", {}).items()
            if k.startswith("nvidia.com/")
        )
        jobs += 1
        pods += n
        gpu_pods += n if per_pod else 0
        replicas += n * per_pod
    return {"jobs": jobs, "pods": pods, "gpu_pods": gpu_pods, "gpu_replicas": replicas}


def synthetic_config(nodes: int, validation: bool = True, coverage: str = "sample") -> dict:
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
        "validation": {"enabled": validation, "coverage": coverage},
    }


def _child(kind: str, nodes: int, types: str, validation: bool, dump: str | None = None) -> None:
    sys.path.insert(0, str(ROOT))
    from gpu_stack.config.stack_files import StackConfig
    from gpu_stack.offline import fast_monitor
    from gpu_stack.offline.runner import run_program

    raw_inputs: dict[tuple[str, str], object] = {}
    if dump:
        # Keep each registration's inputs, next to the recorded (scrubbed) ones: the same-inputs
        # floor registers exactly these.
        from google.protobuf import json_format

        register = fast_monitor.RecordingMonitor.RegisterResource

        def keep(self, request):  # type: ignore[no-untyped-def]
            # As on the wire: a secret stays where the program put it (signature and value).
            raw_inputs[(request.type, request.name)] = json_format.MessageToDict(request.object)
            return register(self, request)

        fast_monitor.RecordingMonitor.RegisterResource = keep  # type: ignore[method-assign]

    if kind == "program":
        cfg = StackConfig(project="gpu-stack", stack="bench")
        for key, value in synthetic_config(nodes, validation).items():
            cfg.values[f"gpu-stack:{key}"] = value
        cfg.values["gpu-stack:ssh"] = {**cfg.values["gpu-stack:ssh"], "privateKey": CANARY_KEY}
        cfg.secret_keys.add("gpu-stack:ssh")
        cfg.secret_values.add(CANARY_KEY)
        project_dir = ROOT
        plan = run_program(cfg, project_dir)
    elif kind.startswith("footprint-"):
        # Untimed: what validation starts at this size, under one coverage.
        cfg = StackConfig(project="gpu-stack", stack="bench")
        for key, value in synthetic_config(nodes, True, kind.split("-", 1)[1]).items():
            cfg.values[f"gpu-stack:{key}"] = value
        plan = run_program(cfg, ROOT)
        print(json.dumps({"resources": len(plan.resources), "types": [], "footprint": footprint(plan.resources)}))
        return
    elif kind == "floor-inputs":
        # Reading the inputs file is the bench's work, not the floor's: timed, and taken off.
        clock = (time.perf_counter(), time.process_time())
        recorded = json.loads(Path(types).read_text())
        inputs_module = types_module("bench_inputs")
        inputs_module.RESOURCES = _prepared_inputs(recorded["resources"])  # type: ignore[attr-defined]
        inputs_module.READS = [(r["type"], r["name"], r["id"]) for r in recorded["reads"]]  # type: ignore[attr-defined]
        sys.modules["bench_inputs"] = inputs_module
        bookkeeping = [time.perf_counter() - clock[0], time.process_time() - clock[1]]
        tmp = Path(tempfile.mkdtemp(prefix="gpu-stack-floor-"))
        (tmp / "__main__.py").write_text(FLOOR_INPUTS_MAIN)
        cfg = StackConfig(project="bench", stack="floor")
        plan = run_program(cfg, tmp, extra_secret_values={CANARY_KEY})
    else:
        tmp = Path(tempfile.mkdtemp(prefix="gpu-stack-floor-"))
        (tmp / "__main__.py").write_text(FLOOR_MAIN)
        cfg = StackConfig(project="bench", stack="floor", values={"bench:types": types})
        plan = run_program(cfg, tmp)
    histogram: dict[tuple[str, bool], int] = {}
    for r in plan.resources:
        histogram[(r.type, r.custom)] = histogram.get((r.type, r.custom), 0) + 1
    types_out = [[t, c, n] for (t, c), n in histogram.items()]
    result: dict[str, object] = {"resources": len(plan.resources), "types": types_out}
    if dump:
        Path(dump).write_text(json.dumps({
            "resources": [[r.type, r.custom, r.name, raw_inputs.get((r.type, r.name), {}), r.inputs] for r in plan.resources],
            "reads": [{"type": r["type"], "name": r["name"], "id": r["id"]} for r in plan.reads],
        }))
    if kind == "floor-inputs":
        # How many resources the floor registered with exactly the program's recorded inputs.
        clock = (time.perf_counter(), time.process_time())
        program = {(t, n): scrubbed for t, _, n, _, scrubbed in recorded["resources"]}
        result["same_inputs"] = sum(1 for r in plan.resources if program.get((r.type, r.name)) == r.inputs)
        result["same_reads"] = sorted((r["type"], r["name"], r["id"]) for r in plan.reads) == sorted(
            (r["type"], r["name"], r["id"]) for r in recorded["reads"]
        )
        result["bookkeeping"] = [bookkeeping[0] + time.perf_counter() - clock[0], bookkeeping[1] + time.process_time() - clock[1]]
    print(json.dumps(result))


def _best_of(repeat: int, kind: str, nodes: int, types: str = "[]", validation: bool = True) -> dict:
    """The fastest of `repeat` fresh runs (wall time is noisy on a shared machine), largest RSS."""
    runs = [_measure(kind, nodes, types, validation) for _ in range(repeat)]
    best = min(runs, key=lambda r: r["wall"])
    return {**best, "rss_mib": max(r["rss_mib"] for r in runs)}


def _measure(kind: str, nodes: int, types: str = "[]", validation: bool = True, dump: str | None = None) -> dict:
    """Run one size in a fresh interpreter; wall time and peak RSS of that process alone."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--nodes", str(nodes), "--types", types]
    if not validation:
        cmd.append("--no-validation")
    if dump:
        cmd += ["--dump", dump]
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
    # The same-inputs floor's own account of reading its inputs file and comparing inputs.
    bookkeeping_wall, bookkeeping_cpu = result.pop("bookkeeping", (0.0, 0.0))
    result.update(wall=result["wall"] - bookkeeping_wall, cpu=result["cpu"] - bookkeeping_cpu)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="comma-separated node counts")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement; the fastest counts")
    parser.add_argument(
        "--child", choices=("program", "floor", "floor-inputs", "footprint-sample", "footprint-full"), help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--footprint-only", action="store_true",
        help="print only the validation footprint table (pods and GPU replicas one `up` starts)",
    )
    parser.add_argument("--dump", help=argparse.SUPPRESS)
    parser.add_argument("--nodes", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--types", default="[]", help=argparse.SUPPRESS)
    parser.add_argument("--no-validation", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--validation", choices=("on", "off", "both"), default="both",
        help="plan the synthetic stacks with validation Jobs, without, or both (two tables)",
    )
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child, args.nodes, args.types, not args.no_validation, args.dump)
        return 0
    variants = {"on": (True,), "off": (False,), "both": (True, False)}[args.validation]
    if not args.footprint_only:
        for validation in variants:
            _table(args, validation)
    if args.footprint_only or True in variants:
        _footprint_table(args)
    return 0


def _table(args: argparse.Namespace, validation: bool) -> None:
    header = (
        "nodes", "resources", "res/node", "wall s", "RSS MiB", "floor wall s", "floor RSS MiB",
        "ratio wall", "ratio RSS", "cpu s", "floor cpu s", "ratio cpu",
        "same-inputs floor wall s", "ratio wall same-inputs", "same-inputs floor cpu s", "ratio cpu same-inputs",
    )
    rows = []
    same_inputs = []
    for nodes in (int(s) for s in args.sizes.split(",")):
        program = _best_of(args.repeat, "program", nodes, validation=validation)
        floor = _best_of(args.repeat, "floor", nodes, types=json.dumps(program["types"]))
        if floor["resources"] != program["resources"]:
            raise SystemExit(f"floor registered {floor['resources']}, program {program['resources']}")
        with tempfile.TemporaryDirectory(prefix="gpu-stack-bench-") as tmp:
            dump = str(Path(tmp) / "inputs.json")
            _measure("program", nodes, validation=validation, dump=dump)  # untimed: writes the inputs
            inputs_floor = _best_of(args.repeat, "floor-inputs", nodes, types=dump)
        if inputs_floor["resources"] != program["resources"]:
            raise SystemExit(f"same-inputs floor registered {inputs_floor['resources']}, program {program['resources']}")
        if not inputs_floor["same_reads"]:
            raise SystemExit(f"same-inputs floor read other objects than the program at {nodes} nodes")
        same_inputs.append((nodes, inputs_floor["same_inputs"], program["resources"]))
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
                inputs_floor["wall"],
                program["wall"] / inputs_floor["wall"],
                inputs_floor["cpu"],
                program["cpu"] / inputs_floor["cpu"],
            )
        )
    fmt = (
        "{}", "{}", "{:.2f}", "{:.2f}", "{:.0f}", "{:.2f}", "{:.0f}", "{:.2f}", "{:.2f}", "{:.2f}", "{:.2f}", "{:.2f}",
        "{:.2f}", "{:.2f}", "{:.2f}", "{:.2f}",
    )
    what = "with validation Jobs (the default)" if validation else "validation.enabled: false"
    print(f"offline plan vs bare-SDK floor, {what}; best of {args.repeat} fresh processes per cell", flush=True)
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("-" * (len(h) + 2) for h in header) + "|")
    for row in rows:
        print("| " + " | ".join(f.format(v).rjust(len(h)) for f, v, h in zip(fmt, row, header, strict=True)) + " |")
    last = rows[-1]
    print()
    print(
        f"targets at {last[0]} nodes: resources/node {last[2]:.2f} (at most {MAX_PER_NODE:g}), "
        f"wall ratio {last[7]:.2f}, cpu ratio {last[11]:.2f} (at most {MAX_RATIO:g}x the floor); "
        f"to the same-inputs floor: wall ratio {last[13]:.2f}, cpu ratio {last[15]:.2f} (at most {MAX_SAME_INPUTS_RATIO:g}x)"
    )
    for nodes, same, total in same_inputs:
        print(f"same-inputs floor at {nodes} nodes: {same} of {total} resources recorded with the program's exact inputs, and the same reads")
    print(flush=True)


def _footprint_table(args: argparse.Namespace) -> None:
    """Validation pods and GPU replicas one `pulumi up` starts, by node count and coverage."""
    header = ("nodes", "coverage", "jobs", "pods", "GPU pods", "GPU replicas")
    print("validation footprint of one `pulumi up` (read from the plan's Job inputs)", flush=True)
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("-" * (len(h) + 2) for h in header) + "|")
    for nodes in (int(s) for s in args.sizes.split(",")):
        for coverage in ("sample", "full"):
            f = _measure(f"footprint-{coverage}", nodes)["footprint"]
            row = (nodes, coverage, f["jobs"], f["pods"], f["gpu_pods"], f["gpu_replicas"])
            print("| " + " | ".join(str(v).rjust(len(h)) for v, h in zip(row, header, strict=True)) + " |")
    print(flush=True)


if __name__ == "__main__":
    sys.exit(main())
