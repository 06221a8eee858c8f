"""The wave scheduler of `fleet preview` and `fleet up`: no Pulumi in it, a `StackRunner` does the work.

1. Every stack not already done for this change is previewed, at most `previewParallel` at once.
   A preview that fails stops the rollout before any `up` (nothing is updated), but for a stack
   whose cluster is unreachable under `onUnreachable: skip`, which is left out.
2. Then wave by wave, at most `parallel` stacks of a wave at once: `up`, then the wave's gate
   (validation passed; the soak). A failed `up` or gate starts no other stack (`onFailure: stop`)
   or lets the rest of its wave run (`finish-wave`); either way no later wave starts, and the
   stacks not reached are not touched (no update in their history).
3. `interrupted` (a threading.Event the command sets on SIGINT or SIGTERM, fleet/automation.py
   forwarding the signal to the CLIs under way): once it is set no preview, `up` or gate starts,
   a stack whose `up` or gate was under way is INTERRUPTED (never done: its gate did not finish
   before the interrupt), and nothing more is reported done (`on_done`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..config.fleet import Fleet, Gate, listed

DONE, FAILED, NOT_REACHED, SKIPPED, ALREADY_DONE, PREVIEWED, INTERRUPTED = (
    "done", "failed", "not reached", "skipped", "already done", "previewed", "interrupted",
)
WAITING, PREVIEWING, UPDATING, GATE = "waiting", "previewing", "updating", "gate"
"""What a stack is doing while the rollout runs (`on_state`), besides the statuses above."""


@dataclass
class StepResult:
    """What one preview or `up` of one stack gave."""

    ok: bool
    changes: dict[str, int] = field(default_factory=dict)
    """Operation -> resources (`update: 2`, `same: 40`), as the engine counts them."""
    outputs: dict[str, Any] = field(default_factory=dict)
    """The stack outputs after `up` (secrets as `[secret]`)."""
    error: str | None = None
    """The engine's error lines, when not ok."""
    unreachable: bool = False
    """The stack's cluster could not be reached."""
    cancelled: bool = False
    """It ended (or never started) because the fleet was interrupted."""
    seconds: float = 0.0


class StackRunner(Protocol):
    def preview(self, stack: str) -> StepResult: ...

    def up(self, stack: str) -> StepResult: ...


GateCheck = Callable[[str, Gate, StepResult], "str | None"]
"""(stack, the wave's gate, its `up`) -> None when it passed, else why not (one line)."""


@dataclass
class StackReport:
    stack: str
    wave: str
    status: str = NOT_REACHED
    preview: StepResult | None = None
    up: StepResult | None = None
    gate: str | None = None
    """`passed`, or why the gate did not pass."""
    reason: str | None = None
    """Why it failed, was skipped or not reached."""
    seconds: float = 0.0


@dataclass
class Rollout:
    reports: list[StackReport]
    stopped: str | None = None
    """Why the rollout stopped before the end (None: it went through)."""
    interrupted: bool = False
    """It stopped because the fleet was interrupted (SIGINT, SIGTERM)."""

    def report(self, stack: str) -> StackReport:
        return next(r for r in self.reports if r.stack == stack)

    @property
    def complete(self) -> bool:
        return all(r.status in (DONE, ALREADY_DONE) for r in self.reports)

    @property
    def none_updated(self) -> bool:
        """It went to no stack: each one it was to update (or preview) was skipped, its cluster
        unreachable, and none had the change already (done by an earlier run). Not a rollout that
        went through (`fleet up` exits 1 on it)."""
        reached = (DONE, ALREADY_DONE, PREVIEWED)
        return any(r.status == SKIPPED for r in self.reports) and not any(r.status in reached for r in self.reports)


def validation_gate(stack: str, gate: Gate, up: StepResult) -> str | None:
    """The validation part of a gate: the `up` ran the stack's validation Jobs (they must complete
    for `up` to succeed), so they passed when `up` did and there were some."""
    if gate.validation and not up.outputs.get("validationJobs"):
        return "no validation Jobs ran (validation.enabled is false on this stack, or the output is missing)"
    return None


def _parallel(
    items: list[str], limit: int, work: Callable[[str], StepResult], interrupted: threading.Event,
) -> dict[str, StepResult]:
    """`work(item)` for each item, at most `limit` at once, in order; none started once
    `interrupted` is set (the items not started have no result)."""
    results: dict[str, StepResult] = {}
    pending = list(items)
    with ThreadPoolExecutor(max_workers=max(1, min(limit, len(items) or 1))) as pool:
        running: dict[Future[StepResult], str] = {}
        while pending or running:
            while pending and len(running) < limit and not interrupted.is_set():
                item = pending.pop(0)
                running[pool.submit(work, item)] = item
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                results[running.pop(future)] = future.result()
    return results


def roll_out(
    fleet: Fleet,
    runner: StackRunner,
    *,
    done: set[str] = frozenset(),  # type: ignore[assignment]
    gate_check: GateCheck = validation_gate,
    on_progress: Callable[[str], None] = lambda line: None,
    on_done: Callable[[str], None] = lambda stack: None,
    on_start: Callable[[str], None] = lambda stack: None,
    on_state: Callable[[str, str], None] = lambda stack, state: None,
    preview_only: bool = False,
    clock: Callable[[], float] = time.monotonic,
    interrupted: threading.Event | None = None,
) -> Rollout:
    """Preview every stack, then (unless `preview_only`) `up` wave by wave; `done`: stacks already
    done for this change (`--resume`), never touched; `on_start(stack)` before each `up`,
    `on_done(stack)` after each stack passes its gate; `on_state(stack, state)` at each change of
    what a stack is doing (WAITING, PREVIEWING, UPDATING, GATE) or of its status; `interrupted`:
    once set, nothing new starts (module docstring, 3)."""
    stop = interrupted if interrupted is not None else threading.Event()
    reports = [StackReport(s, w.name) for w in fleet.waves for s in w.stacks]
    by_stack = {r.stack: r for r in reports}
    rollout = Rollout(reports)
    for stack in done:
        if stack in by_stack:
            by_stack[stack].status, by_stack[stack].reason = ALREADY_DONE, "done for this change by an earlier run"
            on_state(stack, ALREADY_DONE)
    todo = [r.stack for r in reports if r.status != ALREADY_DONE]

    def preview(stack: str) -> StepResult:
        on_state(stack, PREVIEWING)
        on_progress(f"[{stack}] preview: started")
        result = runner.preview(stack)
        on_progress(f"[{stack}] preview: {_step_line(result)}")
        return result

    previews = _parallel(todo, fleet.preview_parallel, preview, stop)
    for stack in todo:
        report = by_stack[stack]
        result = previews.get(stack)
        if result is None:  # never started: the fleet was interrupted first
            report.reason = "not previewed: the fleet was interrupted before its preview started"
            on_state(stack, NOT_REACHED)
            continue
        report.preview = result
        report.seconds += result.seconds
        if result.ok and not result.unreachable:
            report.status = PREVIEWED if preview_only else NOT_REACHED
            on_state(stack, PREVIEWED if preview_only else WAITING)
            continue
        if result.unreachable and fleet.on_unreachable == "skip":
            report.status, report.reason = SKIPPED, f"cluster unreachable, skipped (onUnreachable: skip): {result.error or ''}".rstrip(": ")
            on_state(stack, SKIPPED)
            continue
        if stop.is_set():  # its preview ended by the interrupt: not a failure of the change
            report.status, report.reason = INTERRUPTED, f"preview interrupted: {result.error or 'cancelled'}"
            on_state(stack, INTERRUPTED)
            continue
        report.status = FAILED
        report.reason = ("cluster unreachable: " if result.unreachable else "preview failed: ") + (result.error or "")
        on_state(stack, FAILED)
    if stop.is_set():
        rollout.stopped, rollout.interrupted = "the fleet was interrupted during the previews: no stack was updated", True
        _not_reached(reports, "not started: " + rollout.stopped, on_state)
        return rollout
    failed_previews = [r.stack for r in reports if r.status == FAILED]
    if failed_previews:
        rollout.stopped = f"the preview of {listed(failed_previews)} failed: no stack was updated"
        _not_reached(reports, "the rollout stopped before any update: " + rollout.stopped, on_state)
        return rollout
    if preview_only:
        return rollout

    for wave in fleet.waves:
        stacks = [s for s in wave.stacks if by_stack[s].status == NOT_REACHED]
        hooks = (on_progress, on_start, on_done, on_state)
        failures = _run_wave(fleet, wave.name, wave.gate, wave.parallel, stacks, runner, by_stack, gate_check, hooks, clock, stop)
        if stop.is_set():
            rollout.stopped, rollout.interrupted = f"the fleet was interrupted in wave {wave.name}", True
            _not_reached(reports, f"not started: the fleet was interrupted in wave {wave.name}", on_state)
            return rollout
        if failures:
            rollout.stopped = f"wave {wave.name}: {listed(failures)} failed; no later wave was started"
            _not_reached(reports, f"the rollout stopped at wave {wave.name} ({listed(failures)} failed)", on_state)
            return rollout
    return rollout


def _not_reached(reports: list[StackReport], reason: str, on_state: Callable[[str, str], None]) -> None:
    for report in reports:
        if report.status in (NOT_REACHED, PREVIEWED) and report.reason is None:
            report.status, report.reason = NOT_REACHED, reason
            on_state(report.stack, NOT_REACHED)


def _run_wave(
    fleet: Fleet, wave: str, gate: Gate, parallel: int, stacks: list[str], runner: StackRunner,
    by_stack: dict[str, StackReport], gate_check: GateCheck,
    hooks: tuple[Callable[[str], None], Callable[[str], None], Callable[[str], None], Callable[[str, str], None]],
    clock: Callable[[], float],
    interrupted: threading.Event,
) -> list[str]:
    """`up` then gate for each stack of one wave, `parallel` at once; returns the stacks that failed.
    Once `interrupted` is set, no `up` or gate starts and no stack is done."""
    on_progress, on_start, on_done, on_state = hooks
    failures: list[str] = []
    lock = threading.Lock()

    def one(stack: str) -> None:
        report = by_stack[stack]
        on_state(stack, UPDATING)
        on_progress(f"[{stack}] up (wave {wave}): started")
        on_start(stack)
        start = clock()
        result = runner.up(stack)
        report.up = result
        on_progress(f"[{stack}] up: {_step_line(result)}")
        if interrupted.is_set():
            report.status = INTERRUPTED
            report.reason = (f"up ended by the interrupt: {result.error or 'cancelled'}" if not result.ok else
                             "the interrupt came before its gate: not done (fleet up --resume updates it again)")
        elif not result.ok:
            report.status, report.reason = FAILED, f"up failed: {result.error or 'no error text'}"
        else:
            on_state(stack, GATE)
            why = gate_check(stack, gate, result)
            report.gate = why or "passed"
            if interrupted.is_set():  # a soak cut short by the interrupt is no passed gate
                report.status, report.reason = INTERRUPTED, f"the interrupt came during its gate: not done ({report.gate})"
            elif why:
                report.status, report.reason = FAILED, f"gate did not pass: {why}"
            else:
                report.status = DONE
        report.seconds += clock() - start
        on_state(stack, report.status)
        on_progress(f"[{stack}] {report.status}" + (f": {report.reason}" if report.reason else f" in {report.seconds:.0f}s"))
        with lock:
            if report.status == FAILED:
                failures.append(stack)
        if report.status == DONE and not interrupted.is_set():
            on_done(stack)

    pending = list(stacks)
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        running: set[Future[None]] = set()
        while pending or running:
            stop = (bool(failures) and fleet.on_failure == "stop") or interrupted.is_set()
            while pending and len(running) < parallel and not stop:
                running.add(pool.submit(one, pending.pop(0)))
            if not running:
                break
            finished, running = wait(running, return_when=FIRST_COMPLETED)
            for future in finished:
                future.result()
    for stack in pending:
        if not interrupted.is_set():
            by_stack[stack].reason = f"not started: {listed(failures)} failed in wave {wave} (onFailure: stop)"
    return failures


def _step_line(result: StepResult) -> str:
    if not result.ok:
        what = "cancelled" if result.cancelled else "cluster unreachable" if result.unreachable else "failed"
        return what + f" after {result.seconds:.0f}s"
    changed = {k: v for k, v in result.changes.items() if k != "same" and v}
    text = ", ".join(f"{v} to {k}" for k, v in changed.items()) or "no changes"
    return f"{text} ({result.seconds:.0f}s)"
