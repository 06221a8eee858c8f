"""The program under the real engine: `pulumi preview` wall time at 10, 100 and 1,000 simulated
GPU nodes against a bare program that registers the same resources (same types, names and
inputs, read from the program's own offline plan) without the program's logic, and the state's
size per node after `pulumi up` (`pulumi stack export`, bytes / node).

`make bench-engine` (needs the toolchain: `make e2e-tools`). Each size gets one simulated
cluster (sandbox/) with a Node per declared node; the operator installs the driver and the
toolkit. Then the state of a host-prepared stack (driver and toolkit on the host) after a real
`up` through the command provider, one sshd per node (sandbox/ssh_nodes.py): bytes per node, what
each added node costs (the difference of two sizes), and the node commands' and copies' bytes by
field. Prints Markdown tables; ratios are of the same run. Needs root (the sshd nodes).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.plan_scaling import synthetic_config  # noqa: E402
from sandbox.harness import CHART_DIR, Sandbox  # noqa: E402
from sandbox.pulumi_cli import PulumiProject  # noqa: E402

BARE_MAIN = '''\
"""Bare program: every resource of plan.json with the very inputs the program sent, no logic."""
import json
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

plan = json.loads((Path(__file__).parent / "plan.json").read_text())
providers = {}
for r in plan["resources"]:
    if r["type"] == "pulumi:providers:kubernetes":
        providers[r["name"]] = k8s.Provider(r["name"], context=r["inputs"].get("context"),
                                            cluster_identifier=r["inputs"].get("clusterIdentifier"))
provider = next(iter(providers.values()))
for read in plan.get("reads") or []:
    pulumi.CustomResource(read["type"], read["name"], {}, opts=pulumi.ResourceOptions(provider=provider, id=read["id"]))
for r in plan["resources"]:
    if r["type"].startswith("pulumi:providers:"):
        continue
    if r["type"].startswith("gpu-stack:"):
        pulumi.ComponentResource(r["type"], r["name"])
    else:
        pulumi.CustomResource(r["type"], r["name"], r["inputs"], opts=pulumi.ResourceOptions(provider=provider))
'''


def stack_doc(nodes: int, validation: bool, host_prepared: bool = False) -> dict:
    cfg = synthetic_config(nodes, validation=validation)
    if not host_prepared:
        cfg["driver"] = {"placement": "operator"}
        cfg["toolkit"] = {"placement": "operator"}
        cfg.pop("ssh", None)
        for node in cfg["nodes"]:
            node.pop("address", None)
    cfg["kubernetes"] = {"context": "bench-cluster", "version": "1.34"}
    return {"config": {f"gpu-stack:{k}": v for k, v in cfg.items()}}


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def measure(nodes: int, up: bool, workdir: Path, export_dir: Path | None = None) -> dict:
    stack = f"bench{nodes}"
    src = workdir / "src"
    src.mkdir(parents=True, exist_ok=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        (src / name).write_text((ROOT / name).read_text())
    (src / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(stack_doc(nodes, validation=up)))
    row: dict = {"nodes": nodes}
    with Sandbox(stack, workdir=workdir / "box", config={"operator": {"chartPath": str(CHART_DIR)}}, source=src,
                 node_agents=up) as box:
        plan = json.loads(box.pulumi.run_offline_plan())
        box.pulumi.preview_json()  # warm: plugin start, first API discovery
        row["preview_s"], _ = timed(box.pulumi.preview_json)
        assert box.tools is not None  # the sandbox found its toolchain
        bare = PulumiProject(box.tools, workdir / "bare", stack, box.cluster.kubeconfig, source=box.pulumi.project_dir)
        bare.prepare(box.pulumi.project_dir / f"Pulumi.{stack}.yaml")
        (bare.project_dir / "__main__.py").write_text(BARE_MAIN)
        (bare.project_dir / "plan.json").write_text(json.dumps(plan))
        bare.preview_json()
        row["bare_s"], _ = timed(bare.preview_json)
        row["resources"] = len(plan["resources"])
        if up:
            box.pulumi.up()
            state = box.pulumi.run("stack", "export").stdout
            row["state_bytes_per_node"] = len(state.encode()) // nodes
            if export_dir is not None:
                (export_dir / f"export-{nodes}.json").write_text(state)
    return row


def _field_bytes(value: object) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def host_prepared_state(nodes: int, workdir: Path) -> dict:
    """A real `up` of the synthetic stack with its nodes prepared over SSH: the export, per node."""
    stack = f"hostprep{nodes}"
    src = workdir / "src"
    src.mkdir(parents=True, exist_ok=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        (src / name).write_text((ROOT / name).read_text())
    (src / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(stack_doc(nodes, validation=True, host_prepared=True)))
    with Sandbox(stack, workdir=workdir / "box", config={"operator": {"chartPath": str(CHART_DIR)}}, source=src) as box:
        box.pulumi.up()
        export = box.pulumi.run("stack", "export").stdout
    deployment = json.loads(export)["deployment"]
    by_field: dict[str, int] = {}
    for r in deployment.get("resources") or []:
        if not r["type"].startswith("command:remote:"):
            continue
        kind = r["type"].rsplit(":", 1)[-1]
        for part in ("inputs", "outputs"):
            for key, value in (r.get(part) or {}).items():
                name = f"{kind} {part}.{key}"
                by_field[name] = by_field.get(name, 0) + _field_bytes(value)
        rest = {k: v for k, v in r.items() if k not in ("inputs", "outputs")}
        by_field[f"{kind} (urn, provider, dependencies, stack trace, options)"] = (
            by_field.get(f"{kind} (urn, provider, dependencies, stack trace, options)", 0) + _field_bytes(rest)
        )
    return {
        "nodes": nodes,
        "export_bytes": len(export.encode()),
        "compact_bytes": _field_bytes(deployment),
        "by_field": {k: v / nodes for k, v in by_field.items()},
    }


def print_host_prepared(rows: list[dict]) -> None:
    print("\n| nodes | state after `up` (export) | per node | compact JSON per node |")
    print("| ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['nodes']:,} | {r['export_bytes']:,} B | {r['export_bytes'] // r['nodes']:,} B | {r['compact_bytes'] // r['nodes']:,} B |")
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        added = b["nodes"] - a["nodes"]
        print(f"\nEach added host-prepared node: {(b['export_bytes'] - a['export_bytes']) / added:,.0f} B as exported, "
              f"{(b['compact_bytes'] - a['compact_bytes']) / added:,.0f} B as compact JSON.")
    last = rows[-1]
    print(f"\nNode commands and copies by field, compact JSON per node ({last['nodes']:,} nodes):\n")
    print("| field | bytes / node |")
    print("| --- | ---: |")
    for name, size in sorted(last["by_field"].items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {size:,.0f} |")
    print(f"| total | {sum(last['by_field'].values()):,.0f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--up-sizes", default="10,100", help="sizes that also run `pulumi up` for the state size")
    parser.add_argument("--export-dir", type=Path, help="keep each `pulumi stack export` there (export-<nodes>.json)")
    parser.add_argument("--host-prepared-sizes", default="10,100",
                        help="sizes whose nodes are prepared over SSH for the state per host-prepared node ('' skips)")
    args = parser.parse_args(argv)
    prepared = []
    for n in (int(s) for s in args.host_prepared_sizes.split(",") if s):
        with tempfile.TemporaryDirectory(prefix=f"engine-bench-hostprep-{n}-") as tmp:
            prepared.append(host_prepared_state(n, Path(tmp)))
            print(json.dumps({k: v for k, v in prepared[-1].items() if k != "by_field"}), file=sys.stderr, flush=True)
    ups = {int(s) for s in args.up_sizes.split(",") if s}
    rows = []
    for n in (int(s) for s in args.sizes.split(",") if s):
        with tempfile.TemporaryDirectory(prefix=f"engine-bench-{n}-") as tmp:
            rows.append(measure(n, n in ups, Path(tmp), args.export_dir))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    if rows:
        print("| nodes | resources | `pulumi preview` | bare program, same resources | ratio | state after `up` |")
        print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        state = f"{r['state_bytes_per_node']:,} B / node" if "state_bytes_per_node" in r else "not run"
        print(f"| {r['nodes']:,} | {r['resources']:,} | {r['preview_s']:.1f} s | {r['bare_s']:.1f} s | "
              f"{r['preview_s'] / r['bare_s']:.2f}x | {state} |")
    if prepared:
        print_host_prepared(prepared)
    return 0


if __name__ == "__main__":
    sys.exit(main())
