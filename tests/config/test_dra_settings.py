"""DRA settings (issue 44): which nodes use DRA, and every combination NVIDIA's DRA driver 0.4.1 or
Kubernetes cannot express refused in one line naming the key, the value and why."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_stack.config import SettingsError, load_settings
from gpu_stack.config.facts import dra_nodes, node_allocation, uses_dra

from ..helpers import assert_refused, dev_config


def _dra_config(**dra: Any) -> dict[str, Any]:
    """The dev stack on Kubernetes 1.34 with its first node on DRA."""
    cfg = dev_config()
    cfg["kubernetes"]["version"] = "1.34"
    cfg["nodes"][0]["allocation"] = "dra"
    cfg["sharing"] = {"mode": "time-slicing", "replicas": 4}
    cfg["dra"] = dra
    return cfg


def _problems(cfg: dict[str, Any]) -> list[str]:
    with pytest.raises(SettingsError) as info:
        load_settings(cfg)
    return [p.render() for p in info.value.problems]


def test_nodes_default_to_the_device_plugin_and_choose_dra_per_node_or_stack_wide():
    s = load_settings(dev_config())
    assert not uses_dra(s) and [node_allocation(s, n) for n in s.nodes] == ["devicePlugin", "devicePlugin"]
    s = load_settings(_dra_config())
    assert [n.name for n in dra_nodes(s)] == ["gpu-dev-1"]
    cfg = _dra_config(allocation="dra")
    cfg["nodes"][0].pop("allocation")
    cfg["nodes"][1]["allocation"] = "devicePlugin"
    s = load_settings(cfg)
    assert [node_allocation(s, n) for n in s.nodes] == ["dra", "devicePlugin"]


def test_a_dra_stack_on_an_older_kubernetes_is_refused_registering_nothing():
    cfg = _dra_config()
    cfg["kubernetes"]["version"] = "1.33"
    assert_refused(cfg, "gpu-stack:kubernetes.version = '1.33': nodes[0] (gpu-dev-1) use DRA, which needs "
                        "resource.k8s.io/v1: GA and served with no flag from Kubernetes 1.34")


@pytest.mark.parametrize(("dra", "line"), [
    ({"featureGates": {"MPSSupport": True}},
     ("gpu-stack:dra.featureGates.MPSSupport = True: MPSSupport is an alpha gate of the DRA driver (off by default); "
     "turning it on needs the explicit opt-in dra.allowAlpha: true")),
    ({"featureGates": {"TimeSlicingSettings": True}},
     "gpu-stack:dra.featureGates.TimeSlicingSettings = True: TimeSlicingSettings is an alpha gate"),
    ({"featureGates": {"DynamicMIG": False}, "allowAlpha": True},
     "gpu-stack:dra.featureGates.DynamicMIG = False: is refused: makes MIG devices per claim"),
    ({"featureGates": {"GpuSharing": True}},
     "gpu-stack:dra.featureGates.GpuSharing = True: is not a feature gate of the DRA driver 0.4.1; known: "),
    ({"featureGates": {"IMEXDaemonsWithDNSNames": False}},
     ("gpu-stack:dra.featureGates.IMEXDaemonsWithDNSNames = False: the DRA driver refuses to start: "
     "ComputeDomainCliques requires IMEXDaemonsWithDNSNames")),
    ({"featureGates": {"PassthroughSupport": True, "NVMLDeviceHealthCheck": True}, "allowAlpha": True},
     ("gpu-stack:dra.featureGates.PassthroughSupport = True: the DRA driver refuses to start: PassthroughSupport "
     "and NVMLDeviceHealthCheck are mutually exclusive")),
    ({"extendedResource": True},
     "gpu-stack:dra.allowAlpha = False: dra.extendedResource declares Kubernetes' DRAExtendedResource gate, alpha in 1.34"),
])
def test_driver_gates_alpha_only_with_the_opt_in(dra: dict[str, Any], line: str):
    assert any(p.startswith(line) for p in _problems(_dra_config(**dra))), _problems(_dra_config(**dra))


def test_alpha_gates_pass_with_the_opt_in():
    s = load_settings(_dra_config(allowAlpha=True, extendedResource=True, featureGates={"MPSSupport": True, "TimeSlicingSettings": True}))
    assert s.dra.feature_gates == {"MPSSupport": True, "TimeSlicingSettings": True}


def test_mps_on_a_dra_node_needs_the_drivers_alpha_gate():
    cfg = _dra_config()
    cfg["sharing"] = {"mode": "mps", "replicas": 4}
    assert _problems(cfg) == [
        ("gpu-stack:sharing.mode = 'mps': node gpu-dev-1 uses DRA, where MPS is a GpuConfig in the workload's claim "
        "behind the driver's alpha MPSSupport gate; set dra.allowAlpha: true and dra.featureGates.MPSSupport: true, "
        "or give the node a time-slicing profile")
    ]
    cfg["dra"] = {"allowAlpha": True, "featureGates": {"MPSSupport": True}}
    assert load_settings(cfg).dra.feature_gates["MPSSupport"] is True
    # A device-plugin node may keep MPS without any of it.
    cfg = _dra_config()
    cfg["sharing"] = {"mode": "mps", "replicas": 4, "profiles": {"ts": {"mode": "time-slicing", "replicas": 2}}}
    cfg["nodes"][0]["sharing"] = "ts"
    assert load_settings(cfg).nodes[0].sharing == "ts"


def test_device_plugin_only_sharing_keys_on_a_dra_node_are_refused_with_the_profile_named():
    cfg = _dra_config()
    cfg["sharing"] = {"mode": "none", "profiles": {"big": {"replicas": 8, "renameByDefault": True}}}
    cfg["nodes"][0]["sharing"] = "big"
    assert _problems(cfg) == [
        ("gpu-stack:sharing.profiles.big.renameByDefault = True: applies to node gpu-dev-1, which uses DRA: DRA has no "
        "renamed `<resource>.shared` resources: a claim selects devices of a DeviceClass; give DRA nodes a profile without it")
    ]
    cfg["sharing"]["profiles"]["big"] = {"replicas": 8, "failRequestsGreaterThanOne": True}
    assert _problems(cfg)[0].startswith(
        "gpu-stack:sharing.profiles.big.failRequestsGreaterThanOne = True: applies to node gpu-dev-1, which uses DRA: "
        "DRA has no replicas to limit")
    # The same profile on a device-plugin node is the device plugin's business.
    cfg["nodes"][0]["allocation"] = "devicePlugin"
    load_settings(cfg)


def test_dra_needs_cdi():
    cfg = _dra_config()
    cfg["toolkit"]["cdi"] = False
    assert _problems(cfg) == [
        ("gpu-stack:toolkit.cdi = False: nodes[0] (gpu-dev-1) use DRA, whose driver hands GPUs to containers by CDI "
        "only; set toolkit.cdi: true")
    ]


def test_allocation_and_rollout_values_are_checked_by_their_grammar():
    cfg = _dra_config()
    cfg["nodes"][1]["allocation"] = "claims"
    assert any(p.startswith("gpu-stack:nodes[1].allocation = 'claims'") for p in _problems(cfg))
    cfg = _dra_config(rollout={"maxUnavailable": 0, "timeout": "5s"})
    assert [p.split(":", 2)[1] for p in _problems(cfg)] == ["dra.rollout.maxUnavailable = 0", "dra.rollout.timeout = '5s'"]
    s = load_settings(_dra_config(rollout={"maxUnavailable": "50%", "timeout": "20m", "pluginTimeout": "2m"}))
    assert (s.dra.rollout.max_unavailable, s.dra.rollout.timeout, s.dra.rollout.plugin_timeout) == ("50%", 1200, 120)


def test_the_dra_drivers_image_is_an_image_of_the_stack_only_with_a_dra_node():
    """An override of the DRA driver's repository (air-gapped sites) is accepted where the stack
    installs the driver, and refused, naming the repositories it pulls, where it does not."""
    override = {"overrides": {"registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu": "mirror.example.internal/own/dra"}}
    s = load_settings(_dra_config() | {"images": override})
    assert s.images.overrides
    cfg = _dra_config()
    cfg["nodes"][0].pop("allocation")
    cfg["images"] = override
    assert _problems(cfg)[0].startswith(
        'gpu-stack:images.overrides["registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu"] = '
        "'mirror.example.internal/own/dra': key is not an image repository this stack pulls")


def test_the_operators_driver_below_branch_565_is_refused_for_dra():
    cfg = _dra_config()
    cfg["driver"] = {"placement": "operator", "version": "550.163.01"}
    assert _problems(cfg) == [
        ("gpu-stack:driver.version = '550.163.01': nodes[0] (gpu-dev-1) use DRA, whose driver allocates GPUs from "
        "driver branch 565 on; use a newer driver or keep those nodes on devicePlugin")
    ]


def test_a_local_dra_chart_that_is_not_the_driver_chart_is_refused_registering_nothing(tmp_path):
    (tmp_path / "Chart.yaml").write_text("apiVersion: v2\nname: dra-driver-nvidia-gpu\nversion: 0.3.0\n")
    cfg = _dra_config(chartPath=str(tmp_path))
    assert_refused(cfg, (
        f"gpu-stack:dra.chartPath = '{tmp_path}': {tmp_path} holds chart 'dra-driver-nvidia-gpu' version '0.3.0'; "
        "the stack needs dra-driver-nvidia-gpu 0.4.1"))
    assert_refused(_dra_config(chartPath=str(tmp_path / "missing")), f"gpu-stack:dra.chartPath = '{tmp_path / 'missing'}': ")


def test_dra_driver_settings_without_a_dra_node_are_said_to_do_nothing():
    from gpu_stack.config import advisories

    cfg = _dra_config(featureGates={"NVMLDeviceHealthCheck": True}, allowAlpha=True)
    cfg["nodes"][0].pop("allocation")
    assert (
        "dra.featureGates has no effect: no node uses DRA (nodes[i].allocation, dra.allocation), so NVIDIA's DRA "
        "driver is not installed"
    ) in advisories(load_settings(cfg))
    assert not [w for w in advisories(load_settings(_dra_config(featureGates={"NVMLDeviceHealthCheck": True}, allowAlpha=True))) if "DRA" in w]
