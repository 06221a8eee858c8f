"""One change across many stacks, grouped: the stacks that get the same config edit, and the same
resource change, are said once ("sharing.replicas 4 -> 8 on 17 stacks: rolls the device plugin on
212 nodes"), and what differs per stack is listed after. Pure: stack outcomes in, groups out.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from ..config.safe_input import SECRET_PLACEHOLDER_PREFIX
from ..offline.diff.model import ABSENT, ACTIONS, SYMBOLS, PlanDiff, named
from ..offline.effects import EFFECT_ORDER

VALUE_WIDTH = 60
"""How many characters of a value a grouped line shows."""
SECRET = "[secret]"
FIELDS_SHOWN = 3
"""Changed fields one grouped resource line names; the rest are counted."""


@dataclass(frozen=True)
class ConfigEdit:
    """One leaf of a stack's `gpu-stack:` config that differs from the base (values as shown)."""

    path: str
    old: str
    new: str

    def line(self) -> str:
        if self.old == "(absent)":
            return f"{self.path} set to {self.new}"
        if self.new == "(absent)":
            return f"{self.path} removed (was {self.old})"
        return f"{self.path} {self.old} -> {self.new}"


@dataclass
class StackOutcome:
    """What the offline plan says about one stack of the fleet."""

    stack: str
    diff: PlanDiff | None = None
    config: list[ConfigEdit] = field(default_factory=list)
    error: str | None = None
    """Why the stack could not be planned (one line), when it could not."""

    @property
    def has_changes(self) -> bool:
        return self.diff is not None and self.diff.has_changes


@dataclass
class ChangeSet:
    """Stacks whose config changed the same way (or only by the program: `edits` empty)."""

    edits: tuple[ConfigEdit, ...]
    stacks: list[str]
    effects: dict[str, int]
    """Effect -> the nodes it touches, summed over the stacks."""
    counts: dict[str, int]
    """Action -> resources, summed over the stacks."""

    def line(self) -> str:
        what = "; ".join(e.line() for e in self.edits) or "no stack config edit (the program, its defaults or Pulumi.yaml changed)"
        n = len(self.stacks)
        text = f"{what} on {n} stack{'s' if n != 1 else ''} ({named(self.stacks)})"
        effects = [f"{e} on {k} node{'s' if k != 1 else ''}" for e, k in self.effects.items()]
        counts = ", ".join(f"{v} to {a}" for a, v in self.counts.items() if v)
        return text + ": " + "; ".join(effects + ([counts] if counts else []))


@dataclass
class ResourceGroup:
    """One resource change, identical on every stack listed."""

    action: str
    type: str
    name: str
    fields: tuple[str, ...]
    stacks: list[str]

    def line(self) -> str:
        n = len(self.stacks)
        head = f"{SYMBOLS[self.action]} {self.action} {self.type} {self.name} on {n} stack{'s' if n != 1 else ''} ({named(self.stacks)})"
        shown_fields = list(self.fields[:FIELDS_SHOWN])
        if len(self.fields) > FIELDS_SHOWN:
            shown_fields.append(f"and {len(self.fields) - FIELDS_SHOWN} more fields")
        return head + (": " + "; ".join(shown_fields) if shown_fields else "")


@dataclass
class FleetGroups:
    change_sets: list[ChangeSet]
    resources: list[ResourceGroup]
    unchanged: list[str]
    failed: dict[str, str]


def shown(value: Any) -> str:
    """A value as a grouped line shows it: JSON, cut to VALUE_WIDTH, a secret never."""
    if value is ABSENT:
        return "(absent)"
    if isinstance(value, str) and value.startswith(SECRET_PLACEHOLDER_PREFIX):
        return SECRET
    if repr(value) == SECRET:  # a secret input of a plan diff
        return SECRET
    text = json.dumps(value, sort_keys=True, default=str)
    if SECRET_PLACEHOLDER_PREFIX in text:
        return SECRET
    return text if len(text) <= VALUE_WIDTH else text[: VALUE_WIDTH - 3] + "..."


def _leaves(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value:
        for key, child in value.items():
            _leaves(child, f"{path}.{key}" if path else str(key), out)
    elif isinstance(value, list) and value and any(isinstance(v, (dict, list)) for v in value):
        for i, child in enumerate(value):
            _leaves(child, f"{path}[{i}]", out)
    else:
        out[path] = value


def config_edits(old: dict[str, Any], new: dict[str, Any]) -> list[ConfigEdit]:
    """Leaf-level edits between two `gpu-stack:` namespaces (`sharing.replicas`, `nodes[1].gpu.count`);
    a secret shows as [secret], and a changed one as `[secret] -> [secret]`."""
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    _leaves(old, "", before)
    _leaves(new, "", after)
    edits = []
    for path in list(before) + [p for p in after if p not in before]:
        o, n = before.get(path, ABSENT), after.get(path, ABSENT)
        if o != n:
            edits.append(ConfigEdit(path, shown(o), shown(n)))
    return edits


_NODES = re.compile(r" on (\d+) nodes?\b")


def effect_counts(diff: PlanDiff) -> dict[str, int]:
    """Effect -> how many nodes it touches, read from the diff's effect lines (worst first)."""
    out: dict[str, int] = {}
    for line in diff.effects:
        effect = next((e for e in EFFECT_ORDER if line.startswith(e)), None)
        if effect is None:
            continue
        match = _NODES.search(line)
        out[effect] = out.get(effect, 0) + (int(match.group(1)) if match else 0)
    return out


def _resource_signature(change: Any) -> tuple[str, str, str, tuple[str, ...]]:
    fields: tuple[str, ...] = ()
    if change.action not in ("create", "delete"):
        fields = tuple(f"{f.path} {shown(f.old)} -> {shown(f.new)}" for f in change.fields)
        fields += tuple(f"{p} [secret] changed" for p in change.secret_paths if p not in change.paths)
    return change.action, change.type, change.name, fields


def group_fleet(outcomes: list[StackOutcome]) -> FleetGroups:
    """Stacks grouped by their config edits, resource changes grouped by identity, most stacks first."""
    sets: dict[tuple[ConfigEdit, ...], ChangeSet] = {}
    resources: dict[tuple[str, str, str, tuple[str, ...]], ResourceGroup] = {}
    unchanged: list[str] = []
    failed: dict[str, str] = {}
    for outcome in outcomes:
        if outcome.error is not None or outcome.diff is None:
            failed[outcome.stack] = outcome.error or "not planned"
            continue
        if not outcome.has_changes:
            unchanged.append(outcome.stack)
            continue
        key = tuple(outcome.config)
        group = sets.setdefault(key, ChangeSet(key, [], dict.fromkeys(EFFECT_ORDER, 0), dict.fromkeys(ACTIONS, 0)))
        group.stacks.append(outcome.stack)
        for effect, nodes in effect_counts(outcome.diff).items():
            group.effects[effect] += nodes
        for action in ACTIONS:
            group.counts[action] += outcome.diff.count(action)
        for change in outcome.diff.changes:
            sig = _resource_signature(change)
            resources.setdefault(sig, ResourceGroup(*sig, stacks=[])).stacks.append(outcome.stack)
    for group in sets.values():
        group.effects = {e: n for e, n in group.effects.items() if n or _named_effect(e, group, outcomes)}
    return FleetGroups(
        change_sets=sorted(sets.values(), key=lambda g: -len(g.stacks)),
        resources=sorted(resources.values(), key=lambda r: (-len(r.stacks), r.type, r.name)),
        unchanged=unchanged,
        failed=failed,
    )


def _named_effect(effect: str, group: ChangeSet, outcomes: list[StackOutcome]) -> bool:
    """An effect of the group whose line counts no nodes (a protected resource replaced) still shows."""
    return any(
        o.diff is not None and o.stack in group.stacks and any(line.startswith(effect) for line in o.diff.effects)
        for o in outcomes
    )
