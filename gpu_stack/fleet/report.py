"""How `fleet plan` says what a change does to the fleet: text for a terminal, one Markdown
pull-request comment for the whole fleet, JSON for tools. Every view leads with the grouped
changes, then what differs per stack."""

from __future__ import annotations

from typing import Any

from ..offline.diff import render_markdown as render_stack_markdown
from ..offline.diff.model import ACTIONS
from .group import FleetGroups, StackOutcome, effect_counts, group_fleet

MARKER = "<!-- gpu-stack fleet plan -->"
"""The first line of the Markdown comment, so a workflow finds and updates its own comment."""
RESOURCES_SHOWN = 40
"""Grouped resource lines shown before the rest are counted."""


def _stack_line(o: StackOutcome) -> str:
    if o.error is not None:
        return f"{o.stack}: cannot be planned: {o.error}"
    assert o.diff is not None
    if not o.diff.has_changes:
        return f"{o.stack}: no changes"
    edits = "; ".join(e.line() for e in o.config) or "no stack config edit"
    effects = "; ".join(o.diff.effects) or "no effect on running GPU work"
    return f"{o.stack}: {o.diff.summary()} | config: {edits} | {effects}"


def _lines(base_label: str, outcomes: list[StackOutcome], groups: FleetGroups) -> dict[str, list[str]]:
    changed = sum(1 for o in outcomes if o.has_changes)
    head = [(f"Fleet of {len(outcomes)} stacks: {base_label} -> working tree; {changed} with changes, "
             f"{len(groups.unchanged)} unchanged, {len(groups.failed)} cannot be planned")]
    sets = [g.line() for g in groups.change_sets]
    resources = [r.line() for r in groups.resources[:RESOURCES_SHOWN]]
    if len(groups.resources) > RESOURCES_SHOWN:
        resources.append(f"... and {len(groups.resources) - RESOURCES_SHOWN} more resource changes")
    return {"head": head, "sets": sets, "resources": resources, "stacks": [_stack_line(o) for o in outcomes]}


def render_text(base_label: str, outcomes: list[StackOutcome]) -> str:
    groups = group_fleet(outcomes)
    parts = _lines(base_label, outcomes, groups)
    out = parts["head"]
    if parts["sets"]:
        out += ["", "Changes, grouped by stack config edit:"] + [f"  {line}" for line in parts["sets"]]
    if parts["resources"]:
        out += ["", "Resource changes, grouped:"] + [f"  {line}" for line in parts["resources"]]
    out += ["", "Per stack:"] + [f"  {line}" for line in parts["stacks"]]
    return "\n".join(out) + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def render_markdown(base_label: str, outcomes: list[StackOutcome]) -> str:
    groups = group_fleet(outcomes)
    parts = _lines(base_label, outcomes, groups)
    out = [MARKER, "## Fleet plan", "", _md(parts["head"][0]), ""]
    if parts["sets"]:
        out += ["**Changes, grouped by stack config edit**", ""] + [f"- {_md(line)}" for line in parts["sets"]] + [""]
    out += ["| stack | create | update | replace | delete | effects on running GPU work |", "| --- | --- | --- | --- | --- | --- |"]
    for o in outcomes:
        if o.diff is None:
            out.append(f"| `{o.stack}` | | | | | cannot be planned: {_md(o.error or '')} |")
            continue
        counts = " | ".join(str(o.diff.count(a)) for a in ACTIONS)
        out.append(f"| `{o.stack}` | {counts} | {_md('; '.join(o.diff.effects) or 'none')} |")
    if parts["resources"]:
        out += ["", "<details><summary>Resource changes, grouped</summary>", ""]
        out += [f"- {_md(line)}" for line in parts["resources"]] + ["", "</details>"]
    # then each changed stack's own diff, as `diff --format markdown` shows it
    for o in outcomes:
        if o.diff is not None and o.diff.has_changes:
            out += ["", render_stack_markdown(o.diff).rstrip("\n")]
    return "\n".join(out) + "\n"


def to_json(base_label: str, outcomes: list[StackOutcome]) -> dict[str, Any]:
    groups = group_fleet(outcomes)
    stacks: dict[str, Any] = {}
    for o in outcomes:
        if o.diff is None:
            stacks[o.stack] = {"error": o.error}
            continue
        stacks[o.stack] = {
            "changes": {a: o.diff.count(a) for a in ACTIONS},
            "config": [{"path": e.path, "old": e.old, "new": e.new} for e in o.config],
            "effects": o.diff.effects,
            "effectNodes": effect_counts(o.diff),
        }
    return {
        "base": base_label,
        "stacks": stacks,
        "groups": [
            {"config": [{"path": e.path, "old": e.old, "new": e.new} for e in g.edits], "stacks": g.stacks,
             "effectNodes": g.effects, "changes": g.counts}
            for g in groups.change_sets
        ],
        "resources": [
            {"action": r.action, "type": r.type, "name": r.name, "fields": list(r.fields), "stacks": r.stacks}
            for r in groups.resources
        ],
        "unchanged": groups.unchanged,
        "failed": groups.failed,
    }
