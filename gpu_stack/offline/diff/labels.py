"""The node labels a diff implies: the label Job's table (one line per node) compared line by
line, so the reviewer sees each node whose labels change, not only that a ConfigMap was replaced.

A table that changes renames (replaces, re-runs) the Job (gpu_stack/design/node_label_job.py): every line
here is applied by that one run. A node that leaves the table keeps its labels: the Job may only
touch the table's nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...design.node_label_job import TABLE_KEY, parse_table
from .model import CONFIGMAP, PlanDiff

TABLE = "gpu-operator-node-labels-table"
JOB = "gpu-operator-node-labels-job"


def _table(inputs: Mapping[str, Any] | None) -> dict[str, dict[str, str]] | None:
    text = ((inputs or {}).get("data") or {}).get(TABLE_KEY)
    return parse_table(text) if isinstance(text, str) else None


def _pairs(labels: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "no labels"


def node_label_lines(diff: PlanDiff) -> list[str]:
    """`Node labels the Job changes:` and one line per node whose labels change (or that joins or
    leaves the table); nothing when the table does not change."""
    change = diff.get(CONFIGMAP, TABLE)
    if change is None:
        return []
    old, new = _table(change.old), _table(change.new)
    if old is None and new is None:
        return []
    old, new = old or {}, new or {}
    out = []
    for node in [*new, *(n for n in old if n not in new)]:
        if node not in old:
            out.append(f"{node}: joins the table: {_pairs(new[node])}")
        elif node not in new:
            removal = " ".join(f"{k}-" for k in sorted(old[node]))
            out.append(f"{node}: leaves the table; its labels stay on the node ({_pairs(old[node])})"
                       + (f": remove them with `kubectl label node {node} {removal}`" if removal else ""))
        elif old[node] != new[node]:
            keys = sorted({*old[node], *new[node]})
            out.append(f"{node}: " + ", ".join(
                f"{k} {old[node].get(k, '(unset)')} -> {new[node].get(k, '(removed)')}" for k in keys if old[node].get(k) != new[node].get(k)
            ))
    if not out:
        return []
    return [f"Node labels the Job {JOB} sets ({len(out)} node(s); the table changed, so the Job re-runs):", *out]
