"""The roll-up `fleet up` and `fleet preview` print at the end: per stack what changed, its
validation, how long it took, the outputs an operator asks about first (capacity, preflight), and
where the rollout stopped with the command that resumes it."""

from __future__ import annotations

from typing import Any

from ..config.fleet import listed
from ..config.safe_input import escape, shorten
from .waves import ALREADY_DONE, DONE, FAILED, INTERRUPTED, SKIPPED, Rollout, StackReport, StepResult

REASON_WIDTH = 300


def _changes(step: StepResult | None) -> str:
    if step is None:
        return "-"
    changed = {k: v for k, v in step.changes.items() if k != "same" and v}
    return ", ".join(f"{v} {k}" for k, v in changed.items()) or "no changes"


def _capacity(outputs: dict[str, Any]) -> str:
    rows = outputs.get("capacity")
    total = next((r for r in rows if isinstance(r, dict) and r.get("node") == "TOTAL"), None) if isinstance(rows, list) else None
    if not total:
        return ""
    advertised = total.get("advertises") or {}
    return f"{total.get('gpus')} GPUs advertised as " + ", ".join(f"{v} {k}" for k, v in advertised.items())


def _validation(report: StackReport) -> str:
    if report.up is None:
        return "-"
    if not report.up.ok:
        return "failed" if "validation" in (report.up.error or "").lower() else "not run (up failed)"
    jobs = report.up.outputs.get("validationJobs") or {}
    return f"passed ({len(jobs)} checks)" if jobs else "off"


def stack_lines(report: StackReport) -> list[str]:
    head = f"{report.stack} (wave {report.wave}): {report.status}"
    if report.status in (DONE, FAILED, INTERRUPTED) or report.up is not None:
        head += f" in {report.seconds:.0f}s"
    lines = [head]
    if report.up is not None:
        lines.append(f"  changed: {_changes(report.up)}; validation: {_validation(report)}; gate: {report.gate or '-'}")
        capacity = _capacity(report.up.outputs)
        if capacity:
            lines.append(f"  capacity: {capacity}")
        preflight = report.up.outputs.get("nodePreflight") or {}
        if preflight:
            lines.append(f"  preflight: {len(preflight)} node(s) prepared over SSH: {', '.join(sorted(preflight))}")
    elif report.preview is not None and report.preview.ok and report.status != ALREADY_DONE:
        lines.append(f"  preview: {_changes(report.preview)}")
    if report.reason:
        lines.append("  " + shorten(escape(report.reason), REASON_WIDTH))
    return lines


def render_rollup(rollout: Rollout, command: str, preview_only: bool = False) -> str:
    """The roll-up; `command` is how this run was started (the resume line repeats it with --resume)."""
    title = "Fleet preview" if preview_only else "Fleet roll-up"
    counts: dict[str, int] = {}
    for r in rollout.reports:
        counts[r.status] = counts.get(r.status, 0) + 1
    out = [f"{title}: " + ", ".join(f"{n} {s}" for s, n in counts.items())]
    for report in rollout.reports:
        out += stack_lines(report)
    if rollout.interrupted:
        out.append(f"Interrupted: {escape(rollout.stopped or 'the fleet was interrupted')}")
        if not preview_only:
            out.append(f"Resume (stacks done for this change are skipped): {command} --resume")
    elif rollout.stopped:
        out.append(f"Stopped: {escape(rollout.stopped)}")
        if not preview_only:
            out.append(f"Resume after the fix (stacks done for this change are skipped): {command} --resume")
    elif rollout.none_updated:
        skipped = [r.stack for r in rollout.reports if r.status == SKIPPED]
        what = "previewed" if preview_only else "updated"
        out.append(f"Not rolled out: no stack was {what}; skipped, each cluster unreachable: {listed(skipped)}"
                   + ("" if preview_only else f" (once reachable: {command} --resume)"))
    elif not preview_only:
        skipped = [r.stack for r in rollout.reports if r.status == SKIPPED]
        if skipped:
            # went through, but these have not got the change: not "every stack"
            out.append(f"Every stack reached is done for this change; skipped, not updated: {listed(skipped)} "
                       f"(once reachable: {command} --resume)")
        else:
            out.append("Every stack of the fleet is done for this change.")
    return "\n".join(out) + "\n"
