"""The progress view of `fleet up`: a live table (one row per stack: wave, state, elapsed, step)
on a terminal, plain lines in a pipe or under CI."""

from __future__ import annotations

import io
import re

import pytest

from gpu_stack.config.fleet import parse_fleet
from gpu_stack.fleet.progress import LiveView, PlainView, Table, choose_view, progress_view
from gpu_stack.fleet.waves import DONE, FAILED, GATE, NOT_REACHED, PREVIEWING, UPDATING, WAITING, roll_out

from .test_waves import FakeRunner

STACKS = ["canary", "eu", "us"]
FLEET = parse_fleet({"waves": [{"name": "canary", "stacks": ["canary"]}, {"name": "regions", "stacks": ["eu", "us"], "parallel": 2}]}, STACKS)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_table_has_one_row_per_stack_in_rollout_order_with_wave_state_elapsed_and_step():
    clock = Clock()
    table = Table(FLEET, clock=clock)
    table.set_state("canary", PREVIEWING)
    table.set_step("canary", "preview: started")
    clock.now += 30
    table.set_state("canary", UPDATING)
    table.set_step("canary", "+  kubernetes:apps/v1:DaemonSet gpu-operator creating (12s)")
    clock.now += 45
    table.set_state("eu", PREVIEWING)
    clock.now += 5
    lines = table.lines(width=200)
    assert lines[0].split() == ["STACK", "WAVE", "STATE", "ELAPSED", "STEP"]
    assert [line.split()[:4] for line in lines[1:]] == [
        ["canary", "canary", "updating", "1m20s"], ["eu", "regions", "previewing", "5s"], ["us", "regions", "waiting", "-"],
    ]
    assert lines[1].endswith("+ kubernetes:apps/v1:DaemonSet gpu-operator creating (12s)")
    # the columns line up, and a finished stack's clock stops
    assert len({line.index("STATE") if i == 0 else line.index(line.split()[2]) for i, line in enumerate(lines[:3])}) == 1
    table.set_state("canary", DONE)
    clock.now += 100
    assert table.lines(200)[1].split()[:4] == ["canary", "canary", "done", "1m20s"]


def test_no_table_line_is_wider_than_the_terminal_and_control_characters_never_reach_it():
    clock = Clock()
    table = Table(FLEET, clock=clock)
    table.set_state("us", UPDATING)
    table.set_step("us", "error: \x1b[31mred\x1b[0m " + "x" * 300)
    lines = table.lines(width=60)
    assert all(len(line) <= 60 for line in lines)
    assert lines[3].endswith("...") and "\x1b" not in "".join(lines)


def test_the_live_view_redraws_the_table_in_place():
    term = Terminal()
    view = LiveView(term, Table(FLEET), width=lambda: 100, interval=60)
    first = term.getvalue()
    assert first.count("\n") == 4 and "\x1b[" not in first.replace("\x1b[2K", "")  # drawn once, nothing to go back over
    view.state("canary", UPDATING)
    view.line("[canary] up (wave canary): started")
    view.line("Fleet of 3 stacks")  # not a stack's line: no row changes
    view.close()
    out = term.getvalue()
    redraws = out[len(first):].split("\x1b[4F")
    assert len(redraws) == 5 and redraws[0] == ""  # state, two lines, close: 4 redraws, each back 4 lines, then 4 rows
    last = [line.removeprefix("\x1b[2K") for line in redraws[-1].splitlines()]
    assert last[1].split()[:3] == ["canary", "canary", "updating"] and last[1].endswith("up (wave canary): started")
    view.line("[eu] late")  # after close: nothing more is drawn
    assert term.getvalue() == out


def test_plain_lines_are_the_progress_lines_and_the_engine_lines_only_when_verbose():
    out = io.StringIO()
    view = PlainView(out)
    view.line("[canary] up (wave canary): started")
    view.engine("canary", "+ kubernetes:apps/v1:DaemonSet creating")
    view.state("canary", DONE)
    assert out.getvalue() == "[canary] up (wave canary): started\n"
    verbose = io.StringIO()
    PlainView(verbose, verbose=True).engine("canary", "+ kubernetes:apps/v1:DaemonSet creating")
    assert verbose.getvalue() == "[canary] | + kubernetes:apps/v1:DaemonSet creating\n"


@pytest.mark.parametrize(
    ("tty", "env", "mode", "expected"),
    [
        (True, {"TERM": "xterm-256color"}, "auto", "table"),
        (False, {"TERM": "xterm-256color"}, "auto", "lines"),  # a pipe, a file
        (True, {"TERM": "xterm", "CI": "true"}, "auto", "lines"),  # GitHub Actions and most CI services
        (True, {"TERM": "xterm", "CI": "1"}, "auto", "lines"),
        (True, {"TERM": "xterm", "CI": "false"}, "auto", "table"),
        (True, {"TERM": "dumb"}, "auto", "lines"),
        (True, {"CI": "true"}, "table", "table"),
        (True, {}, "lines", "lines"),
    ],
)
def test_the_table_only_on_a_terminal_outside_ci_unless_asked(tty, env, mode, expected):
    stream = Terminal() if tty else io.StringIO()
    assert choose_view(stream, env, mode) == expected
    view = progress_view(stream, env, FLEET, mode)
    assert isinstance(view, LiveView if expected == "table" else PlainView)
    view.close()


def test_the_rollout_tells_the_table_each_stacks_state_as_it_goes():
    states: list[tuple[str, str]] = []
    roll_out(FLEET, FakeRunner(fail_up={"canary"}), on_state=lambda s, st: states.append((s, st)))
    canary = [st for s, st in states if s == "canary"]
    assert canary == [PREVIEWING, WAITING, UPDATING, FAILED]
    assert [st for s, st in states if s == "eu"] == [PREVIEWING, WAITING, NOT_REACHED]
    states.clear()
    roll_out(FLEET, FakeRunner(), on_state=lambda s, st: states.append((s, st)))
    assert [st for s, st in states if s == "us"] == [PREVIEWING, WAITING, UPDATING, GATE, DONE]
    # the CLI's table fed by it ends with every stack done
    clock = Clock()
    table = Table(FLEET, clock=clock)
    for stack, state in states:
        table.set_state(stack, state)
    assert [re.split(r"\s+", line)[2] for line in table.lines()[1:]] == [DONE, DONE, DONE]
