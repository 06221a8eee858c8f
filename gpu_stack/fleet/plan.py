"""`fleet plan`: the offline plan and diff of every stack of the fleet against one git revision.

The revision is exported once (offline/git_plan.export_tree) and every stack is planned on both
sides in worker processes (at most `jobs` at once): the working tree's plan in the worker, the
base's by that revision's own program, as `diff` does. The diffs, the chart's object diff and the
effects are then computed here with one memoised renderer, so the chart is rendered once per
distinct (values, name, namespace) of the whole fleet.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.safe_input import escape
from ..config.stack_files import StackFileError, read_stack
from ..offline.diff import DiffError, diff_plans
from ..offline.effects import add_objects_and_effects
from ..offline.git_plan import GitPlanError, Revision, export_tree, plan_in_tree
from ..offline.objects import memo_renderer, release_renderer
from ..offline.runner import PlanError, plan_stack
from .group import StackOutcome, config_edits

DEFAULT_JOBS = max(1, min(4, os.cpu_count() or 1))
"""Worker processes by default: the machine's cores, at most 4 (each holds one program run)."""


@dataclass
class FleetPlan:
    base_label: str
    outcomes: list[StackOutcome]
    renders: int = 0
    """How many times the chart was really rendered (once per distinct values set)."""


def _namespace(project_dir: Path, stack: str) -> dict[str, Any]:
    if not (project_dir / f"Pulumi.{stack}.yaml").is_file():
        return {}
    return read_stack(project_dir, stack).namespace()


def plan_pair(project_dir: str, tree: str, label: str, stack: str) -> dict[str, Any]:
    """In a worker: both plans of one stack and both configs, or the one line why not."""
    try:
        head = plan_stack(stack, project_dir).to_json()
        base = plan_in_tree(Path(tree), project_dir, stack, label)
        edits = config_edits(_namespace(Path(tree), stack), _namespace(Path(project_dir), stack))
    except (PlanError, StackFileError, GitPlanError) as exc:
        return {"stack": stack, "error": " ".join(str(exc).split())}
    return {"stack": stack, "head": head, "base": base, "config": edits}


def plan_fleet(
    project_dir: Path | str,
    stacks: list[str],
    revision: Revision,
    chart_dir: Path | None = None,
    jobs: int = DEFAULT_JOBS,
) -> FleetPlan:
    """Every stack's diff against `revision`, planned in at most `jobs` processes."""
    project_dir = Path(project_dir).resolve()
    with tempfile.TemporaryDirectory(prefix="gpu-stack-fleet-base-") as tmp:
        tree = export_tree(project_dir, revision.commit, Path(tmp))
        args = [(str(project_dir), str(tree), revision.label, s) for s in stacks]
        if jobs <= 1 or len(stacks) <= 1:
            results = [plan_pair(*a) for a in args]
        else:
            # spawn, not fork: the parent may hold the Pulumi runtime's threads
            ctx = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=min(jobs, len(stacks)), mp_context=ctx) as pool:
                results = list(pool.map(plan_pair, *zip(*args, strict=True)))
    render = memo_renderer(release_renderer(chart_dir))
    outcomes = []
    for result in results:
        stack = result["stack"]
        if "error" in result:
            outcomes.append(StackOutcome(stack, error=escape(result["error"])))
            continue
        try:
            diff = diff_plans(result["base"], result["head"], base_label=revision.label, head_label="working tree")
            add_objects_and_effects(diff, result["base"], result["head"], chart_dir, render=render)
        except DiffError as exc:
            outcomes.append(StackOutcome(stack, error=escape(str(exc))))
            continue
        outcomes.append(StackOutcome(stack, diff=diff, config=result["config"]))
    return FleetPlan(base_label=revision.label, outcomes=outcomes, renders=getattr(render, "calls", 0))
