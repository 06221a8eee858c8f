"""Issue 23's engine and provider defects, proven with the real engine: a failed MIG rollout Job
removed by its TTL must not break later previews and ups (point 1); a completed Job left behind
by an interrupted `up` is replaced, not answered AlreadyExists or adopted (point 2); the
PrometheusRule is gated on its CRD (point 5); a release name over Helm's limit is refused before
anything is registered (point 4); the state per node stays bounded (point 12)."""

from __future__ import annotations

import json
import time

from .conftest import sandbox_for

TTL = {"ttlSecondsAfterFinished": 60, "timeoutSeconds": 120}


def _out(proc) -> str:
    return proc.stdout + proc.stderr


def _wait_gone(box, kind: str, name: str, ns: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while box.cluster.kubectl("get", kind, name, "-n", ns, check=False).returncode == 0:
        assert time.monotonic() < deadline, f"{kind} {name} still there after {timeout:.0f}s"
        time.sleep(2)


def test_a_failed_rollout_job_removed_by_its_ttl_breaks_no_later_preview_or_up(tools, e2e_tmp):
    with sandbox_for("staging", tools, e2e_tmp / "rollout-ttl", validation=TTL) as box:
        box.agents.fail_mig_profiles.add("inference-balanced")  # the GPU refuses the layout
        failed = box.pulumi.up(check=False)
        assert failed.returncode != 0 and "mig-rollout" in _out(failed), _out(failed)[-3000:]
        job = box.cluster.get_json("jobs", "-n", "gpu-operator", "-l", "app.kubernetes.io/part-of=gpu-mig-rollout")["items"][0]
        _wait_gone(box, "job", job["metadata"]["name"], "gpu-operator")
        box.agents.fail_mig_profiles.clear()
        preview = box.pulumi.run("preview", check=False)
        assert preview.returncode == 0, _out(preview)[-3000:]
        again = box.pulumi.up(check=False)
        assert again.returncode == 0, _out(again)[-3000:]
        labels = box.cluster.get_json("node", "gpu-stg-a100-1")["metadata"]["labels"]
        assert labels.get("nvidia.com/mig.config.state") == "success"


def test_a_job_that_completed_after_an_interrupted_up_is_replaced(tools, e2e_tmp):
    with sandbox_for("k3s", tools, e2e_tmp / "interrupted", validation=TTL) as box:
        box.agents.missing_gpus["k3s-gpu-1"] = 1  # the capacity check fails: an init error in the state
        first = box.pulumi.up(check=False)
        assert first.returncode != 0
        box.agents.missing_gpus.clear()  # the GPU is back; the Job stays failed in the cluster
        second = box.pulumi.up(check=False)
        assert second.returncode == 0, _out(second)[-3000:]
        assert "AlreadyExists" not in _out(second)
        jobs = box.cluster.get_json("jobs", "-n", "gpu-validation")["items"]
        assert jobs and all(j["status"].get("succeeded") == j["spec"]["completions"] for j in jobs)


def test_the_prometheus_rule_waits_for_its_crd(tools, e2e_tmp):
    config = {"alerts": {"enabled": True}, "dcgmExporter": {"enabled": True, "serviceMonitor": {"enabled": False}}}
    box = sandbox_for("k3s", tools, e2e_tmp / "no-crd", **config)
    box.prometheus_crds = False
    with box:
        proc = box.pulumi.run("preview", check=False)
    assert proc.returncode != 0
    assert "prometheusrules.monitoring.coreos.com" in _out(proc), _out(proc)[-3000:]
    # one line naming the CRD and the two ways out, before the provider's read fails
    lines = [line for line in _out(proc).splitlines() if "has no CustomResourceDefinition" in line]
    assert lines and "prometheusrules.monitoring.coreos.com (the Prometheus Operator's)" in lines[0], _out(proc)[-3000:]
    assert "install the Prometheus Operator's CRDs" in lines[0] and "dcgmExporter.serviceMonitor.enabled to false" in lines[0]


def test_a_release_name_over_helms_limit_is_refused_before_anything_is_registered(tools, e2e_tmp):
    with sandbox_for("k3s", tools, e2e_tmp / "long-name", operator={"releaseName": "g" * 54}) as box:
        proc = box.pulumi.run("preview", "--json", check=False)
    assert proc.returncode != 0
    doc = json.loads(proc.stdout)
    assert [s["urn"].rsplit("::", 2)[-2] for s in doc.get("steps") or []] in ([], ["pulumi:pulumi:Stack"])
    message = " ".join(d.get("message", "") for d in doc.get("diagnostics") or [])
    assert "gpu-stack:operator.releaseName" in message and "53" in message, message


def test_the_state_each_node_adds_is_bounded(tools, e2e_tmp):
    """What `pulumi stack export` holds for the resources of one node (its read, the Jobs pinned to
    it; no label patch: the label Job sets the labels), after a real `up`."""
    with sandbox_for("staging", tools, e2e_tmp / "state") as box:
        box.pulumi.up()
        state = json.loads(box.pulumi.run("stack", "export").stdout)
    resources = state["deployment"]["resources"]
    assert not [r for r in resources if r["type"] == "kubernetes:core/v1:NodePatch"]
    for r in resources:
        # The program's own frames only (program.py), so a node's read stays under 5 KB as exported;
        # the stack itself is registered before the program runs (one, with the SDK's frames).
        assert r["type"] == "pulumi:pulumi:Stack" or len(r.get("stackTrace") or []) <= 8, r["urn"]
        if r["type"] == "kubernetes:coordination.k8s.io/v1:Lease":
            assert len(json.dumps(r, indent=4)) < 5_000, r
    for node in ("gpu-stg-a100-1", "gpu-stg-l40s-1"):
        own = [r for r in resources if r["urn"].rsplit("::", 1)[-1].endswith(node)]
        size = sum(len(json.dumps(r)) for r in own)
        assert own and size < 40_000, (node, size, [r["urn"].rsplit("::", 1)[-1] for r in own])


def test_a_fresh_preview_with_the_sharing_benchmark_on_passes_and_reads_nothing_yet(tools, e2e_tmp):
    # Issue 33 item 1 (E13): the results ConfigMap is read only once the collector really ran; a
    # previewed create of the collector knows its inputs (metadata), not its status.
    from sandbox.compare import UNKNOWN_ENGINE, differences, preview_resources

    from .test_preview_equals_plan import offline_plan, pinned

    with sandbox_for("k3s", tools, e2e_tmp / "bench-preview", validation={"sharingBenchmark": {"enabled": True}}) as box:
        proc = box.pulumi.run("preview", check=False)
        assert proc.returncode == 0, _out(proc)[-4000:]
        preview, plan_file = box.pulumi.preview_with_plan()
        # and it is the offline plan of the same stack, under the strict comparison
        found = differences(offline_plan(box), preview, plan_file, pinned(box), box.pulumi.project_dir)
    assert found == [], "\n".join(found)
    names = preview_resources(preview)
    assert "validation-sharing-cost" in names, "the collector Job is planned"
    # the results' read waits for the collector: in this preview its id is unknown, so it is not run
    reads = [r for n, r in names.items() if n.startswith("read:") and "sharing-cost" in n]
    assert all(r["id"] in (None, UNKNOWN_ENGINE) for r in reads), reads


def test_a_renamed_release_is_reinstalled_with_the_old_one_removed_first(tools, e2e_tmp):
    # Issue 33 item 2 (E14): the provider replaces a Release create-before-delete by default, and
    # Helm refuses to install the new one over the chart's cluster-scoped objects the old one
    # owns; the stack replaces it delete-before-replace, as the diff says.
    with sandbox_for("k3s", tools, e2e_tmp / "rename-release", validation={"timeoutSeconds": 180}) as box:
        first = box.pulumi.up(check=False)
        assert first.returncode == 0, _out(first)[-3000:]
        box.pulumi.config_set("gpu-stack:operator.releaseName", "gpu-operator-2")
        preview, plan_file = box.pulumi.preview_with_plan("--diff")
        (urn,) = [s["urn"] for s in preview["steps"] if s["urn"].endswith("::gpu-operator-release")]
        assert [s["op"] for s in preview["steps"] if s["urn"] == urn] == ["replace"]
        # the engine's goal for it: the old release goes first
        assert (plan_file.get("plan", plan_file)["resourcePlans"][urn]["goal"] or {}).get("deleteBeforeReplace") is True
        proc = box.pulumi.up(check=False)
        assert proc.returncode == 0, _out(proc)[-4000:]
        releases = box.cluster.get_json("secrets", "-A", "-l", "owner=helm")["items"]
        assert [(s["metadata"]["labels"]["name"], s["metadata"]["labels"]["status"]) for s in releases] == [("gpu-operator-2", "deployed")]
        assert box.cluster.get_json("clusterpolicies.nvidia.com", "cluster-policy")["metadata"]["annotations"][
            "meta.helm.sh/release-name"] == "gpu-operator-2"
