"""MIG: the mig-parted ConfigMap, the per-node catalog checks, and the catalog against NVIDIA's defaults."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpu_stack.config import load_settings
from gpu_stack.config.gpu_models import builtin_layout, catalog, fits, mig_resource_name
from gpu_stack.design.derive import derive

from ..helpers import assert_refused, plan_of, reference_dir, require_reference

CONFIGMAP = "kubernetes:core/v1:ConfigMap"
NODE_PATCH = "kubernetes:core/v1:NodePatch"
MIG_CM = "gpu-operator-mig-config"
RELEASE_NAME = "gpu-operator-release"
DEFAULT_MIG = reference_dir() / "default-mig-parted-config.yaml"
DOC_EXAMPLES = reference_dir() / "doc-examples"


def _nodes(*specs: tuple[str, str, int], **extra: Any) -> list[dict[str, Any]]:
    return [{"name": n, "gpu": {"model": m, "count": c}, **extra} for n, m, c in specs]


def _reference(path) -> Any:
    require_reference()
    return yaml.safe_load(path.read_text())


# --------------------------------------------------------------------------- the ConfigMap
H200_MIXED = {
    "mig": {"strategy": "mixed", "profiles": {"inference": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}}]}},
    "nodes": _nodes(("h200-a", "H200-141GB", 8), mig="inference") + _nodes(("h200-b", "NVIDIA H200", 8), mig="all-disabled"),
}


def test_custom_profiles_become_a_content_named_configmap_the_release_points_at():
    plan = plan_of(H200_MIXED)
    cm = plan.by_name(MIG_CM)
    name = cm.inputs["metadata"]["name"]
    assert name.startswith("mig-parted-config-") and cm.inputs["metadata"]["namespace"] == "gpu-operator"
    assert list(cm.inputs["data"]) == ["config.yaml"]
    doc = yaml.safe_load(cm.inputs["data"]["config.yaml"])
    assert doc == {"version": "v1", "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "inference": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}}],
    }}
    values = plan.by_name(RELEASE_NAME).inputs["values"]
    assert values["migManager"]["config"] == {"create": False, "name": name, "default": "all-disabled"}
    assert values["mig"] == {"strategy": "mixed"}
    # The MIG label is set by the rollout Job (after a drain), never by the NodePatch.
    labels = {p.inputs["metadata"]["name"]: p.inputs["metadata"]["labels"] for p in plan.of_type(NODE_PATCH)}
    assert all("nvidia.com/mig.config" not in node_labels for node_labels in labels.values())
    table = plan.by_name("mig-rollout-nodes").inputs["data"]["nodes"].splitlines()
    assert [line.split()[:3] for line in table] == [["h200-a", "set", "inference"], ["h200-b", "set", "all-disabled"]]


def test_builtin_configs_need_no_configmap():
    plan = plan_of({"mig": {"strategy": "mixed"}, "nodes": _nodes(("h", "H100-80GB", 8), mig="all-balanced")})
    assert not [r for r in plan.of_type(CONFIGMAP) if r.name == MIG_CM]
    assert "config" not in plan.by_name(RELEASE_NAME).inputs["values"]["migManager"]


def test_with_reboot_sets_the_manager_env():
    plan = plan_of({"mig": {"strategy": "single", "manager": {"withReboot": True}}})
    assert plan.by_name(RELEASE_NAME).inputs["values"]["migManager"] == {
        "enabled": True, "env": [{"name": "WITH_REBOOT", "value": "true"}]}


@pytest.mark.parametrize("example,key", [("custom-mig-config.yaml", "data"), ("mig-cm-values.yaml", "migManager")])
def test_same_settings_give_nvidias_documented_mig_config(example, key):
    doc = _reference(DOC_EXAMPLES / example)
    text = doc["data"]["config.yaml"] if key == "data" else doc["migManager"]["config"]["data"]["config.yaml"]
    theirs = yaml.safe_load(text)
    profiles = {k: v for k, v in theirs["mig-configs"].items() if k != "all-disabled"}
    settings = load_settings({"mig": {"strategy": "mixed", "profiles": profiles}})
    ours = derive(settings).mig
    assert list(ours.data) == ["config.yaml"]
    assert yaml.safe_load(ours.data["config.yaml"]) == theirs


def test_nvidias_example_fits_an_80gb_gpu_but_not_a_40gb_one():
    doc = _reference(DOC_EXAMPLES / "custom-mig-config.yaml")
    profiles = {k: v for k, v in yaml.safe_load(doc["data"]["config.yaml"])["mig-configs"].items() if k != "all-disabled"}
    ok = {"mig": {"strategy": "mixed", "profiles": profiles}, "nodes": _nodes(("a", "A100-80GB", 4), mig="five-1g-one-2g")}
    load_settings(ok)
    bad = {**ok, "nodes": _nodes(("a", "A100-40GB", 4), mig="five-1g-one-2g")}
    with pytest.raises(Exception) as info:
        load_settings(bad)
    assert 'gpu-stack:mig.profiles.five-1g-one-2g[0].mig-devices' in str(info.value)
    assert "5 x 1g.10gb is more than the 4 a A100-40GB holds" in str(info.value)


# --------------------------------------------------------------------------- rejections
H200 = ("h200", "H200-141GB", 2)
CUSTOM = {"p": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}]}
REJECTIONS = [
    ("mig while strategy none", {"mig": {"strategy": "none"}, "nodes": _nodes(H200, mig="all-1g.18gb")},
     "gpu-stack:nodes[0].mig = 'all-1g.18gb': has no effect while mig.strategy is none"),
    ("mig while manager off", {"mig": {"manager": {"enabled": False}}, "nodes": _nodes(H200, mig="all-1g.18gb")},
     "gpu-stack:nodes[0].mig = 'all-1g.18gb': needs the MIG manager, which is off"),
    ("model not in catalog", {"nodes": _nodes(("x", "GTX 1080", 1), mig="all-1g.10gb")},
     "gpu-stack:nodes[0].gpu.model = 'GTX 1080': is not in the GPU catalog"),
    ("model without MIG", {"nodes": _nodes(("l4", "NVIDIA L4", 1), mig="all-1g.10gb")},
     "gpu-stack:nodes[0].mig = 'all-1g.10gb': L4 has no MIG"),
    ("built-in for another GPU", {"nodes": _nodes(H200, mig="all-1g.10gb")},
     "gpu-stack:nodes[0].mig = 'all-1g.10gb': does not apply to H200-141GB; built-in configs for H200-141GB: all-disabled, all-enabled, all-balanced, all-1g.18gb"),
    ("built-in restricted by device filter", {"nodes": _nodes(("nvl", "H200-NVL", 2), mig="all-1g.35gb")},
     "gpu-stack:nodes[0].mig = 'all-1g.35gb': does not apply to H200-NVL"),
    ("unknown built-in", {"nodes": _nodes(H200, mig="all-tiny")},
     "gpu-stack:nodes[0].mig = 'all-tiny': is not a config of the operator's built-in list"),
    ("built-in with several profiles under single", {"mig": {"strategy": "single"}, "nodes": _nodes(H200, mig="all-balanced")},
     "gpu-stack:mig.strategy = 'single': node h200 uses MIG config 'all-balanced' with several instance profiles (1g.18gb, 2g.35gb, 3g.71gb); that needs mig.strategy mixed"),
    ("custom with several profiles under single", {"mig": {"strategy": "single", "profiles": {"two": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 1, "3g.71gb": 1}}]}}, "nodes": _nodes(H200, mig="two")},
     "gpu-stack:mig.strategy = 'single': node h200 uses MIG config 'two' with several instance profiles"),
    ("single with MIG on some GPUs only", {"mig": {"strategy": "single", "profiles": {"half": [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}]}}, "nodes": _nodes(H200, mig="half")},
     "gpu-stack:mig.strategy = 'single': node h200 has MIG on some GPUs and off on others"),
    ("built-in name with custom profiles", {"mig": {"strategy": "mixed", "profiles": CUSTOM}, "nodes": _nodes(H200, mig="all-balanced")},
     "gpu-stack:nodes[0].mig = 'all-balanced': names no config of mig.profiles (custom configs replace the operator's built-in list); defined: all-disabled, p"),
    ("profile not on the GPU", {"mig": {"strategy": "mixed", "profiles": {"p": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}, "nodes": _nodes(H200, mig="p")},
     "gpu-stack:mig.profiles.p[0].mig-devices = {'1g.10gb': 7}: does not fit H200-141GB (node h200): profile '1g.10gb' does not exist on H200-141GB"),
    ("count over the profile max", {"mig": {"strategy": "mixed", "profiles": {"p": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.71gb": 3}}]}}, "nodes": _nodes(H200, mig="p")},
     "3 x 3g.71gb is more than the 2 a H200-141GB holds"),
    ("compute slices over the GPU", {"mig": {"strategy": "mixed", "profiles": {"p": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"4g.71gb": 1, "3g.71gb": 1, "1g.18gb": 1}}]}}, "nodes": _nodes(H200, mig="p")},
     "the instances need 8 compute slices; a H200-141GB has 7"),
    ("memory slices over the GPU", {"mig": {"strategy": "mixed", "profiles": {"p": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.35gb": 4, "2g.35gb": 1}}]}}, "nodes": _nodes(H200, mig="p")},
     "the instances need 10 memory slices; a H200-141GB has 8"),
    ("device index beyond the node", {"mig": {"strategy": "mixed", "profiles": {"p": [
        {"devices": [0, 2], "mig-enabled": True, "mig-devices": {"1g.18gb": 7}}]}}, "nodes": _nodes(H200, mig="p")},
     "gpu-stack:mig.profiles.p[0].devices = [0, 2]: GPU index 2 does not exist on node h200 (2 GPUs, indices 0-1)"),
    ("no entry for the model", {"mig": {"strategy": "mixed", "profiles": {"p": [
        {"device-filter": "0x20B010DE", "devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 7}}]}}, "nodes": _nodes(H200, mig="p")},
     "gpu-stack:nodes[0].mig = 'p': no entry of mig.profiles[\"p\"] applies to H200-141GB (device-filter)"),
    ("enabled without devices", {"mig": {"profiles": {"p": [{"devices": "all", "mig-enabled": True}]}}},
     "gpu-stack:mig.profiles.p[0].mig-devices = {}: is required when mig-enabled is true"),
    ("enabled with only zeros", {"mig": {"profiles": {"p": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 0}}]}}},
     "gpu-stack:mig.profiles.p[0].mig-devices = {'1g.10gb': 0}: is required when mig-enabled is true"),
    ("disabled with devices", {"mig": {"profiles": {"p": [{"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}]}}},
     "gpu-stack:mig.profiles.p[0].mig-devices = {'1g.10gb': 1}: must be empty when mig-enabled is false"),
    ("unknown key in an entry", {"mig": {"profiles": {"p": [{"devices": "all", "mig-enabled": True, "migDevices": {"1g.10gb": 1}}]}}},
     "gpu-stack:mig.profiles.p[0].migDevices: unknown key"),
    ("profile name typo", {"mig": {"profiles": {"p": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10g": 1}}]}}},
     "'1g.10g' is not a MIG profile name"),
    ("profile on no GPU", {"mig": {"profiles": {"p": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.11gb": 1}}]}}},
     "gpu-stack:mig.profiles.p[0].mig-devices[\"1g.11gb\"] = 1: MIG profile '1g.11gb' exists on no GPU of the catalog"),
    ("bad device filter", {"mig": {"profiles": {"p": [{"device-filter": "H200", "devices": "all", "mig-enabled": False}]}}},
     "'H200' is not a PCI device id"),
    ("device filter of an unknown GPU", {"mig": {"profiles": {"p": [{"device-filter": "0x12345678", "devices": "all", "mig-enabled": False}]}}},
     "gpu-stack:mig.profiles.p[0].device-filter = '0x12345678': matches no GPU of the catalog"),
    ("all-disabled that enables", {"mig": {"profiles": {"all-disabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]}}},
     "gpu-stack:mig.profiles.all-disabled = [{'devices': 'all', 'mig-enabled': True, 'mig-devices': {'1g.10gb': 7}}]: must turn MIG off on every GPU"),
    ("all-disabled on some GPUs only", {"mig": {"profiles": {"all-disabled": [{"devices": [0], "mig-enabled": False}]}}},
     "gpu-stack:mig.profiles.all-disabled = [{'devices': [0], 'mig-enabled': False}]: must turn MIG off on every GPU"),
    ("duplicate device indices", {"mig": {"profiles": {"p": [{"devices": [0, 0], "mig-enabled": False}]}}},
     "gpu-stack:mig.profiles.p[0].devices = [0, 0]: must be 'all' or a non-empty list of distinct GPU indices"),
    ("strategy typo", {"mig": {"strategy": "mixd"}},
     "gpu-stack:mig.strategy = 'mixd': must be one of 'none', 'single' or 'mixed'"),
]


@pytest.mark.parametrize("label,config,message", REJECTIONS, ids=[r[0] for r in REJECTIONS])
def test_mig_rejections_are_settings_errors(label, config, message):
    assert_refused(config, message)


@pytest.mark.parametrize("model,config", [
    ("H200-141GB", "all-balanced"), ("NVIDIA H200", "all-1g.18gb"), ("H100-80GB", "all-1g.10gb"),
    ("A100-40GB", "all-1g.10gb"), ("A100-80GB", "all-7g.80gb"), ("A30", "all-2g.12gb"), ("B200", "all-balanced"),
    ("NVIDIA H100 80GB HBM3", "all-3g.40gb"), ("H200-141GB", "all-enabled"), ("H200-141GB", "all-disabled"),
])
def test_builtin_configs_valid_for_the_model_are_accepted(model, config):
    load_settings({"mig": {"strategy": "mixed"}, "nodes": _nodes(("n", model, 8), mig=config)})


def test_catalog_names_and_nvidia_smi_aliases():
    cat = catalog()
    for name in ("H200-141GB", "H100-80GB", "A100-40GB", "A100-80GB", "A30", "L4", "T4", "L40S", "A10", "B200"):
        assert cat.lookup(name) is not None and cat.lookup(name).name == name
    for alias, name in {"NVIDIA H200": "H200-141GB", "NVIDIA H100 80GB HBM3": "H100-80GB", "NVIDIA L4": "L4",
                        "Tesla T4": "T4", "NVIDIA A100-SXM4-40GB": "A100-40GB", "nvidia b200": "B200"}.items():
        assert cat.lookup(alias).name == name
    h200 = cat.lookup("H200-141GB")
    assert h200.compute_capability == (9, 0) and "0x233510DE" in h200.pci_device_ids
    assert not cat.lookup("L4").mig_capable and cat.lookup("T4").compute_capability == (7, 5)
    assert mig_resource_name("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"


def test_fit_counts_slices():
    h200 = catalog().lookup("H200-141GB")
    assert fits(h200, {"1g.18gb": 7}) == []
    assert fits(h200, {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}) == []
    assert fits(h200, {"4g.71gb": 1, "3g.71gb": 1}) == []
    assert fits(h200, {"1g.35gb": 4}) == []
    assert fits(h200, {"1g.35gb": 3, "2g.35gb": 1}) == []
    assert fits(h200, {"1g.35gb": 4, "1g.18gb": 1})  # 9 memory slices


# --------------------------------------------------------------------------- catalog vs NVIDIA's defaults
def _applied(groups: list[dict[str, Any]], device_id: str) -> list[dict[str, int] | None]:
    """What the reference config applies to a GPU with `device_id`: one entry per matching group."""
    out = []
    for g in groups:
        f = g.get("device-filter")
        ids = [] if f is None else ([f] if isinstance(f, str) else f)
        if ids and device_id.lower() not in [i.lower() for i in ids]:
            continue
        out.append(dict(g.get("mig-devices") or {}) if g["mig-enabled"] else None)
    return out


def test_catalog_matches_the_operators_default_mig_configs():
    ref = _reference(DEFAULT_MIG)
    configs = yaml.safe_load(ref["data"]["config.yaml"])["mig-configs"]
    cat = catalog()
    assert set(cat.builtin_configs) == set(configs)
    # Every device id the operator filters on is a catalog model.
    for groups in configs.values():
        for g in groups:
            f = g.get("device-filter")
            for ident in [] if f is None else ([f] if isinstance(f, str) else f):
                assert cat.by_device_id(ident) is not None, ident
    checked = 0
    for model in (m for m in cat.models if m.mig_capable):
        for name, builtin in cat.builtin_configs.items():
            for device_id in model.pci_device_ids:
                applied = _applied(configs[name], device_id)
                if builtin.special == "disabled":
                    assert applied == [None], (name, model.name)
                    continue
                layout = builtin_layout(builtin, model)
                if layout is not None:
                    # The catalog says the config works here: the operator applies exactly that layout,
                    # and it fits the GPU.
                    assert applied == [layout], (name, model.name, device_id, applied)
                    assert fits(model, layout) == [], (name, model.name)
                    checked += 1
                else:
                    # The catalog says it does not: the operator applies nothing, or profiles the GPU lacks.
                    assert all(a is not None and a and not set(a) <= set(model.mig.profiles) for a in applied), (
                        name, model.name, applied)
    assert checked > 100
    # Every profile the catalog knows for a model appears in the operator's list at its max count.
    for model in (m for m in cat.models if m.mig_capable):
        for profile, spec in model.mig.profiles.items():
            counts = {n for groups in configs.values() for g in groups for p, n in (g.get("mig-devices") or {}).items() if p == profile}
            assert spec.max_instances in counts, (model.name, profile, counts)
