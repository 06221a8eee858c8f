"""What a change does to running work: the effects a reviewer must know before approving.

All rules are in one table, `RULES`: each says which changed thing (a rendered object of the
chart, a Helm value when the chart could not be rendered, or a Pulumi resource) at which field
paths has which effect. `annotate` attaches each effect to the change that causes it and returns
the summary lines the diff leads with, one per effect, with the nodes it touches.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..design.node_prep import launch_values
from .diff.dra_rollout import ROLLOUT_JOB as DRA_ROLLOUT_JOB, DraRolloutSummary, dra_rollout
from .diff.model import COMMAND, CREATE, DELETE, JOB, RELEASE, REPLACE, UPDATE, PlanDiff, ResourceChange, named, under
from .diff.rollout import GUARD_JOB, MIG_CONFIGMAP, ROLLOUT_JOB, MigRolloutSummary, layout_edit_line, mig_rollout

ROLLS_DEVICE_PLUGIN = "rolls the device plugin"
RESTARTS_RUNTIME = "restarts the container runtime"
RECONFIGURES_MIG = "reconfigures MIG"
MOVES_ALLOCATION = "moves nodes between the device plugin and DRA"
REFUSES_MIG_EDIT = "refuses a MIG layout edit"
RESTARTS_MIG_MANAGER = "restarts the MIG manager"
RESTARTS_DRIVER = "upgrades or restarts the driver"
REPLACES_PROTECTED = "replaces a protected resource"
REINSTALLS_OPERATOR = "reinstalls the operator"
EFFECT_ORDER = (
    REFUSES_MIG_EDIT, REPLACES_PROTECTED, REINSTALLS_OPERATOR, RESTARTS_DRIVER, RECONFIGURES_MIG, MOVES_ALLOCATION,
    RESTARTS_MIG_MANAGER, RESTARTS_RUNTIME, ROLLS_DEVICE_PLUGIN,
)


@dataclass(frozen=True)
class Rule:
    effect: str
    on: str
    """`object:<Kind>` (a rendered chart object), `values` (the Release's Helm values, used only when
    the chart could not be rendered) or `resource:<type token>` (`resource:*`: any resource)."""
    paths: tuple[str, ...] = ()
    """Field-path prefixes that trigger it (empty: any change)."""
    unless: tuple[str, ...] = ()
    """Field-path prefixes that never trigger it."""
    when: str | None = None
    """An extra condition, by name (see `_CONDITIONS`)."""


# The effect table. Sources: the operator rolls the device-plugin DaemonSet when the ClusterPolicy's
# devicePlugin section changes (not when a ConfigMap's content does); a new mig-parted ConfigMap
# name rolls the MIG manager DaemonSet, whose pods re-apply their node's current config when they
# start (k8s-mig-manager v0.13.1, cmd/nvidia-mig-manager/main.go: the informer's AddFunc); the MIG
# rollout Job repartitions a node after draining it (see `_rollout_effects`), and the layout guard
# Job refuses a layout changed under a name nodes select; the driver DaemonSet is upgraded node by
# node per driver.upgradePolicy; the toolkit (by the operator, or node-prep.sh's runtime phase)
# restarts the runtime when the runtime config changes.
RULES: tuple[Rule, ...] = (
    Rule(ROLLS_DEVICE_PLUGIN, "object:ClusterPolicy", ("spec.devicePlugin", "spec.mig.strategy")),
    Rule(ROLLS_DEVICE_PLUGIN, "values", ("values.devicePlugin", "values.mig.strategy")),
    Rule(RESTARTS_RUNTIME, "object:ClusterPolicy", ("spec.toolkit",), when="toolkit_by_operator"),
    Rule(RESTARTS_RUNTIME, "values", ("values.toolkit",), when="toolkit_by_operator"),
    Rule(RESTARTS_RUNTIME, f"resource:{COMMAND}", ("triggers", "create"), when="runtime_config_changes"),
    # A node's MIG config change is carried out by the MIG rollout Job (see `_rollout_effects`).
    Rule(RECONFIGURES_MIG, "object:ClusterPolicy", ("spec.mig.strategy",), when="mig_nodes"),
    Rule(RECONFIGURES_MIG, "values", ("values.mig.strategy",), when="mig_nodes"),
    Rule(RESTARTS_MIG_MANAGER, "object:ClusterPolicy", ("spec.migManager.config",), when="mig_nodes"),
    Rule(RESTARTS_MIG_MANAGER, "values", ("values.migManager.config",), when="mig_nodes"),
    Rule(RESTARTS_DRIVER, "object:ClusterPolicy", ("spec.driver",), ("spec.driver.upgradePolicy",), when="driver_by_operator"),
    Rule(RESTARTS_DRIVER, "values", ("values.driver",), ("values.driver.upgradePolicy",), when="driver_by_operator"),
    Rule(REPLACES_PROTECTED, "resource:*", (), when="protected"),
    # A new release name or namespace replaces the Release, old one first (deleteBeforeReplace:
    # Helm will not install a release over objects another release owns).
    Rule(REINSTALLS_OPERATOR, f"resource:{RELEASE}", (), when="replaced"),
)


@dataclass
class _Context:
    base: Mapping[str, Any]
    head: Mapping[str, Any]
    gpu_nodes: list[str]
    hits: dict[str, list[str]] = field(default_factory=dict)
    """effect -> nodes (or resources) it touches, in order."""
    possible: set[str] = field(default_factory=set)
    rollout: MigRolloutSummary | None = None
    dra: DraRolloutSummary | None = None


def _dra_effects(diff: PlanDiff, ctx: _Context) -> None:
    """The DRA rollout Job drains and moves every node whose allocation changes
    (offline/diff/dra_rollout.py)."""
    summary = dra_rollout(diff)
    job = diff.get(JOB, DRA_ROLLOUT_JOB)
    if summary is None or job is None:
        return
    ctx.dra = summary
    hits = ctx.hits.setdefault(MOVES_ALLOCATION, [])
    hits.extend(m.node for m in summary.moves if m.node not in hits)
    if MOVES_ALLOCATION not in job.effects:
        job.effects.append(MOVES_ALLOCATION)


def _dra_text(summary: DraRolloutSummary | None) -> str:
    """Which way each node goes, and what that means for the pods that come back."""
    if summary is None:
        return ""
    to_dra = [m.node for m in summary.moves if m.to_dra]
    back = [m.node for m in summary.moves if not m.to_dra]
    text = ""
    if to_dra:
        text += (f"; to DRA: {named(to_dra)}, where pods then get GPUs through ResourceClaims only (a pod that requests "
                 "nvidia.com/gpu runs there only on a cluster with DRAExtendedResource, dra.extendedResource)")
    if back:
        text += f"; back to the device plugin: {named(back)}, where pods then request nvidia.com/gpu again"
    return text


def _values(doc: Mapping[str, Any]) -> dict[str, Any]:
    rel = next((r for r in doc.get("resources") or [] if r.get("type") == RELEASE), None)
    return dict(((rel or {}).get("inputs") or {}).get("values") or {})


def _enabled(doc: Mapping[str, Any], section: str) -> bool:
    return bool((_values(doc).get(section) or {}).get("enabled", True)) if _values(doc) else False


def _trigger_values(inputs: Mapping[str, Any] | None) -> tuple[str | None, dict[str, Any]]:
    """node_prep's command: (the script's sha256 from its triggers, the node's values from its
    launch string); an older plan's triggers [sha256, JSON of the values] are read too."""
    trig = (inputs or {}).get("triggers") or []
    digest = trig[0] if trig and isinstance(trig[0], str) else None
    create = (inputs or {}).get("create")
    vals: Any = launch_values(create) if isinstance(create, str) else {}
    if not vals and len(trig) > 1 and isinstance(trig[1], str) and trig[1].startswith("{"):
        try:
            vals = json.loads(trig[1])
        except ValueError:
            vals = {}
    return digest, vals if isinstance(vals, dict) else {}


RUNTIME_KEYS = ("GPU_STACK_RUNTIME", "GPU_STACK_TOOLKIT_VERSION", "GPU_STACK_PHASES")


def _runtime_config_changes(change: Any, ctx: _Context) -> bool:
    _, new = _trigger_values(change.new)
    if "runtime" not in str(new.get("GPU_STACK_PHASES", "")).split():
        return False
    if change.action == CREATE:
        return True
    old_digest, old = _trigger_values(change.old)
    new_digest, _ = _trigger_values(change.new)
    if any(old.get(k) != new.get(k) for k in RUNTIME_KEYS):
        return True
    if old_digest != new_digest:
        ctx.possible.add(RESTARTS_RUNTIME)
        return True
    return False


def _mig_nodes(doc: Mapping[str, Any]) -> list[str]:
    """Nodes whose MIG config (the capacity table's `mig` column) turns MIG on."""
    return [
        str(r["node"]) for r in doc.get("capacity") or []
        if isinstance(r, Mapping) and r.get("node") != "TOTAL" and r.get("mig") not in (None, "-", "all-disabled")
    ]


def _rollout_effects(diff: PlanDiff, ctx: _Context) -> None:
    """The MIG rollout Job reconfigures (and drains) every node whose MIG config changes or goes
    back to whole GPUs; the layout guard refuses a layout edited under a name nodes select."""
    summary = mig_rollout(diff)
    job = diff.get(JOB, ROLLOUT_JOB)
    if summary is None or job is None:
        return
    ctx.rollout = summary
    if summary.refused:
        refused = ctx.hits.setdefault(REFUSES_MIG_EDIT, [])
        refused.extend(n for e in summary.refused for n in e.nodes if n not in refused)
        for change in (diff.get(JOB, GUARD_JOB), diff.get("kubernetes:core/v1:ConfigMap", MIG_CONFIGMAP)):
            if change is not None and REFUSES_MIG_EDIT not in change.effects:
                change.effects.append(REFUSES_MIG_EDIT)
    nodes = [m.node for m in summary.moves if m.old is not None]
    if not nodes:
        return
    hits = ctx.hits.setdefault(RECONFIGURES_MIG, [])
    hits.extend(n for n in nodes if n not in hits)
    if RECONFIGURES_MIG not in job.effects:
        job.effects.append(RECONFIGURES_MIG)


_CONDITIONS = {
    "toolkit_by_operator": lambda ch, ctx: _enabled(ctx.head, "toolkit") or _enabled(ctx.base, "toolkit"),
    "driver_by_operator": lambda ch, ctx: _enabled(ctx.head, "driver") or _enabled(ctx.base, "driver"),
    "mig_nodes": lambda ch, ctx: bool(_mig_nodes(ctx.head) or _mig_nodes(ctx.base)),
    "runtime_config_changes": _runtime_config_changes,
    "protected": lambda ch, ctx: ch.action in (REPLACE, DELETE) and any(n.startswith("protected") for n in ch.notes),
    "replaced": lambda ch, ctx: isinstance(ch, ResourceChange) and ch.action == REPLACE,
}


def _matches(rule: Rule, paths: list[str], any_change: bool) -> bool:
    relevant = [p for p in paths if not any(under(p, u) for u in rule.unless)]
    if not rule.paths:
        return any_change
    return any(under(p, root) for p in relevant for root in rule.paths)


def _nodes_of(effect: str, subject: str, ctx: _Context, change: Any) -> list[str]:
    if effect == RESTARTS_RUNTIME and isinstance(change, ResourceChange) and change.type == COMMAND:
        return [change.node or change.name]
    if effect in (RECONFIGURES_MIG, RESTARTS_MIG_MANAGER):
        return _mig_nodes(ctx.head) or _mig_nodes(ctx.base)
    if effect == REPLACES_PROTECTED:
        return [subject]
    return list(ctx.gpu_nodes)


def _gpu_nodes(doc: Mapping[str, Any]) -> list[str]:
    return [
        str(r["node"]) for r in doc.get("capacity") or []
        if isinstance(r, Mapping) and isinstance(r.get("node"), str) and r["node"] != "TOTAL"
    ]


def _apply(rule_on: Iterable[Rule], change: Any, subject: str, paths: list[str], ctx: _Context) -> list[str]:
    found: list[str] = []
    for rule in rule_on:
        if rule.effect in found or not _matches(rule, paths, True):
            continue
        cond = _CONDITIONS.get(rule.when) if rule.when else None
        if cond is not None and not cond(change, ctx):
            continue
        found.append(rule.effect)
        nodes = ctx.hits.setdefault(rule.effect, [])
        nodes.extend(n for n in _nodes_of(rule.effect, subject, ctx, change) if n not in nodes)
    return found


def _policy_text(doc: Mapping[str, Any]) -> str:
    policy = ((_values(doc).get("driver") or {}).get("upgradePolicy")) or {}
    if not policy:
        return ""
    if not policy.get("autoUpgrade", True):
        return (
            "driver.upgradePolicy.autoUpgrade is false: the new driver waits until each node's driver pod is "
            "deleted by hand (drain the node first)"
        )
    par = policy.get("maxParallelUpgrades", 1)
    steps = ["cordon"]
    wait = policy.get("waitForCompletion") or {}
    if wait.get("podSelector"):
        steps.append(f"wait for pods {wait['podSelector']!r}")
    steps.append("evict GPU pods")
    if (policy.get("drain") or {}).get("enable"):
        steps.append("drain")
    steps.append("reload the driver")
    at_once = "all nodes at once" if par == 0 else f"{par} node{'s' if par != 1 else ''} at a time"
    return f"the operator upgrades {at_once} (maxUnavailable {policy.get('maxUnavailable', '25%')}): " + ", ".join(steps)


def _rollout_text(summary: MigRolloutSummary | None) -> str:
    """What the rollout waits for before each relabel, and who goes back to whole GPUs."""
    if summary is None or not summary.moves:
        return ""
    text = (f"; before each relabel the rollout waits for the node's MIG manager to be ready on {summary.mig_configmap} "
            f"(mig.rollout.managerTimeout, {summary.manager_timeout}s)")
    if summary.evict and not summary.ignore_unevictable:
        text += " and fails the wave, before the cordon, on a DaemonSet's or static pod that holds GPUs"
    if summary.restored:
        text += (f"; back to whole GPUs (all-disabled, nodes[].mig removed), where the rollout set their MIG config: "
                 f"{named(list(summary.restored))}")
    return text


def _summary(effect: str, nodes: list[str], ctx: _Context) -> str:
    n = len(nodes)
    where = f"{n} node{'s' if n != 1 else ''}" + (f" ({named(nodes)})" if nodes else "")
    if effect == ROLLS_DEVICE_PLUGIN:
        return (
            f"rolls the device plugin on {where}: the nvidia-device-plugin DaemonSet restarts with the new "
            "config; running pods keep their GPUs, new GPU requests wait for the restart"
        )
    if effect == RESTARTS_RUNTIME:
        maybe = " (the node script changed: it restarts the runtime only where the runtime config it writes differs)" if RESTARTS_RUNTIME in ctx.possible else ""
        return f"restarts the container runtime on {where}{maybe}: the kubelet loses its runtime for a moment"
    if effect == RECONFIGURES_MIG:
        return f"reconfigures MIG on {where}: GPU pods there are evicted while the GPUs are repartitioned" + _rollout_text(ctx.rollout)
    if effect == MOVES_ALLOCATION:
        drain = "GPU pods there are evicted" if ctx.dra is None or ctx.dra.evict else "not drained (dra.rollout.evict false)"
        return (f"moves {where} between the device plugin and DRA, in drained waves: {drain}, and each node's old "
                "advertiser is gone before the new one is placed" + _dra_text(ctx.dra))
    if effect == REFUSES_MIG_EDIT and ctx.rollout is not None:
        return f"{REFUSES_MIG_EDIT}: " + "; ".join(layout_edit_line(e) for e in ctx.rollout.refused)
    if effect == RESTARTS_MIG_MANAGER:
        return (f"restarts the MIG manager on {where}: the operator rolls its DaemonSet onto the new mig-parted ConfigMap "
                "node by node, and each pod re-applies its node's current MIG config (an unchanged layout is not "
                "repartitioned; a layout changed under a name nodes select is refused by the layout guard)")
    if effect == RESTARTS_DRIVER:
        policy = _policy_text(ctx.head)
        return f"upgrades or restarts the driver on {where}: GPU pods on each node are evicted before its driver reloads" + (f"; {policy}" if policy else "")
    if effect == REPLACES_PROTECTED:
        return f"replaces a protected resource: {named(nodes)}: `pulumi up` refuses until protect is turned off"
    if effect == REINSTALLS_OPERATOR:
        return (
            f"reinstalls the operator on {where}: the old release is uninstalled before the new one is installed "
            "(a new release name or namespace), so for some minutes no operator runs and its operands (device "
            "plugin, GFD, DCGM exporter, MIG manager; with the operator's driver and toolkit, those too) are removed "
            "and come back; running GPU pods keep the GPUs they hold, new GPU requests wait (drain GPU work first "
            "where the operator runs the driver)"
        )
    return effect


def annotate(diff: PlanDiff, base: Mapping[str, Any], head: Mapping[str, Any], objects: list[Any]) -> list[str]:
    """Attach effects to every change (resource and object) and return the summary lines, worst first."""
    ctx = _Context(base=base, head=head, gpu_nodes=_gpu_nodes(head) or _gpu_nodes(base))
    rendered = {r.release for r in objects if r.unavailable is None}
    for change in diff.changes:
        rules = [r for r in RULES if r.on in (f"resource:{change.type}", "resource:*")]
        if change.type == RELEASE and change.name not in rendered:
            rules += [r for r in RULES if r.on == "values"]
        paths = change.paths or (["create"] if change.action == CREATE else [])
        change.effects = _apply(rules, change, change.name, paths, ctx)
    _rollout_effects(diff, ctx)
    _dra_effects(diff, ctx)
    for rel in objects:
        for ch in rel.changes:
            rules = [r for r in RULES if r.on == f"object:{ch.kind}"]
            if ch.action == UPDATE:
                ch.effects = _apply(rules, ch, ch.key, ch.paths, ctx)
        # The Release's own `values` change carries what its objects' changes do.
        release = diff.get(RELEASE, rel.release)
        if release is not None:
            for ch in rel.changes:
                release.effects.extend(f"{e} (via {ch.key})" for e in ch.effects if f"{e} (via {ch.key})" not in release.effects)
    return [_summary(e, ctx.hits[e], ctx) for e in EFFECT_ORDER if e in ctx.hits]


def add_objects_and_effects(result: PlanDiff, base: Any, head: Any, chart_dir: Path | None, render: Any = None) -> None:
    """The releases' object-level diff (real chart) and the effects of every change, into `result`.
    `render`: a renderer to share between diffs (the fleet renders each distinct values set once)."""
    from .diff.compute import plan_dict
    from .objects import release_objects, release_renderer

    base_doc, head_doc = plan_dict(base), plan_dict(head)
    result.objects = release_objects(base_doc, head_doc, render or release_renderer(chart_dir))
    result.effects = annotate(result, base_doc, head_doc, result.objects)
