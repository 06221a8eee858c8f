"""The offline plan finds the chart `make reference` fetched, on its own (no GPU_STACK_CHART_DIR, no
test harness asked), and only while every file of it matches toolchain/reference.sha256."""

from __future__ import annotations

import shutil

from gpu_stack.config.types import CHART_REPOSITORY, CHART_VERSION
from gpu_stack.offline.chart_files import ChartRef, locate_chart, reference_chart

from ..helpers import CHART_REF, REFERENCE, require_reference

NVIDIA = ChartRef(repository=CHART_REPOSITORY, chart="gpu-operator", version=CHART_VERSION)


def _copy(tmp_path):
    require_reference(CHART_REF)
    root = tmp_path / "reference"
    shutil.copytree(REFERENCE / "chart", root / f"gpu-operator-{CHART_VERSION}" / "chart")
    return root


def test_the_plan_renders_the_reference_chart_without_being_told_where(tmp_path, monkeypatch):
    root = _copy(tmp_path)
    monkeypatch.setenv("GPU_STACK_REFERENCE", str(root))
    monkeypatch.delenv("GPU_STACK_CHART_DIR", raising=False)
    monkeypatch.setenv("GPU_STACK_CHART_PULL", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    assert locate_chart(NVIDIA) == root / f"gpu-operator-{CHART_VERSION}" / "chart"


def test_a_reference_chart_that_differs_from_its_sums_is_not_used(tmp_path, monkeypatch):
    root = _copy(tmp_path)
    monkeypatch.setenv("GPU_STACK_REFERENCE", str(root))
    template = root / f"gpu-operator-{CHART_VERSION}" / "chart" / "templates" / "operator.yaml"
    template.write_text(template.read_text() + "\n# edited\n")
    assert reference_chart(NVIDIA) is None


def test_another_repository_or_version_is_not_taken_for_nvidias_chart(tmp_path, monkeypatch):
    root = _copy(tmp_path)
    monkeypatch.setenv("GPU_STACK_REFERENCE", str(root))
    assert reference_chart(NVIDIA) is not None
    assert reference_chart(ChartRef("https://charts.example.internal/nvidia", "gpu-operator", CHART_VERSION)) is None
    assert reference_chart(ChartRef(CHART_REPOSITORY, "gpu-operator", "v25.3.0")) is None
