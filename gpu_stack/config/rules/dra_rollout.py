"""The capacity floor of the device plugin <-> DRA rollout (`dra.rollout.minSchedulableGpus`).

While a wave of nodes moves, those nodes are cordoned and offer the scheduler nothing; the floor is
how many GPUs of the stack's nodes stay schedulable throughout. The rollout Job forms its waves so
that the floor holds (config/dra-rollout/dra-rollout.sh, at run time, from what the nodes
advertise then); a plan in which moving even one of the nodes that may move breaks it is refused
here, before anything is registered.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..dra import DRA
from ..errors import Problem
from ..facts import node_allocation
from ..root import Settings


def floor_gpus(setting: int | str, total: int) -> int:
    """The floor as a count of GPUs: a count as given, a percentage of `total` rounded up."""
    if isinstance(setting, str):
        return -(-total * int(setting.rstrip("%")) // 100)
    return setting


def count_wave_size(max_unavailable: int | str, nodes: int) -> int:
    """Nodes per wave from `maxUnavailable`: a count as given, a percentage of `nodes` rounded
    down; at least 1."""
    if isinstance(max_unavailable, str):
        return max(1, nodes * int(max_unavailable.rstrip("%")) // 100)
    return max(1, max_unavailable)


def plan_wave_size(max_unavailable: int | str, gpus: Sequence[int], floor: int) -> int:
    """Nodes per wave: `maxUnavailable`'s count, made smaller so that any wave of that many of
    the nodes (`gpus`: each node's GPUs), the largest ones included, leaves `floor` GPUs of the
    rest schedulable; at least 1 (the rule below refuses a plan where one node already breaks it)."""
    size = count_wave_size(max_unavailable, len(gpus))
    spare = sum(gpus) - floor
    largest = sorted(gpus, reverse=True)
    fits = 0
    while fits < len(largest) and sum(largest[: fits + 1]) <= spare:
        fits += 1
    return max(1, min(size, fits))


def dra_rollout_rules(settings: Settings) -> list[Problem]:
    """A floor that no wave can keep: a node that may move (one on DRA, or one whose allocation
    is set explicitly: the way back) has more GPUs than the stack's others minus the floor."""
    rollout = settings.dra.rollout
    nodes = settings.nodes
    total = sum(n.gpu.count for n in nodes)
    floor = floor_gpus(rollout.min_schedulable_gpus, total)
    if floor > total:
        return [Problem(key="dra.rollout.minSchedulableGpus", value=rollout.min_schedulable_gpus,
                        message=f"the stack's nodes have {total} GPU(s) in all: a floor above that can never hold")]
    moving = [n for n in nodes if node_allocation(settings, n) == DRA or n.allocation is not None]
    for n in moving:
        if total - n.gpu.count < floor:
            return [Problem(
                key="dra.rollout.minSchedulableGpus", value=rollout.min_schedulable_gpus,
                message=(f"moving node {n.name} ({n.gpu.count} GPU(s)) between the device plugin and DRA would leave "
                         f"{total - n.gpu.count} of the stack's {total} GPU(s) schedulable, fewer than the floor of "
                         f"{floor}; lower the floor or add GPU nodes"),
            )]
    return []
