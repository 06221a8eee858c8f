"""GPU sharing: what the device plugin gets, what it would reject, and what a replicas edit changes."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from gpu_stack.config import load_settings
from gpu_stack.design.derive import derive
from gpu_stack.design.sharing import NODE_LABEL

from ..helpers import (
    CHART_REF,
    assert_refused,
    dev_config,
    plan_of,
    plan_stack_file,
    reference_dir,
    require_reference,
    set_path,
)

CONFIGMAP = "kubernetes:core/v1:ConfigMap"
RELEASE = "kubernetes:helm.sh/v3:Release"
JOB = "kubernetes:batch/v1:Job"
NODE_PATCH = "kubernetes:core/v1:NodePatch"
SHARING_CM = "gpu-operator-sharing-config"
RELEASE_NAME = "gpu-operator-release"
DOC_EXAMPLES = reference_dir() / "doc-examples"


# --------------------------------------------------------------------------- the plugin's rules
# Written from GPU-OPERATOR-FACTS.md (device plugin v0.18.1), independently of gpu_stack.design.sharing:
# what the plugin rejects, and what it silently ignores (misplaced keys), for one config file.
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
TOP_KEYS = {"version", "flags", "resources", "sharing", "imex"}
FLAG_KEYS = {"migStrategy", "failOnInitError", "nvidiaDriverRoot", "nvidiaDevRoot", "plugin", "gfd", "mpsRoot", "deviceDiscoveryStrategy"}
SHARING_BODY_KEYS = {"renameByDefault", "failRequestsGreaterThanOne", "resources", "strategy"}
RESOURCE_KEYS = {"name", "replicas", "rename", "devices"}


def plugin_rejections(key: str, text: str, cluster_mig_strategy: str, gpu_compute_capability: tuple[int, int] = (9, 0)) -> list[str]:
    """Why device plugin v0.18.1 would refuse (or misread) config `key` of the sharing ConfigMap."""
    problems: list[str] = []
    if not LABEL_VALUE.match(key):
        problems.append(f"key {key!r} is not a label value")
    doc = yaml.safe_load(text)
    if not isinstance(doc, dict):
        return problems + ["not a mapping"]
    problems += [f"unknown top-level key {k!r} (ignored)" for k in set(doc) - TOP_KEYS]
    if doc.get("version", "v1") != "v1":
        problems.append(f"version {doc.get('version')!r}")
    flags = doc.get("flags") or {}
    problems += [f"unknown flag {k!r} (ignored)" for k in set(flags) - FLAG_KEYS]
    strategy = flags.get("migStrategy", "none")
    if strategy not in ("none", "single", "mixed"):
        problems.append(f"migStrategy {strategy!r}")
    if strategy != cluster_mig_strategy:
        problems.append(f"migStrategy {strategy!r} is not the cluster's {cluster_mig_strategy!r} (overridden by env)")
    sharing = doc.get("sharing") or {}
    problems += [f"unknown sharing key {k!r}" for k in set(sharing) - {"timeSlicing", "mps"}]
    for kind in ("timeSlicing", "mps"):
        if kind not in sharing:
            continue
        body = sharing[kind] or {}
        problems += [f"unknown {kind} key {k!r} (ignored)" for k in set(body) - SHARING_BODY_KEYS]
        resources = body.get("resources")
        if not resources:
            problems.append(f"{kind}: no resources specified")
            continue
        for r in resources:
            problems += [f"unknown resource key {k!r}" for k in set(r) - RESOURCE_KEYS]
            name, replicas = r.get("name"), r.get("replicas")
            if not name:
                problems.append("resource without name")
                continue
            if replicas is None:
                problems.append(f"{name}: no replicas")
                continue
            full = name if name.startswith("nvidia.com/") else "nvidia.com/" + name
            if len(full) > 63:
                problems.append(f"{name}: longer than 63 characters")
            if not DNS_SUBDOMAIN.match(full.split("/", 1)[1]):
                problems.append(f"{name}: not a DNS subdomain after the prefix")
            if replicas < 2:
                problems.append(f"{name}: replicas {replicas} < 2")
            if kind == "mps":
                if full.startswith("nvidia.com/mig-"):
                    problems.append(f"{name}: MPS on a MIG device")
                limit = 48 if gpu_compute_capability >= (7, 5) else 16
                if replicas > limit:
                    problems.append(f"{name}: {replicas} MPS replicas > {limit}")
        if kind == "mps":
            if strategy == "mixed":
                problems.append("MPS with migStrategy mixed")
            if body.get("failRequestsGreaterThanOne") is False:
                problems.append("MPS with failRequestsGreaterThanOne false (forced to true)")
    return problems


def test_the_checker_catches_what_the_plugin_rejects():
    good = "version: v1\nflags: {migStrategy: none}\nsharing:\n  timeSlicing:\n    resources: [{name: nvidia.com/gpu, replicas: 4}]\n"
    assert plugin_rejections("default", good, "none") == []
    bad = {
        "replicas 1": good.replace("replicas: 4", "replicas: 1"),
        "no resources": good.replace("[{name: nvidia.com/gpu, replicas: 4}]", "[]"),
        "misplaced": good.replace("{migStrategy: none}", "{migStrategy: none, renameByDefault: true}"),
        "mps mixed": good.replace("none", "mixed").replace("timeSlicing", "mps"),
        "long": good.replace("nvidia.com/gpu", "nvidia.com/" + "g" * 60),
    }
    for label, text in bad.items():
        assert plugin_rejections("default", text, "mixed" if "mixed" in label else "none"), label
    assert plugin_rejections("not a label!", good, "none")


def _sharing_data(plan) -> tuple[str, dict[str, str]]:
    (cm,) = [r for r in plan.of_type(CONFIGMAP) if r.name == SHARING_CM]
    return cm.inputs["metadata"]["name"], cm.inputs["data"]


@pytest.fixture(scope="module")
def dev_plan():
    return plan_stack_file("dev")


def test_dev_sharing_configmap_is_what_the_device_plugin_expects(dev_plan):
    name, data = _sharing_data(dev_plan)
    cm = dev_plan.by_name(SHARING_CM)
    assert cm.inputs["metadata"]["namespace"] == "gpu-operator"
    assert re.fullmatch(r"device-plugin-sharing-[0-9a-f]{10}", name)
    assert yaml.safe_load(data["default"]) == {
        "version": "v1",
        "flags": {"migStrategy": "none"},
        "sharing": {"timeSlicing": {
            "renameByDefault": False,
            "failRequestsGreaterThanOne": False,
            "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
        }},
    }
    config = dev_plan.by_name(RELEASE_NAME).inputs["values"]["devicePlugin"]["config"]
    assert config == {"create": False, "name": name, "default": "default"}


STACKS_TO_CHECK = {
    "dev": dev_config,
    "mixed time-slicing of MIG": lambda: {
        "nodes": [{"name": "a100", "gpu": {"model": "A100-40GB", "count": 2}, "mig": "all-balanced", "sharing": "a100-40gb"},
                  {"name": "t4", "gpu": {"model": "Tesla T4", "count": 1}}],
        "mig": {"strategy": "mixed"},
        "sharing": {"mode": "time-slicing", "replicas": 4, "profiles": {"a100-40gb": {"replicas": 8, "resources": [
            {"name": "nvidia.com/mig-1g.5gb", "replicas": 2}, {"name": "nvidia.com/mig-3g.20gb", "replicas": 3}]}}},
    },
    "mps and opt-out": lambda: {
        "nodes": [{"name": "h", "gpu": {"model": "H100-80GB", "count": 8}},
                  {"name": "v", "gpu": {"model": "V100-32GB", "count": 4}, "sharing": "volta"},
                  {"name": "solo", "gpu": {"model": "L40S", "count": 1}, "sharing": "none"}],
        "mig": {"strategy": "none"},
        "sharing": {"mode": "mps", "replicas": 48, "renameByDefault": True,
                    "profiles": {"volta": {"mode": "mps", "replicas": 16}}},
    },
}


@pytest.mark.parametrize("label", list(STACKS_TO_CHECK))
def test_every_profile_in_the_plan_passes_the_plugin_rules(label):
    from gpu_stack.config.gpu_models import catalog

    config = STACKS_TO_CHECK[label]()
    plan = plan_of(config)
    name, data = _sharing_data(plan)
    values = plan.by_name(RELEASE_NAME).inputs["values"]
    strategy = values["mig"]["strategy"]
    default = values["devicePlugin"]["config"]["default"]
    assert values["devicePlugin"]["config"]["name"] == name
    assert default in data
    for node in config["nodes"]:
        key = node.get("sharing", default)
        cc = catalog().lookup(node["gpu"]["model"]).compute_capability
        assert plugin_rejections(key, data[key], strategy, cc) == [], (node["name"], key)
    for key, text in data.items():
        assert plugin_rejections(key, text, strategy) == [], key
    # Every node label names an existing key.
    for patch in plan.of_type(NODE_PATCH):
        labels = patch.inputs["metadata"].get("labels") or {}
        if NODE_LABEL in labels:
            assert labels[NODE_LABEL] in data


# --------------------------------------------------------------------------- NVIDIA's examples
def _doc_configmap(name: str) -> dict[str, Any]:
    require_reference()
    path = DOC_EXAMPLES / name
    return yaml.safe_load(path.read_text())


PLUGIN_DEFAULTS = {"renameByDefault": False, "failRequestsGreaterThanOne": False}


def _semantic(text: str) -> dict[str, Any]:
    """A device-plugin config with the plugin's defaults filled in (omitted false == false)."""
    doc = yaml.safe_load(text)
    for kind in ("timeSlicing", "mps"):
        body = (doc.get("sharing") or {}).get(kind)
        if body is not None:
            doc["sharing"][kind] = {**PLUGIN_DEFAULTS, **body}
    return doc


@pytest.mark.parametrize("example", ["time-slicing-config-all.yaml", "time-slicing-config-sample.yaml"])
def test_one_line_of_config_gives_nvidias_cluster_wide_example(example):
    doc = _doc_configmap(example)
    (text,) = doc["data"].values()
    ours = derive(load_settings({"sharing": {"mode": "time-slicing", "replicas": 4}, "mig": {"strategy": "none"}})).sharing
    assert _semantic(ours.data["default"]) == _semantic(text)


def test_per_node_profiles_give_nvidias_fine_grained_example():
    doc = _doc_configmap("time-slicing-config-fine.yaml")
    settings = load_settings({
        "mig": {"strategy": "mixed"},
        "nodes": [
            {"name": "node-a100", "gpu": {"model": "A100-40GB", "count": 1}, "mig": "all-balanced", "sharing": "a100-40gb"},
            {"name": "node-t4", "gpu": {"model": "T4", "count": 1}, "sharing": "tesla-t4"},
        ],
        "sharing": {"profiles": {
            "a100-40gb": {"replicas": 8, "resources": [
                {"name": "nvidia.com/mig-1g.5gb", "replicas": 2},
                {"name": "nvidia.com/mig-2g.10gb", "replicas": 2},
                {"name": "nvidia.com/mig-3g.20gb", "replicas": 3},
                {"name": "nvidia.com/mig-7g.40gb", "replicas": 7},
            ]},
            "tesla-t4": {"replicas": 4},
        }},
    })
    ours = derive(settings).sharing
    assert set(ours.data) == set(doc["data"])
    assert _semantic(ours.data["a100-40gb"]) == _semantic(doc["data"]["a100-40gb"])
    # The example writes migStrategy none for the T4 key; the operator overrides every key's
    # migStrategy with the cluster's mig.strategy (env), so the stack writes that truth instead.
    theirs, mine = _semantic(doc["data"]["tesla-t4"]), _semantic(ours.data["tesla-t4"])
    assert mine["sharing"] == theirs["sharing"]
    assert mine["flags"] == {"migStrategy": "mixed"}
    assert ours.node_labels == {"node-a100": "a100-40gb", "node-t4": "tesla-t4"}


# --------------------------------------------------------------------------- rejections
def _nodes(*specs: tuple[str, str, int], **extra: Any) -> list[dict[str, Any]]:
    return [{"name": n, "gpu": {"model": m, "count": c}, **extra} for n, m, c in specs]


L4 = ("gpu-a", "L4", 2)
REJECTIONS = [
    ("replicas 1", {"sharing": {"mode": "time-slicing", "replicas": 1}},
     "gpu-stack:sharing.replicas = 1: must be at least 2"),
    ("profile replicas 1", {"sharing": {"profiles": {"p": {"replicas": 1}}}},
     "gpu-stack:sharing.profiles.p.replicas = 1: must be at least 2"),
    ("resource replicas 1", {"sharing": {"mode": "time-slicing", "resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}},
     "gpu-stack:sharing.resources[0].replicas = 1: must be at least 2"),
    ("empty resources", {"sharing": {"profiles": {"p": {"mode": "time-slicing"}}}},
     "gpu-stack:sharing.profiles.p.replicas: is required for a time-slicing profile unless `resources`"),
    ("empty mps resources", {"sharing": {"profiles": {"p": {"mode": "mps", "resources": []}}}},
     "gpu-stack:sharing.profiles.p.replicas: is required for a mps profile"),
    ("name over 63", {"sharing": {"mode": "time-slicing", "resources": [{"name": "nvidia.com/mig-1g.10gb" + ".x" * 25, "replicas": 2}]}},
     "gpu-stack:sharing.resources[0].name = 'nvidia.com/mig-1g.10gb.x.x"),
    ("unknown resource", {"sharing": {"mode": "time-slicing", "resources": [{"name": "nvidia.com/gpu-big", "replicas": 2}]}},
     "gpu-stack:sharing.resources[0].name = 'nvidia.com/gpu-big': must be nvidia.com/gpu or a MIG resource"),
    ("profile key not a label", {"sharing": {"profiles": {"big gpu": {"replicas": 2}}}},
     "gpu-stack:sharing.profiles = {'big gpu': {'replicas': 2}}: profile name 'big gpu' must be a Kubernetes label value"),
    ("profile key too long", {"sharing": {"profiles": {"p" * 64: {"replicas": 2}}}},
     f"profile name '{'p' * 64}' must be a Kubernetes label value: at most 63 characters"),
    ("reserved default", {"sharing": {"mode": "time-slicing", "profiles": {"default": {"replicas": 8}}}},
     "gpu-stack:sharing.profiles.default: is a reserved profile name"),
    ("reserved none", {"sharing": {"profiles": {"none": {"mode": "none"}}}},
     "gpu-stack:sharing.profiles.none: is a reserved profile name"),
    ("node names missing profile", {"nodes": _nodes(L4, sharing="big"), "sharing": {"profiles": {"small": {"replicas": 2}}}},
     "gpu-stack:nodes[0].sharing = 'big': names no sharing profile; defined: small"),
    ("node names default while mode none", {"nodes": _nodes(L4, sharing="default")},
     "gpu-stack:nodes[0].sharing = 'default': names no sharing profile (sharing.mode is none, so there is no 'default')"),
    ("replicas while mode none", {"sharing": {"replicas": 8}},
     "gpu-stack:sharing.replicas = 8: has no effect while sharing.mode is none"),
    ("rename while mode none", {"sharing": {"mode": "none", "renameByDefault": True}},
     "gpu-stack:sharing.renameByDefault = True: has no effect while sharing.mode is none"),
    ("resources while profile mode none", {"sharing": {"profiles": {"off": {"mode": "none", "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}},
     "gpu-stack:sharing.profiles.off.resources = [{'name': 'nvidia.com/gpu', 'replicas': 2}]: has no effect while sharing.profiles.off.mode is none"),
    ("misplaced device-plugin layout", {"sharing": {"timeSlicing": {"resources": []}}},
     "gpu-stack:sharing.timeSlicing: unknown key"),
    ("gpu in replicas and resources", {"sharing": {"mode": "time-slicing", "replicas": 4, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}},
     "gpu-stack:sharing.resources[0].name = 'nvidia.com/gpu': is also set by sharing.replicas"),
    ("gpu in profile replicas and resources", {"sharing": {"profiles": {"p": {"replicas": 4, "resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}},
     "gpu-stack:sharing.profiles.p.resources[0].name = 'nvidia.com/gpu': is also set by sharing.profiles.p.replicas"),
    ("duplicate resource", {"sharing": {"mode": "time-slicing", "resources": [{"name": "nvidia.com/gpu", "replicas": 2}, {"name": "nvidia.com/gpu", "replicas": 3}]}},
     "gpu-stack:sharing.resources[1].name = 'nvidia.com/gpu': is listed twice (also resources[0])"),
    ("MIG resource without mixed", {"mig": {"strategy": "single"}, "sharing": {"mode": "time-slicing", "resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}},
     "gpu-stack:sharing.resources[0].name = 'nvidia.com/mig-1g.10gb': MIG resources exist only under mig.strategy mixed (now 'single')"),
    ("MIG resource no GPU has", {"mig": {"strategy": "mixed"}, "sharing": {"mode": "time-slicing", "resources": [{"name": "nvidia.com/mig-1g.11gb", "replicas": 2}]}},
     "gpu-stack:sharing.resources[0].name = 'nvidia.com/mig-1g.11gb': names a MIG profile no GPU of the catalog has"),
    ("MPS with mixed", {"mig": {"strategy": "mixed"}, "sharing": {"mode": "mps", "replicas": 4}},
     "gpu-stack:sharing.mode = 'mps': the device plugin refuses MPS with mig.strategy mixed"),
    ("MPS profile with mixed", {"mig": {"strategy": "mixed"}, "sharing": {"profiles": {"m": {"mode": "mps", "replicas": 4}}}},
     "gpu-stack:sharing.profiles.m.mode = 'mps': the device plugin refuses MPS with mig.strategy mixed"),
    ("MPS on MIG resources", {"mig": {"strategy": "single"}, "sharing": {"profiles": {"m": {"mode": "mps", "resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}}}},
     "gpu-stack:sharing.profiles.m.resources[0].name = 'nvidia.com/mig-1g.10gb': MPS cannot share MIG devices"),
    ("MPS on a MIG node", {"mig": {"strategy": "single"}, "sharing": {"mode": "mps", "replicas": 4},
                           "nodes": _nodes(("h200", "H200-141GB", 2), mig="all-1g.18gb")},
     "gpu-stack:nodes[0].mig = 'all-1g.18gb': turns MIG on, but the node shares its GPUs with MPS"),
    ("MPS replicas over 48", {"sharing": {"mode": "mps", "replicas": 64}},
     "gpu-stack:sharing.replicas = 64: must be at most 48 under MPS"),
    ("MPS resource replicas over 48", {"sharing": {"profiles": {"m": {"mode": "mps", "resources": [{"name": "nvidia.com/gpu", "replicas": 49}]}}}},
     "gpu-stack:sharing.profiles.m.resources[0].replicas = 49: must be at most 48 under MPS"),
    ("MPS over 16 on Volta", {"sharing": {"mode": "mps", "replicas": 32}, "nodes": _nodes(("v100", "V100-16GB", 4))},
     "gpu-stack:sharing.replicas = 32: must be at most 16 under MPS on V100-16GB (compute capability 7.0, node v100)"),
    ("MPS fail-requests off", {"sharing": {"mode": "mps", "replicas": 4, "failRequestsGreaterThanOne": False}},
     "gpu-stack:sharing.failRequestsGreaterThanOne = False: MPS always fails requests for more than one replica"),
]


@pytest.mark.parametrize("label,config,message", REJECTIONS, ids=[r[0] for r in REJECTIONS])
def test_device_plugin_rejections_are_settings_errors(label, config, message):
    assert_refused(config, message)


def test_mps_up_to_the_limit_is_accepted():
    plan = plan_of({"sharing": {"mode": "mps", "replicas": 48}, "mig": {"strategy": "none"},
                    "nodes": _nodes(("t4", "T4", 1))})
    _, data = _sharing_data(plan)
    body = yaml.safe_load(data["default"])["sharing"]["mps"]
    assert body["resources"] == [{"name": "nvidia.com/gpu", "replicas": 48}]
    assert body["failRequestsGreaterThanOne"] is True


def test_resources_alone_share_only_what_they_list():
    settings = load_settings({"mig": {"strategy": "mixed"}, "sharing": {
        "mode": "time-slicing", "resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 3}]}})
    doc = yaml.safe_load(derive(settings).sharing.data["default"])
    assert doc["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/mig-1g.10gb", "replicas": 3}]


# --------------------------------------------------------------------------- the replicas edit
def _is_validation(plan, name: str) -> bool:
    """True for a resource of the validation component (it may change with what it validates)."""
    by_name = {r.name: r for r in plan.resources}
    record = by_name.get(name)
    while record is not None:
        if record.type == JOB or "Validation" in record.type:
            return True
        record = by_name.get(record.parent) if record.parent else None
    return False


def _without_device_plugin_config(values: dict[str, Any]) -> dict[str, Any]:
    values = copy.deepcopy(values)
    values["devicePlugin"].pop("config")
    return values


@pytest.fixture(scope="module")
def replicas_edit():
    before = plan_of(dev_config())
    after = plan_of(set_path(dev_config(), "sharing.replicas", 8))
    return before, after


def test_replicas_edit_gives_the_sharing_configmap_a_new_name_and_data(replicas_edit):
    before, after = replicas_edit
    old_name, old_data = _sharing_data(before)
    new_name, new_data = _sharing_data(after)
    assert new_name != old_name
    assert new_data != old_data
    assert yaml.safe_load(new_data["default"])["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 8}]
    assert yaml.safe_load(old_data["default"])["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 4}]


def test_replicas_edit_changes_release_values_only_in_device_plugin_config(replicas_edit):
    before, after = replicas_edit
    old, new = before.by_name(RELEASE_NAME).inputs, after.by_name(RELEASE_NAME).inputs
    assert new["values"]["devicePlugin"]["config"] == {"create": False, "name": _sharing_data(after)[0], "default": "default"}
    assert old["values"]["devicePlugin"]["config"]["name"] == _sharing_data(before)[0]
    assert _without_device_plugin_config(old["values"]) == _without_device_plugin_config(new["values"])
    assert {k: v for k, v in old.items() if k != "values"} == {k: v for k, v in new.items() if k != "values"}


def test_replicas_edit_changes_nothing_else_but_what_validates_it(replicas_edit):
    before, after = replicas_edit
    old = {r.name: r for r in before.resources}
    new = {r.name: r for r in after.resources}
    changed = {n for n in old.keys() | new.keys()
               if n not in old or n not in new or (old[n].type, old[n].inputs, old[n].parent) != (new[n].type, new[n].inputs, new[n].parent)}
    assert {SHARING_CM, RELEASE_NAME} <= changed
    unexpected = {n for n in changed - {SHARING_CM, RELEASE_NAME}
                  if not (_is_validation(before, n) or _is_validation(after, n))}
    assert unexpected == set()
    for patch in before.of_type(NODE_PATCH):
        assert new[patch.name].inputs == patch.inputs


# --------------------------------------------------------------------------- the chart
RICH_STACKS = {
    "MIG mixed with time-sliced MIG resources and custom metrics": {
        "mig": {"strategy": "mixed", "manager": {"withReboot": True}, "profiles": {"inf": [
            {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}}]}},
        "sharing": {"mode": "time-slicing", "resources": [{"name": "nvidia.com/mig-1g.18gb", "replicas": 4}],
                    "profiles": {"whole": {"replicas": 2}}},
        "nodes": [{"name": "h1", "gpu": {"model": "H200-141GB", "count": 8}, "mig": "inf"},
                  {"name": "h2", "gpu": {"model": "H200-141GB", "count": 8}, "mig": "all-disabled", "sharing": "whole"}],
        "dcgmExporter": {"metrics": "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization (in %).\n",
                         "serviceMonitor": {"enabled": True, "relabelings": [
                             {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "instance"}]}},
    },
    "MPS without MIG": {
        "mig": {"strategy": "none"}, "sharing": {"mode": "mps", "replicas": 8},
        "nodes": [{"name": "a", "gpu": {"model": "L40S", "count": 4}}],
    },
}


@pytest.mark.parametrize("label", list(RICH_STACKS))
def test_every_feature_renders_a_clusterpolicy_the_crd_accepts(label):
    chart = require_reference(CHART_REF)
    from gpu_stack.offline.chart import ChartUnavailable, render_release

    from ..crd_schema import check_custom_resource

    plan = plan_of(RICH_STACKS[label])
    release = plan.by_name(RELEASE_NAME).inputs
    try:
        objects = render_release(chart, release["values"], release["name"], release["namespace"])
    except ChartUnavailable as exc:
        pytest.skip(f"cannot render the chart: {exc}")
    (cp,) = [o.body for o in objects if o.kind == "ClusterPolicy"]
    (crd,) = [o.body for o in objects if o.key == "CustomResourceDefinition clusterpolicies.nvidia.com"]
    pruned, errors, doc = check_custom_resource(cp, crd)
    assert pruned == [] and errors == []
    configmaps = {r.inputs["metadata"]["name"]: r for r in plan.of_type(CONFIGMAP)}
    spec = doc["spec"]
    assert spec["devicePlugin"]["config"]["name"] in configmaps
    for section in ("migManager", "dcgmExporter"):
        name = (spec[section].get("config") or {}).get("name")
        assert name in (None, "default-mig-parted-config") or name in configmaps
