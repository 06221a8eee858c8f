"""Hostile and careless input, round five, the fleet side (issue 42, classes 1-5): the fleet file
read as a stack file is, every option of every command given empty, what a problem in the fleet
file may show, wave names, and files named like stack files that are none.

CLI cases run `python -m gpu_stack` as a user would; a case that hung on the old code (a FIFO, an
alias bomb) runs in a child bounded in time and memory, so it fails instead of hanging.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpu_stack.__main__ import build_parser
from gpu_stack.config.fleet import FleetError, load_fleet, parse_fleet

from .test_hostile_input import limit_memory

ROOT = Path(__file__).resolve().parents[2]
SECRET = "ghp_canaryFleetSecret0123456789"
STACKS = ["dev", "prod", "staging"]
FLEET = {"waves": [{"name": "canary", "stacks": ["dev"]}, {"name": "rest", "stacks": ["staging", "prod"]}]}


def _project(tmp_path: Path, fleet: str | None = None, stacks: list[str] = STACKS) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: gpu-stack\nruntime: python\n")
    (project / "__main__.py").write_text("")
    for stack in stacks:
        (project / f"Pulumi.{stack}.yaml").write_text("config: {}\n")
    if fleet is not None:
        (project / "fleet.yaml").write_text(fleet)
    return project


def _cli(project: Path, *args: str, timeout: int = 60) -> subprocess.CompletedProcess[str]:
    """The command in a child of at most 2 GiB that must end within `timeout` seconds."""
    return subprocess.run(
        [sys.executable, "-m", "gpu_stack", "--project-dir", str(project), *args], cwd=ROOT, capture_output=True,
        text=True, errors="replace", timeout=timeout, preexec_fn=limit_memory(2 * 1024**3),
    )


def _refused(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, no traceback, every line short, each needle said."""
    err = proc.stderr
    assert proc.returncode == 2, (proc.returncode, err[-2000:], proc.stdout[-2000:])
    assert "Traceback" not in err, err
    assert all(len(line) <= 420 for line in err.splitlines()), err
    for needle in needles:
        assert needle in err, err
    return err


def _load_error(project: Path) -> str:
    with pytest.raises(FleetError) as caught:
        load_fleet(project)
    return str(caught.value)


# =========================================================================== 1. the fleet file as a stack file
BOMB = "\n".join(
    [f"l0: &l0 [{', '.join(['x'] * 9)}]"]
    + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    + ["waves: [{name: all, stacks: [dev, staging, prod]}]", ""]
)


def test_an_alias_bomb_in_the_fleet_file_is_refused_before_it_expands(tmp_path):
    assert len(BOMB) < 600  # a few hundred bytes that expand to 9**10 values
    proc = _cli(_project(tmp_path, BOMB), "fleet", "plan", "--stack", "dev")
    _refused(proc, "fleet.yaml", "refused before expanding")


def test_a_fifo_as_the_fleet_file_is_refused_without_waiting_on_it(tmp_path):
    project = _project(tmp_path)
    os.mkfifo(project / "fleet.yaml")
    _refused(_cli(project, "fleet", "plan", "--stack", "dev"), "FIFO")


def test_a_fleet_file_that_is_there_but_cannot_be_read_is_an_error_not_the_default_order(tmp_path):
    project = _project(tmp_path)
    (project / "fleet.yaml").symlink_to(project / "fleets" / "gone.yaml")  # dangling
    assert "no such file" in _load_error(project)


def test_a_fleet_file_linked_out_of_the_project_is_refused_and_never_shown(tmp_path):
    outside = tmp_path / "secrets.txt"
    outside.write_text(f"token: {SECRET}\nwaves: [{{name: all, stacks: [dev, staging, prod]}}]\n")
    project = _project(tmp_path)
    (project / "fleet.yaml").symlink_to(outside)
    text = _load_error(project)
    assert "outside" in text and SECRET not in text
    (project / "fleet.yaml").unlink()
    (project / "fleet.yaml").symlink_to("/dev/zero")
    assert "is a character device, not a regular file" in _load_error(project)


def test_a_fleet_file_over_its_bound_is_refused_before_it_is_parsed(tmp_path):
    project = _project(tmp_path, "waves: [{name: all, stacks: [dev, staging, prod]}]\n# " + "x" * (300 * 1024) + "\n")
    assert "larger than 262144 bytes" in _load_error(project)


@pytest.mark.parametrize(("text", "key"), [
    ("  gate: {validation: no}", "waves[0].gate.validation"),  # YAML 1.1's false
    ("  gate: {validation: off}", "waves[0].gate.validation"),
    ("  gate: {soakSeconds: 5:00}", "waves[0].gate.soakSeconds"),  # YAML 1.1's sexagesimal 300
    ("  parallel: true", "waves[0].parallel"),  # a flag is no count
    ("  gate: {validation: 1}", "waves[0].gate.validation"),  # nor is a count a flag
])
def test_yaml_1_1_flags_and_numbers_and_lax_coercions_are_refused_naming_the_key(tmp_path, text, key):
    project = _project(tmp_path, f"waves:\n- name: all\n  stacks: [dev, staging, prod]\n{text}\n")
    assert key in _load_error(project)


def test_a_list_made_long_by_aliases_is_refused_before_its_items_are_checked(tmp_path):
    project = _project(tmp_path, "x: &s dev\nwaves: [{name: all, stacks: [" + ", ".join(["*s"] * 20_000) + "]}]\n")
    assert "waves[0].stacks: lists 20000 items: at most 1000" in _load_error(project)


def test_a_key_twice_in_the_fleet_file_is_refused(tmp_path):
    project = _project(tmp_path, "waves: [{name: a, stacks: [dev, staging, prod]}]\nwaves: [{name: b, stacks: [dev]}]\n")
    assert "already defined" in _load_error(project)


def test_what_planned_before_still_loads(tmp_path):
    text = ("waves:\n- name: canary\n  stacks: [dev]\n  gate: {validation: true, soakSeconds: 300, pollSeconds: 15}\n"
            "- name: prod.eu_1\n  stacks: [staging, prod]\n  parallel: 2\nonFailure: finish-wave\nonUnreachable: skip\n"
            "previewParallel: 3\n")
    fleet, source = load_fleet(_project(tmp_path, text))
    assert source == "fleet.yaml" and fleet.stacks == ["dev", "staging", "prod"]
    assert fleet.waves[0].gate.soak_seconds == 300 and fleet.waves[1].parallel == 2
    committed, _ = load_fleet(ROOT)
    assert committed.stacks == ["dev", "staging", "prod"]
    project = tmp_path / "project"
    (project / "fleets").mkdir()
    (project / "fleets" / "main.yaml").write_text(text)
    (project / "fleets" / "current.yaml").symlink_to("main.yaml")
    (project / "ci").mkdir()
    (project / "ci" / "fleet.yaml").symlink_to("../fleets/main.yaml")  # a link inside the project
    for named in (project / "fleets" / "current.yaml", project / "ci" / "fleet.yaml"):
        assert load_fleet(project, named)[0].stacks == ["dev", "staging", "prod"]


# =========================================================================== 2. options given empty
COMMANDS = [
    (["plan"], "--stack"), (["plan"], "--chart-dir"),
    (["diff"], "--stack"), (["diff"], "--base"), (["diff"], "--against"), (["diff"], "--chart-dir"),
    (["images"], "--stack"), (["images"], "--chart-dir"),
    (["advise"], "--stack"), (["advise", "--stack", "dev"], "--results"),
    (["fleet", "plan"], "--base"), (["fleet", "plan"], "--stack"), (["fleet", "plan"], "--fleet-file"),
    (["fleet", "plan"], "--chart-dir"),
    (["fleet", "preview"], "--wave"), (["fleet", "preview"], "--pulumi"), (["fleet", "preview"], "--fleet-file"),
    (["fleet", "up"], "--wave"), (["fleet", "up"], "--pulumi"), (["fleet", "up"], "--fleet-file"),
    ([], "--project-dir"),
]


def _parse_refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize("value", ["", "  "])
@pytest.mark.parametrize(("command", "flag"), COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_an_option_that_names_a_thing_given_empty_is_refused_never_taken_as_not_given(command, flag, value, capsys):
    argv = [flag, value, "plan"] if not command else [*command, flag, value]
    err = _parse_refusal(argv, capsys)
    assert err.startswith(f"error: {flag} ") and "(it is empty)" in err


@pytest.mark.parametrize(("argv", "needle"), [
    (["plan", "--chart-dir", "/nonexistent/chart"], "--chart-dir '/nonexistent/chart': no such file or folder"),
    (["fleet", "up", "--pulumi", "/nonexistent/pulumi"], "--pulumi '/nonexistent/pulumi': no such file"),
    (["fleet", "plan", "--fleet-file", "/nonexistent/fleet.yaml"], "--fleet-file '/nonexistent/fleet.yaml': no such file"),
    (["advise", "--stack", "dev", "--results", "/nonexistent/results.log"], "--results '/nonexistent/results.log'"),
    (["--project-dir", "/nonexistent/project", "plan"], "--project-dir '/nonexistent/project'"),
    (["fleet", "plan", "--jobs", "0"], "--jobs '0' is not a whole number from 1 to 64"),
    (["fleet", "plan", "--jobs", "-3"], "--jobs '-3' is not a whole number from 1 to 64"),
    (["fleet", "plan", "--jobs", "100000"], "--jobs '100000' is not a whole number from 1 to 64"),
    (["fleet", "up", "--wave", "canary; rm -rf ~"], "--wave 'canary; rm -rf ~' is not a plain wave name"),
    (["diff", "--against", "../prod"], "--against '../prod' is not a plain stack name"),
    (["fleet", "plan", "--stack", "\x1b[31mdev"], "--stack '\\x1b[31mdev' is not a plain stack name"),
])
def test_a_named_thing_that_is_not_there_or_a_count_out_of_bounds_is_refused(argv, needle, capsys):
    err = _parse_refusal(argv, capsys)
    assert needle in err and "\x1b" not in err


def test_a_long_path_that_is_not_there_is_shown_by_its_end_which_names_the_file(capsys):
    deep = "/tmp/" + "a-long-temporary-folder/" * 6 + "none.yaml"
    err = _parse_refusal(["fleet", "plan", "--fleet-file", deep], capsys)
    assert "none.yaml': no such file" in err and err.count("a-long-temporary-folder") < 6


def test_what_parsed_before_still_parses():
    args = build_parser().parse_args(["fleet", "plan", "--base", "HEAD", "--jobs", "2", "--stack", "dev", "-s", "prod"])
    assert (args.base, args.jobs, args.stack) == ("HEAD", 2, ["dev", "prod"])
    args = build_parser().parse_args(["diff", "--against", "prod", "--stack", "dev.eu_1"])
    assert (args.against, args.stack) == ("prod", "dev.eu_1")


# =========================================================================== 3. what a problem may show
@pytest.mark.parametrize("doc", [
    {**FLEET, "token": SECRET},  # an unknown key's value
    {**FLEET, "prometheus": {"dev": f"ftp://prometheus.example/{SECRET}"}},  # a URL's path
    {**FLEET, "prometheus": {"dev": f"http://prometheus.example:9090/{SECRET}", "staging": f"http://prometheus.example:9090/{SECRET}"}},
    SECRET,  # a token pasted (or linked) as the whole file
    [SECRET, "dev"],
    {**FLEET, f"http://user:{SECRET}@example": 1},  # a URL as a key
    {"waves": [SECRET]},  # where a mapping or a list belongs
    {"waves": [{"name": "all", "stacks": SECRET}]},
])
def test_a_problem_in_the_fleet_file_names_the_key_and_never_shows_a_value_that_may_be_secret(doc):
    with pytest.raises(FleetError) as caught:
        parse_fleet(doc, STACKS)
    assert SECRET not in str(caught.value)


def test_refusal_lines_stay_short_whatever_the_inputs_length(tmp_path):
    stacks = [f"region-{i:03d}-with-a-long-name" for i in range(200)]
    fleet = yaml.safe_dump({"waves": [{"name": "all", "stacks": stacks}]})
    project = _project(tmp_path, fleet, stacks)
    err = _refused(_cli(project, "fleet", "plan", "--stack", "not-there"), "--stack not-there: not a stack of the fleet")
    assert "and 192 more" in err
    (project / "fleet.yaml").write_text(yaml.safe_dump({"waves": [{"name": "all", "stacks": [*stacks, "x" * 5000]}]}))
    assert all(len(line) <= 420 for line in _load_error(project).splitlines())


# =========================================================================== 4. wave names
@pytest.mark.parametrize("name", ["canary; rm -rf ~", "a b", "$(id)", "prod/eu", "../x", ".."])
def test_a_wave_name_follows_the_stack_name_rule(name):
    with pytest.raises(FleetError) as caught:
        parse_fleet({"waves": [{"name": name, "stacks": STACKS}]}, STACKS)
    assert "waves[0].name" in str(caught.value) and "as a stack's is" in str(caught.value)


@pytest.mark.parametrize("key", ["kubernetes.it's", "kubernetes.a;touch x", "kubernetes.a b"])
def test_a_config_command_printed_to_paste_names_the_key_quoted_for_the_shell(tmp_path, key):
    from gpu_stack.config.load import expand_dotted_keys
    from gpu_stack.config.stack_files import StackFileError, read_stack

    _, problems = expand_dotted_keys({key: "x"}, secret_keys=[key])
    command = problems[0].message.split("set it in its place: ", 1)[1]
    assert shlex.split(command) == ["pulumi", "config", "rm", f"gpu-stack:{key}", "&&",
                                    "pulumi", "config", "set", "--secret", "--path", f"gpu-stack:{key}", "VALUE"]
    project = _project(tmp_path)
    (project / "Pulumi.yaml").write_text(yaml.safe_dump({"name": "gpu-stack", "config": {f"gpu-stack:{key}": {"secret": True}}}))
    (project / "Pulumi.dev.yaml").write_text(yaml.safe_dump({"config": {f"gpu-stack:{key}": "plain"}}))
    with pytest.raises(StackFileError) as caught:
        read_stack(project, "dev")
    assert shlex.split(str(caught.value).split("set it with: ", 1)[1]) == ["pulumi", "config", "set", "--secret", f"gpu-stack:{key}"]


# =========================================================================== 5. files named like stack files
ODD = ["Pulumi.my stack.yaml", "Pulumi..yaml", "Pulumi.x;y.yaml"]


def test_a_file_named_like_a_stack_file_but_with_no_stack_name_is_no_stack_of_the_fleet(tmp_path):
    project = _project(tmp_path)
    for name in ODD:
        (project / name).write_text("config: {}\n")
    fleet, _ = load_fleet(project)  # the default order, not a traceback
    assert sorted(fleet.stacks) == STACKS
    (project / "fleet.yaml").write_text(yaml.safe_dump(FLEET))
    assert load_fleet(project)[0].stacks == ["dev", "staging", "prod"]  # a fleet that can pass
    err = _refused(_cli(project, "fleet", "plan", "--stack", "nothere"), "not part of the fleet")
    assert err.count("not part of the fleet") == 1 and all(name in err for name in ODD)


def test_exclude_names_committed_stacks_in_no_wave():
    with pytest.raises(FleetError, match=r"exclude\[0\] = 'ghost': has no stack file Pulumi.ghost.yaml"):
        parse_fleet({**FLEET, "exclude": ["ghost"]}, STACKS)
    with pytest.raises(FleetError, match=r"exclude\[0\] = 'dev': is in waves\[0\] \(canary\) too"):
        parse_fleet({**FLEET, "exclude": ["dev"]}, STACKS)
    assert parse_fleet({"waves": [{"name": "a", "stacks": ["dev"]}], "exclude": ["prod", "staging"]}, STACKS).stacks == ["dev"]
