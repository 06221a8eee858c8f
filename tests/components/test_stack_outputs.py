"""The stack outputs are the ones design/outputs.py's table describes: the real __main__.py run
offline exports exactly its keys, in its order, whatever is switched off; the design alone gives
every value but the three only resources know."""

from __future__ import annotations

import re

import pytest

from gpu_stack.config import load_settings
from gpu_stack.config.docs import MARKDOWN_PATH
from gpu_stack.design.derive import derive
from gpu_stack.design.outputs import FROM_RESOURCES, OUTPUTS, design_outputs, stack_outputs

from ..helpers import dev_config, plan_of, plan_stack_file, set_path


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_exported_outputs_are_the_tables(stack):
    assert list(plan_stack_file(stack).outputs) == list(OUTPUTS)


def test_the_exported_outputs_stay_the_tables_with_everything_optional_off():
    cfg = dev_config()
    for path, value in (("validation.enabled", False), ("alerts.enabled", False), ("alerts.dashboard.enabled", False)):
        set_path(cfg, path, value)
    outputs = plan_of(cfg).outputs
    assert list(outputs) == list(OUTPUTS)
    assert (outputs["validationJobs"], outputs["alertRules"], outputs["dashboardConfigMap"], outputs["sharingCost"]) == ({}, [], None, None)


def test_every_output_is_described_in_one_line():
    for key, text in OUTPUTS.items():
        assert text.strip() and "\n" not in text and text.endswith("."), key
    assert set(FROM_RESOURCES) < set(OUTPUTS)


def test_the_design_gives_every_output_but_what_only_resources_know():
    design = derive(load_settings({
        "nodes": [{"name": "h", "gpu": {"model": "H100-80GB", "count": 1}, "mig": "all-1g.10gb"}],
        "mig": {"strategy": "mixed"},
        "alerts": {"enabled": False, "dashboard": {"enabled": True}},
    }))
    values = design_outputs(design)
    assert set(values) == set(OUTPUTS) - set(FROM_RESOURCES)
    assert values["migRolloutJob"] == design.rollout.job_name and values["alertRules"] == []
    assert values["dashboardConfigMap"] == "gpu-stack-dashboard"
    with pytest.raises(ValueError, match="sharingCost"):
        stack_outputs(design, {"releaseName": "gpu-operator", "nodePreflight": {}})
    assert list(stack_outputs(design, dict.fromkeys(FROM_RESOURCES))) == list(OUTPUTS)


def test_the_configuration_reference_lists_the_outputs_as_the_table_says():
    section = MARKDOWN_PATH.read_text(encoding="utf-8").split("\n## Outputs\n", 1)[1]
    rows = re.findall(r"^\| `(\w+)` \| (.+) \|$", section, re.MULTILINE)
    assert rows == list(OUTPUTS.items())
