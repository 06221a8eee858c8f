"""Compare two offline plans the way `pulumi preview --diff` would, and say it for a reviewer.

Pure: plans in (a `Plan` or its JSON dict), a `PlanDiff` out, text or Markdown rendered from it.

- model.py: the diff's model (`PlanDiff`, `ResourceChange`, `FieldChange`) and the type tokens;
- compute.py: resources matched by (type token, name), leaf-level field diff, `diff_plans`;
- replace_rules.py: update or replace, as the providers and the engine decide, in one table;
- rollout.py: the MIG rollout the diff implies (nodes drained and reconfigured, by wave);
- dra_rollout.py: the device plugin <-> DRA rollout the diff implies (nodes drained and moved, by wave);
- blocks.py: what both renderers show, cut into pieces; text.py and markdown.py render them.
"""

from __future__ import annotations

from .compute import command_node, diff_plans, field_changes, plan_dict
from .markdown import MARKER, render_markdown
from .model import (
    ACTIONS,
    COMMAND,
    CONFIGMAP,
    CREATE,
    DELETE,
    JOB,
    K8S_PROVIDER,
    RELEASE,
    REPLACE,
    SECRET_TYPE,
    SYMBOLS,
    UPDATE,
    DiffError,
    FieldChange,
    PlanDiff,
    ResourceChange,
)
from .replace_rules import RULES as REPLACE_RULES
from .rollout import MIG_CONFIGMAP, ROLLOUT_JOB, MigMove, MigRolloutSummary, mig_rollout, mig_rollout_lines
from .text import render_text

FORMATS = ("text", "markdown")


def render(diff: PlanDiff, fmt: str = "text") -> str:
    if fmt == "markdown":
        return render_markdown(diff)
    if fmt == "text":
        return render_text(diff)
    raise DiffError(f"unknown format {fmt!r} (text or markdown)")


__all__ = [
    "ACTIONS", "COMMAND", "CONFIGMAP", "CREATE", "DELETE", "FORMATS", "JOB", "K8S_PROVIDER", "MARKER",
    "MIG_CONFIGMAP", "RELEASE", "REPLACE", "REPLACE_RULES", "ROLLOUT_JOB", "SECRET_TYPE", "SYMBOLS", "UPDATE",
    "DiffError", "FieldChange", "MigMove", "MigRolloutSummary", "PlanDiff", "ResourceChange", "command_node",
    "diff_plans", "field_changes", "mig_rollout", "mig_rollout_lines", "plan_dict", "render", "render_markdown",
    "render_text",
]
