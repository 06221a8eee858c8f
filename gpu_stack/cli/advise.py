"""`python -m gpu_stack advise --stack S [--results FILE]`: which sharing mode and how many replicas,
from the sharing benchmark's results (the stack output `sharingCost`, or a log with its lines)."""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from ..config.files import FileRefused, read_regular_file
from ..config.gpu_models import ALL_DISABLED, catalog
from ..config.safe_input import escape
from ..config.stack_files import StackFileError, read_stack
from ..design.advise import advise, config_lines, option_number, render
from ..design.sharing_cost import RESULT_FIELDS, Results, ResultsError, parse_results, results_from_table
from .options import existing, stack_like

MAX_RESULTS_BYTES = 16 * 1024 * 1024
"""A results log read at most (the benchmark of a large fleet writes well under 1 MiB)."""
MAX_OUTPUT_BYTES = 16 * 1024 * 1024

OUTPUT = "sharingCost"


class AdviseError(Exception):
    """Why no advice can be given (no results, a bad file, a goal without its bound)."""


def stack_output(stack: str, project_dir: Path) -> dict[str, Any]:
    """The stack's `sharingCost` output through the Pulumi CLI (`pulumi stack output --json`)."""
    pulumi = shutil.which("pulumi")
    if pulumi is None:
        raise AdviseError(f"no pulumi CLI on PATH to read the {OUTPUT} output of stack {stack!r}: give --results FILE")
    done = subprocess.run(
        [pulumi, "stack", "output", OUTPUT, "--json", "--stack", stack],
        cwd=project_dir, capture_output=True, text=True, timeout=120, check=False,
    )
    if done.returncode != 0:
        reason = " ".join((done.stderr or done.stdout).split())[:500]
        raise AdviseError(f"pulumi stack output {OUTPUT} --stack {stack} failed: {escape(reason)}")
    if len(done.stdout) > MAX_OUTPUT_BYTES:
        raise AdviseError(f"the {OUTPUT} output of stack {stack!r} is larger than {MAX_OUTPUT_BYTES // (1024 * 1024)} MiB")
    try:
        value = json.loads(done.stdout or "null", parse_constant=_no_constant)
    except (json.JSONDecodeError, RecursionError, ValueError) as exc:
        raise AdviseError(f"pulumi printed no JSON for {OUTPUT}: {escape(str(exc))[:200]}") from None
    if not value:
        raise AdviseError(
            f"stack {stack!r} has no {OUTPUT} results: set gpu-stack:validation.sharingBenchmark.enabled true "
            "and run `pulumi up`, or give --results FILE"
        )
    if not isinstance(value, dict):
        raise AdviseError(f"the {OUTPUT} output of stack {stack!r} is not a mapping of GPU models")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number the benchmark writes")


def load_results(stack: str, project_dir: Path, results_file: Path | None) -> Results:
    try:
        if results_file is not None:
            try:
                text = read_regular_file(results_file, MAX_RESULTS_BYTES, "a results log").decode("utf-8", errors="replace")
            except FileRefused as exc:
                raise AdviseError(str(exc)) from None
            results = parse_results(text)
            where = escape(str(results_file))
        else:
            results = results_from_table(stack_output(stack, project_dir))
            where = f"the {OUTPUT} output of stack {stack!r}"
    except ResultsError as exc:
        raise AdviseError(str(exc)) from None
    if not results.windows:
        raise AdviseError(f"{where} holds no RESULT lines of the sharing benchmark")
    return results


def canonical(model: str) -> str:
    """The catalog's name for a GPU model or alias ("NVIDIA H200", "H200" -> "h200-141gb"), lower case."""
    known = catalog().lookup(model)
    return (known.name if known is not None else model).lower()


def node_indexes(stack: str, project_dir: Path) -> tuple[dict[str, list[int]], int]:
    """GPU model (canonical) -> indexes of the stack's nodes with that model and whole GPUs (MIG
    nodes are left out: MPS refuses MIG devices, and the benchmark measured whole GPUs); and the
    number of nodes."""
    nodes = read_stack(project_dir, stack).namespace().get("nodes") or []
    nodes = nodes if isinstance(nodes, list) else []
    out: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        if not isinstance(node, dict) or node.get("mig") not in (None, ALL_DISABLED):
            continue
        model = str((node.get("gpu") or {}).get("model", ""))
        out.setdefault(canonical(model), []).append(i)
    return out, len(nodes)


def catalog_memory(results: Results, given: float | None) -> dict[str, float]:
    """GPU model -> memory in GiB: --gpu-memory-gib, else the catalog's figure for the model."""
    out: dict[str, float] = {}
    for gpu in {w.gpu for w in results.windows}:
        known = catalog().lookup(gpu)
        if given is not None:
            out[gpu] = given
        elif known is not None:
            out[gpu] = float(known.memory_gb)
    return out


def _options(args: argparse.Namespace) -> dict[str, float | None]:
    """The number options, each checked (one line naming the option, the value and what is allowed)."""
    try:
        out = {name: option_number(flag, getattr(args, name)) for name, flag in (
            ("tolerance", "--tolerance"), ("max_slowdown", "--max-slowdown"),
            ("memory_gib", "--memory-gib"), ("gpu_memory_gib", "--gpu-memory-gib"),
        )}
    except ValueError as exc:
        raise AdviseError(escape(str(exc))) from None
    for size in args.size or ():
        if not re.fullmatch(RESULT_FIELDS["size"], size):
            raise AdviseError(f"--size {escape(repr(size[:40]))}: is not a problem size name (1 to 20 lowercase letters, such as small)")
    return out


def _advise(args: argparse.Namespace) -> int:
    project_dir = args.project_dir
    options = _options(args)
    try:
        results = load_results(args.stack, project_dir, args.results)
        by_model, all_nodes = node_indexes(args.stack, project_dir)
        advice = advise(
            results, args.goal, sizes=args.size or (), tolerance=options["tolerance"] or 0.0,
            max_slowdown=options["max_slowdown"], memory_gib=options["memory_gib"],
            gpu_memory_gib=catalog_memory(results, options["gpu_memory_gib"]),
        )
    except ValueError as exc:
        raise AdviseError(escape(str(exc))) from None
    if not advice:
        raise AdviseError(f"no results for size(s) {', '.join(args.size)}")
    for item in advice:
        indexes = by_model.get(canonical(item.gpu), [])
        print(render(item, config_lines(item, indexes, all_nodes) if indexes else []))
        if not indexes:
            print(f"  (stack {args.stack!r} declares no node with GPU model {item.gpu} and whole GPUs: no config lines)\n")
    return 0


def add_advise_parser(sub: Any) -> None:
    p = sub.add_parser(
        "advise",
        help="recommend time-slicing or MPS and the replica count per GPU model from the sharing benchmark",
        description="Reads the sharing benchmark's results (the stack output sharingCost through the Pulumi CLI, "
        "or --results FILE: a log with its RESULT and MEMORY lines) and recommends, per GPU model and problem size, "
        "a sharing mode and replica count for one goal, with the numbers behind it and the config lines to set.",
    )
    p.add_argument("--stack", "-s", required=True, type=stack_like("--stack", "stack"))
    p.add_argument("--results", type=existing("--results", "results log", "file"), metavar="FILE",
                   help="a log of the benchmark (instead of the stack output)")
    p.add_argument("--goal", choices=("throughput", "latency", "memory"), default="throughput")
    p.add_argument("--max-slowdown", metavar="X", help="goal latency: every pod's p99 at most X times a pod alone")
    p.add_argument("--memory-gib", metavar="GIB", help="memory one replica must be able to allocate")
    p.add_argument(
        "--gpu-memory-gib", metavar="GIB",
        help="the GPU's memory where the results hold no memory test (default: the GPU catalog's figure)",
    )
    p.add_argument("--tolerance", default="0.10", help="throughput within this fraction of the best counts as equal")
    p.add_argument("--size", action="append", metavar="NAME", help="only this problem size (small, medium, large); repeatable")
    p.set_defaults(func=_advise, errors=(AdviseError, StackFileError))
