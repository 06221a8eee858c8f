"""The sharing advisor: from the sharing benchmark's cells, per GPU model and problem size, which
mode (time-slicing or MPS) and how many replicas, for one goal (pure; `python -m gpu_stack advise`).

An option is a mode and a replica count R, judged with all R pods busy:
  time-slicing xR  the K=R window of any time-slicing run (no limit depends on R)
  mps xR           the K=R window of an MPS run with R replicas (the device plugin gives each
                   client 100/R % of the threads and 1/R of the memory, so only that run counts)
Goals:
  throughput  the most aggregate work; every option within `tolerance` of the best is as good, and
              the fewest replicas among them win (same work, shorter iterations, more memory each)
  latency     every pod's p99 iteration time at most `max_slowdown` x a pod alone (solo p50): the
              most replicas that meet it, then the most work
  memory      each replica needs `memory_gib`: only MPS enforces a share (1/R of the GPU), so MPS
              with the most replicas whose share holds it
`memory_gib` also bounds the replicas of the other goals (a share smaller than the need is out).
Options of both modes within `tolerance` of each other are reported as "either mode".
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from .sharing_cost import Cell, MemoryProbe, Results, cells, solo

Goal = Literal["throughput", "latency", "memory"]
MODES = ("time-slicing", "mps")


@dataclass(frozen=True)
class Option:
    mode: str
    replicas: int
    cell: Cell
    vs_solo: float
    p99_vs_solo: float

    @property
    def label(self) -> str:
        return f"{self.mode} x{self.replicas}"


@dataclass(frozen=True)
class Advice:
    gpu: str
    size: str
    bodies: int
    goal: Goal
    modes: tuple[str, ...]
    """The recommended mode, or both when they are within tolerance ("either mode"); empty: none fits."""
    replicas: int | None
    """The recommended replica count (of the first recommended mode; each option carries its own)."""
    options: tuple[Option, ...]
    """Every option measured, best first for the goal."""
    chosen: tuple[Option, ...]
    why: str
    memory_note: str = ""
    config: tuple[str, ...] = field(default_factory=tuple)

    @property
    def headline(self) -> str:
        if not self.modes or self.replicas is None:
            return "no sharing option meets the goal: do not share this GPU (or relax the goal)"
        if len(self.chosen) > 1:
            return "either mode: " + " or ".join(f"{_name(o.mode)} with {o.replicas} replicas" for o in self.chosen)
        return f"{_name(self.modes[0])}, {self.replicas} replicas"


def _name(mode: str) -> str:
    return "MPS" if mode == "mps" else "time-slicing"


def options(all_cells: Sequence[Cell], gpu: str, size: str) -> list[Option]:
    """Every (mode, R) measured with all R pods busy, R >= 2."""
    out: dict[tuple[str, int], Option] = {}
    mine = [c for c in all_cells if c.gpu == gpu and c.size == size]
    for c in mine:
        if c.k < 2 or c.pods != c.k:
            continue
        if c.mode == "mps" and c.replicas != c.k:
            continue
        base = solo(mine, gpu, size, c.mode)
        if base is None:
            continue
        opt = Option(c.mode, c.k, c, c.rate / base.rate, c.p99_us / max(1, base.p50_us))
        key = (c.mode, c.k)
        if key not in out or opt.cell.rate > out[key].cell.rate:
            out[key] = opt
    return sorted(out.values(), key=lambda o: (o.mode, o.replicas))


def gpu_memory_mib(memory: Sequence[MemoryProbe], gpu: str) -> int | None:
    """The GPU's memory as the memory test saw it (share x replicas), if it ran on this model."""
    probes = [m for m in memory if m.gpu == gpu]
    return max(m.share_mib * m.replicas for m in probes) if probes else None


def memory_note(memory: Sequence[MemoryProbe], gpu: str) -> str:
    """What the memory test showed on this GPU model, in one sentence per mode."""
    lines = []
    for mode in MODES:
        probes = [m for m in memory if m.gpu == gpu and m.mode == mode]
        if not probes:
            continue
        greedy = [m for m in probes if m.asked_mib > m.share_mib]
        modest = [m for m in probes if m.asked_mib <= m.share_mib]
        got = sum(m.result == "allocated" for m in modest)
        taker = "got it" if greedy and all(m.result == "allocated" for m in greedy) else "was refused"
        lines.append(
            f"{mode} x{probes[0].replicas}: a pod asking for more than its 1/{probes[0].replicas} share {taker}; "
            f"{got} of {len(modest)} pods asking for less than their share got it"
        )
    if not lines:
        return "MPS limits each pod to 1/R of the GPU's memory; time-slicing limits none (one pod can take it all)"
    return "; ".join(lines)


def _within(best: float, value: float, tolerance: float) -> bool:
    return value >= best * (1 - tolerance)


def advise_one(
    results: Results,
    gpu: str,
    size: str,
    goal: Goal = "throughput",
    *,
    tolerance: float = 0.10,
    max_slowdown: float | None = None,
    memory_gib: float | None = None,
    gpu_memory_gib: float | None = None,
    all_cells: Sequence[Cell] | None = None,
) -> Advice:
    """`all_cells`: cells(results.windows), when the caller computed them once for every model."""
    all_cells = cells(results.windows) if all_cells is None else all_cells
    opts = options(all_cells, gpu, size)
    bodies = next((c.bodies for c in all_cells if c.gpu == gpu and c.size == size), 0)
    mib = gpu_memory_mib(results.memory, gpu)
    total_gib = mib / 1024 if mib is not None else gpu_memory_gib
    note = memory_note(results.memory, gpu)
    fits = opts
    why_memory = ""
    if memory_gib is not None:
        if total_gib is None:
            raise ValueError(f"{gpu}: the GPU's memory is unknown (no memory test in the results): give --gpu-memory-gib")
        fits = [o for o in opts if total_gib / o.replicas >= memory_gib]
        why_memory = f"; {memory_gib:g} GiB per replica of {total_gib:.0f} GiB allows at most {int(total_gib // memory_gib)} replicas"
    if goal == "memory":
        if memory_gib is None:
            raise ValueError("goal memory needs --memory-gib (what one replica must be able to allocate)")
        fits = [o for o in fits if o.mode == "mps"]
        ranked = sorted(fits, key=lambda o: (-o.replicas, -o.cell.rate))
        chosen = ranked[:1]
        why = f"only MPS enforces a memory share (1/R of the GPU per pod){why_memory}"
    elif goal == "latency":
        if max_slowdown is None:
            raise ValueError("goal latency needs --max-slowdown (a pod's p99 at most that many times its time alone)")
        meet = [o for o in fits if o.p99_vs_solo <= max_slowdown]
        ranked = sorted(meet, key=lambda o: (-o.replicas, -o.cell.rate))
        top = ranked[0] if ranked else None
        chosen = [o for o in ranked if top and o.replicas == top.replicas and _within(top.cell.rate, o.cell.rate, tolerance)]
        why = f"every pod's p99 at most {max_slowdown:g}x a pod alone (p50), the most replicas that meet it{why_memory}"
        ranked += [o for o in fits if o not in meet]
    else:
        ranked = sorted(fits, key=lambda o: (-o.cell.rate, o.replicas))
        best = ranked[0].cell.rate if ranked else 0
        close = [o for o in ranked if _within(best, o.cell.rate, tolerance)]
        # Per mode, the fewest replicas that are as good: both modes when both have one.
        chosen = [min(mine, key=lambda o: o.replicas) for m in MODES if (mine := [o for o in close if o.mode == m])]
        why = (
            f"the most aggregate work with all pods busy; within {tolerance:.0%} of the best counts as equal, "
            f"then the fewest replicas{why_memory}"
        )
    chosen_modes = tuple(m for m in MODES if any(o.mode == m for o in chosen))
    replicas = chosen[0].replicas if chosen else None
    ranked += [o for o in opts if o not in ranked]
    return Advice(gpu, size, bodies, goal, chosen_modes, replicas, tuple(ranked), tuple(chosen), why, note)


def advise(
    results: Results,
    goal: Goal = "throughput",
    *,
    sizes: Sequence[str] = (),
    gpu_memory_gib: dict[str, float] | None = None,
    **kw: float | None,
) -> list[Advice]:
    """One Advice per GPU model and size in the results (sizes: only these); `gpu_memory_gib`:
    GPU model -> its memory, where the results hold no memory test."""
    seen: dict[tuple[str, str], None] = {}
    for w in results.windows:
        if not sizes or w.size in sizes:
            seen.setdefault((w.gpu, w.size))
    memory = gpu_memory_gib or {}
    all_cells = cells(results.windows)
    return [
        advise_one(results, gpu, size, goal, gpu_memory_gib=memory.get(gpu), all_cells=all_cells, **kw)  # type: ignore[arg-type]
        for gpu, size in seen
    ]


# --------------------------------------------------------------------------- the command's options
OPTION_RANGES: dict[str, tuple[float, float, str]] = {
    "--tolerance": (0.0, 1.0, "a fraction from 0 up to (not including) 1, such as 0.10"),
    "--max-slowdown": (0.0, 10_000.0, "a factor above 0 and at most 10000, such as 2 or 1.5"),
    "--memory-gib": (0.0, 100_000.0, "GiB above 0 and at most 100000, such as 8 or 0.5"),
    "--gpu-memory-gib": (0.0, 100_000.0, "GiB above 0 and at most 100000, such as 141"),
}
"""Each number option of `advise`: (exclusive low, high, what is allowed); --tolerance may be 0
and is below 1 (a tolerance of 1 counts every option as the best)."""


_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?", re.ASCII)


def option_number(option: str, text: str | None) -> float | None:
    """The value of a number option of `advise`, or ValueError naming the option, the value and
    what is allowed: ASCII digits only, finite, within its range (never NaN, infinity, a negative
    or zero where a size is meant)."""
    if text is None:
        return None
    low, high, allowed = OPTION_RANGES[option]
    shown = repr(text[:40])
    if not _DECIMAL.fullmatch(text):
        if text.strip().lstrip("+-").lower() in ("nan", "inf", "infinity"):
            raise ValueError(f"{option} {shown}: is not a finite number; must be {allowed}")
        raise ValueError(f"{option} {shown}: is not a number in ASCII digits; must be {allowed}")
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"{option} {shown}: is not a finite number; must be {allowed}")
    ok = (low <= value < high) if option == "--tolerance" else (low < value <= high)
    if not ok:
        raise ValueError(f"{option} {shown}: is out of range; must be {allowed}")
    return value


def profile_key(gpu: str, mode: str, replicas: int) -> str:
    """The sharing profile the advice names (`h200-mps4`): a label value and one `--path` part, so a
    GPU model's '.' or '_' becomes '-' (a '.' would be read as a path separator) and it is cut to 63."""
    suffix = f"-{'mps' if mode == 'mps' else 'ts'}{replicas}"
    stem = re.sub(r"[^a-z0-9]+", "-", gpu.lower()).strip("-")[: 63 - len(suffix)].strip("-") or "gpu"
    return stem + suffix


def config_lines(advice: Advice, node_indexes: Sequence[int], all_nodes: int) -> list[str]:
    """The `pulumi config set` lines for each recommended option: the cluster default when every
    node is one of `node_indexes` (this GPU model, whole GPUs), else a profile those nodes select."""
    if advice.replicas is None:
        return []
    lines = []
    for option in advice.chosen:
        mode, replicas = option.mode, option.replicas
        if node_indexes and len(node_indexes) == all_nodes:
            lines.append(f"pulumi config set --path 'gpu-stack:sharing.mode' {mode}")
            lines.append(f"pulumi config set --path 'gpu-stack:sharing.replicas' {replicas}")
        else:
            key = profile_key(advice.gpu, mode, replicas)
            lines.append(f"pulumi config set --path 'gpu-stack:sharing.profiles.{key}.mode' {mode}")
            lines.append(f"pulumi config set --path 'gpu-stack:sharing.profiles.{key}.replicas' {replicas}")
            lines += [f"pulumi config set --path 'gpu-stack:nodes[{i}].sharing' {key}" for i in node_indexes]
        if len(advice.chosen) > 1:
            lines.append("# or")
    return lines[:-1] if lines and lines[-1] == "# or" else lines


def render(advice: Advice, config: Sequence[str] = ()) -> str:
    """The advice as text: headline, why, every option's numbers, memory, the config lines."""
    out = [f"{advice.gpu}, size {advice.size} ({advice.bodies} bodies), goal {advice.goal}: {advice.headline}"]
    out.append(f"  why: {advice.why}")
    out.append("  option             all pods busy (interactions/s)   vs one pod alone   worst p99 vs alone")
    for o in advice.options:
        mark = "  <- recommended" if o in advice.chosen else ""
        out.append(
            f"  {o.label:<18} {o.cell.rate / 1e9:>10,.1f} billion {o.vs_solo:>19.2f}x {o.p99_vs_solo:>19.2f}x{mark}"
        )
    if "mps" in advice.modes:
        alone = [o for o in advice.chosen if o.mode == "mps"]
        out.append(f"  note: under MPS a pod alone gets 1/{alone[0].replicas} of the GPU's threads (the device plugin's limit)")
    out.append(f"  memory: {advice.memory_note}")
    if config:
        out.append("  set:")
        out += [f"    {line}" for line in config]
    return "\n".join(out) + "\n"
