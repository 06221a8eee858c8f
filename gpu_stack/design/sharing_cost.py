"""What sharing costs, from the sharing benchmark's lines (pure; no Pulumi, no I/O).

Each benchmark pod prints one line per window it computed (config/validation/sharing-bench.sh):
  RESULT gpu=H200 mode=mps replicas=8 k=2 pod=1 size=small bodies=4096 batches=12 rate=... p50_us=45 p99_us=51 uuid=GPU-...
(`uuid`, the physical GPU the pod got, is optional: a log from one GPU may leave it out), and the local harness adds what one sharer taking more than its share does to the others:
  MEMORY gpu=H200 mode=mps replicas=4 pod=0 asked_mib=115016 share_mib=35942 result=refused
A line may carry a prefix (`[process 3] `, a log timestamp) and a trailing `# comment`.

`cells` adds up the pods that shared one physical GPU in one window (round K, size, GPU uuid): its
`k` is how many pods really computed on that GPU (on a node of several GPUs a round's pods spread
over them), with their aggregate rate (interactions per second), the median of their p50 and the
worst p99; windows of the same k on several GPUs are averaged (rate) and merged (p50, p99). `solo` is what one pod gets with the GPU to
itself: time-slicing with K=1 (a whole GPU, no limit), else that mode's own K=1 (MPS pods are
limited to 100/R % of the GPU's threads even alone). `cost_table` is the stack output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from statistics import median
from typing import Any

_INT = r"[0-9]+"
_WORD = r"[A-Za-z0-9._-]+"
RESULT_FIELDS = {
    "gpu": _WORD, "mode": r"time-slicing|mps", "replicas": _INT, "k": _INT, "pod": _INT, "size": r"[a-z]+",
    "bodies": _INT, "batches": _INT, "rate": _INT, "p50_us": _INT, "p99_us": _INT, "uuid": r"(GPU|MIG)-[A-Za-z0-9-]{1,80}|-",
}
OPTIONAL = {"uuid": "-"}
MEMORY_FIELDS = {
    "gpu": _WORD, "mode": r"time-slicing|mps", "replicas": _INT, "pod": _INT, "asked_mib": _INT, "share_mib": _INT,
    "result": r"allocated|refused",
}
_LINE = re.compile(r"(?:^|\s)(RESULT|MEMORY)\s+(.*)$")


class ResultsError(ValueError):
    """A results line that is not what the benchmark prints (names the line)."""


@dataclass(frozen=True)
class Window:
    """One pod's measurement in one window (one RESULT line)."""

    gpu: str
    mode: str
    replicas: int
    k: int
    pod: int
    size: str
    bodies: int
    batches: int
    rate: int
    p50_us: int
    p99_us: int
    uuid: str = "-"


@dataclass(frozen=True)
class MemoryProbe:
    """One sharer's allocation in the memory test (one MEMORY line)."""

    gpu: str
    mode: str
    replicas: int
    pod: int
    asked_mib: int
    share_mib: int
    result: str


@dataclass(frozen=True)
class Cell:
    """All pods of one window: K pods of a GPU shared `replicas` ways in `mode`, at one size."""

    gpu: str
    mode: str
    replicas: int
    size: str
    bodies: int
    k: int
    pods: int
    rate: int
    """Aggregate interactions per second of the K pods."""
    p50_us: int
    """Median of the pods' p50 iteration time."""
    p99_us: int
    """Worst pod's p99 iteration time."""


@dataclass(frozen=True)
class Results:
    windows: tuple[Window, ...]
    memory: tuple[MemoryProbe, ...]


def _fields(body: str, spec: dict[str, str], number: int, kind: str) -> dict[str, Any]:
    body = body.split("#", 1)[0]
    pairs: dict[str, str] = {}
    for token in body.split():
        key, sep, value = token.partition("=")
        if not sep or key in pairs:
            raise ResultsError(f"line {number}: {kind} field '{token}' is not key=value (or repeats a key)")
        pairs[key] = value
    for key, default in OPTIONAL.items():
        if key in spec:
            pairs.setdefault(key, default)
    missing = [k for k in spec if k not in pairs]
    if missing:
        raise ResultsError(f"line {number}: {kind} line lacks {', '.join(missing)}")
    out: dict[str, Any] = {}
    for key, pattern in spec.items():
        value = pairs[key]
        if not re.fullmatch(pattern, value):
            raise ResultsError(f"line {number}: {kind} {key}={value!r} is not {pattern}")
        out[key] = int(value) if pattern == _INT else value
    return out


def parse_results(text: str) -> Results:
    """Every RESULT and MEMORY line of a log (other lines are skipped)."""
    windows: list[Window] = []
    memory: list[MemoryProbe] = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = _LINE.search(line)
        if match is None:
            continue
        kind, body = match.groups()
        if kind == "RESULT":
            w = Window(**_fields(body, RESULT_FIELDS, number, kind))
            if w.k < 1 or w.k > w.replicas or w.batches < 1:
                raise ResultsError(f"line {number}: RESULT k={w.k} replicas={w.replicas} batches={w.batches} is impossible")
            windows.append(w)
        else:
            memory.append(MemoryProbe(**_fields(body, MEMORY_FIELDS, number, kind)))
    return Results(tuple(windows), tuple(memory))


def cells(windows: Iterable[Window]) -> list[Cell]:
    """One cell per (GPU model, mode, replicas, size, pods that shared one GPU), first seen first."""
    shared: dict[tuple[str, str, int, str, int, str], list[Window]] = {}
    for w in windows:
        shared.setdefault((w.gpu, w.mode, w.replicas, w.size, w.k, w.uuid), []).append(w)
    by_k: dict[tuple[str, str, int, str, int], list[list[Window]]] = {}
    for (gpu, mode, replicas, size, _round, _uuid), ws in shared.items():
        by_k.setdefault((gpu, mode, replicas, size, len({w.pod for w in ws})), []).append(ws)
    out = []
    for (gpu, mode, replicas, size, k), groups in by_k.items():
        every = [w for ws in groups for w in ws]
        out.append(Cell(
            gpu=gpu, mode=mode, replicas=replicas, size=size, bodies=every[0].bodies, k=k, pods=k,
            rate=round(sum(sum(w.rate for w in ws) for ws in groups) / len(groups)),
            p50_us=int(median(w.p50_us for w in every)), p99_us=max(w.p99_us for w in every),
        ))
    return out


def solo(all_cells: Iterable[Cell], gpu: str, size: str, mode: str | None = None) -> Cell | None:
    """One pod alone on the GPU: time-slicing K=1 (a whole GPU), else `mode`'s own K=1."""
    ones = [c for c in all_cells if c.gpu == gpu and c.size == size and c.k == 1 and c.pods == 1]
    for wanted in ("time-slicing", mode):
        found = [c for c in ones if c.mode == wanted]
        if found:
            return max(found, key=lambda c: c.rate)
    return None


def cost_table(results: Results) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """GPU model -> mode -> one row per replicas, size and K: the `sharingCost` stack output.
    vsSolo: aggregate rate over one pod alone (solo); p99VsSolo: worst p99 over the solo p50."""
    all_cells = cells(results.windows)
    table: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for c in all_cells:
        base = solo(all_cells, c.gpu, c.size, c.mode)
        row: dict[str, Any] = {
            "replicas": c.replicas, "size": c.size, "bodies": c.bodies, "k": c.k, "pods": c.pods,
            "interactionsPerSecond": c.rate, "p50Us": c.p50_us, "p99Us": c.p99_us,
        }
        if base is not None:
            row["vsSolo"] = round(c.rate / base.rate, 3)
            row["p99VsSolo"] = round(c.p99_us / max(1, base.p50_us), 2)
        table.setdefault(c.gpu, {}).setdefault(c.mode, []).append(row)
    return table


def results_from_table(table: dict[str, Any]) -> Results:
    """Windows behind a `sharingCost` stack output: per row, `pods` windows sharing its aggregate
    rate, each with its p50 and p99 (so `cells` gives the row back)."""
    windows = []
    try:
        for gpu, modes in table.items():
            for mode, rows in modes.items():
                for r in rows:
                    pods, rate = int(r["pods"]), int(r["interactionsPerSecond"])
                    for pod in range(pods):
                        windows.append(Window(
                            gpu=str(gpu), mode=str(mode), replicas=int(r["replicas"]), k=int(r["k"]), pod=pod,
                            size=str(r["size"]), bodies=int(r["bodies"]), batches=1,
                            rate=rate // pods + (rate % pods if pod == 0 else 0),
                            p50_us=int(r["p50Us"]), p99_us=int(r["p99Us"]),
                        ))
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise ResultsError(f"the sharingCost output is not what the benchmark writes ({type(exc).__name__}: {exc})") from exc
    return Results(tuple(windows), ())
