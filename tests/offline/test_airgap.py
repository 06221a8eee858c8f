"""The `airgap` sample stack (tests/stacks/Pulumi.airgap.yaml, docs/air-gapped.md): it plans offline
with the chart rendered from its local copy, pulling switched off, and no image, chart or package
URL outside the site's mirrors anywhere in its plan or its rendered objects."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpu_stack.config.stack_files import read_stack
from gpu_stack.offline.render import render_text
from gpu_stack.offline.runner import run_program

from ..helpers import CHART_REF, needs_reference
from .test_images import MIRROR, all_uses, needs_chart, sample_project

PACKAGES = "http://packages.example.internal/"
PUBLIC = ("nvcr.io", "registry.k8s.io", "nvidia.github.io", "helm.ngc.nvidia.com", "docker.io", "ghcr.io", "quay.io", "gcr.io")
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s\"'\\]+")


@pytest.fixture
def airgap(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("GPU_STACK_CHART_PULL", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("GPU_STACK_CHART_DIR", raising=False)
    project = sample_project(tmp_path, "airgap")
    return project, run_program(read_stack(project, "airgap"), project)


@needs_reference(CHART_REF)
def test_the_chart_is_the_local_copy_and_nothing_in_the_plan_names_a_public_host(airgap):
    project, plan = airgap
    release = plan.by_name("gpu-operator-release").inputs
    assert release["chart"] == str(project / "charts" / "gpu-operator") and not release.get("repositoryOpts")
    text = json.dumps(plan.to_json()) + render_text(plan)
    for host in PUBLIC:
        assert host not in text, host
    # Every URL left is the package mirror's, or a template a payload fills in on the node.
    urls = sorted({u for u in URL.findall(text) if "${" not in u and "$key" not in u})
    assert urls and all(u.startswith(PACKAGES) for u in urls), urls
    commands = plan.of_type("command:remote:Command")
    assert len(commands) == 2 and all("GPU_STACK_TOOLKIT_SOURCE=mirror" in json.dumps(c.inputs) for c in commands)


@needs_chart
def test_the_rendered_objects_come_from_the_local_chart_with_every_image_in_the_mirror(airgap):
    _, plan = airgap
    uses = all_uses(plan.to_json())
    assert uses and all(u.image.startswith(MIRROR + "/") for u in uses), sorted({u.image for u in uses})
    assert any(u.source == "ClusterPolicy spec.driver" and u.runs for u in uses)  # the driver from the mirror too
