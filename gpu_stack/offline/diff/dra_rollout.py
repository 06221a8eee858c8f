"""The device plugin <-> DRA rollout a diff implies: which nodes the rollout Job drains and moves,
which way, in which waves, and the capacity floor it keeps (gpu_stack/design/dra_rollout.py).

It reads the Job's node table (the ConfigMap `dra-rollout-nodes`) of both plans: a node whose
mode differs, or a DRA node new to the table (the base plan had no DRA in play: every node was on
the device plugin), is moved. The waves are those of the plan's `WAVE_SIZE`; the Job may make a
wave smaller at run time to keep the floor (a node cordoned by someone else counts for nothing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .model import CONFIGMAP, DELETE, JOB, PlanDiff, named

ROLLOUT_JOB = "dra-rollout-job"
TABLE = "dra-rollout-nodes"
DRA = "dra"


@dataclass(frozen=True)
class DraMove:
    node: str
    to_dra: bool
    wave: int
    devices: int
    """The devices its ResourceSlices must show (towards DRA)."""
    expected: str
    """What the device plugin must advertise (the way back), as `resource=count, ...`."""


@dataclass(frozen=True)
class DraRolloutSummary:
    moves: list[DraMove]
    wave_size: int
    waves: int
    min_gpus: str
    evict: bool
    ignore_unevictable: bool
    eviction_timeout: str
    timeout: str
    plugin_timeout: str


def _table(inputs: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """node -> its table line's words after the name."""
    text = ((inputs or {}).get("data") or {}).get("nodes")
    out: dict[str, list[str]] = {}
    for line in text.splitlines() if isinstance(text, str) else []:
        words = line.split()
        if len(words) >= 4:
            out[words[0]] = words[1:]
    return out


def _env(job: Any) -> dict[str, Any] | None:
    try:
        (container,) = job.new["spec"]["template"]["spec"]["containers"]
        return {e["name"]: e.get("value") for e in container["env"]}
    except (KeyError, TypeError, ValueError):
        return None


def dra_rollout(diff: PlanDiff) -> DraRolloutSummary | None:
    """Which nodes the head plan's rollout Job moves between the device plugin and DRA, against a
    cluster that is at the base plan; None when it moves none."""
    job = diff.get(JOB, ROLLOUT_JOB)
    table = diff.get(CONFIGMAP, TABLE)
    env = _env(job) if job is not None and job.action != DELETE and job.new else None
    if env is None or table is None or table.action == DELETE:
        return None
    try:
        size = max(1, int(env.get("WAVE_SIZE") or 1))
    except (TypeError, ValueError):
        return None
    before, after = _table(table.old), _table(table.new)
    changing: list[tuple[str, bool, int, str]] = []
    for node, words in after.items():
        mode, devices, pairs = words[0], words[2], words[3:]
        was = before[node][0] if node in before else "device-plugin"
        if mode == was:
            continue
        changing.append((node, mode == DRA, int(devices) if devices.isdigit() else 0, ", ".join(pairs)))
    if not changing:
        return None
    moves = [DraMove(node, to_dra, i // size + 1, devices, expected) for i, (node, to_dra, devices, expected) in enumerate(changing)]
    return DraRolloutSummary(
        moves=moves,
        wave_size=size,
        waves=(len(moves) + size - 1) // size,
        min_gpus=str(env.get("MIN_GPUS", "0")),
        evict=str(env.get("EVICT", "true")) == "true",
        ignore_unevictable=str(env.get("IGNORE_UNEVICTABLE", "false")) == "true",
        eviction_timeout=str(env.get("EVICTION_TIMEOUT_SECONDS", "?")),
        timeout=str(env.get("TIMEOUT_SECONDS", "?")),
        plugin_timeout=str(env.get("PLUGIN_TIMEOUT_SECONDS", "?")),
    )


def _move_lines(summary: DraRolloutSummary, move: DraMove) -> list[str]:
    where = f"wave {move.wave} of {summary.waves}"
    way = "from the device plugin to DRA" if move.to_dra else "from DRA back to the device plugin"
    drained = "drained and moved" if summary.evict else "moved without a drain (dra.rollout.evict false)"
    if move.to_dra:
        switch = (f"nvidia.com/gpu.deploy.device-plugin=false, wait until it advertises no nvidia.com/ resource (up to "
                  f"{summary.timeout}s); only then gpu-stack/allocation=dra, wait for its DRA kubelet plugin pod (up to "
                  f"{summary.plugin_timeout}s) and its ResourceSlices with {move.devices} device(s) (up to {summary.timeout}s)")
    else:
        switch = (f"remove gpu-stack/allocation, wait until its ResourceSlices are gone (up to {summary.timeout}s); only then "
                  f"nvidia.com/gpu.deploy.device-plugin=true, wait until it advertises {move.expected or 'its resources'} "
                  f"(up to {summary.timeout}s)")
    lines = [f"{where}: node {move.node} will be {drained} {way}"]
    if summary.evict:
        check = ("its GPU pods a drain cannot evict are left to release their GPUs (dra.rollout.ignoreUnevictable)"
                 if summary.ignore_unevictable else "refuse the wave if a DaemonSet's or static pod holds GPUs there")
        lines.append(f"{where}: node {move.node} drain: {check}, cordon, evict its GPU pods (PodDisruptionBudgets "
                     f"respected, up to {summary.eviction_timeout}s)")
    lines.append(f"{where}: node {move.node} switch: {switch}" + ("; then uncordon" if summary.evict else ""))
    return lines


def stranded(diff: PlanDiff) -> list[str]:
    """The nodes the base plan's rollout Job had on DRA, where the head plan has no Job at all: no
    node is set to DRA and none has `allocation` set, so nothing moves them back. They keep their
    labels (gpu-stack/allocation=dra, the operator's device plugin off) while the DRA driver's
    release goes: they advertise no GPU either way."""
    table = diff.get(CONFIGMAP, TABLE)
    if table is None or table.action != DELETE:
        return []
    return [node for node, words in _table(table.old).items() if words[0] == DRA]


def dra_rollout_lines(diff: PlanDiff) -> list[str]:
    """The reviewer's view of an allocation change: each node drained and moved, by wave; or the
    nodes a change would leave with no GPU advertised (`stranded`)."""
    left = stranded(diff)
    if left:
        return [(f"DRA rollout: WARNING: {named(left)} would advertise no GPU at all: with no node on DRA and no "
                 "nodes[i].allocation set, the rollout Job and the DRA driver go, and nothing takes DRA's labels off "
                 "these nodes. Set nodes[i].allocation: devicePlugin on them, and keep it until an `up` has moved them "
                 "(docs/dra.md, the way back).")]
    summary = dra_rollout(diff)
    if summary is None:
        return []
    floor = (f", made smaller where needed to keep {summary.min_gpus} GPU(s) schedulable (dra.rollout.minSchedulableGpus)"
             if summary.min_gpus not in ("0", "") else "")
    head = (f"DRA rollout: {len(summary.moves)} node(s) in {summary.waves} wave(s) of at most {summary.wave_size} "
            f"(dra.rollout.maxUnavailable{floor}); a wave starts only when the previous one succeeded, and a node never "
            "advertises its GPUs through both the device plugin and DRA:")
    return [head, *(line for m in summary.moves for line in _move_lines(summary, m))]
