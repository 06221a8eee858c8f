"""The real nvidia-mig-parted v0.13.1 (toolchain/build.sh) checks every MIG config the stack makes.

`nvidia-mig-parted assert --valid-config -f FILE -c NAME` parses FILE with mig-parted's own spec
types (api/spec/v1/spec.go: unknown fields, `devices`, `mig-enabled`/`mig-devices` rules, profile
name format) and checks that NAME is in it, without touching a GPU (cmd/nvidia-mig-parted/assert:
it returns before NVML is opened). The MIG manager runs the same check on the mounted ConfigMap
before it applies a node's label. So: every config of every committed stack, and of generated
stacks, must pass, and every node's label must name a config that passes; a config the settings
accept and mig-parted refuses would be a defect of the settings.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import given

from gpu_stack.config import load_settings
from gpu_stack.config.stack_files import read_stack
from gpu_stack.design.derive import derive
from gpu_stack.offline.runner import PROJECT_DIR

from ..helpers import assert_refused, reference_dir, require_reference
from ..toolchain import tool
from .test_properties import PROPERTY, _valid, mig_configs

STACK_FILES = sorted(PROJECT_DIR.glob("Pulumi.*.yaml")) + sorted((PROJECT_DIR / "tests" / "stacks").glob("Pulumi.*.yaml"))
DEFAULT_MIG = reference_dir() / "default-mig-parted-config.yaml"


def valid_config(path: Path, name: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(tool("nvidia-mig-parted")), "assert", "--valid-config", "-f", str(path), "-c", name],
                          capture_output=True, text=True, timeout=30)


def assert_valid(path: Path, name: str) -> None:
    proc = valid_config(path, name)
    assert proc.returncode == 0 and "Selected MIG configuration is valid" in proc.stdout, (name, proc.stdout, proc.stderr)


def _stack_settings(path: Path, tmp_path: Path):
    """A committed stack's settings (a sample stack of tests/stacks/ with the project's Pulumi.yaml)."""
    stack = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
    if path.parent != PROJECT_DIR:
        shutil.copy(PROJECT_DIR / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
        shutil.copy(path, tmp_path / path.name)
        path = tmp_path / path.name
    return load_settings(read_stack(path.parent, stack).namespace())


def builtin_config(tmp_path: Path) -> Path:
    """The operator's built-in config.yaml (its default-mig-parted-config ConfigMap) as a file."""
    require_reference()
    path = tmp_path / "default-config.yaml"
    path.write_text(yaml.safe_load(DEFAULT_MIG.read_text())["data"]["config.yaml"])
    return path


def test_the_stack_files_are_found():
    assert {p.name for p in STACK_FILES} >= {"Pulumi.dev.yaml", "Pulumi.staging.yaml", "Pulumi.prod.yaml", "Pulumi.k3s.yaml"}


@pytest.mark.parametrize("stack_file", STACK_FILES, ids=[p.name for p in STACK_FILES])
def test_every_mig_config_of_a_committed_stack_passes_mig_parted(tmp_path, stack_file):
    settings = _stack_settings(stack_file, tmp_path)
    mig = derive(settings).mig
    if mig.configmap_name is None:
        # No custom profiles: the nodes name configs of the operator's built-in list.
        builtin = builtin_config(tmp_path)
        for label in mig.node_labels.values():
            assert_valid(builtin, label)
        return
    config = tmp_path / "config.yaml"
    config.write_text(mig.data["config.yaml"])
    for name in yaml.safe_load(config.read_text())["mig-configs"]:
        assert_valid(config, name)
    for label in mig.node_labels.values():
        assert_valid(config, label)


@PROPERTY
@given(mig_configs())
def test_any_mig_config_the_settings_accept_passes_mig_parted(tmp_path_factory, raw):
    settings = _valid(raw)
    mig = derive(settings).mig
    config = tmp_path_factory.mktemp("mig") / "config.yaml"
    config.write_text(mig.data["config.yaml"])
    for name in mig.document["mig-configs"]:
        assert_valid(config, name)


@pytest.mark.parametrize("name", ["n", "y", "N", "1e3", "10", "off", "null", "0x1f"])
def test_config_names_yaml_1_1_reads_as_something_else_still_name_their_config(tmp_path, name):
    """Found by the property test above: a config named `n` came out as the key "false"."""
    settings = load_settings({"mig": {"strategy": "mixed", "profiles": {name: [{"devices": "all", "mig-enabled": False}]}},
                              "nodes": [{"name": "h100", "gpu": {"model": "H100-80GB", "count": 8}, "mig": name}]})
    mig = derive(settings).mig
    config = tmp_path / "config.yaml"
    config.write_text(mig.data["config.yaml"])
    assert_valid(config, name)
    assert mig.node_labels["h100"] == name


def test_the_operators_built_in_configs_pass_mig_parted(tmp_path):
    builtin = builtin_config(tmp_path)
    names = list(yaml.safe_load(builtin.read_text())["mig-configs"])
    assert "all-disabled" in names and len(names) > 20
    for name in names:
        assert_valid(builtin, name)


# Entries mig-parted refuses, each with the settings' own refusal of the same entry: the check above
# can fail, and the settings stop what the binary would stop.
REFUSED = [
    ({"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 1}},
     "MIG devices included when 'mig-enabled' is false", "must be empty when mig-enabled is false"),
    ({"devices": "all", "mig-enabled": True, "migDevices": {"1g.10gb": 1}},
     "unexpected field: migDevices", "migDevices: unknown key"),
    ({"devices": "some", "mig-enabled": False},
     "invalid string input for 'devices': some", "devices = 'some': must be one of 'all'"),
    ({"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10g": 1}},
     "1g.10g", "'1g.10g' is not a MIG profile name"),
    ({"devices": "all"}, "missing required field: mig-enabled", "mig-enabled: is required"),
]


@pytest.mark.parametrize("entry,binary_says,settings_say", REFUSED, ids=[r[1][:40] for r in REFUSED])
def test_what_mig_parted_refuses_the_settings_refuse_too(tmp_path, entry, binary_says, settings_say):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"version": "v1", "mig-configs": {"p": [entry]}}))
    proc = valid_config(config, "p")
    assert proc.returncode != 0 and binary_says in proc.stderr, proc.stderr
    assert_refused({"mig": {"strategy": "mixed", "profiles": {"p": [entry]}}}, settings_say)
