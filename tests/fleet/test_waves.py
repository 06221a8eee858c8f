"""The wave scheduler with a fake runner (no Pulumi): order, parallelism, what a failure stops,
unreachable clusters, resume; the roll-up. The soak gate: test_soak_gate.py; the resume key:
test_resume_key.py; an interrupt: test_interrupt.py."""

from __future__ import annotations

import threading
import time

from gpu_stack.config.fleet import parse_fleet
from gpu_stack.fleet.rollup import render_rollup
from gpu_stack.fleet.state import change_keys, forget, load_done, record_done
from gpu_stack.fleet.waves import ALREADY_DONE, DONE, FAILED, NOT_REACHED, SKIPPED, StepResult, roll_out

STACKS = ["canary", "eu", "us", "ap", "prod"]
OUTPUTS = {"validationJobs": {"cuda-smoke": "cuda-smoke-1"}, "alertRules": ["GpuXidError", "GpuHot"],
           "capacity": [{"node": "TOTAL", "gpus": 4, "advertises": {"nvidia.com/gpu": 8}}]}


class FakeRunner:
    """Records every call in order; `fail_up`, `fail_preview`, `unreachable` pick the stacks that fail."""

    def __init__(self, fail_up=(), fail_preview=(), unreachable=(), delay=0.0, outputs=OUTPUTS):
        self.calls: list[tuple[str, str]] = []
        self.fail_up, self.fail_preview, self.unreachable = set(fail_up), set(fail_preview), set(unreachable)
        self.delay, self.outputs = delay, outputs
        self.running = 0
        self.most_at_once = 0
        self.lock = threading.Lock()

    def _enter(self, op: str, stack: str) -> None:
        with self.lock:
            self.calls.append((op, stack))
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        time.sleep(self.delay)
        with self.lock:
            self.running -= 1

    def preview(self, stack: str) -> StepResult:
        self._enter("preview", stack)
        if stack in self.unreachable:
            return StepResult(False, error="dial tcp 127.0.0.1:6443: connect: connection refused", unreachable=True)
        if stack in self.fail_preview:
            return StepResult(False, error="error: invalid stack config")
        return StepResult(True, changes={"update": 1, "same": 30})

    def up(self, stack: str) -> StepResult:
        self._enter("up", stack)
        if stack in self.fail_up:
            return StepResult(False, error="error: validation check cuda-smoke failed: FAIL simulated")
        return StepResult(True, changes={"update": 1, "replace": 2, "same": 30}, outputs=dict(self.outputs))


def _fleet(**extra):
    doc = {"waves": [
        {"name": "canary", "stacks": ["canary"]},
        {"name": "regions", "stacks": ["eu", "us", "ap"], "parallel": 2},
        {"name": "prod", "stacks": ["prod"]},
    ], **extra}
    return parse_fleet(doc, sorted(STACKS))


def _ups(runner: FakeRunner) -> list[str]:
    return [s for op, s in runner.calls if op == "up"]


def test_every_stack_is_previewed_first_then_updated_wave_by_wave_in_order():
    runner = FakeRunner(delay=0.05)
    rollout = roll_out(_fleet(), runner)
    assert [op for op, _ in runner.calls[:5]] == ["preview"] * 5
    ups = _ups(runner)
    assert ups[0] == "canary" and set(ups[1:4]) == {"eu", "us", "ap"} and ups[4] == "prod"
    assert rollout.complete and rollout.stopped is None
    assert [r.status for r in rollout.reports] == [DONE] * 5


def test_a_wave_runs_at_most_its_parallel_stacks_at_once():
    runner = FakeRunner(delay=0.1)
    roll_out(parse_fleet({"waves": [{"name": "all", "stacks": STACKS, "parallel": 2}], "previewParallel": 3}, sorted(STACKS)), runner)
    assert runner.most_at_once <= 3
    runner = FakeRunner(delay=0.1)
    fleet = parse_fleet({"waves": [{"name": "all", "stacks": STACKS, "parallel": 2}], "previewParallel": 1}, sorted(STACKS))
    roll_out(fleet, runner)
    assert runner.most_at_once == 2  # the ups, two at a time (previews one by one)


def test_a_failed_canary_stops_the_rollout_and_no_later_stack_is_updated():
    runner = FakeRunner(fail_up={"canary"})
    lines: list[str] = []
    rollout = roll_out(_fleet(), runner, on_progress=lines.append)
    assert _ups(runner) == ["canary"]
    assert rollout.report("canary").status == FAILED
    assert "cuda-smoke failed" in (rollout.report("canary").reason or "")
    assert all(rollout.report(s).status == NOT_REACHED for s in ("eu", "us", "ap", "prod"))
    assert rollout.stopped == "wave canary: canary failed; no later wave was started"
    assert "[canary] failed: up failed: error: validation check cuda-smoke failed: FAIL simulated" in lines


def test_on_failure_stop_starts_no_other_stack_of_the_wave_and_finish_wave_runs_them():
    runner = FakeRunner(fail_up={"eu"})
    fleet = parse_fleet({"waves": [{"name": "canary", "stacks": ["canary"]}, {"name": "rest", "stacks": ["eu", "us", "ap", "prod"]}]}, sorted(STACKS))
    rollout = roll_out(fleet, runner)
    assert _ups(runner) == ["canary", "eu"]
    assert "not started: eu failed in wave rest" in (rollout.report("us").reason or "")
    runner = FakeRunner(fail_up={"eu"})
    fleet = parse_fleet({"waves": [{"name": "canary", "stacks": ["canary"]}, {"name": "rest", "stacks": ["eu", "us", "ap"]},
                                   {"name": "prod", "stacks": ["prod"]}], "onFailure": "finish-wave"}, sorted(STACKS))
    rollout = roll_out(fleet, runner)
    assert _ups(runner) == ["canary", "eu", "us", "ap"]
    assert rollout.report("us").status == DONE and rollout.report("prod").status == NOT_REACHED


def test_a_failed_preview_updates_nothing():
    runner = FakeRunner(fail_preview={"prod"})
    rollout = roll_out(_fleet(), runner)
    assert _ups(runner) == []
    assert rollout.stopped == "the preview of prod failed: no stack was updated"
    assert rollout.report("canary").status == NOT_REACHED


def test_an_unreachable_cluster_stops_or_is_skipped_as_the_fleet_file_says():
    runner = FakeRunner(unreachable={"us"})
    rollout = roll_out(_fleet(), runner)
    assert _ups(runner) == [] and rollout.report("us").status == FAILED
    assert rollout.report("us").reason == "cluster unreachable: dial tcp 127.0.0.1:6443: connect: connection refused"
    runner = FakeRunner(unreachable={"us"})
    rollout = roll_out(_fleet(onUnreachable="skip"), runner)
    assert "us" not in _ups(runner) and len(_ups(runner)) == 4
    assert rollout.report("us").status == SKIPPED and rollout.stopped is None and not rollout.complete
    # the roll-up does not call that every stack done: it names the one skipped and how to finish it
    last = render_rollup(rollout, "python -m gpu_stack fleet up").splitlines()[-1]
    assert last == ("Every stack reached is done for this change; skipped, not updated: us "
                    "(once reachable: python -m gpu_stack fleet up --resume)")


def test_a_gate_that_does_not_pass_stops_the_next_wave():
    runner = FakeRunner(outputs={"validationJobs": {}})
    rollout = roll_out(_fleet(), runner)
    assert _ups(runner) == ["canary"]
    assert rollout.report("canary").reason == (
        "gate did not pass: no validation Jobs ran (validation.enabled is false on this stack, or the output is missing)"
    )


def test_resume_skips_the_stacks_done_for_this_change_without_previewing_them():
    runner = FakeRunner()
    done_now: list[str] = []
    rollout = roll_out(_fleet(), runner, done={"canary", "eu"}, on_done=done_now.append)
    assert {s for _, s in runner.calls} == {"us", "ap", "prod"}
    assert rollout.report("canary").status == ALREADY_DONE and rollout.complete
    assert sorted(done_now) == ["ap", "prod", "us"]


def test_a_stack_whose_up_fails_is_no_longer_done_even_when_its_file_is_reverted_to_the_last_change_done(tmp_path):
    for name in ("Pulumi.yaml", "__main__.py", *(f"Pulumi.{s}.yaml" for s in STACKS)):
        (tmp_path / name).write_text(f"{name}\n")
    keys = change_keys(tmp_path, STACKS)

    def run(runner: FakeRunner, resume: bool):
        return roll_out(
            _fleet(), runner, done=load_done(tmp_path, keys) if resume else set(),
            on_done=lambda s: record_done(tmp_path, keys[s], s, {}), on_start=lambda s: forget(tmp_path, s),
        )

    assert run(FakeRunner(), resume=False).complete and load_done(tmp_path, keys) == set(STACKS)
    # the next change fails on the canary (its file is then reverted: the same key as before)
    run(FakeRunner(fail_up={"canary"}), resume=False)
    assert load_done(tmp_path, keys) == set(STACKS) - {"canary"}
    runner = FakeRunner()
    assert run(runner, resume=True).complete
    assert _ups(runner) == ["canary"]


def test_the_roll_up_says_per_stack_what_changed_and_where_it_stopped_with_the_resume_command():
    rollout = roll_out(_fleet(), FakeRunner(fail_up={"eu"}))
    text = render_rollup(rollout, "python -m gpu_stack fleet up")
    lines = text.splitlines()
    assert lines[0].startswith("Fleet roll-up: ")
    assert "  changed: 1 update, 2 replace; validation: passed (1 checks); gate: passed" in lines
    assert "  capacity: 4 GPUs advertised as 8 nvidia.com/gpu" in lines
    assert any(line.startswith("eu (wave regions): failed") for line in lines)
    assert "Resume after the fix (stacks done for this change are skipped): python -m gpu_stack fleet up --resume" in lines
    assert lines[-2] == "Stopped: wave regions: eu failed; no later wave was started"
