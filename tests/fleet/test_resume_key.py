"""The resume key (issue 41, item 7): a stack stays done under `fleet up --resume` until something
its `pulumi up` runs or reads changes (the program __main__.py imports, Pulumi.yaml,
requirements.txt's pinned SDKs, config/, the Pulumi CLI's version, its stack file, the local chart
copy it names), and only then: the fleet's own code, the CLI front end and the offline diff are
never run by `pulumi up`, so a change to them (the fleet's progress lines) is no new change."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_stack.fleet.state import change_keys, load_done, program_files, record_done

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _project(tmp_path: Path) -> Path:
    """A project laid out as this one: __main__.py imports the components, which import the config;
    the fleet, the CLI front end and the offline code sit beside them, imported by none of those."""
    files = {
        "Pulumi.yaml": "name: gpu-stack\nruntime: python\n",
        "requirements.txt": "pulumi==3.259.0\npulumi-kubernetes==4.25.0\n",
        "__main__.py": "import pulumi\n\nfrom gpu_stack.components.stack import build_stack\n",
        "gpu_stack/__init__.py": "",
        "gpu_stack/components/__init__.py": "",
        "gpu_stack/components/stack.py": "from ..config import load\nfrom ..design.derive import derive\n\ndef build_stack(): ...\n",
        "gpu_stack/config/__init__.py": "from .load import *  # noqa\n",
        "gpu_stack/config/load.py": "import yaml\n",
        "gpu_stack/design/__init__.py": "",
        "gpu_stack/design/derive.py": "def derive():\n    from . import late  # an import inside a function counts\n",
        "gpu_stack/design/late.py": "X = 1\n",
        "gpu_stack/fleet/__init__.py": "",
        "gpu_stack/fleet/progress.py": "LINE = '[{stack}] up: started'\n",
        "gpu_stack/cli/__init__.py": "",
        "gpu_stack/cli/fleet.py": "from ..fleet import progress\n",
        "gpu_stack/offline/diff.py": "from ..config import load\n",
        "gpu_stack/__main__.py": "from .cli import fleet\n",
        "config/gpu-models.yaml": "H200: {}\n",
        "Pulumi.a.yaml": "config: {}\n",
        "Pulumi.b.yaml": "config:\n  gpu-stack:operator:\n    chartPath: charts/gpu-operator\n",
        "charts/gpu-operator/Chart.yaml": "name: gpu-operator\nversion: v25.10.1\n",
        "charts/gpu-operator/templates/operator.yaml": "kind: Deployment\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def _done_after(project: Path, edit, cli: str = "3.259.0", after: str = "3.259.0") -> set[str]:
    keys = change_keys(project, ["a", "b"], cli)
    for stack in ("a", "b"):
        record_done(project, keys[stack], stack, {})
    edit(project)
    return load_done(project, change_keys(project, ["a", "b"], after))


def _write(rel: str, text: str):
    return lambda project: (project / rel).write_text(text)


def test_the_program_files_are_what_main_imports_and_not_the_fleet_the_cli_or_the_offline_diff(tmp_path):
    project = _project(tmp_path)
    names = {p.relative_to(project).as_posix() for p in program_files(project)}
    assert {"__main__.py", "gpu_stack/__init__.py", "gpu_stack/components/stack.py", "gpu_stack/config/load.py",
            "gpu_stack/config/__init__.py", "gpu_stack/design/derive.py", "gpu_stack/design/late.py",
            "Pulumi.yaml", "requirements.txt", "config/gpu-models.yaml"} <= names
    assert not {n for n in names if n.startswith(("gpu_stack/fleet", "gpu_stack/cli", "gpu_stack/offline"))}
    assert "gpu_stack/__main__.py" not in names  # the CLI front end (`python -m gpu_stack`)


def test_this_projects_program_files_leave_out_the_fleet_the_cli_and_the_offline_diff():
    names = {p.relative_to(PROJECT_ROOT).as_posix() for p in program_files(PROJECT_ROOT)}
    assert "gpu_stack/components/stack.py" in names and "gpu_stack/design/derive.py" in names
    assert "gpu_stack/fleet/progress.py" not in names and "gpu_stack/cli/fleet.py" not in names
    assert not {n for n in names if n.startswith(("gpu_stack/fleet/", "gpu_stack/cli/", "gpu_stack/offline/"))}


@pytest.mark.parametrize(("what", "edit"), [
    ("the fleet's progress lines", _write("gpu_stack/fleet/progress.py", "LINE = '[{stack}] up (wave {wave}): started'\n")),
    ("the CLI front end", _write("gpu_stack/cli/fleet.py", "from ..fleet import progress  # reworded\n")),
    ("the offline diff", _write("gpu_stack/offline/diff.py", "from ..config import load\nX = 2\n")),
    ("a new fleet module", _write("gpu_stack/fleet/table.py", "ROWS = []\n")),
])
def test_what_pulumi_up_never_runs_is_no_change(tmp_path, what, edit):
    assert _done_after(_project(tmp_path), edit) == {"a", "b"}, what


@pytest.mark.parametrize(("what", "edit"), [
    ("a module the program imports", _write("gpu_stack/design/derive.py", "def derive():\n    return 2\n")),
    ("a module imported inside a function", _write("gpu_stack/design/late.py", "X = 2\n")),
    ("the pinned SDKs (and so the provider plugins)", _write("requirements.txt", "pulumi==3.259.0\npulumi-kubernetes==4.26.0\n")),
    ("the runtime's options", _write("Pulumi.yaml", "name: gpu-stack\nruntime: {name: python, options: {toolchain: uv}}\n")),
    ("data the program reads", _write("config/gpu-models.yaml", "H200: {memory: 141}\n")),
])
def test_what_pulumi_up_runs_is_every_stacks_change(tmp_path, what, edit):
    assert _done_after(_project(tmp_path), edit) == set(), what


def test_a_new_pulumi_cli_is_every_stacks_change(tmp_path):
    assert _done_after(_project(tmp_path), lambda p: None, cli="3.259.0", after="3.260.0") == set()


def test_a_new_local_chart_copy_is_the_change_of_the_stacks_that_use_it(tmp_path):
    project = _project(tmp_path)
    assert _done_after(project, _write("charts/gpu-operator/templates/operator.yaml", "kind: DaemonSet\n")) == {"a"}
    # a chart given as a packaged .tgz, by an absolute path
    tgz = tmp_path / "gpu-operator-v25.10.1.tgz"
    tgz.write_bytes(b"\x1f\x8b one")
    (project / "Pulumi.b.yaml").write_text(f"config:\n  gpu-stack:operator:\n    chartPath: {tgz}\n")
    assert _done_after(project, lambda p: tgz.write_bytes(b"\x1f\x8b two")) == {"a"}


def test_a_stacks_own_file_is_its_change_alone(tmp_path):
    assert _done_after(_project(tmp_path), _write("Pulumi.a.yaml", "config: {gpu-stack:sharing: {replicas: 8}}\n")) == {"b"}
