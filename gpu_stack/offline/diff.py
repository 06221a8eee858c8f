"""Compare two offline plans the way `pulumi preview --diff` would, and say it for a reviewer.

Pure: plans in (a `Plan` or its JSON dict), a `PlanDiff` out, text or Markdown rendered from it.
Resources are matched by (type token, name). Whether a change is an in-place update or a
replacement follows the providers' own rules (see `_replace_reasons`), so the summary counts
are what the real preview prints, and the node commands that would run again are named.
"""

from __future__ import annotations

import difflib
import html
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import yaml

from ..stack_files import SECRET_PLACEHOLDER_PREFIX
from .render import NOISE_KEYS, clean_inputs, render_capacity

CREATE, UPDATE, REPLACE, DELETE = "create", "update", "replace", "delete"
ACTIONS = (CREATE, UPDATE, REPLACE, DELETE)
SYMBOLS = {CREATE: "+", UPDATE: "~", REPLACE: "+-", DELETE: "-"}

COMMAND = "command:remote:Command"
CONFIGMAP = "kubernetes:core/v1:ConfigMap"
SECRET_TYPE = "kubernetes:core/v1:Secret"
JOB = "kubernetes:batch/v1:Job"
RELEASE = "kubernetes:helm.sh/v3:Release"
K8S_PROVIDER = "pulumi:providers:kubernetes"
# Inputs the Helm provider cannot change in place (a new release name or namespace is a new release).
RELEASE_REPLACE_KEYS = ("name", "namespace")
# kubernetes provider settings that point it at another cluster: everything it manages is replaced.
PROVIDER_CLUSTER_KEYS = ("kubeconfig", "context", "cluster")


COMPONENT_NOTE = "(a component: no inputs of its own, it groups the resources under it)"


class DiffError(Exception):
    """The plans cannot be compared (or one of them would leak a secret)."""


# --------------------------------------------------------------------------- model
@dataclass(frozen=True)
class FieldChange:
    """One leaf that differs; `path` is dotted (`values.devicePlugin.config.name`, `data.default`)."""

    path: str
    old: Any
    new: Any

    @property
    def kind(self) -> str:
        if self.old is _ABSENT:
            return "added"
        if self.new is _ABSENT:
            return "removed"
        return "changed"


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


_ABSENT: Any = _Absent()


@dataclass
class ResourceChange:
    action: str
    type: str
    name: str
    fields: list[FieldChange] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    """Why a replacement (empty for updates, creates and deletes)."""
    old: dict[str, Any] | None = None
    new: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    """What a reviewer must know beyond the inputs (a protected resource that `pulumi up` won't delete)."""

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.fields]

    node_name: str | None = None
    """For a node command: the node it runs on (`gpu-dev-1 (10.20.0.11)`), when known."""

    effects: list[str] = field(default_factory=list)
    """What it does to running work (offline/effects.py), e.g. `rolls the device plugin`."""

    @property
    def node(self) -> str | None:
        return self.node_name if self.type == COMMAND else None

    @property
    def reruns_on_node(self) -> bool:
        """A remote command that runs again: created, replaced (triggers) or updated (its script changed)."""
        return self.type == COMMAND and self.action in (CREATE, UPDATE, REPLACE)


@dataclass
class PlanDiff:
    base_label: str
    head_label: str
    stack: str
    changes: list[ResourceChange]
    capacity: tuple[list[Any], list[Any]] = ([], [])
    warnings: tuple[list[str], list[str]] = ([], [])
    effects: list[str] = field(default_factory=list)
    """Effects on running work, worst first (offline/effects.py); the rendering leads with them."""
    objects: list[Any] = field(default_factory=list)
    """Object-level diff per Helm release (offline/objects.ReleaseObjects), when computed."""

    def count(self, action: str) -> int:
        return sum(1 for c in self.changes if c.action == action)

    @property
    def has_changes(self) -> bool:
        return bool(self.changes)

    def summary(self) -> str:
        return ", ".join(f"{self.count(a)} to {a}" for a in ACTIONS)

    def get(self, type_token: str, name: str) -> ResourceChange | None:
        return next((c for c in self.changes if c.type == type_token and c.name == name), None)

    def of_type(self, type_token: str) -> list[ResourceChange]:
        return [c for c in self.changes if c.type == type_token]

    @property
    def node_commands(self) -> list[ResourceChange]:
        return [c for c in self.changes if c.reruns_on_node]


# --------------------------------------------------------------------------- plans in
def plan_dict(plan: Any) -> dict[str, Any]:
    """A `Plan` or a plan JSON dict, as the JSON dict; refuses one that carries a secret."""
    doc = plan.to_json() if hasattr(plan, "to_json") else plan
    if not isinstance(doc, Mapping) or not isinstance(doc.get("resources"), list):
        raise DiffError("not a plan: expected a mapping with a 'resources' list")
    text = json.dumps(doc, default=str)
    if SECRET_PLACEHOLDER_PREFIX in text:
        raise DiffError("refusing to diff a plan that carries an unscrubbed secret value")
    return dict(doc)


def _resources(doc: Mapping[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in doc["resources"]:
        out[(r["type"], r["name"])] = r
    return out


def _clean(value: Any) -> Any:
    """Inputs without the SDK's bookkeeping keys (the same noise the plan's text view drops)."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if k not in NOISE_KEYS}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


# --------------------------------------------------------------------------- field diff
def field_changes(old: Any, new: Any, prefix: str = "") -> list[FieldChange]:
    """Leaf-level differences of two JSON values; lists of equal length compare item by item."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[FieldChange] = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in old:
                out.append(FieldChange(path, _ABSENT, new[key]))
            elif key not in new:
                out.append(FieldChange(path, old[key], _ABSENT))
            else:
                out.extend(field_changes(old[key], new[key], path))
        return out
    if isinstance(old, list) and isinstance(new, list):
        old_named, new_named = _by_name(old), _by_name(new)
        if old_named is not None and new_named is not None:
            # Lists of named items (containers, env, volumes): `env[GPU_STACK_NODE].value`, not `env[3].value`.
            out = []
            for key in list(new_named) + [k for k in old_named if k not in new_named]:
                path = f"{prefix}[{key}]"
                if key not in old_named:
                    out.append(FieldChange(path, _ABSENT, new_named[key]))
                elif key not in new_named:
                    out.append(FieldChange(path, old_named[key], _ABSENT))
                else:
                    out.extend(field_changes(old_named[key], new_named[key], path))
            if not out and list(old_named) != list(new_named):
                out.append(FieldChange(f"{prefix} (order)", list(old_named), list(new_named)))
            return out
        if len(old) == len(new):
            out = []
            for i, (a, b) in enumerate(zip(old, new)):
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


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + ".") or path.startswith(root + "[")


def command_node(inputs: Mapping[str, Any]) -> str | None:
    conn = inputs.get("connection")
    if isinstance(conn, Mapping) and isinstance(conn.get("host"), str):
        return conn["host"]
    return None


def _replace_reasons(
    type_token: str,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    paths: list[str],
    config_maps_mutable: bool,
) -> list[str]:
    """Why the provider would replace rather than update, mirroring each provider's rules."""
    reasons: list[str] = []
    if type_token.startswith("kubernetes:") and not type_token.startswith("kubernetes:helm.sh/"):
        # Kubernetes objects: a new name or namespace is a different object.
        for key in ("metadata.name", "metadata.namespace"):
            if key in paths:
                reasons.append(f"{key} changed")
        if type_token in (CONFIGMAP, SECRET_TYPE):
            immutable = bool(old.get("immutable")) or bool(new.get("immutable"))
            data_paths = [p for p in paths if _under(p, "data") or _under(p, "binaryData") or _under(p, "stringData")]
            if data_paths or "immutable" in paths:
                if immutable:
                    reasons.append("data of an immutable ConfigMap changed")
                elif not config_maps_mutable:
                    reasons.append("ConfigMap data changed (the kubernetes provider replaces ConfigMaps on data changes)")
        if type_token == JOB and any(_under(p, "spec") for p in paths):
            reasons.append("a Job's spec cannot be changed in place")
    elif type_token == RELEASE:
        for key in RELEASE_REPLACE_KEYS:
            if key in paths:
                reasons.append(f"release {key} changed")
    elif type_token == COMMAND:
        if any(_under(p, "triggers") for p in paths):
            reasons.append("triggers changed")
    elif type_token == K8S_PROVIDER:
        # The provider's DiffConfig: with a clusterIdentifier set before and after, only a change
        # of it replaces; adding or removing one never does (on- and off-boarding).
        old_id, new_id = old.get("clusterIdentifier"), new.get("clusterIdentifier")
        if old_id is not None and new_id is not None:
            if old_id != new_id:
                reasons.append("provider clusterIdentifier changed: it points at another cluster")
            return reasons
        if "clusterIdentifier" in paths:
            return reasons
        for key in PROVIDER_CLUSTER_KEYS:
            if key in paths:
                reasons.append(f"provider {key} changed: it points at another cluster")
    return reasons


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
    order = list(new_res) + [k for k in old_res if k not in new_res]
    for key in order:
        type_token, name = key
        o, n = old_res.get(key), new_res.get(key)
        if o is None:
            assert n is not None
            changes.append(ResourceChange(CREATE, type_token, name, old=None, new=_clean(n.get("inputs") or {})))
            continue
        if n is None:
            changes.append(ResourceChange(DELETE, type_token, name, old=_clean(o.get("inputs") or {}), new=None))
            continue
        oi, ni = _clean(o.get("inputs") or {}), _clean(n.get("inputs") or {})
        fields = field_changes(oi, ni)
        fields += field_changes(o.get("options") or {}, n.get("options") or {}, "options")
        if not fields:
            continue
        paths = [f.path for f in fields]
        reasons = _replace_reasons(type_token, oi, ni, paths, mutable)
        for prop in (n.get("options") or {}).get("replaceOnChanges") or []:
            if any(prop == "*" or _under(p, prop) for p in paths if not p.startswith("options.")):
                reasons.append(f"replaceOnChanges: {prop}")
        if type_token == K8S_PROVIDER and not same_stack:
            reasons = []
        changes.append(
            ResourceChange(REPLACE if reasons else UPDATE, type_token, name, fields, reasons, old=oi, new=ni)
        )
    changes = _cascade_provider_replacements(changes, old_res, new_res)
    _name_command_nodes(changes, old_doc, new_doc)
    for change in changes:
        old_opts = (old_res.get((change.type, change.name)) or {}).get("options") or {}
        if change.action in (DELETE, REPLACE) and old_opts.get("protect"):
            change.notes.append(
                f"protected: `pulumi up` refuses to {change.action} it until protect is turned off in a separate update"
            )
    return PlanDiff(
        base_label=base_label,
        head_label=head_label,
        stack=str(new_doc.get("stack") or old_doc.get("stack") or ""),
        changes=changes,
        capacity=(list(old_doc.get("capacity") or []), list(new_doc.get("capacity") or [])),
        warnings=(list(old_doc.get("warnings") or []), list(new_doc.get("warnings") or [])),
    )


def _cascade_provider_replacements(
    changes: list[ResourceChange],
    old_res: dict[tuple[str, str], dict[str, Any]],
    new_res: dict[tuple[str, str], dict[str, Any]],
) -> list[ResourceChange]:
    """A replaced provider replaces every resource it manages, changed or not (as the engine does)."""
    replaced = {c.name for c in changes if c.type.startswith("pulumi:providers:") and c.action == REPLACE}
    if not replaced:
        return changes
    by_key = {(c.type, c.name): c for c in changes}
    out = list(changes)
    for key, res in new_res.items():
        provider = (res.get("options") or {}).get("provider")
        if provider not in replaced or key not in old_res:
            continue
        reason = f"its provider {provider} is replaced"
        change = by_key.get(key)
        if change is None:
            inputs = _clean(res.get("inputs") or {})
            change = ResourceChange(REPLACE, key[0], key[1], [], [reason], old=inputs, new=inputs)
            out.append(change)
        elif change.action in (UPDATE, REPLACE):
            change.action = REPLACE
            change.reasons.append(reason)
    order = {key: i for i, key in enumerate(new_res)}
    return sorted(out, key=lambda c: order.get((c.type, c.name), len(order)))


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
        chain, name = [], change.name
        while name and name not in chain:
            chain.append(name)
            name = parents.get(name)
        found = sorted((n for n in nodes if any(n in link for link in chain)), key=len, reverse=True)
        host = command_node(change.new or change.old or {})
        if found:
            change.node_name = found[0] + (f" ({host})" if host and host != found[0] else "")
        else:
            change.node_name = host


# --------------------------------------------------------------------------- rendering helpers
class _Dumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)


def _yaml(value: Any) -> str:
    # No line folding: a long one-line value stays one line (folded YAML reads as a false change).
    return yaml.dump(value, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1 << 20)


def _scalar(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _line_diff(old: str, new: str, context: int = 3) -> list[str]:
    """A unified line diff (no file headers): ' ', '-' and '+' prefixed lines and @@ hunks."""
    lines = list(
        difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=context)
    )
    return lines[2:]


def _multiline(value: Any) -> bool:
    return isinstance(value, str) and "\n" in value.rstrip("\n")


def _path_get(value: Any, path: str) -> Any:
    """Follow a dotted path produced by field_changes (keys and [i] indexes)."""
    for token in re.findall(r"[^.\[\]]+|\[\d+\]", path):
        if token.startswith("["):
            idx = int(token[1:-1])
            value = value[idx] if isinstance(value, list) and idx < len(value) else _ABSENT
        else:
            value = value.get(token, _ABSENT) if isinstance(value, dict) else _ABSENT
        if value is _ABSENT:
            return _ABSENT
    return value


@dataclass
class _Block:
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


def _blocks(change: ResourceChange) -> list[_Block]:
    blocks: list[_Block] = []
    doc_roots = _value_document_roots(change)
    for root in doc_roots:
        key = root.split(".", 1)[1]
        old = _path_get(change.old, root)
        new = _path_get(change.new, root)
        old_text = "" if old is _ABSENT else _yaml({key: old})
        new_text = "" if new is _ABSENT else _yaml({key: new})
        # Whole subtree as context: Helm value subtrees are small and their nesting is the point.
        lines = _line_diff(old_text, new_text, context=10_000)
        blocks.append(_Block(f"{root} (Helm values)", [l for l in lines if not l.startswith("@@")]))
    for f in change.fields:
        if any(_under(f.path, r) for r in doc_roots):
            continue
        if _multiline(f.old) or _multiline(f.new):
            old_text = "" if f.old is _ABSENT else str(f.old)
            new_text = "" if f.new is _ABSENT else str(f.new)
            blocks.append(_Block(f.path, _line_diff(old_text, new_text)))
        else:
            blocks.append(_Block(f.path, [], scalar=f))
    # One-value changes first, then the line diffs they explain.
    return [b for b in blocks if b.scalar is not None] + [b for b in blocks if b.scalar is None]


def _scalar_text(f: FieldChange) -> str:
    if f.kind == "added":
        return f"{f.path}: added {_scalar(f.new)}"
    if f.kind == "removed":
        return f"{f.path}: removed (was {_scalar(f.old)})"
    return f"{f.path}: {_scalar(f.old)} -> {_scalar(f.new)}"


def _scalar_diff(f: FieldChange) -> list[str]:
    out = []
    if f.kind != "added":
        out.append(f"- {f.path}: {_scalar(f.old)}")
    if f.kind != "removed":
        out.append(f"+ {f.path}: {_scalar(f.new)}")
    return out


def _headline(change: ResourceChange) -> str:
    text = f"{SYMBOLS[change.action]} {change.action} {change.type} {change.name}"
    if change.reasons:
        text += f" ({'; '.join(change.reasons)})"
    return text


def _what(change: ResourceChange) -> str:
    """One line on what a created or deleted resource is (name/namespace or node)."""
    inputs = change.new if change.action == CREATE else change.old
    inputs = inputs or {}
    meta = inputs.get("metadata") if isinstance(inputs.get("metadata"), dict) else {}
    bits = []
    if change.type == COMMAND and change.node:
        bits.append(f"on node {change.node}")
    if meta.get("name"):
        ns = meta.get("namespace")
        bits.append(f"{ns}/{meta['name']}" if ns else str(meta["name"]))
    elif change.type == RELEASE and inputs.get("name"):
        bits.append(f"release {inputs.get('namespace', '')}/{inputs['name']} chart {inputs.get('chart')} {inputs.get('version')}")
    return ", ".join(bits)


def _body_for_new_or_gone(change: ResourceChange) -> list[str]:
    inputs = change.new if change.action == CREATE else change.old
    if not inputs:
        return []
    sign = "+" if change.action == CREATE else "-"
    # Long scripts by size and hash, as in the plan's text view (a change to one shows as a line diff).
    return [f"{sign} {line}" for line in _yaml(clean_inputs(inputs)).rstrip("\n").splitlines()]


def _node_command_lines(diff: PlanDiff) -> list[str]:
    cmds = diff.node_commands
    if not cmds:
        return ["Node commands that re-run: none"]
    out = ["Node commands that re-run:"]
    for c in cmds:
        where = c.node or "(node unknown)"
        why = {CREATE: "new", UPDATE: "its script changed", REPLACE: "; ".join(c.reasons)}[c.action]
        out.append(f"node command re-runs on {where}: {c.name} ({why})")
    return out


ROLLOUT_JOB = "mig-rollout-job"
MIG_CONFIGMAP = "gpu-operator-mig-config"


@dataclass(frozen=True)
class MigMove:
    """One node the MIG rollout Job will relabel, as the diff of two plans shows it."""

    node: str
    old: str | None
    """Its MIG config in the base plan; None when the node is new to the stack (first install)."""
    new: str
    wave: int
    expected: dict[str, Any]


@dataclass(frozen=True)
class MigRolloutSummary:
    moves: list[MigMove]
    wave_size: int
    evict: bool
    eviction_timeout: str
    timeout: str
    waves: int
    content_changes: list[str]
    """MIG configs whose definition changed under the same name (their nodes are not relabelled)."""


def _rows(rows: list[Any]) -> dict[str, Mapping[str, Any]]:
    return {r["node"]: r for r in rows if isinstance(r, Mapping) and isinstance(r.get("node"), str) and r["node"] != "TOTAL"}


def _parted(inputs: Mapping[str, Any] | None) -> dict[str, Any]:
    text = ((inputs or {}).get("data") or {}).get("config.yaml")
    try:
        doc = yaml.safe_load(text) if isinstance(text, str) else None
    except yaml.YAMLError:
        return {}
    return (doc or {}).get("mig-configs") or {} if isinstance(doc, dict) else {}


def mig_rollout(diff: PlanDiff) -> MigRolloutSummary | None:
    """Which nodes the MIG rollout Job of the head plan drains and relabels, in which waves.

    The Job relabels every node whose `nvidia.com/mig.config` differs from its config, in table
    order, `WAVE_SIZE` at a time; against a cluster that is at the base plan those are the nodes
    whose MIG config differs between the plans (and nodes new to the stack)."""
    job = diff.get(JOB, ROLLOUT_JOB)
    if job is None or job.action == DELETE or not job.new:
        return None
    try:
        (container,) = job.new["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        size = max(1, int(env.get("WAVE_SIZE") or 1))
    except (KeyError, TypeError, ValueError):
        return None
    old_rows, new_rows = _rows(diff.capacity[0]), _rows(diff.capacity[1])
    changing: list[tuple[str, str | None, str, dict[str, Any]]] = []
    unchanged: list[str] = []
    for node, row in new_rows.items():
        new = row.get("mig")
        if not isinstance(new, str) or new == "-":
            continue
        old_row = old_rows.get(node)
        old = old_row.get("mig") if old_row is not None else None
        if old == new:
            unchanged.append(node)
            continue
        advertises = row.get("advertises")
        before = None if old_row is None else (old if isinstance(old, str) and old != "-" else "(none)")
        changing.append((node, before, new, dict(advertises) if isinstance(advertises, Mapping) else {}))
    moves = [MigMove(node, old, new, i // size + 1, exp) for i, (node, old, new, exp) in enumerate(changing)]
    cm = diff.get(CONFIGMAP, MIG_CONFIGMAP)
    content_changes: list[str] = []
    if cm is not None and cm.action in (UPDATE, REPLACE):
        before, after = _parted(cm.old), _parted(cm.new)
        used = {str(new_rows[n].get("mig")) for n in unchanged}
        content_changes = sorted(c for c in used if c in before and c in after and before[c] != after[c])
    if not moves and not content_changes:
        return None
    return MigRolloutSummary(
        moves=moves,
        wave_size=size,
        evict=str(env.get("EVICT", "true")) == "true",
        eviction_timeout=str(env.get("EVICTION_TIMEOUT_SECONDS", "?")),
        timeout=str(env.get("TIMEOUT_SECONDS", "?")),
        waves=(len(moves) + size - 1) // size,
        content_changes=content_changes,
    )


def _mig_move_line(summary: MigRolloutSummary, move: MigMove) -> str:
    resources = ", ".join(f"{k}={v}" for k, v in sorted(move.expected.items()))
    verify = f"wait for nvidia.com/mig.config.state=success and {resources}" if resources else "wait for nvidia.com/mig.config.state=success"
    where = f"wave {move.wave} of {summary.waves}"
    if move.old is None:
        return (f"{where}: node {move.node} is new to the stack: the rollout Job sets MIG config {move.new} "
                f"(first install: no GPU pods to drain), then will {verify}")
    if not summary.evict:
        return (f"{where}: node {move.node} will be reconfigured without a drain (mig.rollout.evict false): "
                f"MIG config {move.old} -> {move.new}; relabel, {verify}")
    return (f"{where}: node {move.node} will be drained and reconfigured: MIG config {move.old} -> {move.new}; "
            f"cordon, evict its GPU pods (PodDisruptionBudgets respected, up to {summary.eviction_timeout}s), "
            f"relabel, {verify} (up to {summary.timeout}s), uncordon")


def mig_rollout_lines(diff: PlanDiff) -> list[str]:
    """The reviewer's view of a MIG edit: each node drained and reconfigured, by wave."""
    summary = mig_rollout(diff)
    if summary is None:
        return []
    out = []
    if summary.moves:
        out.append(
            f"MIG rollout: {len(summary.moves)} node(s) in {summary.waves} wave(s) of at most {summary.wave_size} "
            "(mig.rollout.maxUnavailable); a wave starts only when the previous one succeeded:"
        )
        out.extend(_mig_move_line(summary, m) for m in summary.moves)
    for config in summary.content_changes:
        out.append(
            f"MIG config {config} changes its definition under the same name: the rollout Job does not relabel its "
            "nodes, and MIG manager re-applies it when it restarts with the new ConfigMap, without a drain; "
            "drain those nodes first or give the config a new name"
        )
    return out


def _deleted_commands(diff: PlanDiff) -> list[ResourceChange]:
    return [c for c in diff.changes if c.type == COMMAND and c.action == DELETE]


def _capacity_lines(diff: PlanDiff) -> list[str]:
    old, new = diff.capacity
    if old == new:
        return []
    return [
        line
        for line in _line_diff(_capacity_table(old), _capacity_table(new), context=10_000)
        if not line.startswith("@@")
    ]


def _capacity_table(rows: list[Any]) -> str:
    if not rows:
        return ""
    if all(isinstance(r, dict) for r in rows):
        return "\n".join(line.rstrip() for line in render_capacity(rows).splitlines()[1:]) + "\n"
    return _yaml(rows)


def _warning_lines(diff: PlanDiff) -> list[str]:
    old, new = diff.warnings
    gone = [w for w in old if w not in new]
    added = [w for w in new if w not in old]
    return [f"- {w}" for w in gone] + [f"+ {w}" for w in added]


def _assert_no_secret(text: str) -> str:
    if SECRET_PLACEHOLDER_PREFIX in text:
        raise DiffError("diff output would carry a secret value; refusing to print it")
    return text


# --------------------------------------------------------------------------- text
def render_text(diff: PlanDiff) -> str:
    out = [f"Stack '{diff.stack}': {diff.base_label} -> {diff.head_label}", diff.summary()]
    if not diff.has_changes:
        out.append("No resource changes.")
    if diff.effects:
        out.append("Effects on running work:")
        out.extend(f"  ! {e}" for e in diff.effects)
    out.extend(_node_command_lines(diff))
    for c in _deleted_commands(diff):
        out.append(f"node command removed from the stack: {c.name}" + (f" (was on {c.node})" if c.node else ""))
    out.extend(mig_rollout_lines(diff))
    for change in diff.changes:
        out.append("")
        out.append(_headline(change))
        out.extend(f"    ! {note}" for note in change.notes)
        out.extend(f"    effect: {e}" for e in change.effects)
        what = _what(change)
        if what and change.action in (CREATE, DELETE):
            out.append(f"    {what}")
        if change.action in (CREATE, DELETE):
            body = _body_for_new_or_gone(change)
            out.extend("    " + line for line in body or [COMPONENT_NOTE])
            continue
        for block in _blocks(change):
            if block.scalar is not None:
                out.append(f"    {_scalar_text(block.scalar)}")
                continue
            out.append(f"    {block.title}:")
            out.extend("        " + line for line in block.lines)
    if diff.objects:
        from .objects import objects_text

        out.extend(objects_text(diff.objects))
    cap = _capacity_lines(diff)
    if cap:
        out.append("")
        out.append("Capacity:")
        out.extend("    " + line for line in cap)
    warn = _warning_lines(diff)
    if warn:
        out.append("")
        out.append("Warnings:")
        out.extend("    " + line for line in warn)
    return _assert_no_secret("\n".join(out) + "\n")


# --------------------------------------------------------------------------- markdown
MARKER = "<!-- gpu-stack-offline-diff -->"


def _fence(lines: Iterable[str], lang: str = "diff") -> list[str]:
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
    cmds = diff.node_commands
    if cmds:
        out.append("Node commands that re-run:")
        for c in cmds:
            why = {CREATE: "new", UPDATE: "its script changed", REPLACE: "; ".join(c.reasons)}[c.action]
            out.append(f"- node command re-runs on `{c.node or '(node unknown)'}`: `{c.name}` ({why})")
    else:
        out.append("Node commands that re-run: none")
    for c in _deleted_commands(diff):
        out.append(f"- node command removed from the stack: `{c.name}`" + (f" (was on `{c.node}`)" if c.node else ""))
    rollout = mig_rollout_lines(diff)
    if rollout:
        out.append("")
        out.append(e(rollout[0]) if rollout[0].startswith("MIG rollout:") else f"- {e(rollout[0])}")
        out.extend(f"- {e(line)}" for line in rollout[1:])
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
            what = _what(change)
            if what:
                out.append(e(what))
                out.append("")
            body = _body_for_new_or_gone(change)
            out.extend(_fence(body) if body else [COMPONENT_NOTE])
        else:
            lines: list[str] = []
            for block in _blocks(change):
                if block.scalar is not None:
                    lines.extend(_scalar_diff(block.scalar))
                    continue
                lines.append(f"# {block.title}")
                lines.extend(block.lines)
            out.extend(_fence(lines))
        out.append("")
        out.append("</details>")
        out.append("")
    if diff.objects:
        from .objects import objects_markdown

        out.extend(objects_markdown(diff.objects))
    cap = _capacity_lines(diff)
    if cap:
        out.append("<details open>")
        out.append("<summary>Capacity</summary>")
        out.append("")
        out.extend(_fence(cap))
        out.append("")
        out.append("</details>")
        out.append("")
    warn = _warning_lines(diff)
    if warn:
        out.append("Warnings:")
        out.append("")
        out.extend(_fence(warn))
        out.append("")
    return _assert_no_secret("\n".join(out).rstrip("\n") + "\n")


def render(diff: PlanDiff, fmt: str = "text") -> str:
    if fmt == "markdown":
        return render_markdown(diff)
    if fmt == "text":
        return render_text(diff)
    raise DiffError(f"unknown format {fmt!r} (text or markdown)")
