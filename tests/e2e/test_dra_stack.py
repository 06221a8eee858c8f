"""The dra sample stack (tests/stacks/Pulumi.dra.yaml) on the real engine: the real Pulumi CLI and
kubernetes provider 4.25.0 against the real kube-apiserver, scheduler and controller-manager 1.34
with kwok nodes. `up` installs NVIDIA's DRA driver chart beside the GPU Operator, the rollout Job
moves the two H100 nodes to DRA (the DRA kubelet plugin's stand-in publishes their ResourceSlices,
sandbox/dra_slices.py), and the dra-claim validation Job's pod gets a GPU through the untyped
resource.k8s.io/v1 ResourceClaimTemplate: the claim allocated by the real scheduler from the node's
slice. What is simulated: the kubelet's device preparation (CDI) and the CUDA payload (kwok
completes the pod), docs/dra.md."""

from __future__ import annotations

import pytest

from gpu_stack.offline.diff import diff_plans

from .conftest import sandbox_for
from .test_preview_equals_plan import offline_plan
from .test_up_flow import _engine_changes

STACK = "dra"
DRA_NODES = ("dra-h100-1", "dra-h100-2")


@pytest.fixture(scope="module")
def box(tools, e2e_tmp):
    with sandbox_for(STACK, tools, e2e_tmp / "dra-stack") as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def first_up(box):
    plan = offline_plan(box)
    proc = box.pulumi.up(check=False)
    return plan, proc


def test_up_installs_the_dra_driver_beside_the_operator_and_moves_the_dra_nodes(box, first_up):
    plan, proc = first_up
    # the stand-ins' own errors too: a slice never published shows as the rollout's timeout
    stand_ins = f"\nnode agents: {box.agents.errors[-5:]}\nDRA slice stand-in: {box.dra_agents.errors[-5:]}"
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:] + stand_ins
    c = box.cluster
    outputs = box.pulumi.outputs()
    ns = outputs["operatorNamespace"]
    releases = sorted(s["metadata"]["labels"]["name"] for s in c.get_json("secrets", "-n", ns, "-l", "owner=helm,status=deployed")["items"])
    assert releases == ["gpu-operator", "nvidia-dra-driver-gpu"]
    # The DeviceClasses as the API server keeps them: v1, and gpu.nvidia.com without the chart's
    # extendedResourceName (Kubernetes 1.34 drops it while the alpha DRAExtendedResource gate is off).
    classes = {d["metadata"]["name"]: d for d in c.get_json("deviceclasses.resource.k8s.io")["items"]}
    assert sorted(classes) == ["gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"]
    assert "extendedResourceName" not in classes["gpu.nvidia.com"]["spec"]
    # One advertiser per node: the DRA nodes carry the switch, the device-plugin node neither label.
    for node in (*DRA_NODES, "dp-l40s-1"):
        labels = c.get_json("node", node)["metadata"]["labels"]
        dra = node in DRA_NODES
        assert labels.get("gpu-stack/allocation") == ("dra" if dra else None), (node, labels)
        if dra:
            assert labels.get("nvidia.com/gpu.deploy.device-plugin") == "false"
            assert "nvidia.com/device-plugin.config" not in labels
        else:
            assert labels.get("nvidia.com/gpu.deploy.device-plugin") != "false"
    # The kubelet plugin runs on the DRA nodes only.
    plugin = c.get_json("pods", "-n", ns, "-l", "dra-driver-nvidia-gpu-component=kubelet-plugin")["items"]
    assert sorted(p["spec"].get("nodeName") for p in plugin) == sorted(DRA_NODES)
    # The validation claimed a GPU of a DRA node through the template, allocated by the scheduler.
    jobs = {j["metadata"]["name"]: j for j in c.get_json("jobs", "-n", "gpu-validation")["items"]}
    (claim_job,) = [name for key, name in outputs["validationJobs"].items() if key.startswith("dra-claim-")]
    assert jobs[claim_job]["status"].get("succeeded") == 1, jobs[claim_job]["status"]
    templates = c.get_json("resourceclaimtemplates.resource.k8s.io", "-n", "gpu-validation")["items"]
    assert len(templates) == 1
    (pod,) = [p for p in c.get_json("pods", "-n", "gpu-validation")["items"] if p["metadata"]["labels"].get("job-name") == claim_job]
    assert pod["spec"]["nodeName"] in DRA_NODES
    (status,) = pod["status"]["resourceClaimStatuses"]
    assert status["name"] == "gpu" and status["resourceClaimName"]
    # The claim made from the template may be gone once its pod finished (the resourceclaim
    # controller deletes it); while it is there, it was allocated from the node's own slice.
    claims = c.get_json("resourceclaims.resource.k8s.io", "-n", "gpu-validation")["items"]
    for claim in (x for x in claims if x["metadata"]["name"] == status["resourceClaimName"]):
        for result in ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results", []):
            assert (result["driver"], result["pool"]) == ("gpu.nvidia.com", pod["spec"]["nodeName"])
    assert plan["outputs"]["nodeLabels"] == outputs["nodeLabels"]


def test_a_second_up_changes_nothing(box, first_up):
    assert first_up[1].returncode == 0
    proc = box.pulumi.up("--expect-no-changes", check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]


def test_moving_the_device_plugin_node_to_dra_changes_what_the_offline_diff_predicted(box, first_up):
    """`nodes[2].allocation: dra`: the real preview changes exactly the resources the offline diff
    says (the rollout Job and its table, the new node class's dra-claim Job and the device-plugin
    checks it replaces, ...); `up` moves the node: both labels on it, no device-plugin resource
    left, the kubelet plugin there too."""
    assert first_up[1].returncode == 0
    before = offline_plan(box)
    box.pulumi.config_set("gpu-stack:nodes[2].allocation", "dra")
    after = offline_plan(box)
    predicted = {c.name: c.action for c in diff_plans(before, after).changes}
    assert predicted, "moving a node changes the plan"
    assert _engine_changes(box.pulumi.preview_json("--diff")) == predicted
    proc = box.pulumi.up(check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    c = box.cluster
    node = c.get_json("node", "dp-l40s-1")
    labels = node["metadata"]["labels"]
    assert (labels.get("gpu-stack/allocation"), labels.get("nvidia.com/gpu.deploy.device-plugin")) == ("dra", "false")
    assert not [k for k, v in (node["status"].get("allocatable") or {}).items() if k.startswith("nvidia.com/") and v != "0"]
    ns = box.pulumi.outputs()["operatorNamespace"]
    plugin = c.get_json("pods", "-n", ns, "-l", "dra-driver-nvidia-gpu-component=kubelet-plugin")["items"]
    assert sorted(p["spec"].get("nodeName") for p in plugin) == sorted((*DRA_NODES, "dp-l40s-1"))
