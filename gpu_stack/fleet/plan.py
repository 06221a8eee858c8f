"""`fleet plan`: the offline plan and diff of every stack of the fleet against one git revision.

The revision is exported once (offline/git_plan.export_tree). Then work is shared wherever the
inputs are the same:

- A plan is a function of the program (`Pulumi.yaml`, `__main__.py`, `gpu_stack/`, `config/`:
  fleet/state.program_digest) and of the stack file's bytes; the stack's name reaches it only as
  the plan's `stack` and the default `clusterIdentifier` (`<project>-<stack>`). So each distinct
  (program, stack file) is planned once, under the name of its first stack, and the plans of the
  other stacks with the same file are that plan renamed (`renamed`; tests/fleet/test_fleet_plan.py
  checks it against a plan made under the other name).
- When the revision's program is the working tree's, the base side is planned by this process's
  code too (no interpreter per stack), and a stack whose file did not change has the same plan on
  both sides: no second run. Only a revision with another program plans its side by that
  revision's own code, in a subprocess per distinct stack file, as `diff` does.
- The chart is rendered once per distinct (values, name, namespace) of the whole fleet, in a
  thread pool as soon as a plan names the release (`PooledRenderer`), while the next program runs.
- The diff (with the chart's object diff and the effects) is computed once per distinct pair of
  plans (base, working tree) and given to every stack with that pair under its own name, unless it
  mentions the stack's name (a stack new at this change: its provider is created with it).

In-process plans run here and, when there are many of them (plan_workers.py `WORK_PER_WORKER`), in up to
`jobs - 1` worker processes beside this one (`Workers`): this process plans too, taking the runs
no worker has started from the end of the list while the workers take them from its start. A
process's first run costs about eight later ones (the SDKs' modules and type tables load on first
use), so where the working tree's stack files say there will be enough runs for workers
(`expected_runs`), this process reads the revision, makes its first run (`_first_run`: a plan the
fleet needs, kept), and only then are the workers forked from it (plan_workers.py `FORK`), before
any other thread or child process runs here: they start with what that run loaded. Where workers
cannot be forked, they are spawned first thing and warm up on the program's imports meanwhile.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config.safe_input import escape
from ..config.stack_files import StackFileError, read_stack
from ..offline.chart import ChartRenderError
from ..offline.diff import DiffError, PlanDiff, diff_plans
from ..offline.effects import add_objects_and_effects
from ..offline.git_plan import Revision, empty_plan, export_tree
from .group import StackOutcome, config_edits
from .plan_workers import (
    DEFAULT_JOBS,
    FORK,
    PooledRenderer,
    Workers,
    _digest,
    _plan_there,
    _program_or_stack,
    expected_runs,
    plan_here,
    prompt_threads,
    workers_for,
)
from .state import PROGRAM_PARTS, program_digest


@dataclass
class FleetPlan:
    base_label: str
    outcomes: list[StackOutcome]
    renders: int = 0
    """How many times the chart was really rendered (once per distinct values set)."""
    runs: int = 0
    """How many times a program really ran (once per distinct program and stack file)."""


@dataclass(frozen=True)
class PlanKey:
    """What decides a plan but the stack's name: the program and the stack file's bytes."""

    program: str
    stack_file: str


@dataclass
class _Work:
    """One program run: `stack`'s file in `folder`, by this process's code (`here`) or the folder's."""

    key: PlanKey
    stack: str
    folder: Path
    here: bool
    members: list[str] = field(default_factory=list)
    """Every stack whose plan on this side is this run's, renamed."""


def renamed(doc: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """The plan of stack `new` from the plan of stack `old` with the same program and stack file:
    its `stack`, and every string that is the default cluster identifier `<project>-<old>`."""
    if old == new:
        return doc
    old_id, new_id = f"{doc.get('project')}-{old}", f"{doc.get('project')}-{new}"

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return new_id if value == old_id else value
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    out = walk(doc)
    out["stack"] = new
    return out


def _run(
    works: list[_Work], project_dir: Path, tree: Path, label: str, jobs: int,
    on_plan: Callable[[PlanKey, dict[str, Any]], None] = lambda key, plan: None,
    workers: Workers | None = None,
    between: Callable[[dict[PlanKey, dict[str, Any]]], None] = lambda results: None,
    done: Mapping[PlanKey, dict[str, Any]] | None = None,
) -> dict[PlanKey, dict[str, Any]]:
    """Every run's plan (or error), by key: another program's in subprocesses (`jobs` at once),
    this program's here and in `workers`; `on_plan(key, plan)` as each plan comes; with workers,
    `between(results so far)` after each (this process's work while the workers run: the diffs
    whose two plans are in). `done`: runs made already (the warm-up's), not run again."""
    results: dict[PlanKey, dict[str, Any]] = {}
    done = done or {}

    def got(key: PlanKey, result: dict[str, Any], then: bool = False) -> None:
        results[key] = result
        if "plan" in result:
            on_plan(key, result["plan"])
        if then:
            between(results)

    for key, result in done.items():
        got(key, result)
    there = [w for w in works if not w.here]
    here = [w for w in works if w.here and w.key not in done]
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as threads:
        pending: dict[PlanKey, Future[dict[str, Any]]] = {
            w.key: threads.submit(_plan_there, tree, project_dir, w.stack, label) for w in there
        }
        items = [(w.stack, str(w.folder), str(project_dir)) for w in here]
        if workers is not None and not there and workers_for(len(here), jobs) > 0:
            # the workers take the runs from the start, this process from the end: what it finds
            # not yet started (a future it can still cancel) it plans itself
            futures = [workers.pool.submit(plan_here, *item) for item in items]
            taken: set[int] = set()

            def collect(i: int) -> None:
                taken.add(i)
                try:
                    result = futures[i].result()
                except BrokenProcessPool:  # a worker died (killed, out of memory): plan it here
                    result = plan_here(*items[i])
                got(here[i].key, result, then=True)

            for i in reversed(range(len(items))):
                if not futures[i].cancel():
                    break
                taken.add(i)
                got(here[i].key, plan_here(*items[i]), then=True)
                # the workers' plans already in: their diffs now, while the workers still plan
                for j in range(i):
                    if j not in taken and futures[j].done():
                        collect(j)
            for i in range(len(futures)):
                if i not in taken:
                    collect(i)
        else:
            for w, item in zip(here, items, strict=True):
                got(w.key, plan_here(*item))
        for key, future in pending.items():
            got(key, future.result())
    return results


def _names_its_stack(diff: PlanDiff, plan: Mapping[str, Any]) -> bool:
    """Whether the diff holds the stack's default cluster identifier (`<project>-<stack>`, the only
    part of a plan its name decides, `renamed`) anywhere: then it is the stack's own."""
    return f"{plan.get('project')}-{diff.stack}" in json.dumps(dataclasses.asdict(diff), default=str)


def plan_fleet(
    project_dir: Path | str,
    stacks: list[str],
    revision: Revision,
    chart_dir: Path | None = None,
    jobs: int = DEFAULT_JOBS,
) -> FleetPlan:
    """Every stack's diff against `revision`, each distinct (program, stack file) planned once."""
    with prompt_threads():
        return _fleet(Path(project_dir).resolve(), stacks, revision, chart_dir, jobs)


def _fleet(project_dir: Path, stacks: list[str], revision: Revision, chart_dir: Path | None, jobs: int) -> FleetPlan:
    count = workers_for(expected_runs(project_dir, stacks), jobs)
    head_program = program_digest(project_dir)
    # spawned workers warm up on their imports from the start; forked ones after this process's
    # first run, so they start with what it loaded
    workers = Workers(count, project_dir) if count > 0 and not FORK else None
    # one thread: the renders share one Helm child (RenderServer), one render at a time
    render_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="render")
    render = PooledRenderer(chart_dir, render_pool)
    try:
        with tempfile.TemporaryDirectory(prefix="gpu-stack-fleet-base-") as tmp:
            tree, base_program = _export(project_dir, revision, Path(tmp), head_program)
            # each side's stack files, hashed once: what decides a run (PlanKey), and whether one changed
            files = {folder: {s: _digest(folder / f"Pulumi.{s}.yaml") for s in stacks} for folder in (tree, project_dir)}
            if base_program != head_program or files[tree] != files[project_dir]:
                render.server.start()  # a diff will render: the Helm child loads beside this process's first run
            warmed = _first_run(project_dir, stacks, head_program, files[project_dir]) if count > 0 and FORK else {}
            if count > 0 and FORK:  # no thread but this one runs here yet (the render pool starts none before use)
                workers = Workers(count, project_dir, close=render.server.fds())
            return _plan_fleet(project_dir, stacks, revision, chart_dir, jobs, render, workers,
                               (tree, head_program, base_program), files, warmed)
    finally:
        render.close()
        render_pool.shutdown(wait=True, cancel_futures=True)
        if workers is not None:
            workers.close()


def _export(project_dir: Path, revision: Revision, tmp: Path, head_program: str) -> tuple[Path, str]:
    """The revision's project folder and its program digest: the program and the stack files
    first; the whole tree only for a program of its own."""
    tree = export_tree(project_dir, revision.commit, tmp / "program", keep=_program_or_stack,
                       paths=(*PROGRAM_PARTS, "Pulumi.*.yaml")).resolve()
    base_program = program_digest(tree)
    if base_program != head_program:
        tree = export_tree(project_dir, revision.commit, tmp / "tree").resolve()
    return tree, base_program


def _first_run(
    project_dir: Path, stacks: list[str], head_program: str, files: Mapping[str, str | None],
) -> dict[PlanKey, tuple[str, dict[str, Any]]]:
    """This process's first, slow, run (the SDKs' modules and type tables load on first use), made
    before the workers are forked, on a plan the fleet needs: the last stack's working-tree plan
    (this process takes the runs from the end; `files`: each stack file's digest). By key, with the
    stack it was planned as."""
    for stack in reversed(stacks):
        file = files[stack]
        if file is not None:
            return {PlanKey(head_program, file): (stack, plan_here(stack, str(project_dir), str(project_dir)))}
    return {}


def _plan_fleet(
    project_dir: Path, stacks: list[str], revision: Revision, chart_dir: Path | None, jobs: int, render: PooledRenderer,
    workers: Workers | None, exported: tuple[Path, str, str], files: Mapping[Path, Mapping[str, str | None]],
    warmed: dict[PlanKey, tuple[str, dict[str, Any]]],
) -> FleetPlan:
    tree, head_program, base_program = exported
    works: dict[PlanKey, _Work] = {}
    sides: dict[str, tuple[PlanKey | None, PlanKey | None]] = {}

    def side(stack: str, folder: Path, program: str) -> PlanKey | None:
        file = files[folder][stack]
        if file is None:
            return None
        key = PlanKey(program, file)
        if key not in works:
            works[key] = _Work(key, stack, folder, here=program == head_program)
        works[key].members.append(stack)
        return key

    for stack in stacks:
        sides[stack] = (side(stack, tree, base_program), side(stack, project_dir, head_program))
    # the renders a diff will need: those of the plans of a stack that changed
    changed = {key for pair in sides.values() if pair[0] != pair[1] for key in pair if key is not None}

    def prefetch(key: PlanKey, plan: dict[str, Any]) -> None:
        if key in changed:
            render.prefetch(plan)

    results: dict[PlanKey, dict[str, Any]] = {}
    pairs = [sides[stack] for stack in stacks]
    configs: dict[tuple[PlanKey | None, PlanKey | None], dict[str, Any]] = {}
    shared: dict[tuple[PlanKey | None, PlanKey | None], tuple[str, PlanDiff]] = {}
    outcomes: dict[str, StackOutcome] = {}

    def plan_of(stack: str, key: PlanKey | None) -> dict[str, Any]:
        if key is None:
            return {"plan": empty_plan(stack)}
        own = results.get(PlanKey(key.program, key.stack_file + "/" + stack))
        if own is not None:
            return own
        result = results[key]
        return {"plan": renamed(result["plan"], works[key].stack, stack)} if "plan" in result else result

    def outcome(stack: str) -> StackOutcome:
        pair = sides[stack]
        if pair not in configs:
            # from the config each side was planned from, else (another program's run, an
            # error) read from the two stack files
            old, new = (_planned_namespace(results, key) for key in pair)
            configs[pair] = (
                {"edits": config_edits(old, new)} if old is not None and new is not None
                else _config(tree, project_dir, stack)
            )
        config = configs[pair]
        if pair in shared and "error" not in config:
            _, diff = shared[pair]
            return StackOutcome(stack, diff=dataclasses.replace(diff, stack=stack), config=config["edits"])
        base, head = plan_of(stack, pair[0]), plan_of(stack, pair[1])
        error = head.get("error") or base.get("error") or config.get("error")
        if error is not None:
            return StackOutcome(stack, error=escape(error))
        try:
            diff = diff_plans(base["plan"], head["plan"], base_label=revision.label, head_label="working tree")
            if pair[0] != pair[1]:  # the same program and file on both sides: nothing to render or annotate
                add_objects_and_effects(diff, base["plan"], head["plan"], chart_dir, render=render)
        except (DiffError, ChartRenderError) as exc:
            return StackOutcome(stack, error=escape(" ".join(str(exc).split())))
        if pairs.count(pair) > 1 and not _names_its_stack(diff, head["plan"]):
            shared[pair] = (stack, diff)  # for the next stacks with the same pair
        return StackOutcome(stack, diff=diff, config=config["edits"])

    def ready(got: dict[PlanKey, dict[str, Any]]) -> None:
        """While the workers run: the outcome of each stack whose two plans are in (and fine)."""
        results.update(got)
        for stack in stacks:
            keys = [k for k in sides[stack] if k is not None]
            if stack not in outcomes and all("plan" in results.get(k, {}) for k in keys):
                outcomes[stack] = outcome(stack)

    done = {}
    for key, (stack, result) in warmed.items():
        if key in works and stack in works[key].members:
            works[key].stack = stack  # the run's plan is this stack's (the others' are renamed from it)
            done[key] = result
    results.update(_run(list(works.values()), project_dir, tree, revision.label, jobs, on_plan=prefetch,
                        workers=workers, between=ready, done=done))
    # a shared run that failed: each of its stacks on its own, so each error names its stack
    for key, work in works.items():
        if "error" in results[key] and len(set(work.members)) > 1:
            for stack in sorted(set(work.members) - {work.stack}):
                alone = plan_here(stack, str(work.folder), str(project_dir)) if work.here else _plan_there(
                    tree, project_dir, stack, revision.label)
                results[PlanKey(key.program, key.stack_file + "/" + stack)] = alone
    for stack in stacks:
        if stack not in outcomes:
            outcomes[stack] = outcome(stack)
    return FleetPlan(base_label=revision.label, outcomes=[outcomes[s] for s in stacks], renders=render.calls,
                     runs=len(results))


def _planned_namespace(results: dict[PlanKey, dict[str, Any]], key: PlanKey | None) -> dict[str, Any] | None:
    """The `gpu-stack:` config the run `key` planned from ({} for a side without the stack file),
    None where the run did not say (another program's run, an error)."""
    if key is None:
        return {}
    namespace = results.get(key, {}).get("namespace")
    return namespace if isinstance(namespace, dict) else None


def _namespace(project_dir: Path, stack: str) -> dict[str, Any]:
    if not (project_dir / f"Pulumi.{stack}.yaml").is_file():
        return {}
    return read_stack(project_dir, stack, inside=True).namespace()


def _config(tree: Path, project_dir: Path, stack: str) -> dict[str, Any]:
    """The stack's `gpu-stack:` config edits between the revision and the working tree."""
    try:
        return {"edits": config_edits(_namespace(tree, stack), _namespace(project_dir, stack))}
    except StackFileError as exc:
        return {"error": " ".join(str(exc).split())}
