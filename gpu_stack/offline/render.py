"""Human-readable rendering of a plan: a resource tree with the inputs that matter."""

from __future__ import annotations

import hashlib
from typing import Any

from pulumi.runtime.rpc import UNKNOWN as UNKNOWN_ID

from .plan import Plan, ResourceRecord
from .yaml_text import to_yaml

# Keys the SDK adds that say nothing to a reviewer.
NOISE_KEYS = {"__defaults", "apiVersion", "kind"}
LONG_TEXT_LINES = 24


def clean_inputs(inputs: Any, shorten: bool = True) -> Any:
    """Drop SDK noise; long scripts are shown by size and hash (the JSON plan has them whole)."""
    if isinstance(inputs, dict):
        return {k: clean_inputs(v, shorten) for k, v in inputs.items() if k not in NOISE_KEYS}
    if isinstance(inputs, list):
        return [clean_inputs(v, shorten) for v in inputs]
    if shorten and isinstance(inputs, str) and inputs.count("\n") > LONG_TEXT_LINES:
        digest = hashlib.sha256(inputs.encode()).hexdigest()[:12]
        return f"<{inputs.count(chr(10))} lines, sha256 {digest}>"
    return inputs


def _indent(text: str, prefix: str) -> str:
    return "".join(prefix + line + "\n" for line in text.rstrip("\n").splitlines())


def _children(plan: Plan) -> dict[str | None, list[ResourceRecord]]:
    tree: dict[str | None, list[ResourceRecord]] = {}
    for r in plan.resources:
        tree.setdefault(r.parent, []).append(r)
    return tree


def render_text(plan: Plan) -> str:
    tree = _children(plan)
    counts: dict[str, int] = {}
    for r in plan.resources:
        if r.custom:
            counts[r.type] = counts.get(r.type, 0) + 1
    out = [f"Plan of stack '{plan.stack}' (project {plan.project}): {sum(counts.values())} resources to create"]
    out.append("")

    def walk(parent: str | None, depth: int) -> None:
        for r in tree.get(parent, []):
            pad = "    " * depth
            marker = "+" if r.custom else "*"
            out.append(f"{pad}{marker} {r.type}  {r.name}")
            extra = []
            if r.depends_on:
                extra.append(f"depends on: {', '.join(r.depends_on)}")
            if r.options:
                extra.append("options: " + ", ".join(f"{k}={v}" for k, v in r.options.items()))
            for line in extra:
                out.append(f"{pad}    # {line}")
            if r.custom:
                body = clean_inputs(r.inputs)
                if body:
                    out.append(_indent(to_yaml(body), pad + "      ").rstrip("\n"))
            walk(r.name, depth + 1)

    walk(None, 0)
    # a read whose id is unknown in the preview (it waits for a resource's result) runs only in `up`
    reads = [r for r in getattr(plan, "reads", None) or [] if str(r["id"]) not in (UNKNOWN_ID, "[unknown]")]
    if reads:
        shown = ", ".join(str(r["id"]) for r in reads[:5]) + (f" and {len(reads) - 5} more" if len(reads) > 5 else "")
        out.append("")
        out.append(f"Reads (must already exist; `pulumi preview` fails on one that does not): {len(reads)} object(s): {shown}")
    if plan.capacity:
        out.append("")
        out.append(render_capacity(plan.capacity))
    out.append("")
    if plan.warnings:
        out.append("Warnings:")
        out.extend(f"  - {w}" for w in plan.warnings)
    else:
        out.append("Warnings: none")
    out.append("")
    out.append("Resources by type: " + ", ".join(f"{t} x{n}" for t, n in sorted(counts.items())))
    return "\n".join(out) + "\n"


def render_capacity(rows: list[dict[str, Any]]) -> str:
    """Capacity rows are dicts; render them as an aligned table (keys of the first row as columns)."""
    if not rows:
        return ""
    columns = list(rows[0].keys())
    cells = [[_cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    lines = ["Capacity:"]
    lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    for row in cells:
        lines.append("  " + "  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
    if value is None:
        return "-"
    return str(value)
