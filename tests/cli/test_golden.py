"""Golden files: the plan (text and JSON) of every committed stack and the diff of one small edit
per stack, byte for byte as the command line prints them. A refactoring that changes no behaviour
leaves them as they are; a change that means to alter a plan rewrites them with one switch:

    GPU_STACK_UPDATE_GOLDEN=1 make test-quick      (or: make golden)

and the rewritten files show the change in review."""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path

import pytest

from gpu_stack.__main__ import main
from gpu_stack.config.stack_files import read_stack
from gpu_stack.offline.diff import diff_plans, render
from gpu_stack.offline.effects import add_objects_and_effects
from gpu_stack.offline.runner import PROJECT_DIR, plan_stack, run_program
from sandbox import reference

from ..helpers import CHART_REF, helm_sdk_problem, reference_dir, require_reference

GOLDEN = PROJECT_DIR / "tests" / "golden"
SAMPLES = PROJECT_DIR / "tests" / "stacks"
UPDATE = os.environ.get("GPU_STACK_UPDATE_GOLDEN") == "1"
STACKS = ("dev", "staging", "prod", "airgap", "k3s", "dra")


def _set(values: dict, key: str, path: list, value) -> None:
    target = values[key]
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value


# One edit a reviewer meets often, per stack: the replicas of time-slicing, or a node's MIG layout.
EDITS = {
    "dev": ("sharing-replicas", "gpu-stack:sharing", ["replicas"], 5),
    "staging": ("sharing-replicas", "gpu-stack:sharing", ["replicas"], 3),
    "prod": ("node-mig", "gpu-stack:nodes", [2, "mig"], "inference-balanced"),
    "airgap": ("sharing-replicas", "gpu-stack:sharing", ["replicas"], 3),
    "k3s": ("sharing-replicas", "gpu-stack:sharing", ["replicas"], 3),
    # the device-plugin node moves to DRA: its labels, the release's nodes, the validation
    "dra": ("node-allocation", "gpu-stack:nodes", [2, "allocation"], "dra"),
}


@pytest.fixture(scope="module")
def project_dirs(tmp_path_factory) -> dict[str, Path]:
    """Where each stack is planned: the project for its own stacks; for a sample stack of
    tests/stacks/, a folder with the project's Pulumi.yaml and __main__.py beside it, and the chart
    where the air-gapped sample expects its local copy (charts/gpu-operator)."""
    dirs = {}
    for stack in STACKS:
        if (PROJECT_DIR / f"Pulumi.{stack}.yaml").exists():
            dirs[stack] = PROJECT_DIR
            continue
        folder = tmp_path_factory.mktemp(stack)
        for name in ("Pulumi.yaml", "__main__.py"):
            shutil.copy(PROJECT_DIR / name, folder / name)
        shutil.copy(SAMPLES / f"Pulumi.{stack}.yaml", folder / f"Pulumi.{stack}.yaml")
        (folder / "charts").mkdir()
        (folder / "charts" / "gpu-operator").symlink_to(reference_dir() / "chart", target_is_directory=True)
        dirs[stack] = folder
    return dirs


@pytest.fixture(scope="module")
def chart_dir() -> Path:
    chart = require_reference(CHART_REF)
    problem = helm_sdk_problem()
    if problem:
        pytest.skip(f"the golden plans list the chart's objects: {problem}")
    return chart


def _compare(name: str, text: str, project_dir: Path) -> None:
    """`text` against tests/golden/<name>, the project folder written as <project> (a sample
    stack's local chart path names it) and the reference chart as <reference-chart> (where it lies
    differs between a checkout, a worktree and CI)."""
    text = text.replace(str(project_dir), "<project>")
    for chart, shown in ((reference_dir() / "chart", "<reference-chart>"), (reference.path(reference.DRA_CHART), "<reference-dra-chart>")):
        for form in sorted({str(chart), str(chart.resolve())}, key=len, reverse=True):
            text = text.replace(form, shown)
    path = GOLDEN / name
    if UPDATE:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.exists(), f"{path} is missing: GPU_STACK_UPDATE_GOLDEN=1 make test-quick writes it"
    expected = path.read_text()
    assert text == expected, (
        f"{name} differs from its golden file; when the change is meant, rewrite the golden files "
        "with GPU_STACK_UPDATE_GOLDEN=1 make test-quick and review their diff"
    )


def _dra_chart(stack: str) -> None:
    """The DRA sample's plans list the DRA driver chart's objects too: its reference copy is needed."""
    if stack == "dra":
        require_reference(reference.DRA_CHART)


@pytest.mark.parametrize("fmt", ["text", "json"])
@pytest.mark.parametrize("stack", STACKS)
def test_plan_matches_its_golden_file(stack, fmt, project_dirs, chart_dir, capsys):
    _dra_chart(stack)
    argv = ["--project-dir", str(project_dirs[stack]), "plan", "--stack", stack, "--format", fmt]
    assert main(argv + (["--chart-dir", str(chart_dir)] if fmt == "text" else [])) == 0
    _compare(f"{stack}.plan.{'txt' if fmt == 'text' else 'json'}", capsys.readouterr().out, project_dirs[stack])


@pytest.mark.parametrize("stack", STACKS)
def test_diff_of_one_edit_matches_its_golden_file(stack, project_dirs, chart_dir):
    """What `diff --base` prints after one edit of the stack file (the base planned from the file
    as committed, the head from the edited config), objects and effects included."""
    _dra_chart(stack)
    label, key, path, value = EDITS[stack]
    base = plan_stack(stack, project_dirs[stack])
    edited = read_stack(project_dirs[stack], stack)
    edited.values = copy.deepcopy(edited.values)
    _set(edited.values, key, path, value)
    head = run_program(edited, project_dirs[stack])
    result = diff_plans(base, head, base_label=f"Pulumi.{stack}.yaml", head_label=f"{label} edit")
    assert result.has_changes
    add_objects_and_effects(result, base, head, chart_dir)
    _compare(f"{stack}.diff-{label}.txt", render(result, "text"), project_dirs[stack])
