"""Upgrade settings: operator.upgradeCRD and driver.upgradePolicy, from stack config with the
chart's defaults, checked like every other key."""

from __future__ import annotations

import pytest
import yaml

from gpu_stack.config.stack_files import read_stack
from gpu_stack.design.labels import GPU_NODE_TOLERATION
from gpu_stack.offline.runner import PROJECT_DIR

from ..helpers import assert_refused, dev_config, plan_of, require_reference, set_path

RELEASE = "gpu-operator-release"


def _staging():
    return read_stack(PROJECT_DIR, "staging").namespace()


def _values(cfg):
    return plan_of(cfg).by_name(RELEASE).inputs["values"]


def test_defaults_are_the_charts_own():
    values_file = require_reference() / "values.yaml"
    chart = yaml.safe_load(values_file.read_text())
    values = _values(_staging())
    assert values["operator"]["upgradeCRD"] is chart["operator"]["upgradeCRD"] is True
    # the chart's own tolerations kept (a list value replaces the chart's), the GPU pools' taint added
    assert values["operator"]["tolerations"] == [*chart["operator"]["tolerations"], GPU_NODE_TOLERATION]
    assert values["driver"]["upgradePolicy"] == chart["driver"]["upgradePolicy"]


def test_the_policy_is_set_only_where_the_operator_manages_the_driver():
    dev = _values(dev_config())
    assert dev["driver"] == {"enabled": False}
    assert dev["operator"]["upgradeCRD"] is True


def test_settings_reach_the_values_as_typed():
    cfg = set_path(_staging(), "driver.upgradePolicy", {
        "autoUpgrade": False, "maxParallelUpgrades": 0, "maxUnavailable": "50%",
        "drain": {"enable": True, "force": True, "timeoutSeconds": 0, "podSelector": "team=ml"},
    })
    cfg = set_path(cfg, "operator.upgradeCRD", False)
    values = _values(cfg)
    policy = values["driver"]["upgradePolicy"]
    assert (policy["autoUpgrade"], policy["maxParallelUpgrades"], policy["maxUnavailable"]) == (False, 0, "50%")
    assert policy["drain"] == {"enable": True, "force": True, "podSelector": "team=ml", "timeoutSeconds": 0, "deleteEmptyDir": False}
    assert policy["gpuPodDeletion"] == {"force": False, "timeoutSeconds": 300, "deleteEmptyDir": False}
    assert values["operator"]["upgradeCRD"] is False


@pytest.mark.parametrize(
    "path,value,message",
    [
        ("operator.upgradeCRD", "yes please", "gpu-stack:operator.upgradeCRD = 'yes please': must be true or false"),
        ("driver.upgradePolicy.maxUnavailable", "lots",
         "gpu-stack:driver.upgradePolicy.maxUnavailable = 'lots': must be a number of nodes (0 or more) or a percentage from 0% to 100%, such as 25%"),
        ("driver.upgradePolicy.maxUnavailable", "150%", "maxUnavailable = '150%': must be a number of nodes"),
        ("driver.upgradePolicy.maxUnavailable", -1, "maxUnavailable = -1: must be a number of nodes"),
        ("driver.upgradePolicy.maxParallelUpgrades", -2, "gpu-stack:driver.upgradePolicy.maxParallelUpgrades = -2: must be at least 0"),
        ("driver.upgradePolicy.drain.timeoutSeconds", "5m", "gpu-stack:driver.upgradePolicy.drain.timeoutSeconds = '5m': must be a whole number"),
        ("driver.upgradePolicy.gpuPodDeletion.force", "maybe", "gpu-stack:driver.upgradePolicy.gpuPodDeletion.force = 'maybe': must be true or false"),
        ("driver.upgradePolicy.waitForCompletion.podSelector", "app: x",
         "gpu-stack:driver.upgradePolicy.waitForCompletion.podSelector = 'app: x': must be a Kubernetes label selector"),
        ("driver.upgradePolicy.drain.podSelector", "!critical",
         "gpu-stack:driver.upgradePolicy.drain.podSelector = '!critical': must not begin with '!'"),
        ("driver.upgradePolicy.drainage", {"enable": True},
         "gpu-stack:driver.upgradePolicy.drainage: unknown key; did you mean 'drain'?"),
        ("driver.upgradePolicy.podDeletion", {"force": True},
         "gpu-stack:driver.upgradePolicy.podDeletion: unknown key; did you mean 'gpuPodDeletion'?"),
    ],
)
def test_bad_upgrade_settings_are_refused_naming_key_value_and_what_is_allowed(path, value, message):
    assert_refused(set_path(_staging(), path, value), message)
