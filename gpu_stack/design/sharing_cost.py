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

from ..config.safe_input import escape

_INT = r"[0-9]{1,15}"
"""A count or a measurement: ASCII digits, at most 15 (a float holds it exactly; nothing bigger is measured)."""
_WORD = r"[A-Za-z0-9._-]{1,64}"
RESULT_FIELDS = {
    "gpu": _WORD, "mode": r"time-slicing|mps", "replicas": _INT, "k": _INT, "pod": _INT, "size": r"[a-z]{1,20}",
    "bodies": _INT, "batches": _INT, "rate": _INT, "p50_us": _INT, "p99_us": _INT, "uuid": r"(GPU|MIG)-[A-Za-z0-9-]{1,80}|-",
}
OPTIONAL = {"uuid": "-"}
MEMORY_FIELDS = {
    "gpu": _WORD, "mode": r"time-slicing|mps", "replicas": _INT, "pod": _INT, "asked_mib": _INT, "share_mib": _INT,
    "result": r"allocated|refused",
}
_LINE = re.compile(r"(?:^|\s)(RESULT|MEMORY)\s+(.*)$")

MAX_REPLICAS = 1024
"""The most replicas a sharing profile may have (config/sharing.py): no window has more pods on a GPU."""
MAX_LINES = 200_000
"""RESULT and MEMORY lines read at most (a full benchmark of 64 GPU models writes a few thousand)."""
MAX_GPU_MODELS = 64
MAX_SIZES = 16
"""Distinct problem sizes read at most (a stack runs at most 6)."""
MAX_CELLS = 20_000
"""Distinct (GPU model, mode, replicas, size, pods) measured at most: bounds the advisor's work."""


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


def _checked(pairs: dict[str, Any], spec: dict[str, str], where: str, kind: str) -> dict[str, Any]:
    """The fields of one RESULT or MEMORY record, each checked by its pattern (the same for a log
    line and for a row of the `sharingCost` output), numbers as int within their bounds."""
    for key, default in OPTIONAL.items():
        if key in spec:
            pairs.setdefault(key, default)
    missing = [k for k in spec if k not in pairs]
    if missing:
        raise ResultsError(f"{where}: {kind} lacks {', '.join(missing)}")
    out: dict[str, Any] = {}
    for key, pattern in spec.items():
        value = pairs[key]
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(text, str) or not re.fullmatch(pattern, text):
            shown = escape(repr(value)[:60])
            what = "ASCII digits (at most 15)" if pattern == _INT else f"one of {pattern}" if "|" in pattern else pattern
            raise ResultsError(f"{where}: {kind} {key}={shown} is not {what}")
        out[key] = int(text) if pattern == _INT else text
    if kind == "RESULT":
        if not 1 <= out["k"] <= out["replicas"] <= MAX_REPLICAS or out["batches"] < 1:
            raise ResultsError(
                f"{where}: RESULT k={out['k']} replicas={out['replicas']} batches={out['batches']} is impossible "
                f"(1 <= k <= replicas <= {MAX_REPLICAS}, batches >= 1)"
            )
        if out["rate"] < 1 or out["bodies"] < 1:
            raise ResultsError(f"{where}: RESULT rate={out['rate']} bodies={out['bodies']} is impossible (a window that ran computed something)")
        if out["p50_us"] < 1 or out["p99_us"] < out["p50_us"]:
            raise ResultsError(
                f"{where}: RESULT p50_us={out['p50_us']} p99_us={out['p99_us']} is impossible (an iteration takes at least "
                "1 us, and the p99 is at least the p50)"
            )
    elif not 1 <= out["replicas"] <= MAX_REPLICAS or out["share_mib"] < 1:
        raise ResultsError(
            f"{where}: MEMORY replicas={out['replicas']} share_mib={out['share_mib']} is impossible "
            f"(1 to {MAX_REPLICAS} replicas, a share of at least 1 MiB)"
        )
    return out


def _fields(body: str, spec: dict[str, str], number: int, kind: str) -> dict[str, Any]:
    body = body.split("#", 1)[0]
    pairs: dict[str, str] = {}
    for token in body.split():
        key, sep, value = token.partition("=")
        if not sep or key in pairs:
            raise ResultsError(f"line {number}: {kind} field '{escape(token[:60])}' is not key=value (or repeats a key)")
        pairs[key] = value
    return _checked(dict(pairs), spec, f"line {number}", kind)


class _Bounds:
    """Counts what is read, refusing more than the advisor is bounded to."""

    def __init__(self) -> None:
        self.gpus: set[str] = set()
        self.sizes: set[str] = set()
        self.cells: set[tuple[Any, ...]] = set()
        self.lines = 0

    def add(self, w: Window | None, where: str) -> None:
        self.lines += 1
        if self.lines > MAX_LINES:
            raise ResultsError(f"{where}: more than {MAX_LINES} RESULT and MEMORY lines; give the log of one benchmark run")
        if w is None:
            return
        self.gpus.add(w.gpu)
        self.sizes.add(w.size)
        self.cells.add((w.gpu, w.mode, w.replicas, w.size, w.k))
        if len(self.gpus) > MAX_GPU_MODELS or len(self.sizes) > MAX_SIZES or len(self.cells) > MAX_CELLS:
            raise ResultsError(
                f"{where}: more than {MAX_GPU_MODELS} GPU models, {MAX_SIZES} sizes or {MAX_CELLS} measured "
                "combinations; give the log of one benchmark run"
            )


def parse_results(text: str) -> Results:
    """Every RESULT and MEMORY line of a log (other lines are skipped)."""
    windows: list[Window] = []
    memory: list[MemoryProbe] = []
    bounds = _Bounds()
    for number, line in enumerate(text.splitlines(), start=1):
        match = _LINE.search(line)
        if match is None:
            continue
        kind, body = match.groups()
        if kind == "RESULT":
            w = Window(**_fields(body, RESULT_FIELDS, number, kind))
            windows.append(w)
            bounds.add(w, f"line {number}")
        else:
            memory.append(MemoryProbe(**_fields(body, MEMORY_FIELDS, number, kind)))
            bounds.add(None, f"line {number}")
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
    by_size: dict[tuple[str, str], list[Cell]] = {}
    for c in all_cells:
        by_size.setdefault((c.gpu, c.size), []).append(c)
    table: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for c in all_cells:
        base = solo(by_size[(c.gpu, c.size)], c.gpu, c.size, c.mode)
        row: dict[str, Any] = {
            "replicas": c.replicas, "size": c.size, "bodies": c.bodies, "k": c.k, "pods": c.pods,
            "interactionsPerSecond": c.rate, "p50Us": c.p50_us, "p99Us": c.p99_us,
        }
        if base is not None:
            row["vsSolo"] = round(c.rate / base.rate, 3)
            row["p99VsSolo"] = round(c.p99_us / max(1, base.p50_us), 2)
        table.setdefault(c.gpu, {}).setdefault(c.mode, []).append(row)
    return table


_ROW_KEYS = {
    "replicas": "replicas", "size": "size", "bodies": "bodies", "k": "k", "pods": "pods",
    "interactionsPerSecond": "rate", "p50Us": "p50_us", "p99Us": "p99_us",
}
OUTPUT = "sharingCost"


def results_from_table(table: Any) -> Results:
    """Windows behind a `sharingCost` stack output: per row, `pods` windows sharing its aggregate
    rate, each with its p50 and p99 (so `cells` gives the row back). Every GPU model, mode and
    number is checked exactly as a log line's (a name that is not one never reaches the output),
    and a row's pods are the pods that shared one GPU in it (`pods` = `k`)."""
    if not isinstance(table, dict):
        raise ResultsError(f"the {OUTPUT} output is not a mapping of GPU models (it is {type(table).__name__})")
    windows = []
    bounds = _Bounds()
    for gpu, modes in table.items():
        if not isinstance(modes, dict):
            raise ResultsError(f"the {OUTPUT} output's GPU model {escape(repr(gpu)[:60])} is not a mapping of modes")
        for mode, rows in modes.items():
            if not isinstance(rows, list):
                raise ResultsError(f"the {OUTPUT} output's {escape(repr(gpu)[:60])}.{escape(repr(mode)[:40])} is not a list of rows")
            for i, row in enumerate(rows):
                where = f"the {OUTPUT} output's {escape(str(gpu)[:60])}/{escape(str(mode)[:20])} row {i}"
                if not isinstance(row, dict):
                    raise ResultsError(f"{where} is not a mapping")
                pairs: dict[str, Any] = {_ROW_KEYS.get(k, f"unknown:{k}"): v for k, v in row.items() if k in _ROW_KEYS}
                pairs.update(gpu=gpu, mode=mode, pod=0, batches=1)
                r = _checked(pairs, {**RESULT_FIELDS, "pods": _INT}, where, "RESULT")
                if r["pods"] != r["k"]:
                    raise ResultsError(f"{where}: pods={r['pods']} k={r['k']} is not what the benchmark writes (pods = k)")
                pods, rate = r.pop("pods"), r["rate"]
                for pod in range(pods):
                    w = Window(**{**r, "pod": pod, "rate": rate // pods + (rate % pods if pod == 0 else 0)})
                    windows.append(w)
                    bounds.add(w, where)
    return Results(tuple(windows), ())
