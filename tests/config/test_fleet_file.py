"""The fleet file (gpu_stack/config/fleet.py): what a user writes, what is refused and how it is said."""

from __future__ import annotations

import pytest

from gpu_stack.config.fleet import FleetError, default_fleet, load_fleet, parse_fleet

COMMITTED = ["dev", "prod", "staging"]


def _error(doc, committed=COMMITTED) -> str:
    with pytest.raises(FleetError) as caught:
        parse_fleet(doc, committed)
    return str(caught.value)


def test_a_fleet_file_gives_waves_in_order_with_their_parallelism_and_gates():
    fleet = parse_fleet(
        {
            "waves": [
                {"name": "canary", "stacks": ["dev"], "gate": {"soakSeconds": 60}},
                {"name": "rest", "stacks": ["staging", "prod"], "parallel": 2},
            ],
            "onFailure": "finish-wave",
            "prometheus": {"dev": "http://127.0.0.1:9090"},
        },
        COMMITTED,
    )
    assert fleet.stacks == ["dev", "staging", "prod"]
    assert fleet.waves[0].gate.soak_seconds == 60 and fleet.waves[0].gate.validation
    assert fleet.waves[1].parallel == 2 and fleet.wave_of("prod").name == "rest"
    assert fleet.on_failure == "finish-wave" and fleet.on_unreachable == "stop"


def test_without_a_fleet_file_dev_is_the_canary_then_staging_then_other_stacks_then_prod(tmp_path):
    for stack in ("prod", "staging", "dev", "qa", "eu"):
        (tmp_path / f"Pulumi.{stack}.yaml").write_text("config: {}\n")
    fleet, source = load_fleet(tmp_path)
    assert [(w.name, w.stacks) for w in fleet.waves] == [
        ("canary", ["dev"]), ("staging", ["staging"]), ("others", ["eu", "qa"]), ("prod", ["prod"]),
    ]
    assert source.startswith("default order")
    assert [w.stacks for w in default_fleet(["prod", "qa"]).waves] == [["qa"], ["prod"]]
    assert default_fleet(["prod"]).waves[0].name == "canary"


def test_the_committed_fleet_file_names_each_wave_for_its_stack_in_the_default_order():
    fleet, source = load_fleet(".")
    assert source == "fleet.yaml"
    assert [(w.name, w.stacks) for w in fleet.waves] == [("dev", ["dev"]), ("staging", ["staging"]), ("prod", ["prod"])]


def test_a_bad_value_is_one_line_naming_the_key_the_value_and_what_is_allowed():
    text = _error({"waves": [{"name": "a", "stacks": ["dev", "../x"], "parallel": 0}], "onFailure": "halt"})
    lines = text.splitlines()
    assert any(line.strip() == "waves[0].parallel = 0: Input should be greater than or equal to 1" for line in lines)
    assert any("waves[0].stacks[1] = '../x': must be a plain stack name" in line for line in lines)
    assert any("onFailure = 'halt': Input should be 'stop' or 'finish-wave'" in line for line in lines)


def test_a_url_with_credentials_and_an_unknown_key_are_refused():
    text = _error({"waves": [{"name": "a", "stacks": COMMITTED}], "prometheus": {"dev": "http://u:p@h:9090"}, "wavez": []})
    assert "wavez" in text and "unknown key" in text
    assert "prometheus.dev" in text and "credentials" in text and "u:p" not in text


def test_a_stack_in_two_waves_a_missing_stack_file_and_a_forgotten_stack_are_refused():
    text = _error({"waves": [{"name": "a", "stacks": ["dev"]}, {"name": "b", "stacks": ["dev", "qa"]}]})
    assert "waves[1].stacks[0] = 'dev': is already in waves[0] (a)" in text
    assert "waves[1].stacks[1] = 'qa': has no stack file Pulumi.qa.yaml" in text
    assert "stack prod has a stack file but is in no wave" in text
    assert parse_fleet({"waves": [{"name": "a", "stacks": ["dev"]}], "exclude": ["prod", "staging"]}, COMMITTED).stacks == ["dev"]


def test_a_fleet_file_that_is_not_yaml_says_so_in_one_line(tmp_path):
    (tmp_path / "Pulumi.dev.yaml").write_text("config: {}\n")
    (tmp_path / "fleet.yaml").write_text("waves: [\n")
    with pytest.raises(FleetError) as caught:
        load_fleet(tmp_path)
    assert str(caught.value).splitlines()[1].strip().startswith("(file): cannot be read: ")
    assert "line 2" in str(caught.value)
    (tmp_path / "fleet.yaml").write_text("- dev\n")
    with pytest.raises(FleetError, match="must be a mapping with `waves:`"):
        load_fleet(tmp_path)
