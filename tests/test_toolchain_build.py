"""toolchain/build.sh keys its cache by the versions and by the build recipe: a changed recipe
rebuilds the components it changed, and only those. Checked on the script itself, sourced (it
then defines its functions only) with a cache folder of the test's own: nothing heavy is built."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

PROJECT_DIR = Path(__file__).resolve().parents[1]
BUILD = PROJECT_DIR / "toolchain" / "build.sh"


def _bash(script: str, tools: Path, build: Path = BUILD, **env: str) -> subprocess.CompletedProcess[str]:
    """The script as on a user's machine (CI unset, even when the suite itself runs under CI)."""
    return subprocess.run(
        ["bash", "-c", f"source {build}\n{script}"],
        env={**os.environ, "GPU_STACK_TOOLS": str(tools), "GPU_STACK_REFERENCE": str(tools / "no-reference"), "CI": "", **env},
        capture_output=True, text=True, timeout=120,
    )


def _recipes(tools: Path, build: Path = BUILD) -> dict[str, str]:
    proc = _bash('for c in "${ORDER[@]}"; do echo "$c $(recipe "$c")"; done', tools, build)
    assert proc.returncode == 0, proc.stderr
    return dict(line.split() for line in proc.stdout.splitlines())


def _copy(tmp_path: Path, edit) -> Path:
    """A copy of toolchain/ with build.sh (and versions.env) edited by `edit(folder)`."""
    folder = tmp_path / "toolchain"
    shutil.copytree(PROJECT_DIR / "toolchain", folder)
    edit(folder)
    return folder / "build.sh"


def _sub(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def test_sourcing_the_script_defines_a_recipe_per_component_and_builds_nothing(tmp_path: Path):
    tools = tmp_path / "tools"
    recipes = _recipes(tools)
    assert len(recipes) == 13 and len(set(recipes.values())) == 13
    assert all(re.fullmatch(r"[0-9a-f]{16}", r) for r in recipes.values())
    assert _recipes(tools) == recipes  # stable
    assert not tools.exists()


@pytest.mark.parametrize(
    "what, edit, changed",
    [
        ("a comment", lambda d: _sub(d / "build.sh", "# Components built from the reference sources", "# Built from the reference sources"), set()),
        ("etcd's ldflags", lambda d: _sub(d / "build.sh", 'go build -trimpath -ldflags "$LDS" -o "$out/etcd"', 'go build -trimpath -ldflags "$LDS -X main.x=1" -o "$out/etcd"'), {"etcd"}),
        # the CLI's recipe is part of the released layout's (it links the CLI), not the language host's
        ("the CLI's", lambda d: _sub(d / "build.sh", "  wrapper pulumi\n", "  wrapper pulumi-cli\n"), {"pulumi", "pulumi-release"}),
        # a helper's text is part of every recipe calling it
        ("upstream_sums", lambda d: _sub(d / "build.sh", "| tee download.json", "| tee ./download.json"), {"nvidia-ctk", "device-plugin", "mps-control-daemon"}),
        # a pin: the components that read it (kwok stamps the Kubernetes version into its binary)
        ("the Kubernetes pin", lambda d: _sub(d / "versions.env", "KUBERNETES_VERSION=1.34.4", "KUBERNETES_VERSION=1.34.5"), {"kubernetes", "kwok"}),
    ],
)
def test_a_changed_recipe_changes_the_stamp_of_what_it_builds_only(tmp_path: Path, what, edit, changed):
    before = _recipes(tmp_path / "tools")
    after = _recipes(tmp_path / "tools", _copy(tmp_path, edit))
    assert {c for c in before if before[c] != after[c]} == changed, what


FAKE = """
KEYS[fake]=fake-1; KEYS[other]=other-1
build_fake() { echo "built by {MARK}" > "$out/fake"; }
build_other() { echo other > "$out/other"; }
main fake other
"""


def test_a_component_is_rebuilt_when_its_recipe_changed_and_only_then(tmp_path: Path):
    tools = tmp_path / "tools"
    first = _bash(FAKE.replace("{MARK}", "one"), tools)
    assert first.returncode == 0, first.stderr
    assert "fake-1: built in" in first.stderr and "other-1: built in" in first.stderr
    assert (tools / "fake-1" / "fake").read_text() == "built by one\n"
    assert (tools / "fake-1" / ".recipe").read_text().strip()

    again = _bash(FAKE.replace("{MARK}", "one"), tools)
    assert "fake-1: cached" in again.stderr and "other-1: cached" in again.stderr and "building" not in again.stderr

    changed = _bash(FAKE.replace("{MARK}", "two"), tools)
    assert changed.returncode == 0, changed.stderr
    assert "fake-1: its recipe changed" in changed.stderr and "fake-1: built in" in changed.stderr
    assert "other-1: cached" in changed.stderr
    assert (tools / "fake-1" / "fake").read_text() == "built by two\n"


def test_a_folder_built_before_the_stamps_is_rebuilt_once(tmp_path: Path):
    tools = tmp_path / "tools"
    assert _bash(FAKE.replace("{MARK}", "one"), tools).returncode == 0
    (tools / "fake-1" / ".recipe").unlink()  # as the script before the stamps left it
    proc = _bash(FAKE.replace("{MARK}", "one"), tools)
    assert "fake-1: its recipe changed (build.sh, a pin it reads or Go: no stamp ->" in proc.stderr
    assert "other-1: cached" in proc.stderr
    assert "fake-1: cached" in _bash(FAKE.replace("{MARK}", "one"), tools).stderr


def test_a_source_from_the_reference_folder_is_checked_by_its_sums(tmp_path: Path):
    """The command provider's source, with one file changed, is refused (and under CI the build
    fails); with no reference folder at all the line names `make reference`."""
    tools = tmp_path / "tools"
    missing = _bash("main command-provider", tools)
    assert missing.returncode == 0  # not CI: skipped with the line
    assert "pulumi-command-1.2.1: not built, no source at" in missing.stderr and "`make reference`" in missing.stderr
    assert _bash("main command-provider", tools, CI="true").returncode == 1
    ref = tmp_path / "ref" / "pulumi-command-v1.2.1" / "provider"
    ref.mkdir(parents=True)
    (ref / "go.mod").write_text("module github.com/pulumi/pulumi-command/provider\n")
    proc = _bash("main command-provider", tools, GPU_STACK_REFERENCE=str(tmp_path / "ref"))
    assert proc.returncode == 1
    assert "pulumi-command-v1.2.1/provider/go.mod has sha256" in proc.stderr
    assert "differs from toolchain/reference.sha256" in proc.stderr
    assert not (tools / "pulumi-command-1.2.1").exists()


# --------------------------------------------------------------------------- a user's own install
def _released_cli(tmp_path: Path, version: str) -> Path:
    """A `pulumi` release layout on PATH (the CLI, the language host and its shim) reporting `version`."""
    bin_dir = tmp_path / f"pulumi-{version}"
    bin_dir.mkdir()
    for name, line in (("pulumi", f"v{version}"), ("pulumi-language-python", version), ("pulumi-language-python-exec", "")):
        (bin_dir / name).write_text(f"#!/bin/sh\necho {line}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("version, ci, taken", [("3.259.0", "false", True), ("3.250.0", "false", False), ("3.259.0", "true", False)])
def test_a_pulumi_on_path_is_used_only_at_the_pinned_version_and_never_under_ci(tmp_path, monkeypatch, version, ci, taken):
    from sandbox import toolchain

    assert toolchain.versions()["PULUMI_VERSION"] == "3.259.0"
    monkeypatch.setenv("GPU_STACK_TOOLS", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PATH", f"{_released_cli(tmp_path, version)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("CI", ci)
    if taken:
        found = toolchain.find(("pulumi-release",))
        assert found["pulumi"] == tmp_path / f"pulumi-{version}" / "pulumi"
        assert found["pulumi-language-python-exec"].parent == found["pulumi"].parent
        return
    with pytest.raises(toolchain.ToolchainMissing) as info:
        toolchain.find(("pulumi-release",))
    message = str(info.value)
    assert "missing pulumi (pulumi-release-3.259.0)" in message
    if ci == "true":
        assert "CI=true: only the cache counts" in message
    else:
        assert f"pulumi at {tmp_path}/pulumi-{version}/pulumi reports {version}, not the pinned 3.259.0" in message


def test_a_provider_plugin_on_path_is_never_used_an_installed_one_at_the_pin_is(tmp_path, monkeypatch):
    from sandbox import toolchain

    monkeypatch.setenv("GPU_STACK_TOOLS", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("PULUMI_HOME", str(tmp_path / "pulumi-home"))
    monkeypatch.delenv("CI", raising=False)
    on_path = tmp_path / "bin"
    on_path.mkdir()
    (on_path / "pulumi-resource-command").write_text("#!/bin/sh\n")
    (on_path / "pulumi-resource-command").chmod(0o755)
    monkeypatch.setenv("PATH", f"{on_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(toolchain.ToolchainMissing, match=r"missing pulumi-resource-command \(pulumi-command-1.2.1\)"):
        toolchain.find(("command-provider",))
    plugin = tmp_path / "pulumi-home" / "plugins" / "resource-command-v1.2.1" / "pulumi-resource-command"
    plugin.parent.mkdir(parents=True)
    shutil.copy2(on_path / "pulumi-resource-command", plugin)
    assert toolchain.find(("command-provider",))["pulumi-resource-command"] == plugin
    monkeypatch.setenv("CI", "true")
    with pytest.raises(toolchain.ToolchainMissing, match="CI=true: only the cache counts"):
        toolchain.find(("command-provider",))


def test_an_unknown_component_is_named_and_fails_the_build(tmp_path: Path):
    proc = subprocess.run(["bash", str(BUILD), "etcd-server"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "GPU_STACK_TOOLS": str(tmp_path / "tools")})
    assert proc.returncode == 1
    assert "toolchain: etcd-server: no such component (one of: " in proc.stderr and " etcd " in proc.stderr
