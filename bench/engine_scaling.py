"""The program under the real engine: `pulumi preview` wall time at 10, 100 and 1,000 simulated
GPU nodes against a bare program that registers the same resources (same types, names and
inputs, read from the program's own offline plan) without the program's logic, and the state's
size per node after `pulumi up` (`pulumi stack export`, bytes / node).

`make bench-engine` (needs the toolchain: `make e2e-tools`). Each size gets one simulated
cluster (sandbox/) with a Node per declared node; the operator installs the driver and the
toolkit (no node command: the command provider cannot be built here, see toolchain/versions.env).
Prints a Markdown table; ratios are of the same run.
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


def stack_doc(nodes: int, validation: bool) -> dict:
    cfg = synthetic_config(nodes, validation=validation)
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000")
    parser.add_argument("--up-sizes", default="10,100", help="sizes that also run `pulumi up` for the state size")
    parser.add_argument("--export-dir", type=Path, help="keep each `pulumi stack export` there (export-<nodes>.json)")
    args = parser.parse_args(argv)
    ups = {int(s) for s in args.up_sizes.split(",") if s}
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix=f"engine-bench-{n}-") as tmp:
            rows.append(measure(n, n in ups, Path(tmp), args.export_dir))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("| nodes | resources | `pulumi preview` | bare program, same resources | ratio | state after `up` |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        state = f"{r['state_bytes_per_node']:,} B / node" if "state_bytes_per_node" in r else "not run"
        print(f"| {r['nodes']:,} | {r['resources']:,} | {r['preview_s']:.1f} s | {r['bare_s']:.1f} s | "
              f"{r['preview_s'] / r['bare_s']:.2f}x | {state} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
