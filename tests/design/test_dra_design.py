"""The DRA design (issue 44): the exact values NVIDIA's DRA driver release receives, the exact labels
per node (the device plugin off on exactly the DRA nodes, never both advertisers on one node), the
validation Job that claims a GPU through a ResourceClaimTemplate, and what the plan tells
workloads."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_stack.config import load_settings
from gpu_stack.design.derive import derive
from gpu_stack.design.dra import ALLOCATION_LABEL, DEVICE_PLUGIN_LABEL

from ..helpers import dev_config

KUBELET_PLUGIN_PLACEMENT = {
    "nodeSelector": {"gpu-stack/allocation": "dra"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu-stack/allocation", "operator": "In", "values": ["dra"]}]},
    ]}}},
}


def _cfg(**edits: Any) -> dict[str, Any]:
    cfg = dev_config()
    cfg["kubernetes"]["version"] = "1.34"
    cfg["nodes"][0]["allocation"] = "dra"
    for key, value in edits.items():
        cfg[key] = value
    return cfg


def test_no_dra_node_no_dra_release_and_no_dra_label():
    design = derive(load_settings(dev_config()))
    assert design.dra is None
    assert all(ALLOCATION_LABEL not in labels and DEVICE_PLUGIN_LABEL not in labels for labels in design.node_labels.values())


def test_the_release_gets_exactly_these_values_with_a_host_driver():
    design = derive(load_settings(_cfg()))
    assert design.dra is not None
    assert design.dra.release == {
        "name": "nvidia-dra-driver-gpu", "namespace": "gpu-operator", "create_namespace": False, "atomic": True,
        "cleanup_on_fail": True, "timeout": 600, "max_history": 10, "disable_openapi_validation": False,
        "values": {
            "resourceApiVersion": "resource.k8s.io/v1",
            "nvidiaDriverRoot": "/",
            "gpuResourcesEnabledOverride": True,
            "resources": {"gpus": {"enabled": True}, "computeDomains": {"enabled": False}},
            "kubeletPlugin": KUBELET_PLUGIN_PLACEMENT,
        },
    }
    assert (design.dra.chart, design.dra.version, design.dra.repository) == (
        "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu", "0.4.1", None)


def test_the_operators_driver_root_gates_mirror_and_pull_secrets_reach_the_values():
    cfg = _cfg(dra={"allowAlpha": True, "featureGates": {"TimeSlicingSettings": True, "MPSSupport": True}, "computeDomains": True})
    cfg["driver"] = {"placement": "operator"}
    cfg["images"] = {"mirror": "mirror.example.internal/nvidia", "pullSecrets": ["site-pull"]}
    values = derive(load_settings(cfg)).dra.values  # type: ignore[union-attr]
    assert values["nvidiaDriverRoot"] == "/run/nvidia/driver"
    assert values["featureGates"] == {"MPSSupport": True, "TimeSlicingSettings": True}
    assert values["resources"]["computeDomains"] == {"enabled": True}
    assert values["image"] == {"repository": "mirror.example.internal/nvidia/dra-driver-nvidia/dra-driver-nvidia-gpu", "tag": "v0.4.1"}
    assert values["imagePullSecrets"] == [{"name": "site-pull"}]


def test_labels_turn_the_device_plugin_off_on_exactly_the_dra_nodes():
    cfg = _cfg(sharing={"mode": "none", "profiles": {"ts": {"replicas": 2}}})
    cfg["nodes"][0]["sharing"] = "ts"
    cfg["nodes"][1]["sharing"] = "ts"
    design = derive(load_settings(cfg))
    assert design.node_labels == {
        "gpu-dev-1": {"gpu-stack/allocation": "dra", "nvidia.com/gpu.deploy.device-plugin": "false"},
        "gpu-dev-2": {"nvidia.com/device-plugin.config": "ts"},
    }
    # Never both: no node carries the device-plugin sharing label and the DRA switch at once.
    for labels in design.node_labels.values():
        assert not ({ALLOCATION_LABEL, DEVICE_PLUGIN_LABEL} & set(labels) and "nvidia.com/device-plugin.config" in labels)
    # The way back: a node set to devicePlugin again gets neither DRA label (the label Job's
    # server-side apply then removes them, and the operator puts its device plugin back).
    cfg["nodes"][0]["allocation"] = "devicePlugin"
    assert derive(load_settings(cfg)).node_labels["gpu-dev-1"] == {"nvidia.com/device-plugin.config": "ts"}


def test_stack_wide_dra_with_a_per_node_exception():
    cfg = _cfg(dra={"allocation": "dra"})
    cfg["nodes"][0].pop("allocation")
    cfg["nodes"][1]["allocation"] = "devicePlugin"
    design = derive(load_settings(cfg))
    assert design.dra is not None and design.dra.nodes == ("gpu-dev-1",)
    assert design.dra.expected_devices == {"gpu-dev-1": {"gpu.nvidia.com": 2}}
    assert [row.get("claims") for row in design.capacity[:2]] == [{"gpu.nvidia.com": 2}, None]
    assert design.capacity[0]["advertises"] == {} and design.capacity[1]["advertises"] == {"nvidia.com/gpu": 4}


def test_the_validation_claims_a_gpu_through_a_claim_template_on_each_dra_node_sample():
    design = derive(load_settings(_cfg()))
    assert design.validation is not None
    jobs = {j.key: j for j in design.validation.jobs}
    job = jobs["dra-claim-gpu-dev-1"]
    assert job.claim_template is not None
    template = job.claim_template
    assert (template["apiVersion"], template["kind"], template["metadata"]["namespace"]) == (
        "resource.k8s.io/v1", "ResourceClaimTemplate", "gpu-validation")
    assert template["spec"] == {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}},
    ]}}}
    pod = job.manifest["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": template["metadata"]["name"]}]
    container = pod["containers"][0]
    assert container["resources"]["claims"] == [{"name": "gpu"}]
    assert not any(k.startswith("nvidia.com/") for k in container["resources"]["limits"])
    assert container["command"][-1].endswith("/cuda-smoke.sh")
    assert {"name": "EXPECTED_GPUS", "value": "1"} in container["env"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-dev-1"]}]}]
    # No device-plugin GPU Job is pinned to the DRA node (it advertises no nvidia.com/gpu).
    assert [j.key for j in design.validation.jobs if j.node == "gpu-dev-1"] == ["dra-claim-gpu-dev-1"]


def test_a_dra_node_whose_gpus_are_all_mig_claims_a_mig_device():
    cfg = _cfg(mig={"strategy": "mixed"})
    cfg["nodes"][0] = {"name": "gpu-h100", "address": "10.20.0.21", "gpu": {"model": "H100-80GB", "count": 2},
                       "mig": "all-1g.10gb", "allocation": "dra"}
    design = derive(load_settings(cfg))
    assert design.dra is not None and design.dra.expected_devices == {"gpu-h100": {"mig.nvidia.com": 14}}
    job = next(j for j in design.validation.jobs if j.key == "dra-claim-gpu-h100")  # type: ignore[union-attr]
    assert job.claim_template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "mig.nvidia.com"  # type: ignore[index]
    assert any("its MIG devices (1g.10gb) are devices of DeviceClass mig.nvidia.com" in w for w in design.warnings)


def test_the_plan_says_what_workloads_must_change():
    warnings = derive(load_settings(_cfg())).warnings
    assert (
        "DRA nodes (gpu-dev-1) advertise no nvidia.com/gpu: a pod that requests it runs only on device-plugin nodes; "
        "to run on a DRA node it requests a ResourceClaim (template) of DeviceClass gpu.nvidia.com (DeviceClass "
        "gpu.nvidia.com keeps extendedResourceName only with the alpha DRAExtendedResource gate)"
    ) in warnings
    assert (
        "node gpu-dev-1 (profile 'default', time-slicing nvidia.com/gpu x4): replicas become pods that share one "
        "ResourceClaim (each pod names it under spec.resourceClaims); DRA enforces no replica count, so the number "
        "of pods sharing a GPU is the workload's"
    ) in warnings
    extended = derive(load_settings(_cfg(dra={"allowAlpha": True, "extendedResource": True}))).warnings
    assert any(w.startswith("DRA nodes (gpu-dev-1): a pod that requests nvidia.com/gpu may be placed there") for w in extended)


def test_a_stack_of_dra_nodes_only_plans_no_device_plugin_smoke_job():
    """No node advertises nvidia.com/gpu: an unpinned cuda-smoke Job asking for it would wait for ever."""
    cfg = _cfg(dra={"allocation": "dra"})
    design = derive(load_settings(cfg))
    assert design.validation is not None
    checks = sorted({j.check for j in design.validation.jobs if j.node is not None or j.gpu_resource is not None})
    assert "cuda-smoke" not in checks and "dra-claim" in checks
    # nor a free-capacity gate with nothing to check (the gate fails on an empty table)
    assert "free-capacity" not in {j.check for j in design.validation.jobs}
    assert design.capacity[-1]["claims"] == {"gpu.nvidia.com": 3}


def test_the_allocation_switch_is_the_rollout_jobs_never_the_label_jobs():
    """The label Job runs before the drain: it must never switch a node's advertiser (a node with
    busy GPUs would get both). Every node of a stack with DRA in play is in the rollout's table and
    the label Job's table carries none of the switch labels."""
    design = derive(load_settings(_cfg()))
    assert design.dra_rollout is not None and design.dra_rollout.nodes == ("gpu-dev-1", "gpu-dev-2")
    assert design.node_labels["gpu-dev-1"] == {"gpu-stack/allocation": "dra", "nvidia.com/gpu.deploy.device-plugin": "false"}
    assert design.label_job is not None
    assert all(not ({ALLOCATION_LABEL, DEVICE_PLUGIN_LABEL} & set(labels)) for labels in design.label_job.labels.values())


def test_the_claim_template_and_its_job_are_valid_kubernetes_1_34_objects():
    import kubernetes_validate

    design = derive(load_settings(_cfg()))
    job = next(j for j in design.validation.jobs if j.check == "dra-claim")  # type: ignore[union-attr]
    for doc in (job.manifest, job.claim_template):
        kubernetes_validate.validate(doc, "1.34", strict=True)
    # v1's request shape: `exactly` (v1beta1's flat deviceClassName is refused by the 1.34 schema)
    flat = {**job.claim_template, "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com"}]}}}}  # type: ignore[dict-item]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(flat, "1.34", strict=True)
