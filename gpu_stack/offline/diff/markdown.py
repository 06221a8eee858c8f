"""The diff as Markdown, for a pull-request comment: one collapsible section per change."""

from __future__ import annotations

import html

from .blocks import (
    COMPONENT_NOTE,
    assert_no_secret,
    body_lines,
    capacity_lines,
    change_blocks,
    clip,
    describe,
    fence,
    scalar_diff,
    warning_lines,
)
from .commands import deleted_commands, node_command_rows, secret_lines
from .dra_rollout import dra_rollout_lines
from .labels import node_label_lines
from .model import CREATE, DELETE, SYMBOLS, PlanDiff
from .objects_view import objects_markdown
from .rollout import mig_rollout_lines

MARKER = "<!-- gpu-stack-offline-diff -->"


def _md_code(text: str) -> str:
    return f"<code>{html.escape(text)}</code>"


def render_markdown(diff: PlanDiff) -> str:
    e = html.escape
    out = [
        f"### Stack `{diff.stack}`: {diff.base_label} → {diff.head_label}",
        "",
        f"**{diff.summary()}**",
        "",
    ]
    if not diff.has_changes:
        out.append("No resource changes.")
        out.append("")
    if diff.effects:
        out.append("**Effects on running work:**")
        out.append("")
        out.extend(f"- ⚠️ {e(x)}" for x in diff.effects)
        out.append("")
    secrets = secret_lines(diff)
    if secrets:
        out.append(f"**🔑 {e(secrets[0])}**")
        out.extend(f"- {e(line)}" for line in secrets[1:])
        out.append("")
    cmds = diff.node_commands
    out.append(f"Node commands that re-run: {len(cmds)}" if cmds else "Node commands that re-run: none")
    for what, node, name, why in node_command_rows(diff):
        if node.endswith(" nodes"):
            out.append(f"- {what} on {node} ({e(why)}): {e(name)}")
        else:
            out.append(f"- {what} on `{node}`: `{name}` ({e(why)})")
    for c in deleted_commands(diff):
        out.append(f"- node command removed from the stack: `{c.name}`" + (f" (was on `{c.node}`)" if c.node else ""))
    rollout = mig_rollout_lines(diff)
    if rollout:
        out.append("")
        out.append(e(rollout[0]) if rollout[0].startswith("MIG rollout:") else f"- {e(rollout[0])}")
        out.extend(f"- {e(line)}" for line in rollout[1:])
    moves = dra_rollout_lines(diff)
    if moves:
        out.append("")
        out.append(e(moves[0]))
        out.extend(f"- {e(line)}" for line in moves[1:])
    labels = node_label_lines(diff)
    if labels:
        out.append("")
        out.append(e(labels[0]))
        out.extend(f"- {e(line)}" for line in labels[1:])
    out.append("")
    for change in diff.changes:
        summary = f"{e(SYMBOLS[change.action])} <b>{change.action}</b> {_md_code(change.type)} <b>{e(change.name)}</b>"
        if change.reasons:
            summary += " — " + e("; ".join(change.reasons))
        if change.effects:
            summary += " — ⚠️ " + e("; ".join(change.effects))
        out.append("<details>")
        out.append(f"<summary>{summary}</summary>")
        out.append("")
        for note in change.notes:
            out.append(f"> **{e(note)}**")
            out.append("")
        if change.action in (CREATE, DELETE):
            what = describe(change)
            if what:
                out.append(e(what))
                out.append("")
            body = body_lines(change)
            out.extend(fence(body) if body else [COMPONENT_NOTE])
        else:
            lines: list[str] = []
            for block in change_blocks(change):
                if block.scalar is not None:
                    lines.extend(scalar_diff(block.scalar))
                    continue
                lines.append(f"# {block.title}")
                lines.extend(block.lines)
            out.extend(fence(lines))
        out.append("")
        out.append("</details>")
        out.append("")
    if diff.objects:
        out.extend(objects_markdown(diff.objects))
    cap = capacity_lines(diff)
    if cap:
        out.append("<details open>")
        out.append("<summary>Capacity</summary>")
        out.append("")
        out.extend(fence(cap))
        out.append("")
        out.append("</details>")
        out.append("")
    warn = warning_lines(diff)
    if warn:
        out.append("Warnings:")
        out.append("")
        out.extend(fence(warn))
        out.append("")
    return assert_no_secret("\n".join(clip(line) for line in out).rstrip("\n") + "\n")

