"""NVIDIA's DRA driver chart 0.4.1, rendered offline with Helm's Go SDK from the reference copy with
the values the stack gives it: the plan shows the DRA release and the objects it creates (the
DeviceClasses at resource.k8s.io/v1, the kubelet plugin only on the DRA nodes); the chart cannot
render offline without the version the stack pins."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from gpu_stack.__main__ import main
from gpu_stack.offline.chart import RenderedObject, render_release
from gpu_stack.offline.objects import release_renderer
from gpu_stack.offline.runner import PROJECT_DIR
from sandbox import reference

from ..helpers import dev_config, helm_sdk_problem, needs_reference, plan_of, require_reference

NO_SDK = helm_sdk_problem()
pytestmark = [
    needs_reference(reference.DRA_CHART),
    pytest.mark.skipif(NO_SDK is not None, reason=f"cannot render the chart: {NO_SDK}"),
]
RELEASE = "kubernetes:helm.sh/v3:Release"


def _dra_config() -> dict[str, Any]:
    cfg = dev_config()
    cfg["kubernetes"]["version"] = "1.34"
    cfg["nodes"][0]["allocation"] = "dra"
    return cfg


def _dra_release(plan) -> dict[str, Any]:
    (release,) = [r for r in plan.of_type(RELEASE) if r.name == "dra-driver-release"]
    return release.inputs


def _render(inputs: dict[str, Any]) -> list[RenderedObject]:
    # The release's own chart reference, located as the plan locates it (the reference copy).
    return release_renderer()(inputs)


def test_a_stack_without_dra_nodes_has_no_dra_release():
    plan = plan_of(dev_config())
    assert [r.name for r in plan.of_type(RELEASE)] == ["gpu-operator-release"]


def test_the_dra_release_renders_the_device_classes_at_v1_and_the_plugin_on_dra_nodes_only():
    inputs = _dra_release(plan_of(_dra_config()))
    assert (inputs["chart"], inputs["version"]) == ("oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu", "0.4.1")
    objects = _render(inputs)
    classes = {o.name: o.body for o in objects if o.kind == "DeviceClass"}
    assert sorted(classes) == ["gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"]
    assert {o.api_version for o in objects if o.kind == "DeviceClass"} == {"resource.k8s.io/v1"}
    # The chart's gpu.nvidia.com sets extendedResourceName with v1 (kept by the API server only under
    # the alpha DRAExtendedResource gate: the plan warns about it, docs/dra.md says what it means).
    assert classes["gpu.nvidia.com"]["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert classes["mig.nvidia.com"]["spec"]["selectors"] == [
        {"cel": {"expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"}}]
    (plugin,) = [o for o in objects if o.kind == "DaemonSet"]
    assert plugin.key == "DaemonSet gpu-operator/dra-driver-nvidia-gpu-kubelet-plugin"
    pod = plugin.body["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpu-stack/allocation": "dra"}
    assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "gpu-stack/allocation", "operator": "In", "values": ["dra"]}]}]
    assert plugin.body["spec"]["template"]["metadata"]["labels"]["dra-driver-nvidia-gpu-component"] == "kubelet-plugin"
    env = {e["name"]: e.get("value") for c in pod["containers"] for e in c.get("env") or []}
    assert env["NVIDIA_DRIVER_ROOT"] == "/"
    import kubernetes_validate

    for cls in classes.values():
        kubernetes_validate.validate(cls, "1.34", strict=True)
    # No controller Deployment: ComputeDomains are off.
    assert not [o for o in objects if o.kind == "Deployment"]


def test_the_pinned_api_version_rules_the_objects_not_the_renderers_api_list():
    """The chart takes `resourceApiVersion` over what its renderer says the cluster serves
    (`.Capabilities.APIVersions`, which differs between an offline render, Helm's defaults of the
    provider's client libraries and a live cluster): with the stack's pin every DRA object is v1
    whatever renders it; another value would change them (here v1beta2, which 1.34 does not serve
    by default, and without extendedResourceName)."""
    inputs = _dra_release(plan_of(_dra_config()))
    assert inputs["values"]["resourceApiVersion"] == "resource.k8s.io/v1"
    chart = require_reference(reference.DRA_CHART)
    other = render_release(chart, {**inputs["values"], "resourceApiVersion": "resource.k8s.io/v1beta2"}, inputs["name"], inputs["namespace"])
    classes = {o.name: o for o in other if o.kind == "DeviceClass"}
    assert {o.api_version for o in classes.values()} == {"resource.k8s.io/v1beta2"}
    assert "extendedResourceName" not in classes["gpu.nvidia.com"].body["spec"]


def test_the_plan_of_the_dra_sample_lists_the_dra_release_objects(tmp_path, capsys):
    """`plan` of the DRA sample stack (tests/stacks/Pulumi.dra.yaml) lists the objects of both
    releases, the DRA chart rendered with the real chart (tests/golden/dra.plan.txt holds the text)."""
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(PROJECT_DIR / name, tmp_path / name)
    shutil.copy(PROJECT_DIR / "tests" / "stacks" / "Pulumi.dra.yaml", tmp_path / "Pulumi.dra.yaml")
    chart = require_reference(reference.CHART)
    assert main(["--project-dir", str(tmp_path), "plan", "--stack", "dra", "--chart-dir", str(chart)]) == 0
    text = capsys.readouterr().out
    assert "Objects of release dra-driver-release (rendered with Helm): 21\n  + DeviceClass gpu.nvidia.com\n" in text
    assert "  + DaemonSet gpu-operator/dra-driver-nvidia-gpu-kubelet-plugin\n" in text
    assert "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate x1" in text


def test_the_reference_copy_passes_as_a_local_dra_chart():
    """The sandbox and the end-to-end tier install the DRA chart from the reference copy
    (`dra.chartPath`): the stack's check of a local chart accepts it."""
    from gpu_stack.config.chart_source import local_chart_problems

    chart = require_reference(reference.DRA_CHART)
    assert local_chart_problems(chart, "0.4.1", name="dra-driver-nvidia-gpu", subchart=None) == []
    plan = plan_of({**_dra_config(), "dra": {"chartPath": str(chart)}})
    assert _dra_release(plan)["chart"] == str(chart)
