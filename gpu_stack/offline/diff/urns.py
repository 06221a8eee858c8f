"""Which resource the engine takes a planned resource to be: by URN, as `pulumi up` matches the
state, not by name alone. A resource whose parent chain changed (so its URN) is the same resource
only where an alias names its old place (the resource's own, or one of its parents': the engine
gives children their parents' aliases); else the engine creates it anew and deletes the old one."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

Records = Mapping[str, Mapping[str, Any]]
"""A plan's resources by name (names are unique in a plan)."""


def resources_by_name(doc: Mapping[str, Any]) -> dict[str, Any]:
    return {r["name"]: r for r in doc["resources"]}


def _chains(resources: Records) -> Any:
    """name -> every parent-type chain the resource answers to (its own first, then its aliases')."""

    @cache
    def chains(name: str) -> frozenset[tuple[str, ...]]:
        r = resources.get(name)
        if r is None:
            return frozenset()
        parent = r.get("parent")
        above = chains(parent) if parent else frozenset({()})
        out = {chain + (r["type"],) for chain in above}
        for alias in (r.get("options") or {}).get("aliases") or []:
            if alias.get("noParent"):
                out.add((r["type"],))
            elif alias.get("parent"):
                out |= {chain + (r["type"],) for chain in chains(alias["parent"])}
        return frozenset(out)

    return chains


def own_chain(resources: Records, name: str) -> tuple[str, ...]:
    """The types of the resource's parents, then its own: the type part of its URN."""
    types: list[str] = []
    at = resources.get(name)
    while at is not None:
        types.insert(0, at["type"])
        parent = at.get("parent")
        at = resources.get(parent) if parent else None
    return tuple(types)


def moved_reason(old_doc: Mapping[str, Any], new_doc: Mapping[str, Any]) -> Any:
    """name -> why the engine will not take the new resource for the old one (None: it will)."""
    old, new = resources_by_name(old_doc), resources_by_name(new_doc)
    chains = _chains(new)

    def reason(name: str) -> str | None:
        before = own_chain(old, name)
        if before in chains(name):
            return None
        after = own_chain(new, name)
        return (
            f"its URN changes ({'$'.join(before)} -> {'$'.join(after)}) and no alias names the old one: "
            "`pulumi up` creates it anew and deletes the old one"
        )

    return reason
