"""Compare two plans the way `pulumi preview --diff` would: a `PlanDiff` out of two plan documents.

Pure: plans in (a `Plan` or its JSON dict), resources matched by (type token, name), leaf-level
field changes, update or replace per replace_rules.py, the node each node command runs on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...config.stack_files import SECRET_PLACEHOLDER_PREFIX
from .model import (
    ABSENT,
    COMMAND,
    CREATE,
    DELETE,
    K8S_PROVIDER,
    REPLACE,
    UPDATE,
    DiffError,
    FieldChange,
    PlanDiff,
    ResourceChange,
    clean,
    secret_change,
)
from .replace_rules import cascade_provider_replacements, replace_reasons
from .urns import moved_reason, own_chain, resources_by_name


def plan_dict(plan: Any) -> dict[str, Any]:
    """A `Plan` or a plan JSON dict, as the JSON dict; refuses one that carries a secret."""
    doc = plan.to_json() if hasattr(plan, "to_json") else plan
    if not isinstance(doc, Mapping) or not isinstance(doc.get("resources"), list):
        raise DiffError("not a plan: expected a mapping with a 'resources' list")
    text = json.dumps(doc, default=str)
    if SECRET_PLACEHOLDER_PREFIX in text:
        raise DiffError("refusing to diff a plan that carries an unscrubbed secret value")
    for i, r in enumerate(doc["resources"]):
        if not isinstance(r, Mapping) or not isinstance(r.get("type"), str) or not isinstance(r.get("name"), str):
            raise DiffError(f"not a plan: resource {i} has no string 'type' and 'name'")
        if not isinstance(r.get("inputs", {}), Mapping) or not isinstance(r.get("secrets", {}), Mapping):
            raise DiffError(f"not a plan: resource {r['name'][:80]!r} has inputs or secrets that are not a mapping")
    return dict(doc)


def secret_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[FieldChange]:
    """Each secret input whose fingerprint differs (added, removed or changed), by path."""
    a, b = old.get("secrets") or {}, new.get("secrets") or {}
    return [secret_change(p, a.get(p), b.get(p)) for p in sorted(set(a) | set(b)) if a.get(p) != b.get(p)]


def _shows_secret(value: Any) -> bool:
    return "[secret]" in json.dumps(value, default=str)


def _fingerprints_missing(o: Mapping[str, Any], n: Mapping[str, Any]) -> bool:
    """A side whose inputs show [secret] but that records no fingerprints (a plan by older code)."""
    return any("secrets" not in r and _shows_secret(r.get("inputs")) for r in (o, n))


def _resources(doc: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in doc["resources"]:
        out[(r["type"], r["name"])] = r
    return out


def _keyed_changes(keys: Any, old: Mapping[Any, Any], new: Mapping[Any, Any], path_of: Any) -> list[FieldChange]:
    """For each key in order: added, removed, or the differences of its two values."""
    out: list[FieldChange] = []
    for key in keys:
        path = path_of(key)
        if key not in old:
            out.append(FieldChange(path, ABSENT, new[key]))
        elif key not in new:
            out.append(FieldChange(path, old[key], ABSENT))
        else:
            out.extend(field_changes(old[key], new[key], path))
    return out


def _same(old: Any, new: Any) -> bool:
    """Equal, and of the same type at every leaf (`==` alone takes 1 for 1.0 and for True)."""
    kind = type(old)
    if kind is not type(new):
        return False
    if kind is dict:
        return old.keys() == new.keys() and all(_same(value, new[key]) for key, value in old.items())
    if kind is list:
        return len(old) == len(new) and all(map(_same, old, new))
    return bool(old == new)


def field_changes(old: Any, new: Any, prefix: str = "") -> list[FieldChange]:
    """Leaf-level differences of two JSON values; lists of equal length compare item by item."""
    if old == new and _same(old, new):  # most of two plans: no walk that builds paths
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(set(old) | set(new), key=str)
        return _keyed_changes(keys, old, new, lambda key: f"{prefix}.{key}" if prefix else str(key))
    if isinstance(old, list) and isinstance(new, list):
        old_named, new_named = _by_name(old), _by_name(new)
        if old_named is not None and new_named is not None:
            # Lists of named items (containers, env, volumes): `env[GPU_STACK_NODE].value`, not `env[3].value`.
            keys = list(new_named) + [k for k in old_named if k not in new_named]
            out = _keyed_changes(keys, old_named, new_named, lambda key: f"{prefix}[{key}]")
            if not out and list(old_named) != list(new_named):
                out.append(FieldChange(f"{prefix} (order)", list(old_named), list(new_named)))
            return out
        if len(old) == len(new):
            out = []
            for i, (a, b) in enumerate(zip(old, new, strict=True)):
                out.extend(field_changes(a, b, f"{prefix}[{i}]"))
            return out
    if old == new and type(old) is type(new):
        return []
    return [FieldChange(prefix, old, new)]


def _by_name(items: list[Any]) -> dict[str, Any] | None:
    """A list whose items are mappings with distinct string `name`s, keyed by name; else None."""
    if not items or not all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items):
        return None
    named = {i["name"]: i for i in items}
    return named if len(named) == len(items) else None


def _kept_options(record: Mapping[str, Any]) -> dict[str, Any]:
    """A record's options but its aliases: an alias changes nothing `pulumi up` does to the resource
    (whether it is the same resource is moved_reason's question)."""
    return {k: v for k, v in (record.get("options") or {}).items() if k != "aliases"}


def command_node(inputs: Mapping[str, Any]) -> str | None:
    conn = inputs.get("connection")
    if isinstance(conn, Mapping) and isinstance(conn.get("host"), str):
        return conn["host"]
    return None


def diff_plans(
    base: Any,
    head: Any,
    base_label: str = "base",
    head_label: str = "head",
    same_stack: bool = True,
) -> PlanDiff:
    """What applying `head` over a stack that is at `base` would do, resource by resource.

    `same_stack=False` compares two stacks (dev vs prod): their providers point at different
    clusters by design, so that difference is listed but not treated as a replacement.
    """
    old_doc, new_doc = plan_dict(base), plan_dict(head)
    old_res, new_res = _resources(old_doc), _resources(new_doc)
    mutable = any(
        str(r.get("inputs", {}).get("enableConfigMapMutable")).lower() == "true"
        for r in new_doc["resources"]
        if r["type"] == K8S_PROVIDER
    )
    changes: list[ResourceChange] = []
    unknown: list[str] = []
    moved = moved_reason(old_doc, new_doc)
    order = list(new_res) + [k for k in old_res if k not in new_res]
    for key in order:
        type_token, name = key
        o, n = old_res.get(key), new_res.get(key)
        if o is None:
            assert n is not None
            changes.append(ResourceChange(CREATE, type_token, name, old=None, new=clean(n.get("inputs") or {})))
            continue
        if n is None:
            changes.append(ResourceChange(DELETE, type_token, name, old=clean(o.get("inputs") or {}), new=None))
            continue
        if o == n and _same(o, n) and moved(name) is None:  # the same record: nothing to walk
            if _fingerprints_missing(o, n):
                unknown.append(name)
            continue
        oi, ni = clean(o.get("inputs") or {}), clean(n.get("inputs") or {})
        fields = field_changes(oi, ni)
        missing = _fingerprints_missing(o, n)
        if missing:
            unknown.append(name)
        secrets = [] if missing else secret_changes(o, n)
        # Where the shown value itself changed (a secret that became plain text), that change says it.
        secrets = [s for s in secrets if not any(s.path == f.path or s.path.startswith((f.path + ".", f.path + "[")) for f in fields)]
        fields = fields + secrets
        fields += field_changes(_kept_options(o), _kept_options(n), "options")
        elsewhere = moved(name)
        if not fields and elsewhere is None:
            continue
        paths = [f.path for f in fields]
        reasons = replace_reasons(type_token, oi, ni, paths, n.get("options") or {}, mutable)
        if elsewhere is not None:
            reasons = [elsewhere, *reasons]
        if type_token == K8S_PROVIDER and not same_stack:
            reasons = []
        change = ResourceChange(REPLACE if reasons else UPDATE, type_token, name, fields, reasons, old=oi, new=ni)
        change.secret_paths = [f.path for f in secrets]
        changes.append(change)
    changes = cascade_provider_replacements(changes, old_res, new_res)
    _name_command_nodes(changes, old_doc, new_doc)
    for change in changes:
        if change.type == NODE_PATCH and change.action == DELETE:
            change.notes.append(_gone_node_note(change, old_doc))
    for change in changes:
        old_opts = (old_res.get((change.type, change.name)) or {}).get("options") or {}
        new_opts = (new_res.get((change.type, change.name)) or {}).get("options") or {}
        if change.action == REPLACE and new_opts.get("deleteBeforeReplace"):
            change.notes.append("deleted before its replacement is created (deleteBeforeReplace)")
        if change.action in (DELETE, REPLACE) and old_opts.get("protect"):
            change.notes.append(
                f"protected: `pulumi up` refuses to {change.action} it until protect is turned off in a separate update"
            )
    result = PlanDiff(
        base_label=base_label,
        head_label=head_label,
        stack=str(new_doc.get("stack") or old_doc.get("stack") or ""),
        changes=changes,
        capacity=(list(old_doc.get("capacity") or []), list(new_doc.get("capacity") or [])),
        warnings=(list(old_doc.get("warnings") or []), list(new_doc.get("warnings") or [])),
    )
    if unknown:
        result.secrets_unknown = unknown
    return result


NODE_PATCH = "kubernetes:core/v1:NodePatch"


def urn(doc: Mapping[str, Any], name: str) -> str:
    """The resource's URN as the engine builds it: the types of its parents, then its own."""
    return f"urn:pulumi:{doc.get('stack')}::{doc.get('project')}::{'$'.join(own_chain(resources_by_name(doc), name))}::{name}"


def _gone_node_note(change: ResourceChange, doc: Mapping[str, Any]) -> str:
    """A NodePatch's delete is a server-side apply: on a Node that has left the cluster it creates
    an empty one. What to run instead (docs/running-for-real.md, Removing a node)."""
    node = ((change.old or {}).get("metadata") or {}).get("name") or change.name
    target = urn(doc, change.name)
    return (
        f"if node {node} has already left the cluster, this delete creates an empty Node {node}: "
        f"run `pulumi up --exclude '{target}'`, then `pulumi state delete '{target}'` instead"
    )


def _name_command_nodes(changes: list[ResourceChange], *docs: Mapping[str, Any]) -> None:
    """Tell each node command which node it runs on: a node name found in its name or its parents'."""
    nodes: set[str] = set()
    parents: dict[str, str | None] = {}
    for doc in docs:
        for row in doc.get("capacity") or []:
            if isinstance(row, Mapping) and isinstance(row.get("node"), str) and row["node"] != "TOTAL":
                nodes.add(row["node"])
        for r in doc["resources"]:
            parents.setdefault(r["name"], r.get("parent"))
    for change in changes:
        if change.type != COMMAND:
            continue
        chain: list[str] = []
        name: str | None = change.name
        while name and name not in chain:
            chain.append(name)
            name = parents.get(name)
        # The node names inside the chain's names: each name's substrings looked up (a name is
        # short), not every node tried against it (10,000 nodes x 10,000 commands).
        found = sorted({link[i:j] for link in chain for i in range(len(link)) for j in range(i + 1, len(link) + 1)} & nodes,
                       key=len, reverse=True)
        host = command_node(change.new or change.old or {})
        if found:
            change.node_name = found[0] + (f" ({host})" if host and host != found[0] else "")
        else:
            change.node_name = host

