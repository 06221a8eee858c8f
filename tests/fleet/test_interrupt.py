"""A fleet interrupted (issue 41, item 4): however the signal comes (Ctrl-C to the process group,
`kill -INT` to the fleet's PID alone, SIGTERM from `timeout` or a CI runner), each CLI under way
gets exactly one SIGINT (the Pulumi CLI cancels on its first signal and terminates on the
second), nothing new starts (no queued preview, no `up`, no gate), nothing is recorded done that
is not, and the command exits 128 + the signal.

The scheduler with a fake runner, then `python -m gpu_stack fleet preview|up` as a process of its
own, driving the real Automation API against the stand-in CLI (tests/fleet/fake_pulumi.py) that
records each command it ran and each signal it got. The real engine: tests/e2e/test_fleet.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from gpu_stack.config.fleet import Gate
from gpu_stack.fleet.gates import gate_check
from gpu_stack.fleet.waves import DONE, INTERRUPTED, NOT_REACHED, StepResult, roll_out

from .test_automation import fake_cli
from .test_waves import OUTPUTS, STACKS, FakeRunner, _fleet, _ups

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class InterruptingRunner(FakeRunner):
    """A FakeRunner whose `op` of `stack` sets `interrupted` while it runs (as the signal handler does)."""

    def __init__(self, interrupted: threading.Event, op: str, stack: str, **kw):
        super().__init__(**kw)
        self.interrupted, self.op, self.stack = interrupted, op, stack

    def preview(self, stack: str) -> StepResult:
        if (self.op, self.stack) == ("preview", stack):
            self.interrupted.set()
            self._enter("preview", stack)
            return StepResult(False, error="cancelled", cancelled=True)
        return super().preview(stack)

    def up(self, stack: str) -> StepResult:
        if (self.op, self.stack) == ("up", stack):
            self.interrupted.set()
            self._enter("up", stack)
            return StepResult(False, error="update canceled", cancelled=True)
        return super().up(stack)


def test_no_queued_preview_starts_after_the_interrupt():
    stop = threading.Event()
    runner = InterruptingRunner(stop, "preview", "canary", delay=0.05)
    done: list[str] = []
    rollout = roll_out(_fleet(previewParallel=1), runner, interrupted=stop, on_done=done.append)
    assert runner.calls == [("preview", "canary")]  # the four queued previews never started
    assert rollout.interrupted and rollout.stopped == "the fleet was interrupted during the previews: no stack was updated"
    assert rollout.report("canary").status == INTERRUPTED and done == []
    assert all(rollout.report(s).status == NOT_REACHED for s in STACKS[1:])
    assert "not previewed: the fleet was interrupted" in (rollout.report("prod").reason or "")


def test_after_an_interrupt_in_a_wave_no_up_or_gate_starts_and_nothing_more_is_done():
    stop = threading.Event()
    runner = InterruptingRunner(stop, "up", "eu", delay=0.2)
    done: list[str] = []
    gated: list[str] = []

    def gate(stack, g, up):
        gated.append(stack)
        return None

    rollout = roll_out(_fleet(), runner, interrupted=stop, on_done=done.append, gate_check=gate)
    ups = _ups(runner)
    assert ups[:2] == ["canary", "eu"] and set(ups) <= {"canary", "eu", "us"} and "prod" not in ups and "ap" not in ups
    assert done == ["canary"] and gated == ["canary"]  # us (beside eu) ended after the interrupt: not gated, not done
    assert rollout.report("canary").status == DONE and rollout.report("eu").status == INTERRUPTED
    if "us" in ups:
        assert rollout.report("us").status == INTERRUPTED
        assert "before its gate" in (rollout.report("us").reason or "")
    assert rollout.report("ap").status == NOT_REACHED and rollout.report("prod").status == NOT_REACHED
    assert rollout.interrupted and rollout.stopped == "the fleet was interrupted in wave regions"


def test_the_soak_is_cut_short_by_the_interrupt_and_does_not_pass():
    stop = threading.Event()
    fleet = _fleet(prometheus={"canary": "http://127.0.0.1:9090"})
    asked: list[int] = []

    def alerts(url, names, labels):
        asked.append(1)
        threading.Timer(0.05, stop.set).start()  # the signal comes during the soak
        return {}

    check = gate_check(fleet, alerts=alerts, interrupted=stop)
    start = time.monotonic()
    assert check("canary", Gate(soak_seconds=600, poll_seconds=300), StepResult(True, outputs=OUTPUTS)) == (
        "the soak was cut short by the interrupt")
    assert time.monotonic() - start < 5 and asked == [1]  # not 600 s, nor another query


# --------------------------------------------------------------------------- the command, as a process


def _project(tmp_path: Path, stacks: list[str]) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: gpu-stack\nruntime: python\n")
    (project / "__main__.py").write_text("")
    for stack in stacks:
        (project / f"Pulumi.{stack}.yaml").write_text("config: {}\n")
    fleet = {"waves": [{"name": "canary", "stacks": stacks[:1]}, {"name": "rest", "stacks": stacks[1:]}],
             "previewParallel": 1}
    (project / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    return project


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _run_and_signal(tmp_path: Path, cli: Path, project: Path, command: str, how: str, when: str) -> tuple[int, str]:
    """`fleet COMMAND` in a session of its own; once the stand-in CLI ran `when`, the signal `how`."""
    cmd = [sys.executable, "-m", "gpu_stack", "--project-dir", str(project), "fleet", command, "--pulumi", str(cli),
           "--progress", "lines"]
    env = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), "FAKE_PULUMI_DIR": str(tmp_path)}
    proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while when not in _lines(tmp_path / "calls"):
            assert proc.poll() is None and time.monotonic() < deadline, (proc.poll(), _lines(tmp_path / "calls"))
            time.sleep(0.05)
        time.sleep(0.3)  # the stand-in has its handlers
        if how == "SIGINT to the process group":
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C on a terminal
        elif how == "SIGINT to the PID":
            os.kill(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode, out


HOW = ("SIGINT to the process group", "SIGINT to the PID", "SIGTERM to the PID")


@pytest.mark.parametrize("how", HOW)
def test_fleet_preview_interrupted_cancels_the_cli_under_way_once_and_starts_no_queued_preview(tmp_path, monkeypatch, how):
    stacks = ["dev", "eu", "us"]
    cli = fake_cli(tmp_path, monkeypatch, {"dev": {"preview": {"block": 30}}})
    code, out = _run_and_signal(tmp_path, cli, _project(tmp_path, stacks), "preview", how, "preview dev")
    # the CLI under way got one SIGINT (in a process group of its own: no signal but the fleet's reached it)
    assert _lines(tmp_path / "signals") == ["dev preview SIGINT True"], out
    assert [c for c in _lines(tmp_path / "calls") if c.startswith("preview")] == ["preview dev"], out  # no queued one
    assert code == (143 if "SIGTERM" in how else 130), out
    assert "Interrupted: the fleet was interrupted during the previews: no stack was updated" in out
    assert "interrupted (SIG" in out and "--resume" in out


def test_fleet_up_interrupted_by_sigterm_cancels_the_up_records_nothing_and_starts_nothing_after(tmp_path, monkeypatch):
    stacks = ["dev", "eu", "us"]
    cli = fake_cli(tmp_path, monkeypatch, {s: {"preview": {"events": [
        {"summaryEvent": {"maybeCorrupt": False, "durationSeconds": 1, "resourceChanges": {"update": 1}, "PolicyPacks": {}}},
    ]}} for s in stacks} | {"dev": {"preview": {"events": [
        {"summaryEvent": {"maybeCorrupt": False, "durationSeconds": 1, "resourceChanges": {"update": 1}, "PolicyPacks": {}}},
    ]}, "up": {"block": 30}}})
    project = _project(tmp_path, stacks)
    code, out = _run_and_signal(tmp_path, cli, project, "up", "SIGTERM to the PID", "up dev")
    assert code == 143, out
    assert _lines(tmp_path / "signals") == ["dev up SIGINT True"], out
    assert [c for c in _lines(tmp_path / "calls") if c.startswith("up")] == ["up dev"], out
    state = project / ".gpu-stack" / "fleet-state.json"
    assert not state.exists() or "dev" not in json.loads(state.read_text())["stacks"], out
    assert "dev (wave canary): interrupted" in out and "up ended by the interrupt" in out
    assert "eu (wave rest): not reached" in out
