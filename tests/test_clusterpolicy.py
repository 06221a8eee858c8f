"""The release values of every stack, rendered as chart v25.10.1 does, give a valid ClusterPolicy
that points at the ConfigMaps the same plan creates."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_stack.offline.runner import PROJECT_DIR
from gpu_stack.stack_files import list_stacks

from .clusterpolicy_render import load_reference, render_clusterpolicy, validate_clusterpolicy
from .helpers import plan_stack_file, reference_dir

REF = reference_dir()
pytestmark = pytest.mark.skipif(
    not (REF / "values.yaml").exists() or not (REF / "crd-clusterpolicies.yaml").exists(),
    reason=f"chart reference (values.yaml, ClusterPolicy CRD) not found at {REF}",
)

STACKS = list_stacks(PROJECT_DIR)


@pytest.fixture(scope="module")
def reference():
    return load_reference(REF)


@pytest.fixture(scope="module", params=STACKS)
def stack_plan(request):
    return plan_stack_file(request.param)


def _release(plan):
    (release,) = plan.of_type("kubernetes:helm.sh/v3:Release")
    return release


def _configmaps(plan) -> dict[str, Any]:
    return {r.inputs["metadata"]["name"]: r for r in plan.of_type("kubernetes:core/v1:ConfigMap")}


def test_values_render_a_valid_clusterpolicy(stack_plan, reference):
    chart_values, crd = reference
    doc = render_clusterpolicy(chart_values, _release(stack_plan).inputs["values"], crd)
    assert validate_clusterpolicy(doc, crd) == []


def test_clusterpolicy_points_at_the_plans_own_configmaps(stack_plan, reference):
    chart_values, crd = reference
    release = _release(stack_plan)
    spec = render_clusterpolicy(chart_values, release.inputs["values"], crd)["spec"]
    configmaps = _configmaps(stack_plan)
    namespace = release.inputs["namespace"]

    plugin = spec["devicePlugin"].get("config")
    if plugin:
        cm = configmaps[plugin["name"]]
        assert cm.inputs["metadata"]["namespace"] == namespace
        assert cm.name in release.depends_on
        if plugin.get("default"):
            assert plugin["default"] in cm.inputs["data"]
    mig = spec["migManager"].get("config", {})
    if mig.get("name"):
        cm = configmaps[mig["name"]]
        assert cm.inputs["metadata"]["namespace"] == namespace
        assert "config.yaml" in cm.inputs["data"]
        assert mig["default"] == "all-disabled"
    dcgm = spec["dcgmExporter"].get("config", {})
    if dcgm.get("name"):
        cm = configmaps[dcgm["name"]]
        assert "dcgm-metrics.csv" in cm.inputs["data"]
    # Labels name keys that exist in the ConfigMaps they select from.
    for patch in stack_plan.of_type("kubernetes:core/v1:NodePatch"):
        labels = patch.inputs["metadata"].get("labels", {})
        if "nvidia.com/device-plugin.config" in labels:
            assert plugin, "a node selects a sharing profile but the ClusterPolicy has no device-plugin config"
            assert labels["nvidia.com/device-plugin.config"] in configmaps[plugin["name"]].inputs["data"]


def test_dev_clusterpolicy_is_what_the_stack_decides(reference):
    chart_values, crd = reference
    plan = plan_stack_file("dev")
    spec = render_clusterpolicy(chart_values, _release(plan).inputs["values"], crd)["spec"]
    sharing_cm = plan.by_name("gpu-operator-sharing-config").inputs["metadata"]["name"]
    assert spec["devicePlugin"]["config"] == {"name": sharing_cm, "default": "default"}
    assert spec["driver"]["enabled"] is False
    assert spec["toolkit"]["enabled"] is False
    assert spec["mig"] == {"strategy": "none"}
    assert spec["dcgmExporter"]["serviceMonitor"]["enabled"] is True
    assert spec["dcgmExporter"]["serviceMonitor"]["additionalLabels"] == {"release": "kube-prometheus-stack"}
    assert "defaultRuntime" not in spec.get("operator", {})


def _paths(tree: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(tree, dict) and tree:
        out = []
        for k, v in tree.items():
            out.extend(_paths(v, prefix + (k,)))
        return out
    return [prefix]


def _known(path: tuple[str, ...], chart_values: dict[str, Any], crd: dict[str, Any]) -> bool:
    node: Any = chart_values
    for part in path:
        if isinstance(node, dict) and part in node:
            node = node[part]
        else:
            break
    else:
        return True
    schema: Any = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    for part in path:
        props = schema.get("properties") if isinstance(schema, dict) else None
        if props and part in props:
            schema = props[part]
        elif isinstance(schema, dict) and isinstance(schema.get("additionalProperties"), dict):
            schema = schema["additionalProperties"]
        else:
            return False
    return True


def test_every_value_set_is_one_the_chart_reads(stack_plan, reference):
    chart_values, crd = reference
    values = _release(stack_plan).inputs["values"]
    unknown = [".".join(p) for p in _paths(values) if not _known(p, chart_values, crd)]
    assert unknown == []
    assert "defaultRuntime" not in values.get("operator", {})


@pytest.mark.parametrize(
    "values,expected",
    [
        ({"mig": {"strategy": "dual"}}, "mig.strategy"),
        ({"dcgmExporter": {"serviceMonitor": {"enabled": True, "interval": "15 seconds"}}}, "dcgmExporter.serviceMonitor.interval"),
        ({"migManager": {"config": {"name": "custom", "default": "custom-default"}}}, "migManager.config.default"),
        ({"devicePlugin": {"config": {"name": 42}}}, "devicePlugin.config.name"),
    ],
)
def test_renderer_catches_values_the_crd_rejects(values, expected, reference):
    chart_values, crd = reference
    errors = validate_clusterpolicy(render_clusterpolicy(chart_values, values, crd), crd)
    assert any(e.startswith("spec." + expected) for e in errors), errors
