"""What both renderers of a diff show, cut into pieces: a changed resource's blocks (one-value
changes, line diffs of scripts, Helm values as YAML documents), the node-command, capacity and
warning lines. YAML through the one dumper of the offline views (../yaml_text.py), never folded.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ...config.stack_files import SECRET_PLACEHOLDER_PREFIX
from ..render import clean_inputs, render_capacity
from ..yaml_text import NO_FOLD, to_yaml
from .model import (
    ABSENT,
    COMMAND,
    CREATE,
    RELEASE,
    SYMBOLS,
    DiffError,
    FieldChange,
    PlanDiff,
    ResourceChange,
    SecretValue,
    is_secret_change,
    under,
)

COMPONENT_NOTE = "(a component: no inputs of its own, it groups the resources under it)"


def dump_yaml(value: Any) -> str:
    # No line folding: a long one-line value stays one line (folded YAML reads as a false change).
    return to_yaml(value, width=NO_FOLD)


def scalar(value: Any) -> str:
    if value is ABSENT:
        return "(absent)"
    if isinstance(value, SecretValue):
        return "[secret]"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def line_diff(old: str, new: str, context: int = 3) -> list[str]:
    """A unified line diff (no file headers): ' ', '-' and '+' prefixed lines and @@ hunks."""
    lines = list(
        difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=context)
    )
    return lines[2:]


LINE_LIMIT = 400
"""The longest line a diff prints; a longer one is cut, saying how much was left out."""
LONG_VALUE = 160
"""A one-line value longer than this (an alert expression over every node) is shown where it changed."""
HUNKS = 20


def clip(line: str) -> str:
    if len(line) <= LINE_LIMIT:
        return line
    keep = LINE_LIMIT - 48
    return line[:keep] + f" ... [{len(line) - keep} more characters]"


def _shown(text: str, start: int, end: int, context: int = 30) -> str:
    """text[start:end] in brackets with a little context, each part short."""
    mid = text[start:end]
    mid = mid if len(mid) <= 100 else mid[:60] + f"...({len(mid) - 90} more)..." + mid[-30:]
    left = ("..." if start > context else "") + text[max(0, start - context) : start]
    right = text[end : end + context] + ("..." if end + context < len(text) else "")
    return f"{left}[{mid}]{right}"


MATCHED_TOKENS = 4000
"""Past this many differing words, the changed span is shown as one place (matching is quadratic)."""


def _changed_places(a: list[str], b: list[str]) -> list[tuple[str, int, int, int, int]]:
    """Opcodes of the spans that differ: the common head and tail cut off first (a change to a long
    value is mostly local), then the rest matched word by word when it is small enough."""
    p = 0
    while p < len(a) and p < len(b) and a[p] == b[p]:
        p += 1
    q = 0
    while q < len(a) - p and q < len(b) - p and a[-1 - q] == b[-1 - q]:
        q += 1
    mid_a, mid_b = a[p : len(a) - q], b[p : len(b) - q]
    if not mid_a and not mid_b:
        return []
    if len(mid_a) + len(mid_b) > MATCHED_TOKENS:
        return [("replace", p, len(a) - q, p, len(b) - q)]
    return [(tag, i1 + p, i2 + p, j1 + p, j2 + p)
            for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=False).get_opcodes() if tag != "equal"]


def long_value_lines(old: str, new: str) -> list[str]:
    """Where two long one-line values differ: a -/+ pair per changed place (word by word, then
    narrowed to the characters that differ, in brackets, with context), at most HUNKS places."""
    a, b = re.split(r"(\s+)", old), re.split(r"(\s+)", new)
    ops = _changed_places(a, b)
    out: list[str] = []
    for _, i1, i2, j1, j2 in ops[:HUNKS]:
        s1, s2 = len("".join(a[:i1])), len("".join(b[:j1]))
        e1, e2 = s1 + len("".join(a[i1:i2])), s2 + len("".join(b[j1:j2]))
        while s1 < e1 and s2 < e2 and old[s1] == new[s2]:
            s1, s2 = s1 + 1, s2 + 1
        while e1 > s1 and e2 > s2 and old[e1 - 1] == new[e2 - 1]:
            e1, e2 = e1 - 1, e2 - 1
        out.append("-" + _shown(old, s1, e1))
        out.append("+" + _shown(new, s2, e2))
    if len(ops) > HUNKS:
        out.append(f" ... and {len(ops) - HUNKS} more changed places")
    return out


def _long(value: Any) -> bool:
    return isinstance(value, str) and len(value) > LONG_VALUE


def multiline(value: Any) -> bool:
    return isinstance(value, str) and "\n" in value.rstrip("\n")


def _path_get(value: Any, path: str) -> Any:
    """Follow a dotted path produced by field_changes (keys and [i] indexes)."""
    for token in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if token.startswith("["):
            idx = int(token[1:-1])
            value = value[idx] if isinstance(value, list) and idx < len(value) else ABSENT
        else:
            value = value.get(token, ABSENT) if isinstance(value, dict) else ABSENT
        if value is ABSENT:
            return ABSENT
    return value


@dataclass
class Block:
    """One piece of a resource's change: a header line (path) and diff lines under it."""

    title: str
    lines: list[str]
    scalar: FieldChange | None = None
    """A one-value change: text shows `path: old -> new`, Markdown a -/+ pair."""


def _value_document_roots(change: ResourceChange) -> list[str]:
    """Inputs shown as a YAML document diff rather than leaf by leaf: Helm values, per top-level key."""
    roots: list[str] = []
    if change.type == RELEASE:
        for p in change.paths:
            if p.startswith("values."):
                top = "values." + p[len("values.") :].split(".")[0].split("[")[0]
                if top not in roots:
                    roots.append(top)
    return roots


def change_blocks(change: ResourceChange) -> list[Block]:
    blocks: list[Block] = []
    doc_roots = _value_document_roots(change)
    for root in doc_roots:
        key = root.split(".", 1)[1]
        old = _path_get(change.old, root)
        new = _path_get(change.new, root)
        old_text = "" if old is ABSENT else dump_yaml({key: old})
        new_text = "" if new is ABSENT else dump_yaml({key: new})
        # Whole subtree as context: Helm value subtrees are small and their nesting is the point.
        lines = line_diff(old_text, new_text, context=10_000)
        blocks.append(Block(f"{root} (Helm values)", [line for line in lines if not line.startswith("@@")]))
    for f in change.fields:
        if any(under(f.path, r) for r in doc_roots):
            continue
        if multiline(f.old) or multiline(f.new):
            old_text = "" if f.old is ABSENT else str(f.old)
            new_text = "" if f.new is ABSENT else str(f.new)
            blocks.append(Block(f.path, line_diff(old_text, new_text)))
        elif isinstance(f.old, str) and isinstance(f.new, str) and (_long(f.old) or _long(f.new)):
            title = f"{f.path} (one line, {len(f.old)} -> {len(f.new)} characters; where it changed)"
            blocks.append(Block(title, long_value_lines(f.old, f.new)))
        else:
            blocks.append(Block(f.path, [], scalar=f))
    # One-value changes first, then the line diffs they explain.
    return [b for b in blocks if b.scalar is not None] + [b for b in blocks if b.scalar is None]


def scalar_text(f: FieldChange) -> str:
    if is_secret_change(f):
        return f"{f.path}: secret {f.kind} (neither value shown)"
    if f.kind == "added":
        return clip(f"{f.path}: added {scalar(f.new)}")
    if f.kind == "removed":
        return clip(f"{f.path}: removed (was {scalar(f.old)})")
    return clip(f"{f.path}: {scalar(f.old)} -> {scalar(f.new)}")


def scalar_diff(f: FieldChange) -> list[str]:
    if is_secret_change(f):
        return [f"! {f.path}: secret {f.kind} (neither value shown)"]
    out = []
    if f.kind != "added":
        out.append(clip(f"- {f.path}: {scalar(f.old)}"))
    if f.kind != "removed":
        out.append(clip(f"+ {f.path}: {scalar(f.new)}"))
    return out


def headline(change: ResourceChange) -> str:
    text = f"{SYMBOLS[change.action]} {change.action} {change.type} {change.name}"
    if change.reasons:
        text += f" ({'; '.join(change.reasons)})"
    return text


def describe(change: ResourceChange) -> str:
    """One line on what a created or deleted resource is (name/namespace or node)."""
    inputs = change.new if change.action == CREATE else change.old
    inputs = inputs or {}
    meta: dict[str, Any] = inputs["metadata"] if isinstance(inputs.get("metadata"), dict) else {}
    bits = []
    if change.type == COMMAND and change.node:
        bits.append(f"on node {change.node}")
    if meta.get("name"):
        ns = meta.get("namespace")
        bits.append(f"{ns}/{meta['name']}" if ns else str(meta["name"]))
    elif change.type == RELEASE and inputs.get("name"):
        bits.append(f"release {inputs.get('namespace', '')}/{inputs['name']} chart {inputs.get('chart')} {inputs.get('version')}")
    return ", ".join(bits)


def body_lines(change: ResourceChange) -> list[str]:
    inputs = change.new if change.action == CREATE else change.old
    if not inputs:
        return []
    sign = "+" if change.action == CREATE else "-"
    # Long scripts by size and hash, as in the plan's text view (a change to one shows as a line diff).
    return [clip(f"{sign} {line}") for line in dump_yaml(clean_inputs(inputs)).rstrip("\n").splitlines()]


def capacity_lines(diff: PlanDiff) -> list[str]:
    old, new = diff.capacity
    if old == new:
        return []
    return [
        line
        for line in line_diff(_capacity_table(old), _capacity_table(new), context=10_000)
        if not line.startswith("@@")
    ]


def _capacity_table(rows: list[Any]) -> str:
    if not rows:
        return ""
    if all(isinstance(r, dict) for r in rows):
        return "\n".join(line.rstrip() for line in render_capacity(rows).splitlines()[1:]) + "\n"
    return dump_yaml(rows)


def warning_lines(diff: PlanDiff) -> list[str]:
    old, new = diff.warnings
    gone = [w for w in old if w not in new]
    added = [w for w in new if w not in old]
    return [f"- {w}" for w in gone] + [f"+ {w}" for w in added]


def assert_no_secret(text: str) -> str:
    if SECRET_PLACEHOLDER_PREFIX in text:
        raise DiffError("diff output would carry a secret value; refusing to print it")
    return text


def fence(lines: Iterable[str], lang: str = "diff") -> list[str]:
    lines = list(lines)
    longest = max((len(run) for line in lines for run in _backtick_runs(line)), default=0)
    ticks = "`" * max(3, longest + 1)
    return [ticks + lang, *lines, ticks]


def _backtick_runs(line: str) -> list[str]:
    runs, cur = [], ""
    for ch in line:
        if ch == "`":
            cur += "`"
        elif cur:
            runs.append(cur)
            cur = ""
    if cur:
        runs.append(cur)
    return runs
