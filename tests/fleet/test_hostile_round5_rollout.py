"""Hostile and careless input, round five, the rollout side (issue 42, classes 1, 2, 4, 6 and 7):
`fleet up` run as a user and the deploy workflow run it, against the stand-in CLI
(tests/fleet/fake_pulumi.py) through the real Automation API; the resume state file
(gpu_stack/fleet/state.py) corrupt, hostile or another project's; stack files that are no
regular files, hashed without waiting on them.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_stack.fleet.state import change_keys, load_done, record_done, state_path

from ..config.test_hostile_input import limit_memory
from .test_automation import fake_cli

ROOT = Path(__file__).resolve().parents[2]
STACKS = ["dev", "eu", "us"]
SUMMARY = {"summaryEvent": {"maybeCorrupt": False, "durationSeconds": 1, "resourceChanges": {"update": 1}, "PolicyPacks": {}}}
OK = {s: {"preview": {"events": [SUMMARY]}, "up": {"events": [SUMMARY]}, "outputs": {"validationJobs": {"gpu": "ok"}}}
      for s in STACKS}
UNREACHABLE = [{"diagnosticEvent": {
    "message": ' Kubernetes API server at "https://127.0.0.1:6443" is unreachable. It\'s possible that the URL or '
               "authentication information in your kubeconfig is incorrect\n",
    "color": "never", "severity": "error", "urn": "urn:pulumi:dev::gpu-stack::kubernetes:core/v1:Namespace::gpu-operator"}}]


def _project(where: Path, fleet: dict[str, Any] | None = None) -> Path:
    where.mkdir(parents=True)
    (where / "Pulumi.yaml").write_text("name: gpu-stack\nruntime: python\n")
    (where / "__main__.py").write_text("")
    for stack in STACKS:
        (where / f"Pulumi.{stack}.yaml").write_text("config: {}\n")
    fleet = fleet or {"waves": [{"name": "canary", "stacks": ["dev"]}, {"name": "rest", "stacks": ["eu", "us"]}]}
    (where / "fleet.yaml").write_text(yaml.safe_dump(fleet))
    return where


def _fleet(tmp_path: Path, cli: Path, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_PULUMI_DIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", "gpu_stack", "--project-dir", str(project), "fleet", *args, "--pulumi", str(cli),
         "--progress", "lines"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )


def _calls(tmp_path: Path) -> list[str]:
    path = tmp_path / "calls"
    return path.read_text().splitlines() if path.exists() else []


# =========================================================================== 2. --wave ''
@pytest.mark.parametrize("wave", ["", " "])
def test_fleet_up_with_an_empty_wave_rolls_out_nothing(tmp_path, monkeypatch, wave):
    cli = fake_cli(tmp_path, monkeypatch, OK)
    done = _fleet(tmp_path, cli, _project(tmp_path / "project"), "up", "--wave", wave)
    assert done.returncode == 2 and "--wave" in done.stderr and "(it is empty)" in done.stderr, done.stderr
    assert _calls(tmp_path) == []  # no stack selected, previewed or updated


# =========================================================================== 4. the resume line
@pytest.mark.parametrize("wave", ["canary", "-canary"])
def test_the_resume_line_is_quoted_for_the_shell_and_parses_back_to_the_same_rollout(tmp_path, monkeypatch, wave):
    from gpu_stack.__main__ import build_parser

    script = {**OK, "dev": {"preview": {"events": [SUMMARY]}, "up": {"code": 1, "stderr": ["error: boom"]}}}
    cli = fake_cli(tmp_path, monkeypatch, script)
    project = _project(tmp_path / "my project $(touch pwned)",
                       {"waves": [{"name": wave, "stacks": ["dev"]}, {"name": "rest", "stacks": ["eu", "us"]}]})
    fleet_file = project / "fleets; x" / "main fleet.yaml"
    fleet_file.parent.mkdir()
    shutil.copy(project / "fleet.yaml", fleet_file)
    done = _fleet(tmp_path, cli, project, "up", "--fleet-file", str(fleet_file), f"--wave={wave}")
    assert done.returncode == 1, done.stdout + done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("Resume after the fix"))
    words = shlex.split(line.split(": ", 1)[1])
    assert words[:3] == ["python", "-m", "gpu_stack"]
    args = build_parser().parse_args(words[3:])
    assert (args.project_dir, args.fleet_file, args.wave, args.resume) == (project, fleet_file, wave, True)


# =========================================================================== 6. nothing updated
@pytest.mark.parametrize("command", ["up", "preview"])
def test_a_rollout_in_which_every_stack_was_skipped_as_unreachable_does_not_exit_0(tmp_path, monkeypatch, command):
    cli = fake_cli(tmp_path, monkeypatch, {s: {"preview": {"events": UNREACHABLE, "code": 255}} for s in STACKS})
    fleet = {"waves": [{"name": "canary", "stacks": ["dev"]}, {"name": "rest", "stacks": ["eu", "us"]}],
             "onUnreachable": "skip"}
    done = _fleet(tmp_path, cli, _project(tmp_path / "project", fleet), command)
    assert done.returncode == 1, done.stdout
    assert "Not rolled out: no stack was" in done.stdout and "Every stack" not in done.stdout
    assert not any(c.startswith("up ") for c in _calls(tmp_path))


def test_a_rollout_that_updated_some_and_skipped_others_still_went_through(tmp_path, monkeypatch):
    cli = fake_cli(tmp_path, monkeypatch, {**OK, "us": {"preview": {"events": UNREACHABLE, "code": 255}}})
    fleet = {"waves": [{"name": "canary", "stacks": ["dev"]}, {"name": "rest", "stacks": ["eu", "us"]}],
             "onUnreachable": "skip"}
    done = _fleet(tmp_path, cli, _project(tmp_path / "project", fleet), "up")
    assert done.returncode == 0 and "skipped, not updated: us" in done.stdout, done.stdout


def test_only_a_rollout_that_reached_no_stack_is_said_not_rolled_out():
    from gpu_stack.fleet.waves import ALREADY_DONE, DONE, SKIPPED, Rollout, StackReport

    def rollout(*statuses: str) -> Rollout:
        return Rollout([StackReport(f"s{i}", "all", status=status) for i, status in enumerate(statuses)])

    assert rollout(SKIPPED, SKIPPED).none_updated
    # done by an earlier run (a --resume), or now: the change reached them; the skipped one is said
    assert not rollout(ALREADY_DONE, SKIPPED).none_updated and not rollout(DONE, SKIPPED).none_updated
    assert not rollout(ALREADY_DONE, ALREADY_DONE).none_updated


def test_the_roll_up_of_a_200_stack_fleet_keeps_every_line_short():
    from gpu_stack.config.fleet import parse_fleet
    from gpu_stack.fleet.rollup import render_rollup
    from gpu_stack.fleet.waves import roll_out

    from .test_waves import FakeRunner

    stacks = [f"region-{i:03d}-with-a-long-name" for i in range(200)]
    fleet = parse_fleet({"waves": [{"name": "canary", "stacks": stacks[:1]}, {"name": "rest", "stacks": stacks[1:], "parallel": 64}],
                         "previewParallel": 64}, stacks)
    for runner in (FakeRunner(fail_preview=stacks), FakeRunner(fail_up=stacks[1:]), FakeRunner(unreachable=stacks)):
        text = render_rollup(roll_out(fleet, runner), "gpu-stack fleet up")
        assert all(len(line) <= 420 for line in text.splitlines()), max(text.splitlines(), key=len)


# =========================================================================== 7. the resume state file
def _keys(project: Path) -> dict[str, str]:
    return change_keys(project, STACKS, "v3.200.0")


def _refusal(project: Path) -> str:
    from gpu_stack.fleet.state import StateRefused

    with pytest.raises(StateRefused) as caught:
        load_done(project, _keys(project))
    text = str(caught.value)
    assert "delete .gpu-stack/fleet-state.json" in text and len(text) <= 400 and "\n" not in text
    return text


@pytest.mark.parametrize("content", [
    b"{not json", b"\xff\xfe", b"[]", b'{"stacks": []}', b"[" * 100_000, json.dumps({"stacks": {"dev": 1}}).encode(),
    b'{"stacks": {}, "pad": "' + b"x" * (2 * 1024 * 1024) + b'"}',  # over the bound: refused unparsed
])
def test_a_corrupt_state_file_is_refused_with_the_way_out(tmp_path, content):
    project = _project(tmp_path / "project")
    state_path(project).parent.mkdir()
    state_path(project).write_bytes(content)
    _refusal(project)


def test_a_hand_made_state_file_that_marks_every_stack_done_is_not_trusted(tmp_path):
    project = _project(tmp_path / "project")
    state_path(project).parent.mkdir()
    state_path(project).write_text(json.dumps({"stacks": {s: {"change": k} for s, k in _keys(project).items()}}))
    _refusal(project)


def test_the_state_file_of_another_project_is_refused(tmp_path):
    mine, theirs = _project(tmp_path / "mine"), _project(tmp_path / "theirs")  # the same files: the same keys
    for stack, key in _keys(theirs).items():
        record_done(theirs, key, stack, {"wave": "canary"})
    assert load_done(theirs, _keys(theirs)) == set(STACKS)
    state_path(mine).parent.mkdir()
    shutil.copy(state_path(theirs), state_path(mine))
    assert "another project" in _refusal(mine)
    state_path(mine).unlink()
    state_path(mine).symlink_to(state_path(theirs))  # a link out of the project
    assert "outside" in _refusal(mine)


def test_the_state_file_is_never_written_through_a_planted_link(tmp_path):
    project = _project(tmp_path / "project")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    state_path(project).parent.mkdir()
    for name in ("fleet-state.tmp", "fleet-state.json.tmp"):
        (state_path(project).parent / name).symlink_to(victim)
    record_done(project, _keys(project)["dev"], "dev", {"wave": "canary"})
    assert victim.read_text() == "keep me\n"
    assert load_done(project, _keys(project)) == {"dev"}


def test_fleet_up_writes_no_state_through_a_state_folder_linked_out_of_the_project(tmp_path, monkeypatch):
    cli = fake_cli(tmp_path, monkeypatch, OK)
    project = _project(tmp_path / "project")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    state_path(project).parent.symlink_to(elsewhere, target_is_directory=True)
    done = _fleet(tmp_path, cli, project, "up")
    assert done.returncode == 2 and "is not a folder inside the project" in done.stderr, done.stdout + done.stderr
    assert _calls(tmp_path) == [] and list(elsewhere.iterdir()) == []


def test_fleet_up_resume_with_a_corrupt_state_file_stops_before_anything_runs(tmp_path, monkeypatch):
    cli = fake_cli(tmp_path, monkeypatch, OK)
    project = _project(tmp_path / "project")
    state_path(project).parent.mkdir()
    state_path(project).write_text('{"stacks": {"dev": {"change": "x"}}}')
    done = _fleet(tmp_path, cli, project, "up", "--resume")
    assert done.returncode == 2 and "delete .gpu-stack/fleet-state.json" in done.stderr, done.stderr
    assert _calls(tmp_path) == []
    done = _fleet(tmp_path, cli, project, "up")  # without --resume: the file starts anew
    assert done.returncode == 0, done.stdout + done.stderr
    assert set(json.loads(state_path(project).read_text())["stacks"]) == set(STACKS)


# =========================================================================== 1. stack files that are no regular files
def _in_child(code: str, timeout: int = 60) -> subprocess.CompletedProcess[str]:
    """`code` in a child that must end within `timeout` (the old code waited on a FIFO for ever)."""
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          preexec_fn=limit_memory(2 * 1024**3))


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_stack_file_that_is_a_fifo_or_a_device_is_hashed_without_reading_it(tmp_path, kind):
    project = _project(tmp_path / "project")
    (project / "Pulumi.eu.yaml").unlink()
    if kind == "fifo":
        os.mkfifo(project / "Pulumi.eu.yaml")
    else:
        (project / "Pulumi.eu.yaml").symlink_to("/dev/zero")
    code = (f"from pathlib import Path\nfrom gpu_stack.fleet.state import change_keys\n"
            f"from gpu_stack.fleet.plan_workers import _digest\n"
            f"p = Path({str(project)!r})\nkeys = change_keys(p, ['dev', 'eu', 'us'])\n"
            f"assert len(set(keys.values())) == 3 and _digest(p / 'Pulumi.eu.yaml') is not None\nprint('ok')\n")
    assert _in_child(code).stdout == "ok\n"


def test_fleet_plan_reads_no_stack_file_a_link_takes_out_of_the_project(tmp_path):
    from gpu_stack.fleet.plan_workers import plan_here

    project = tmp_path / "project"
    project.mkdir()
    for name in ("Pulumi.yaml", "__main__.py", "Pulumi.dev.yaml"):
        shutil.copy(ROOT / name, project / name)
    outside = tmp_path / "elsewhere.yaml"
    shutil.copy(ROOT / "Pulumi.dev.yaml", outside)  # a stack file a plan would take
    (project / "Pulumi.evil.yaml").symlink_to(outside)
    assert "plan" in plan_here("dev", str(project), str(project))
    result = plan_here("evil", str(project), str(project))
    assert "plan" not in result and "is a link to a file outside" in result["error"]

