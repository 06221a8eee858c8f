"""The MIG rollout a diff implies: which nodes the rollout Job drains and reconfigures, in which waves.

The rendered diff leads with these lines, and ../effects.py takes the nodes it reconfigures from
the same summary, so the two never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import yaml

from .model import CONFIGMAP, DELETE, JOB, REPLACE, UPDATE, PlanDiff

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

