"""The diff as text, for a terminal: summary, effects, node commands, MIG and DRA rollouts, then each change."""

from __future__ import annotations

from .blocks import (
    COMPONENT_NOTE,
    assert_no_secret,
    body_lines,
    capacity_lines,
    change_blocks,
    clip,
    describe,
    headline,
    scalar_text,
    warning_lines,
)
from .commands import deleted_commands, node_command_lines, secret_lines
from .dra_rollout import dra_rollout_lines
from .labels import node_label_lines
from .model import CREATE, DELETE, PlanDiff
from .objects_view import objects_text
from .rollout import mig_rollout_lines


def render_text(diff: PlanDiff) -> str:
    out = [f"Stack '{diff.stack}': {diff.base_label} -> {diff.head_label}", diff.summary()]
    if not diff.has_changes:
        out.append("No resource changes.")
    if diff.effects:
        out.append("Effects on running work:")
        out.extend(f"  ! {e}" for e in diff.effects)
    out.extend(secret_lines(diff))
    out.extend(node_command_lines(diff))
    for c in deleted_commands(diff):
        out.append(f"node command removed from the stack: {c.name}" + (f" (was on {c.node})" if c.node else ""))
    out.extend(mig_rollout_lines(diff))
    out.extend(dra_rollout_lines(diff))
    labels = node_label_lines(diff)
    out.extend(labels[:1] + [f"  {line}" for line in labels[1:]])
    for change in diff.changes:
        out.append("")
        out.append(headline(change))
        out.extend(f"    ! {note}" for note in change.notes)
        out.extend(f"    effect: {e}" for e in change.effects)
        what = describe(change)
        if what and change.action in (CREATE, DELETE):
            out.append(f"    {what}")
        if change.action in (CREATE, DELETE):
            body = body_lines(change)
            out.extend("    " + line for line in body or [COMPONENT_NOTE])
            continue
        for block in change_blocks(change):
            if block.scalar is not None:
                out.append(f"    {scalar_text(block.scalar)}")
                continue
            out.append(f"    {block.title}:")
            out.extend("        " + line for line in block.lines)
    if diff.objects:
        out.extend(objects_text(diff.objects))
    cap = capacity_lines(diff)
    if cap:
        out.append("")
        out.append("Capacity:")
        out.extend("    " + line for line in cap)
    warn = warning_lines(diff)
    if warn:
        out.append("")
        out.append("Warnings:")
        out.extend("    " + line for line in warn)
    return assert_no_secret("\n".join(clip(line) for line in out) + "\n")

