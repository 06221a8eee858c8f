"""The object-level diff of each Helm release (../objects.py), as lines for the text and Markdown views."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from .blocks import fence, line_diff, multiline, scalar_text
from .model import CREATE, DELETE, UPDATE, FieldChange

if TYPE_CHECKING:
    from ..objects import ObjectChange, ReleaseObjects


def _field_lines(f: FieldChange) -> list[str]:
    if multiline(f.old) or multiline(f.new):
        old = "" if f.kind == "added" else str(f.old)
        new = "" if f.kind == "removed" else str(f.new)
        return [f"{f.path}:"] + ["    " + line for line in line_diff(old, new)]
    return [scalar_text(f)]


def _title(rel: ReleaseObjects) -> str:
    return f"Objects of release {rel.release}"


def _counts(rel: ReleaseObjects) -> str:
    by = {a: sum(1 for c in rel.changes if c.action == a) for a in (CREATE, UPDATE, DELETE)}
    return f"{by[CREATE]} to add, {by[UPDATE]} to change, {by[DELETE]} to remove (of {rel.counts[1]} rendered)"


def _change_head(c: ObjectChange) -> str:
    sign = {CREATE: "+ add", UPDATE: "~ change", DELETE: "- remove"}[c.action]
    return f"{sign} {c.key}" + (f" (hook {c.hook})" if c.hook else "")


def objects_text(objects: list[ReleaseObjects]) -> list[str]:
    out: list[str] = []
    for rel in objects:
        out.append("")
        if rel.unavailable:
            out.append(f"{_title(rel)}: not shown: {rel.unavailable}")
            continue
        out.append(f"{_title(rel)} (rendered with Helm from {rel.chart}): {_counts(rel)}")
        for c in rel.changes:
            out.append(f"  {_change_head(c)}")
            out.extend(f"      effect: {e}" for e in c.effects)
            for f in c.fields:
                out.extend("      " + line for line in _field_lines(f))
    return out


def objects_markdown(objects: list[ReleaseObjects]) -> list[str]:
    out: list[str] = []
    for rel in objects:
        if rel.unavailable:
            out.append(f"_{html.escape(_title(rel))}: not shown: {html.escape(rel.unavailable)}_")
            out.append("")
            continue
        out.append("<details open>")
        out.append(f"<summary>{html.escape(_title(rel))}: {html.escape(_counts(rel))}</summary>")
        out.append("")
        lines: list[str] = []
        for c in rel.changes:
            lines.append(_change_head(c))
            lines.extend(f"#   effect: {e}" for e in c.effects)
            for f in c.fields:
                lines.extend("    " + line for line in _field_lines(f))
        out.extend(fence(lines or ["(no object changes)"], lang="text"))
        out.append("")
        out.append("</details>")
        out.append("")
    return out
