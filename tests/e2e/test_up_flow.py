"""A user's real steps on the staging stack (MIG and time-slicing, the operator's driver and
toolkit), each with the real Pulumi CLI and provider against the simulated cluster, in order:
`up` on a fresh cluster, a second `up` that changes nothing, a replicas edit whose preview shows
what the offline diff predicted, a validation Job removed by its TTL, then `destroy`."""

from __future__ import annotations

import json
import time

import pytest

from gpu_stack.offline.diff import CREATE, DELETE, REPLACE, UPDATE, diff_plans, render_text
from sandbox.compare import preview_resources

from .conftest import sandbox_for
from .test_preview_equals_plan import offline_plan

STACK = "staging"


@pytest.fixture(scope="module")
def box(tools, e2e_tmp):
    # a short TTL, so that the TTL step takes a minute, not a day
    with sandbox_for(STACK, tools, e2e_tmp / "up-flow", validation={"ttlSecondsAfterFinished": 60}) as sandbox:
        yield sandbox


def cluster_scoped(box) -> set[tuple[str, str]]:
    """(resource, name) of every listable cluster-scoped object in the cluster but Nodes and
    Events (the simulated cluster's own) and kwok's."""
    kinds = box.cluster.kubectl("api-resources", "--namespaced=false", "--verbs=list", "-o", "name").stdout.split()
    skip = {"nodes", "events.events.k8s.io", "componentstatuses"}
    found = set()
    for kind in kinds:
        if kind in skip or kind.endswith(".kwok.x-k8s.io"):
            continue
        for item in box.cluster.get_json(kind)["items"]:
            found.add((kind, item["metadata"]["name"]))
    return found


@pytest.fixture(scope="module")
def first_up(box):
    plan = offline_plan(box)
    box.before_first_up = cluster_scoped(box)
    proc = box.pulumi.up(check=False)
    return plan, proc


def test_up_on_a_fresh_cluster_installs_prepares_and_validates(box, first_up):
    plan, proc = first_up
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    outputs = box.pulumi.outputs()
    assert outputs["releaseName"] == plan["outputs"]["releaseName"]
    assert outputs["chartVersion"] == "v25.10.1"
    c = box.cluster
    ns = outputs["operatorNamespace"]
    # the Helm release, installed with its wait satisfied
    secrets = c.get_json("secrets", "-n", ns, "-l", "owner=helm")["items"]
    assert [s["metadata"]["labels"]["status"] for s in secrets] == ["deployed"]
    # the ConfigMaps the ClusterPolicy names, as planned
    policy = c.get_json("clusterpolicies.nvidia.com", "cluster-policy")["spec"]
    assert policy["devicePlugin"]["config"]["name"] == outputs["sharingConfigMap"]
    assert policy["migManager"]["config"]["name"] == outputs["migConfigMap"]
    for name in (outputs["sharingConfigMap"], outputs["migConfigMap"]):
        c.get_json("configmap", name, "-n", ns)
    # node labels, alert rules and the dashboard
    for node, labels in outputs["nodeLabels"].items():
        have = c.get_json("node", node)["metadata"]["labels"]
        assert {k: have.get(k) for k in labels} == labels
    assert c.get_json("prometheusrules.monitoring.coreos.com", "-A")["items"]
    dashboards = c.get_json("configmaps", "-A", "--field-selector", f"metadata.name={outputs['dashboardConfigMap']}")["items"]
    assert len(dashboards) == 1 and any(k.endswith(".json") for k in dashboards[0]["data"])
    # every validation Job named in the outputs was admitted and its pods scheduled on the nodes it
    # targets; kwok completes those that need a GPU (admitted and scheduled, not validated: see
    # docs/real-engine.md), the API-talking ones run for real below
    jobs = {j["metadata"]["name"]: j for j in c.get_json("jobs", "-n", "gpu-validation")["items"]}
    assert sorted(jobs) == sorted(outputs["validationJobs"].values())
    pods = c.get_json("pods", "-n", "gpu-validation")["items"]
    for name, job in jobs.items():
        assert job["status"].get("succeeded") == job["spec"]["completions"], (name, job["status"])
        selector = job["spec"]["template"]["spec"].get("nodeSelector") or {}
        for pod in (p for p in pods if p["metadata"].get("labels", {}).get("job-name") == name):
            labels = c.get_json("node", pod["spec"]["nodeName"])["metadata"]["labels"]
            assert {k: labels.get(k) for k in selector} == selector, (name, pod["spec"]["nodeName"])
    # the checks that only talk to the API ran for real (the pod runner), as their ServiceAccounts
    ran = {key.split("/")[1].rsplit("-", 1)[0]: run for key, run in box.runner.runs.items()}
    for check in ("free-capacity", "mig-state", "sharing-capacity"):
        run = ran[outputs["validationJobs"][check]]
        assert run.returncode == 0 and f"PASS {check}:" in run.stdout, run.stdout
    # the label Job ran for real (the pod runner), as its ServiceAccount, and applied the table
    (label_run,) = [run for key, run in box.runner.runs.items() if key.startswith("gpu-operator/node-labels-")]
    assert label_run.returncode == 0 and "PASS node-labels: labels of 2 node(s) applied" in label_run.stdout, label_run.stdout
    # the MIG rollout ran for real (the pod runner) and the MIG manager stand-in applied the layout
    node = c.get_json("node", "gpu-stg-a100-1")["metadata"]["labels"]
    assert node.get("nvidia.com/mig.config") == "inference-balanced"
    assert node.get("nvidia.com/mig.config.state") == "success"


def test_a_second_up_changes_nothing(box, first_up):
    assert first_up[1].returncode == 0
    proc = box.pulumi.up("--expect-no-changes", check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]


def _engine_changes(preview: dict) -> dict[str, str]:
    out = {}
    for name, r in preview_resources(preview).items():
        op = r["op"]
        if op in ("update",):
            out[name] = UPDATE
        elif op in ("replace", "create-replacement", "delete-replaced"):
            out[name] = REPLACE
        elif op == "create":
            out[name] = CREATE
        elif op == "delete":
            out[name] = DELETE
    return out


def test_a_replicas_edit_changes_what_the_offline_diff_predicted(box, first_up):
    assert first_up[1].returncode == 0
    before = offline_plan(box)
    box.pulumi.config_set("gpu-stack:sharing.replicas", "8")
    after = offline_plan(box)
    predicted = {c.name: c.action for c in diff_plans(before, after).changes}
    preview = box.pulumi.preview_json("--diff")
    assert _engine_changes(preview) == predicted
    proc = box.pulumi.up(check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    outputs = box.pulumi.outputs()
    assert outputs["sharingConfigMap"] != before["outputs"]["sharingConfigMap"]
    policy = box.cluster.get_json("clusterpolicies.nvidia.com", "cluster-policy")["spec"]
    assert policy["devicePlugin"]["config"]["name"] == outputs["sharingConfigMap"]
    # the device plugin's config in the cluster is exactly the one the offline plan shows
    cm = box.cluster.get_json("configmap", outputs["sharingConfigMap"], "-n", outputs["operatorNamespace"])
    (planned,) = [r["inputs"] for r in after["resources"] if r["name"] == "gpu-operator-sharing-config"]
    assert cm["data"] == planned["data"] and "replicas: 8" in cm["data"]["default"]


def test_a_job_removed_by_its_ttl_is_noticed_by_refresh_and_run_again_by_up(box, first_up):
    assert first_up[1].returncode == 0
    c = box.cluster
    # the Job the last `up` ran (the TTL controller may have removed it already)
    name = box.pulumi.outputs()["validationJobs"]["cuda-smoke"]
    deadline = time.monotonic() + 180
    while c.kubectl("get", "job", name, "-n", "gpu-validation", check=False).returncode == 0:
        assert time.monotonic() < deadline, "the TTL controller did not remove the finished Job"
        time.sleep(2)
    # the docs: a removed Job never blocks a later preview
    box.pulumi.preview_json()

    def job_ids() -> set[str]:
        return {r["id"] for r in box.pulumi.export()["deployment"]["resources"] if r["type"] == "kubernetes:batch/v1:Job"}

    before = job_ids()
    assert f"gpu-validation/{name}" in before
    box.pulumi.run("refresh", "--yes")
    # refresh removed the TTL-deleted Jobs from the state: the next up creates them again
    gone = before - job_ids()
    assert f"gpu-validation/{name}" in gone, sorted(before)
    changes = _engine_changes(box.pulumi.preview_json())
    assert sorted(changes.values()) == [CREATE] * len(gone), changes
    proc = box.pulumi.up(check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    job = c.get_json("job", name, "-n", "gpu-validation")
    assert job["status"].get("succeeded") == job["spec"]["completions"]


def _allocatable(box, node: str, want: str) -> None:
    deadline = time.monotonic() + 30
    while box.cluster.get_json("node", node)["status"]["allocatable"].get("nvidia.com/gpu") != want:
        assert time.monotonic() < deadline, f"the device plugin stand-in did not re-advertise {want} on {node}"
        time.sleep(0.5)


def test_one_nodes_profile_is_one_table_line_the_label_job_applies_and_removes(box, first_up):
    assert first_up[1].returncode == 0
    before = offline_plan(box)
    box.pulumi.config_set("gpu-stack:sharing.profiles.ts-4.mode", "time-slicing")
    box.pulumi.config_set("gpu-stack:sharing.profiles.ts-4.replicas", "4")
    box.pulumi.config_set("gpu-stack:nodes[1].sharing", "ts-4")
    after = offline_plan(box)
    diff = diff_plans(before, after)
    assert "  gpu-stg-l40s-1: nvidia.com/device-plugin.config (unset) -> ts-4" in render_text(diff)
    assert _engine_changes(box.pulumi.preview_json("--diff")) == {c.name: c.action for c in diff.changes}
    proc = box.pulumi.up(check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    labels = box.cluster.get_json("node", "gpu-stg-l40s-1")["metadata"]["labels"]
    assert labels.get("nvidia.com/device-plugin.config") == "ts-4"
    _allocatable(box, "gpu-stg-l40s-1", "16")  # 4 GPUs x 4 replicas: the plugin followed the label
    # The profile removed again: the Job's server-side apply drops the label it had set.
    box.pulumi.run("config", "rm", "--path", "gpu-stack:nodes[1].sharing")
    proc = box.pulumi.up(check=False)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "nvidia.com/device-plugin.config" not in box.cluster.get_json("node", "gpu-stg-l40s-1")["metadata"]["labels"]
    _allocatable(box, "gpu-stg-l40s-1", "32")  # back on the default: 4 GPUs x 8 (the replicas edit above)
    assert box.cluster.get_json("node", "gpu-stg-a100-1")["metadata"]["labels"]["nvidia.com/device-plugin.config"] == "none"


def test_destroy_leaves_only_what_the_docs_say_stays(box, first_up):
    assert first_up[1].returncode == 0
    box.pulumi.run("destroy", "--yes")
    c = box.cluster
    namespaces = {n["metadata"]["name"] for n in c.get_json("namespaces")["items"]}
    assert not {"gpu-operator", "gpu-validation"} & namespaces
    crds = {n["metadata"]["name"] for n in c.get_json("crds")["items"]}
    assert "clusterpolicies.nvidia.com" in crds, "Helm never deletes CRDs (docs/upgrades-and-destroy.md)"
    assert "nvidia.com/device-plugin.config" not in c.get_json("node", "gpu-stg-l40s-1")["metadata"]["labels"]
    # Labels set by the label Job and the MIG rollout Job (kubectl, not Pulumi) stay, as documented
    a100 = c.get_json("node", "gpu-stg-a100-1", "--show-managed-fields")["metadata"]
    assert a100["labels"].get("nvidia.com/mig.config") == "inference-balanced"
    assert a100["labels"].get("nvidia.com/device-plugin.config") == "none"
    assert any(f.get("manager") == "gpu-stack-node-labels" for f in a100["managedFields"])
    state = json.loads(box.pulumi.run("stack", "export").stdout)
    assert [r["type"] for r in state["deployment"].get("resources") or [] if r["type"] != "pulumi:pulumi:Stack"] == []
    # every cluster-scoped object the stack (or the operator for it) created is gone, but the CRDs
    # Helm never deletes (the chart's and NFD's)
    kept_groups = ("nvidia.com", "nfd.k8s-sigs.io")
    left = {(kind, name) for kind, name in cluster_scoped(box) - box.before_first_up
            if not (kind == "customresourcedefinitions.apiextensions.k8s.io" and name.endswith(kept_groups))
            # the API server's own APIService per group/version of a CRD that stays
            and not (kind == "apiservices.apiregistration.k8s.io" and name.split(".", 1)[1] in kept_groups)}
    assert left == set(), sorted(left)
