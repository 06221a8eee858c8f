"""The real chart v25.10.1, rendered with Helm's Go SDK from the reference copy with every stack's
release values: every object is valid (the ClusterPolicy and other custom resources against
their CRDs as the API server stores them, the rest against the Kubernetes schemas of
`kubernetes.version`), the ClusterPolicy points at the plan's own ConfigMaps, and the chart
lints clean with the stack's values."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from gpu_stack.config import load_settings
from gpu_stack.config.stack_files import list_stacks, read_stack
from gpu_stack.offline.chart import RenderedObject, lint, render_release
from gpu_stack.offline.runner import PROJECT_DIR

from ..crd_schema import check_custom_resource
from ..helpers import (
    CHART_REF,
    dev_config,
    helm_sdk_problem,
    needs_reference,
    plan_of,
    plan_stack_file,
    reference_dir,
    set_path,
)

CHART = reference_dir() / "chart"
NO_SDK = helm_sdk_problem()
pytestmark = [
    needs_reference(CHART_REF),
    pytest.mark.skipif(NO_SDK is not None, reason=f"cannot render the chart: {NO_SDK}"),
]

STACKS = list_stacks(PROJECT_DIR)
RELEASE = "kubernetes:helm.sh/v3:Release"


def _release(plan):
    (release,) = plan.of_type(RELEASE)
    return release


def render(plan) -> list[RenderedObject]:
    inputs = _release(plan).inputs
    return render_release(CHART, inputs["values"], inputs["name"], inputs["namespace"])


def _one(objects: list[RenderedObject], kind: str) -> dict[str, Any]:
    (obj,) = [o for o in objects if o.kind == kind]
    return obj.body


def _crds(objects: list[RenderedObject]) -> dict[tuple[str, str], dict[str, Any]]:
    """(group, kind) -> CRD, for every CRD the chart ships."""
    out = {}
    for o in objects:
        if o.kind == "CustomResourceDefinition":
            spec = o.body["spec"]
            out[(spec["group"], spec["names"]["kind"])] = o.body
    return out


def schema_version(minor: str) -> str:
    matches = [v for v in kubernetes_validate.utils.all_versions() if kubernetes_validate.utils.major_minor(v) == minor]
    assert matches, f"kubernetes-validate ships no schema for {minor}"
    return sorted(matches, key=lambda v: tuple(int(p) for p in v.split(".")))[-1]


# Defects of the upstream chart itself, independent of the stack's values: the object, the path of
# the field, and why. Each is checked to be exactly that (the rest of the object must validate).
KNOWN_UPSTREAM_DEFECTS = {
    "Job gpu-operator/gpu-operator-node-feature-discovery-prune": (
        ("spec", "template", "spec", "resources"),
        ("NFD chart v0.18.2 post-delete-job.yaml puts master.resources at pod level (a field from "
        "Kubernetes 1.32 on); older API servers drop it, so the post-delete prune Job runs without limits"),
    ),
}


def _without(body: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    import copy

    out = copy.deepcopy(body)
    node = out
    for part in path[:-1]:
        node = node[part]
    del node[path[-1]]
    return out


@pytest.fixture(scope="module", params=STACKS)
def stack(request):
    plan = plan_stack_file(request.param)
    return request.param, plan, render(plan)


def test_every_rendered_object_is_valid(stack):
    name, _plan, objects = stack
    version = schema_version(load_settings(read_stack(PROJECT_DIR, name).namespace()).kubernetes.version)
    crds = _crds(objects)
    kinds = set()
    for obj in objects:
        kinds.add(obj.kind)
        crd = crds.get((obj.group, obj.kind))
        if crd is not None:
            pruned, errors, _ = check_custom_resource(obj.body, crd)
            assert pruned == [], f"{obj.key}: the API server would drop {pruned}"
            assert errors == [], f"{obj.key}: {errors}"
        elif obj.key in KNOWN_UPSTREAM_DEFECTS and tuple(map(int, version.split(".")[:2])) < (1, 32):
            path, _why = KNOWN_UPSTREAM_DEFECTS[obj.key]
            with pytest.raises(kubernetes_validate.ValidationError, match=f"'{path[-1]}' was unexpected"):
                kubernetes_validate.validate(obj.body, version, strict=True)
            kubernetes_validate.validate(_without(obj.body, path), version, strict=True)
        else:
            kubernetes_validate.validate(obj.body, version, strict=True)
    # The release's core objects are all there (NFD only where the stack deploys it).
    assert {"ClusterPolicy", "Deployment", "ClusterRole", "ServiceAccount", "CustomResourceDefinition"} <= kinds


def test_clusterpolicy_points_at_the_plans_own_configmaps(stack):
    _, plan, objects = stack
    spec = _one(objects, "ClusterPolicy")["spec"]
    release = _release(plan)
    configmaps = {r.inputs["metadata"]["name"]: r for r in plan.of_type("kubernetes:core/v1:ConfigMap")}
    namespace = release.inputs["namespace"]

    plugin = spec["devicePlugin"].get("config")
    if plugin:
        cm = configmaps[plugin["name"]]
        assert cm.inputs["metadata"]["namespace"] == namespace
        assert cm.name in release.depends_on
        if plugin.get("default"):
            assert plugin["default"] in cm.inputs["data"]
    mig = spec["migManager"].get("config", {})
    if mig.get("name") and mig["name"] != "default-mig-parted-config":
        cm = configmaps[mig["name"]]
        assert cm.inputs["metadata"]["namespace"] == namespace
        assert "config.yaml" in cm.inputs["data"]
        assert mig["default"] == "all-disabled"
    dcgm = spec["dcgmExporter"].get("config", {})
    if dcgm.get("name"):
        assert "dcgm-metrics.csv" in configmaps[dcgm["name"]].inputs["data"]
    # The chart creates no ConfigMap of its own for what the stack owns (create: false).
    rendered_cms = {o.name for o in objects if o.kind == "ConfigMap"}
    assert not rendered_cms & set(configmaps)
    for patch in plan.of_type("kubernetes:core/v1:NodePatch"):
        labels = patch.inputs["metadata"].get("labels", {})
        if "nvidia.com/device-plugin.config" in labels:
            assert plugin, "a node selects a sharing profile but the ClusterPolicy has no device-plugin config"
            assert labels["nvidia.com/device-plugin.config"] in configmaps[plugin["name"]].inputs["data"]


def test_dev_clusterpolicy_is_what_the_stack_decides():
    plan = plan_stack_file("dev")
    objects = render(plan)
    spec = _one(objects, "ClusterPolicy")["spec"]
    sharing_cm = plan.by_name("gpu-operator-sharing-config").inputs["metadata"]["name"]
    assert spec["devicePlugin"]["config"] == {"name": sharing_cm, "default": "default"}
    assert spec["driver"]["enabled"] is False
    assert spec["toolkit"]["enabled"] is False
    assert spec["mig"] == {"strategy": "none"}
    assert spec["dcgmExporter"]["serviceMonitor"]["enabled"] is True
    assert spec["dcgmExporter"]["serviceMonitor"]["additionalLabels"] == {"release": "kube-prometheus-stack"}
    assert "defaultRuntime" not in spec["operator"]


def test_staging_driver_upgrade_policy_reaches_the_clusterpolicy_and_the_crd_hook_is_rendered():
    plan = plan_stack_file("staging")
    objects = render(plan)
    crd = _crds(objects)[("nvidia.com", "ClusterPolicy")]
    _, errors, stored = check_custom_resource(_one(objects, "ClusterPolicy"), crd)
    assert errors == []
    assert stored["spec"]["driver"]["upgradePolicy"] == {
        "autoUpgrade": True,
        "maxParallelUpgrades": 1,
        "maxUnavailable": "25%",
        "waitForCompletion": {"timeoutSeconds": 0},
        "podDeletion": {"force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
        "drain": {"enable": False, "force": False, "timeoutSeconds": 300, "deleteEmptyDir": False},
    }
    hooks = {o.key: o.hook for o in objects if o.hook == "pre-upgrade"}
    assert hooks["Job gpu-operator/gpu-operator-upgrade-crd"] == "pre-upgrade"
    job = next(o for o in objects if o.key == "Job gpu-operator/gpu-operator-upgrade-crd").body
    script = " ".join(job["spec"]["template"]["spec"]["containers"][0]["command"])
    assert "kubectl apply -f /opt/gpu-operator/nvidia.com_clusterpolicies.yaml" in script


def test_upgrade_policy_settings_reach_the_clusterpolicy_as_typed():
    cfg = read_stack(PROJECT_DIR, "staging").namespace()
    cfg = set_path(cfg, "driver.upgradePolicy", {
        "autoUpgrade": True,
        "maxParallelUpgrades": 2,
        "maxUnavailable": 1,
        "waitForCompletion": {"timeoutSeconds": 1800, "podSelector": "app in (training,eval)"},
        "gpuPodDeletion": {"force": True, "timeoutSeconds": 600, "deleteEmptyDir": True},
        "drain": {"enable": True, "podSelector": "tier=batch,!critical", "timeoutSeconds": 900},
    })
    cfg = set_path(cfg, "operator.upgradeCRD", False)
    plan = plan_of(cfg)
    objects = render(plan)
    crd = _crds(objects)[("nvidia.com", "ClusterPolicy")]
    pruned, errors, stored = check_custom_resource(_one(objects, "ClusterPolicy"), crd)
    assert pruned == [] and errors == []
    policy = stored["spec"]["driver"]["upgradePolicy"]
    assert policy["maxParallelUpgrades"] == 2 and policy["maxUnavailable"] == 1
    assert policy["waitForCompletion"] == {"timeoutSeconds": 1800, "podSelector": "app in (training,eval)"}
    assert policy["podDeletion"] == {"force": True, "timeoutSeconds": 600, "deleteEmptyDir": True}
    assert policy["drain"] == {"enable": True, "force": False, "podSelector": "tier=batch,!critical", "timeoutSeconds": 900, "deleteEmptyDir": False}
    # upgradeCRD off: no pre-upgrade hook, and Helm validates against the cluster's schema again.
    assert not [o for o in objects if o.hook == "pre-upgrade"]
    assert "disableOpenapiValidation" not in _release(plan).inputs


def test_upgrade_crd_on_skips_helms_openapi_check_as_the_chart_requires():
    assert _release(plan_stack_file("dev")).inputs["disableOpenapiValidation"] is True
    assert _release(plan_stack_file("dev")).inputs["values"]["operator"]["upgradeCRD"] is True


@pytest.mark.parametrize("name", STACKS)
def test_chart_lints_clean_with_the_stacks_values(name):
    plan = plan_stack_file(name)
    inputs = _release(plan).inputs
    minor = load_settings(read_stack(PROJECT_DIR, name).namespace()).kubernetes.version
    with_values = lint(CHART, inputs["values"], inputs["namespace"], kube_version=f"v{minor}.0")
    chart_alone = lint(CHART, {}, inputs["namespace"], kube_version=f"v{minor}.0")
    # The stack's values add no finding. The one finding of the chart itself: NVIDIA publishes it as
    # version 'v25.10.1', which Helm installs but lint calls not SemVer 2.
    assert with_values == chart_alone == ["Chart.yaml: version 'v25.10.1' is not a valid SemVerV2"]


def test_values_the_crd_rejects_are_caught_by_the_validation():
    cfg = dev_config()
    values = _release(plan_of(cfg)).inputs["values"]
    for bad, path in (
        ({"mig": {"strategy": "dual"}}, "spec.mig.strategy"),
        ({"dcgmExporter": {"serviceMonitor": {"enabled": True, "interval": "15 seconds"}}}, "spec.dcgmExporter.serviceMonitor.interval"),
        ({"devicePlugin": {"config": {"name": 42, "default": "x"}}}, "spec.devicePlugin.config.name"),
    ):
        objects = render_release(CHART, {**values, **bad}, "gpu-operator", "gpu-operator")
        crd = _crds(objects)[("nvidia.com", "ClusterPolicy")]
        _, errors, _ = check_custom_resource(_one(objects, "ClusterPolicy"), crd)
        assert any(e.startswith(path) for e in errors), (bad, errors)


def test_a_field_the_crd_does_not_know_would_be_pruned():
    objects = render(plan_stack_file("dev"))
    crd = _crds(objects)[("nvidia.com", "ClusterPolicy")]
    doc = _one(objects, "ClusterPolicy")
    doc = {**doc, "spec": {**doc["spec"], "devicePlugin": {**doc["spec"]["devicePlugin"], "replicas": 8}}}
    pruned, _, stored = check_custom_resource(doc, crd)
    assert pruned == ["spec.devicePlugin.replicas"]
    assert "replicas" not in stored["spec"]["devicePlugin"]
    # The chart writes `name: ""` as a YAML null: dropped, then the CRD's default applies.
    assert stored["spec"]["migManager"]["config"]["name"] == "default-mig-parted-config"


def _leaves(tree: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(tree, dict) and tree:
        return [leaf for k, v in tree.items() for leaf in _leaves(v, prefix + (k,))]
    return [prefix]


def _changed(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "9" if value else "x9"
    if isinstance(value, list):
        return value + value[:1] if value else [{"name": "X9", "value": "1"}]
    return {"x9": "1"}


def _set(tree: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    import copy

    out = copy.deepcopy(tree)
    node = out
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return out


@pytest.mark.parametrize("name", STACKS)
def test_every_value_the_stack_sets_is_read_by_the_chart(name):
    """Change any one value the stack sets and the rendered release changes: no value is ignored
    (misplaced, or no longer read by this chart version, like operator.defaultRuntime)."""
    inputs = _release(plan_stack_file(name)).inputs
    values = inputs["values"]
    base = {o.key: o.body for o in render_release(CHART, values, inputs["name"], inputs["namespace"])}
    ignored = []
    for path in _leaves(values):
        node: Any = values
        for part in path:
            node = node[part]
        edited = _set(values, path, _changed(node))
        if path[-1] == "create":
            # `create` is read together with `data` (create without data makes nothing: a chart trap).
            edited = _set(edited, path[:-1] + ("data",), {"k": "v"})
        changed = render_release(CHART, edited, inputs["name"], inputs["namespace"])
        if {o.key: o.body for o in changed} == base:
            ignored.append(".".join(path))
    assert ignored == []
    assert "defaultRuntime" not in values.get("operator", {})


@pytest.mark.parametrize("stack", STACKS)
def test_the_only_delete_hook_is_nfds_and_the_cluster_policy_goes_with_the_release(stack):
    # docs/upgrades-and-destroy.md: with the stack's values no pre-delete cleanup of the operator's
    # custom resources runs; Helm deletes the ClusterPolicy as an object of the release.
    objects = render(plan_stack_file(stack))
    deletes = sorted({(o.kind, o.hook) for o in objects if o.hook and "delete" in o.hook})
    nfd = bool(_release(plan_stack_file(stack)).inputs["values"]["nfd"]["enabled"])
    assert all(hook == "post-delete" for _, hook in deletes) and (bool(deletes) == nfd), deletes
    assert not [o for o in objects if o.hook and "pre-delete" in o.hook]
    policy = _one(objects, "ClusterPolicy")
    assert "helm.sh/resource-policy" not in (policy["metadata"].get("annotations") or {})


GPU_POOL_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
"""The taint GKE puts on every GPU node pool (AKS: the same key); a managed control plane has no Node."""


def tolerates(tolerations: list[dict[str, Any]] | None, taint: dict[str, str]) -> bool:
    """Kubernetes' rule (k8s.io/api core/v1 toleration.go ToleratesTaint)."""
    for t in tolerations or []:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("key") and t["key"] != taint["key"]:
            continue
        if t.get("operator", "Equal") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def test_every_pod_of_the_release_can_run_where_every_node_is_a_tainted_gpu_node(stack):
    # No control-plane Node, every Node tainted nvidia.com/gpu:NoSchedule: the operator, NFD's
    # master and garbage collector, the CRD hook Job and the operands all have to tolerate it, or
    # they stay Pending and Helm's wait for the release never ends.
    _, _plan, objects = stack
    untolerated = []
    for obj in objects:
        template = (obj.body.get("spec") or {}).get("template") if obj.kind in ("Deployment", "DaemonSet", "Job") else None
        if template is not None and not tolerates(template["spec"].get("tolerations"), GPU_POOL_TAINT):
            untolerated.append(obj.key)
    assert untolerated == []
    # the operands the operator creates take the ClusterPolicy's daemonsets.tolerations
    assert tolerates(_one(objects, "ClusterPolicy")["spec"]["daemonsets"].get("tolerations"), GPU_POOL_TAINT)
