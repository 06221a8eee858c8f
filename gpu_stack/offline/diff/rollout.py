"""The MIG rollout a diff implies: which nodes the rollout Job drains and reconfigures, in which
waves, which go back to whole GPUs, and which layout edit the layout guard refuses.

The rendered diff leads with these lines, and ../effects.py takes the nodes it reconfigures from
the same summary, so the two never disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from .model import CONFIGMAP, DELETE, JOB, REPLACE, UPDATE, PlanDiff

ROLLOUT_JOB = "mig-rollout-job"
GUARD_JOB = "gpu-operator-mig-layout-guard-job"
MIG_CONFIGMAP = "gpu-operator-mig-config"
ALL_DISABLED = "all-disabled"


@dataclass(frozen=True)
class MigMove:
    """One node the MIG rollout Job will relabel, as the diff of two plans shows it."""

    node: str
    old: str | None
    """Its MIG config in the base plan; None when the node is new to the stack (first install)."""
    new: str
    wave: int
    expected: dict[str, Any]
    restore: bool = False
    """Its `mig` was removed: back to all-disabled (whole GPUs), if the rollout set `old`."""


@dataclass(frozen=True)
class LayoutEdit:
    """A MIG config whose layout changes under the same name."""

    config: str
    nodes: list[str]
    """The base plan's nodes that select it (the live labels when the cluster is at the base)."""
    refused: bool
    """The layout guard Job fails `pulumi up` before the release (nodes select it, a guard exists)."""


@dataclass(frozen=True)
class MigRolloutSummary:
    moves: list[MigMove]
    wave_size: int
    evict: bool
    eviction_timeout: str
    timeout: str
    manager_timeout: str
    mig_configmap: str
    ignore_unevictable: bool
    waves: int
    layout_edits: list[LayoutEdit]

    @property
    def restored(self) -> list[str]:
        return [m.node for m in self.moves if m.restore]

    @property
    def refused(self) -> list[LayoutEdit]:
        return [e for e in self.layout_edits if e.refused]


def _rows(rows: list[Any]) -> dict[str, Mapping[str, Any]]:
    return {r["node"]: r for r in rows if isinstance(r, Mapping) and isinstance(r.get("node"), str) and r["node"] != "TOTAL"}


def _parted(inputs: Mapping[str, Any] | None) -> dict[str, Any]:
    text = ((inputs or {}).get("data") or {}).get("config.yaml")
    try:
        doc = yaml.safe_load(text) if isinstance(text, str) else None
    except yaml.YAMLError:
        return {}
    return (doc or {}).get("mig-configs") or {} if isinstance(doc, dict) else {}


def _env(job: Any) -> dict[str, Any] | None:
    try:
        (container,) = job.new["spec"]["template"]["spec"]["containers"]
        return {e["name"]: e.get("value") for e in container["env"]}
    except (KeyError, TypeError, ValueError):
        return None


def _config(row: Mapping[str, Any] | None) -> str | None:
    """The row's MIG config; None for no row or no config (`-`)."""
    mig = row.get("mig") if row is not None else None
    return mig if isinstance(mig, str) and mig != "-" else None


def _layout_edits(diff: PlanDiff, old_rows: dict[str, Mapping[str, Any]]) -> list[LayoutEdit]:
    cm = diff.get(CONFIGMAP, MIG_CONFIGMAP)
    if cm is None or cm.action not in (UPDATE, REPLACE):
        return []
    before, after = _parted(cm.old), _parted(cm.new)
    guard = diff.get(JOB, GUARD_JOB)
    guarded = guard is not None and guard.action != DELETE and bool(guard.new)
    out = []
    for config in sorted(c for c in before if c in after and before[c] != after[c]):
        nodes = [n for n, row in old_rows.items() if _config(row) == config]
        if nodes:
            out.append(LayoutEdit(config, nodes, refused=guarded))
    return out


def mig_rollout(diff: PlanDiff) -> MigRolloutSummary | None:
    """Which nodes the MIG rollout Job of the head plan drains and relabels, in which waves.

    The Job relabels every node whose `nvidia.com/mig.config` differs from its config, in table
    order, `WAVE_SIZE` at a time; against a cluster that is at the base plan those are the nodes
    whose MIG config differs between the plans (and nodes new to the stack), and the nodes whose
    `mig` was removed (back to all-disabled, when the rollout had set their config)."""
    job = diff.get(JOB, ROLLOUT_JOB)
    env = _env(job) if job is not None and job.action != DELETE and job.new else None
    old_rows, new_rows = _rows(diff.capacity[0]), _rows(diff.capacity[1])
    layout_edits = _layout_edits(diff, old_rows)
    if env is None:
        return None
    try:
        size = max(1, int(env.get("WAVE_SIZE") or 1))
    except (TypeError, ValueError):
        return None
    changing: list[tuple[str, str | None, str, dict[str, Any], bool]] = []
    for node, row in new_rows.items():
        old_row = old_rows.get(node)
        new, old = _config(row), _config(old_row)
        advertises = row.get("advertises")
        expected = dict(advertises) if isinstance(advertises, Mapping) else {}
        if new is None:
            if old is not None and old != ALL_DISABLED:
                changing.append((node, old, ALL_DISABLED, expected, True))
            continue
        if old == new:
            continue
        before = None if old_row is None else (old or "(none)")
        changing.append((node, before, new, expected, False))
    moves = [MigMove(node, old, new, i // size + 1, exp, restore) for i, (node, old, new, exp, restore) in enumerate(changing)]
    if not moves and not layout_edits:
        return None
    return MigRolloutSummary(
        moves=moves,
        wave_size=size,
        evict=str(env.get("EVICT", "true")) == "true",
        eviction_timeout=str(env.get("EVICTION_TIMEOUT_SECONDS", "?")),
        timeout=str(env.get("TIMEOUT_SECONDS", "?")),
        manager_timeout=str(env.get("MANAGER_TIMEOUT_SECONDS", "?")),
        mig_configmap=str(env.get("MIG_CONFIGMAP") or "its mig-parted ConfigMap"),
        ignore_unevictable=str(env.get("IGNORE_UNEVICTABLE", "false")) == "true",
        waves=(len(moves) + size - 1) // size,
        layout_edits=layout_edits,
    )


def _mig_move_lines(summary: MigRolloutSummary, move: MigMove) -> list[str]:
    """What changes on the node, its steps, and the resources it must advertise: each on a line of
    its own, so every line stays within the diff's line limit whatever the names and the layout."""
    resources = ", ".join(f"{k}={v}" for k, v in sorted(move.expected.items()))
    where = f"wave {move.wave} of {summary.waves}"
    verify = ("wait for nvidia.com/mig.config.state=success and the resources below" if resources
              else "wait for nvidia.com/mig.config.state=success")
    done = [f"{where}: node {move.node} is done when it advertises {resources}"] if resources else []
    manager = f"wait for its MIG manager to be ready on {summary.mig_configmap} (up to {summary.manager_timeout}s)"
    check = ("its GPU pods a drain cannot evict are left to release their GPUs (mig.rollout.ignoreUnevictable)"
             if summary.ignore_unevictable else "refuse the wave if a DaemonSet's or static pod holds GPUs there")
    if move.old is None:
        return [(f"{where}: node {move.node} is new to the stack: the rollout Job sets MIG config {move.new} once its "
                f"MIG manager is ready on {summary.mig_configmap} (up to {summary.manager_timeout}s; first install: no GPU "
                f"pods to drain), then will {verify}"), *done]
    if move.restore:
        head = (f"{where}: node {move.node} goes back to whole GPUs (nodes[].mig removed): MIG config {move.old} -> "
                f"{move.new}, if the rollout set {move.old} (a config set by anyone else stays as it is)")
    elif summary.evict:
        head = f"{where}: node {move.node} will be drained and reconfigured: MIG config {move.old} -> {move.new}"
    else:
        head = f"{where}: node {move.node} will be reconfigured without a drain (mig.rollout.evict false): MIG config {move.old} -> {move.new}"
    if not summary.evict:
        steps = f"{manager}, relabel, {verify}"
    else:
        steps = (f"{check}, {manager}, cordon, evict its GPU pods (PodDisruptionBudgets respected, up to "
                 f"{summary.eviction_timeout}s), relabel, {verify} (up to {summary.timeout}s), uncordon")
    return [head, f"{where}: node {move.node} steps: {steps}", *done]


def layout_edit_line(edit: LayoutEdit) -> str:
    nodes = ", ".join(edit.nodes)
    if edit.refused:
        return (f"MIG config {edit.config} changes its layout under the same name while node(s) {nodes} select it: refused: "
                f"`pulumi up` fails at the layout guard Job ({GUARD_JOB}) before the operator release changes, since the "
                "MIG manager would re-partition those nodes without a drain; give the new layout a new name and point the nodes at it")
    return (f"MIG config {edit.config} changes its layout under the same name while node(s) {nodes} select it: MIG manager "
            "re-applies it when it restarts with the new ConfigMap, without a drain; give the new layout a new name")


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
        out.extend(line for m in summary.moves for line in _mig_move_lines(summary, m))
    out.extend(layout_edit_line(e) for e in summary.layout_edits)
    return out
