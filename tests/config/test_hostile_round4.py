"""Hostile and careless input, round four: image references and mirrors, every image under the
mirror, options that must agree with the validation they plan, the `advise` and `images`
commands, local charts and every file the program reads, credentials anywhere in a URL.

CLI cases run `python -m gpu_stack` as a user would (tests/config/test_hostile_input.py's helpers).
"""

from __future__ import annotations

import pytest

from gpu_stack.config import SettingsError, load_settings
from gpu_stack.config.grammars import url_credentials
from gpu_stack.config.safe_input import redact_url_credentials
from gpu_stack.design.derive import derive

from ..helpers import dev_config, set_path
from .test_hostile_input import assert_clean_refusal, cli, project, stack_yaml

CANARY = "canaryFragmentToken42"


def _refusal(cfg: dict) -> str:
    with pytest.raises(SettingsError) as info:
        load_settings(cfg)
    return str(info.value)


# =========================================================================== 3. options and validation agree
def _job_checks(cfg: dict) -> tuple[set[str], tuple[str, ...]]:
    plan = derive(load_settings(cfg)).validation
    assert plan is not None
    return {j.check for j in plan.jobs}, plan.notes


def test_a_toolkit_that_gives_unrequested_gpus_by_choice_plans_no_check_that_would_fail_every_up():
    checks, notes = _job_checks(dev_config())
    assert "no-gpu" in checks
    for placement in ("operator", "host"):
        cfg = set_path(dev_config(), "toolkit.acceptEnvvarWhenUnprivileged", True)
        cfg["toolkit"]["placement"] = placement
        checks, notes = _job_checks(cfg)
        assert "no-gpu" not in checks, placement
        assert any("acceptEnvvarWhenUnprivileged is true" in n and "no-GPU check is not planned" in n for n in notes)


# =========================================================================== 5. images --driver-os
@pytest.mark.parametrize(
    "value",
    ["ubuntu22.04\nevil.example/x:1 registry.example.internal/x", "../../etc/passwd", "ubuntu22.04 --all",
     "-rf", "", "ubuntu22.04;id", "UBUNTU22.04", "ubuntu22.04\r", "rhel", "ubuntu2204"],
)
def test_a_driver_os_that_is_not_an_os_tag_is_refused_before_anything_is_printed(tmp_path, value):
    proc = cli(project(tmp_path, stack_yaml(dev_config())), "images", "--stack", "t", "--format", "copy", f"--driver-os={value}")
    err = assert_clean_refusal(proc, "--driver-os", "is not an OS tag of the driver image")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("value", ["ubuntu20.04", "ubuntu22.04", "ubuntu24.04", "rhel8.10", "rhel9.6", "rhcos4.18", "sles15.6"])
def test_the_os_tags_the_operator_builds_are_accepted(value):
    from gpu_stack.config.images import driver_os_tag

    assert driver_os_tag(value) == value


# =========================================================================== 8. credentials anywhere in a URL
@pytest.mark.parametrize(
    "url",
    [f"https://charts.example.internal/nvidia#token={CANARY}", f"https://charts.example.internal/nvidia#access_token={CANARY}",
     f"oci://registry.example.internal/charts#x-amz-signature={CANARY}"],
)
def test_a_token_in_a_repository_urls_fragment_is_refused_and_hidden(url):
    assert url_credentials(url) is not None
    text = _refusal(set_path(dev_config(), "operator.repository", url))
    assert "gpu-stack:operator.repository = " in text and "carries credentials (a fragment (#" in text
    assert CANARY not in text and "#[hidden]" in text


def test_a_fragment_without_a_token_is_still_refused_in_a_repository_url_and_hidden():
    text = _refusal(set_path(dev_config(), "operator.repository", f"https://charts.example.internal/nvidia#{CANARY}"))
    assert "without a fragment" in text and CANARY not in text


def test_a_url_with_a_user_and_a_query_token_hides_both():
    shown = redact_url_credentials(f"'https://robot:{CANARY}@charts.example.internal/x?token={CANARY}#sig={CANARY}'")
    assert CANARY not in shown and "[credentials hidden]" in shown and "?[hidden]" in shown
