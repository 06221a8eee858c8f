"""The progress view of `fleet preview` and `fleet up`: a live table on a terminal, plain lines
elsewhere (a pipe, a file, CI).

The table has one row per stack of the fleet, in rollout order: its wave, its state (waiting,
previewing, updating, gate, done, failed, ...), its step (the last thing said about it: the
engine's current line while its preview or `up` runs) and how long it has been at it. It is
redrawn in place (cursor up, erase line) on each change and every second, each line cut to the
terminal's width so that none wraps. Plain lines are the same lines as before, one per step and
stack, with the engine's own lines only under `--verbose`.

`choose_view` picks: the table when the output is a terminal, TERM is not `dumb` and the run is
not under CI (`CI` set, as GitHub Actions and most CI services set it); `--progress table|lines`
forces one.
"""

from __future__ import annotations

import re
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TextIO

from ..config.fleet import Fleet
from ..config.safe_input import escape
from .waves import ALREADY_DONE, DONE, FAILED, INTERRUPTED, NOT_REACHED, PREVIEWED, SKIPPED, WAITING

FINAL = (DONE, FAILED, SKIPPED, NOT_REACHED, ALREADY_DONE, PREVIEWED, INTERRUPTED)
"""States after which a stack's clock stops."""
COLUMNS = ("STACK", "WAVE", "STATE", "ELAPSED", "STEP")
_STACK_LINE = re.compile(r"^\[([^\]]+)\] (.*)$")
_ERASE, _UP = "\x1b[2K", "\x1b[{n}F"
"""Erase the line; move the cursor to the start of the line `n` lines up."""


class View(Protocol):
    def line(self, text: str) -> None: ...

    def engine(self, stack: str, text: str) -> None: ...

    def state(self, stack: str, state: str) -> None: ...

    def close(self) -> None: ...


def elapsed(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


@dataclass
class Row:
    stack: str
    wave: str
    state: str = WAITING
    step: str = ""
    started: float | None = None
    ended: float | None = None


class Table:
    """The rows, and their text at a given time (pure: no terminal in it)."""

    def __init__(self, fleet: Fleet, clock: Callable[[], float] = time.monotonic):
        self.rows = {s: Row(s, w.name) for w in fleet.waves for s in w.stacks}
        self.clock = clock

    def set_state(self, stack: str, state: str) -> None:
        row = self.rows.get(stack)
        if row is None:
            return
        now = self.clock()
        if row.started is None and state not in (WAITING, ALREADY_DONE, NOT_REACHED):
            row.started = now
        row.state = state
        row.ended = now if state in FINAL else None

    def set_step(self, stack: str, step: str) -> None:
        row = self.rows.get(stack)
        if row is not None and step.strip():
            row.step = " ".join(escape(step).split())

    def lines(self, width: int = 120) -> list[str]:
        now = self.clock()
        cells = [COLUMNS] + [
            (r.stack, r.wave, r.state, elapsed(None if r.started is None else (r.ended or now) - r.started), r.step)
            for r in self.rows.values()
        ]
        widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS) - 1)]
        out = []
        for c in cells:
            text = "  ".join(v.ljust(w) for v, w in zip(c[:-1], widths, strict=True)) + "  " + c[-1]
            text = text.rstrip()
            out.append(text if len(text) <= width else text[: max(1, width - 3)] + "...")
        return out


class PlainView:
    """One line per step and stack, printed as it comes; the engine's lines only when `verbose`."""

    def __init__(self, stream: TextIO, verbose: bool = False):
        self.stream, self.verbose = stream, verbose
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        with self.lock:
            print(text, file=self.stream, flush=True)

    def engine(self, stack: str, text: str) -> None:
        if self.verbose and text.strip():
            self.line(f"[{stack}] | {text}")

    def state(self, stack: str, state: str) -> None:
        pass

    def close(self) -> None:
        pass


class LiveView:
    """The table, redrawn in place on `stream` (a terminal) on each change and every `interval` s."""

    def __init__(self, stream: TextIO, table: Table, width: Callable[[], int] | None = None, interval: float = 1.0):
        self.stream, self.table = stream, table
        self.width = width or (lambda: shutil.get_terminal_size((120, 24)).columns)
        self.lock = threading.Lock()
        self.drawn = 0
        self.closed = threading.Event()
        self.ticker = threading.Thread(target=self._tick, args=(interval,), daemon=True, name="fleet-table")
        self.draw()
        self.ticker.start()

    def _tick(self, interval: float) -> None:
        while not self.closed.wait(interval):
            self.draw()

    def draw(self) -> None:
        with self.lock:
            if self.closed.is_set() and self.drawn:
                return
            lines = self.table.lines(self.width() - 1)
            text = (_UP.format(n=self.drawn) if self.drawn else "") + "".join(f"{_ERASE}{line}\n" for line in lines)
            self.stream.write(text)
            self.stream.flush()
            self.drawn = len(lines)

    def line(self, text: str) -> None:
        match = _STACK_LINE.fullmatch(text.rstrip("\n"))
        if match and match.group(1) in self.table.rows:
            self.table.set_step(match.group(1), match.group(2))
        self.draw()

    def engine(self, stack: str, text: str) -> None:
        # the engine's progress (`+ kubernetes:apps/v1:DaemonSet ... creating`) is the step it is at
        self.table.set_step(stack, text)

    def state(self, stack: str, state: str) -> None:
        self.table.set_state(stack, state)
        self.draw()

    def close(self) -> None:
        self.draw()
        self.closed.set()
        self.ticker.join(timeout=5)


def choose_view(stream: TextIO, env: Mapping[str, str], mode: str = "auto") -> str:
    """`table` or `lines`: the table only on a terminal, outside CI, unless `mode` forces one."""
    if mode in ("table", "lines"):
        return mode
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    ci = env.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    return "table" if tty and not ci and env.get("TERM", "") != "dumb" else "lines"


def progress_view(stream: TextIO, env: Mapping[str, str], fleet: Fleet, mode: str = "auto", verbose: bool = False) -> View:
    if choose_view(stream, env, mode) == "table":
        return LiveView(stream, Table(fleet))
    return PlainView(stream, verbose)
