"""Validation Jobs in the plan: valid manifests, least privilege, the right GPU resource, and
re-runs exactly when the config a Job validates changes."""

from __future__ import annotations

import copy
import re
from typing import Any

import kubernetes_validate
import pytest

from gpu_stack.config import load_settings
from gpu_stack.design.capacity import node_capacity
from gpu_stack.design.derive import derive
from gpu_stack.design.validation import (
    job_name,
    node_slug,
    payload_data,
    payload_deadline,
)
from gpu_stack.offline.plan import ResourceRecord

from ..helpers import assert_refused, dev_config, plan_of, plan_stack_file, set_path

JOB = "kubernetes:batch/v1:Job"
VALIDATION_TYPES = {
    "kubernetes:core/v1:Namespace",
    "kubernetes:core/v1:ConfigMap",
    "kubernetes:core/v1:ServiceAccount",
    "kubernetes:core/v1:Service",
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRole",
    "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding",
    JOB,
}
DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


def schema_version(minor: str) -> str:
    """The newest schema kubernetes-validate ships for a Kubernetes minor such as '1.31'."""
    matches = [v for v in kubernetes_validate.utils.all_versions() if kubernetes_validate.utils.major_minor(v) == minor]
    assert matches, f"kubernetes-validate ships no schema for {minor}"
    return sorted(matches, key=lambda v: tuple(int(p) for p in v.split(".")))[-1]


def validation_resources(plan):
    return [r for r in plan.resources if r.parent == "validation" and r.custom]


def jobs(plan) -> dict[str, ResourceRecord]:
    """Pulumi name -> the Job's inputs, for the validation Jobs of a plan."""
    return {r.name: r for r in plan.of_type(JOB) if r.parent == "validation"}


def container(job) -> dict:
    (c,) = job.inputs["spec"]["template"]["spec"]["containers"]
    return c


def env(job) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container(job)["env"]}


def closure(plan, name: str) -> set[str]:
    """Every resource `name` waits for, directly or through what it waits for."""
    by_name = {r.name: r for r in plan.resources}
    seen: set[str] = set()
    todo = list(by_name[name].depends_on)
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo.extend(by_name[n].depends_on if n in by_name else ())
    return seen


def table_of(plan, job) -> str:
    """The per-node table a cluster Job reads: its ConfigMap's data as mounted at EXPECTED_FILE."""
    pod = job.inputs["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == "expected"]
    (mount,) = [m for m in container(job)["volumeMounts"] if m["name"] == "expected"]
    (cm,) = [r for r in plan.of_type("kubernetes:core/v1:ConfigMap") if r.inputs["metadata"]["name"] == volume["configMap"]["name"]]
    assert cm.name in job.depends_on and cm.inputs["immutable"] is True
    assert env(job)["EXPECTED_FILE"] == f"{mount['mountPath']}/nodes"
    return cm.inputs["data"]["nodes"]


@pytest.fixture(scope="module")
def dev_plan():
    return plan_of(dev_config())


@pytest.fixture(scope="module")
def mig_config():
    cfg = dev_config()
    cfg["nodes"].append({"name": "gpu-mig-1", "address": "10.20.0.13", "gpu": {"model": "H100-80GB", "count": 2}, "mig": "halves", "sharing": "none"})
    cfg["mig"] = {
        "strategy": "mixed",
        "profiles": {"halves": [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]},
    }
    return cfg


@pytest.fixture(scope="module")
def mig_plan(mig_config):
    return plan_of(mig_config)


# --------------------------------------------------------------------------- the dev plan
def test_dev_plan_holds_every_job_after_the_release(dev_plan):
    found = jobs(dev_plan)
    assert set(found) == {
        "validation-cuda-smoke",
        "validation-sharing-capacity",
        "validation-free-capacity",
        "validation-sharing-pods-gpu-dev-1",
        "validation-sharing-pods-gpu-dev-2",
        # dev's coverage is full: every node's own toolkit config is checked (W5), not once per class
        "validation-no-gpu-gpu-dev-1",
        "validation-no-gpu-gpu-dev-2",
        "validation-dcgm-metrics",
    }
    for job in found.values():
        assert "gpu-operator-release" in closure(dev_plan, job.name), job.name
        assert job.inputs["metadata"]["namespace"] == "gpu-validation"
        assert DNS_LABEL.match(job.inputs["metadata"]["name"]), job.inputs["metadata"]["name"]


def test_the_no_gpu_check_runs_once_per_class_when_sampled_and_on_every_node_when_full():
    from ..helpers import dev_config

    cfg = dev_config()
    cfg["validation"] = {**cfg.get("validation", {}), "coverage": "sample"}
    assert sorted(n for n in jobs(plan_of(cfg)) if n.startswith("validation-no-gpu")) == ["validation-no-gpu-gpu-dev-1"]
    cfg["validation"]["coverage"] = "full"
    assert sorted(n for n in jobs(plan_of(cfg)) if n.startswith("validation-no-gpu")) == [
        "validation-no-gpu-gpu-dev-1", "validation-no-gpu-gpu-dev-2"
    ]


def test_a_full_coverage_run_adds_two_jobs_per_node():
    def count(n: int, mig: int = 0) -> int:
        cfg: dict[str, Any] = {"nodes": [{"name": f"gpu-{i}", "gpu": {"model": "H100-80GB", "count": 2}} for i in range(n)]}
        cfg["sharing"] = {"mode": "time-slicing", "replicas": 4}
        cfg["mig"] = {"strategy": "mixed"}
        cfg["validation"] = {"coverage": "full"}
        for node in cfg["nodes"][:mig]:
            node["mig"] = "all-3g.40gb"
        return len([r for r in plan_of(cfg).resources if r.parent == "validation"])

    # coverage full (an acceptance run): per shared node one sharing-pods Job (on a shared MIG node
    # the same Job proves the MIG device) and one no-GPU Job (each host's own toolkit config, W5);
    # the cluster's mig-state Job and its table once.
    assert count(6) - count(3) == 3 * 2
    assert count(6, mig=3) - count(3, mig=3) == 3 * 2
    assert count(6, mig=3) - count(6) == 2


def test_dev_jobs_request_the_right_gpu_resource(dev_plan):
    found = jobs(dev_plan)
    smoke = container(found["validation-cuda-smoke"])["resources"]
    assert smoke["limits"]["nvidia.com/gpu"] == "1" and smoke["requests"]["nvidia.com/gpu"] == "1"
    capacity = found["validation-sharing-capacity"]
    # One Job reads every shared node and expects the capacity table (`make plan`).
    assert table_of(dev_plan, capacity) == "gpu-dev-1 nvidia.com/gpu=8\ngpu-dev-2 nvidia.com/gpu=4\n"
    assert container(capacity)["command"][-1].endswith("/node-capacity.sh")
    assert not any(k.startswith("nvidia.com/") for k in container(capacity)["resources"]["limits"])
    for node, gpus in (("gpu-dev-1", 2), ("gpu-dev-2", 1)):
        pods = found[f"validation-sharing-pods-{node}"]
        spec = pods.inputs["spec"]
        # R x G pods, all at once, each with one replica of a shared GPU.
        assert spec["completionMode"] == "Indexed"
        assert spec["completions"] == spec["parallelism"] == 4 * gpus
        assert container(pods)["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert env(pods)["PEERS"] == str(4 * gpus)
        assert "EXPECTED_MIG_DEVICES" not in env(pods)
        terms = spec["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert terms["nodeSelectorTerms"] == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
        # The pods start only once every shared node advertises the replicas and has them free.
        assert pods.depends_on == ["validation-free-capacity", "validation-sharing-barrier"]
        assert "validation-sharing-capacity" in found["validation-free-capacity"].depends_on
    for name in ("validation-dcgm-metrics",):
        assert not any(k.startswith("nvidia.com/") for k in container(found[name])["resources"]["limits"])


def test_sharing_pods_find_each_other_through_one_headless_service(dev_plan):
    service = dev_plan.by_name("validation-sharing-barrier")
    assert service.inputs["metadata"]["name"] == "sharing-barrier"
    assert service.inputs["spec"]["clusterIP"] == "None"
    assert service.inputs["spec"]["publishNotReadyAddresses"] is True
    assert service.inputs["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
    selector = service.inputs["spec"]["selector"]
    assert [r.name for r in dev_plan.of_type("kubernetes:core/v1:Service") if r.parent == "validation"] == [service.name]
    for node in ("gpu-dev-1", "gpu-dev-2"):
        pods = jobs(dev_plan)[f"validation-sharing-pods-{node}"]
        job_name_ = pods.inputs["metadata"]["name"]
        template = pods.inputs["spec"]["template"]
        assert service.name in pods.depends_on
        assert selector.items() <= template["metadata"]["labels"].items()
        assert template["spec"]["subdomain"] == "sharing-barrier"
        # Indexed pods get the hostname <job>-<index>: peers resolve as <job>-<i>.sharing-barrier.
        assert env(pods)["PEER_PREFIX"] == job_name_ and env(pods)["PEER_DOMAIN"] == "sharing-barrier"
        assert DNS_LABEL.match(f"{job_name_}-{pods.inputs['spec']['completions'] - 1}")
    # Only sharing pods carry the barrier label.
    others = [j for n, j in jobs(dev_plan).items() if "sharing-pods" not in n]
    assert all(not selector.items() <= j.inputs["spec"]["template"]["metadata"]["labels"].items() for j in others)


def test_every_job_is_bounded_and_locked_down(dev_plan):
    s = load_settings(dev_config())
    for job in jobs(dev_plan).values():
        spec = job.inputs["spec"]
        assert spec["backoffLimit"] in (0, 1)
        assert spec["activeDeadlineSeconds"] == s.validation.timeout_seconds
        assert spec["ttlSecondsAfterFinished"] == s.validation.ttl_seconds_after_finished
        pod = spec["template"]["spec"]
        assert pod["restartPolicy"] == "Never"
        assert {"key": "nvidia.com/gpu", "operator": "Exists"} in pod["tolerations"]
        c = container(job)
        # What the container runs with: its own securityContext over the pod's.
        sc = {**pod["securityContext"], **c["securityContext"]}
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0 and sc["runAsGroup"] != 0
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert sc["readOnlyRootFilesystem"] is True
        # kubectl caches under $HOME: only its containers get one, on the writable /tmp.
        assert ("HOME" in env(job)) == (c["image"] == s.validation.images.kubectl)
        assert env(job).get("HOME", "/tmp") == "/tmp"
        # The payload's FAIL line becomes the termination message Pulumi prints with the failed Job.
        assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
        assert {"cpu", "memory"} <= set(c["resources"]["requests"]) and {"cpu", "memory"} <= set(c["resources"]["limits"])
        assert c["image"] in {s.validation.images.cuda, s.validation.images.toolbox, s.validation.images.kubectl}
        # Pulumi waits for the Job a minute longer than Kubernetes lets it run.
        assert job.options["customTimeouts"] == {
            "create": f"{s.validation.timeout_seconds + 60}s",
            "update": f"{s.validation.timeout_seconds + 60}s",
        }
        # Any change or init error replaces the Job (an update would read a live Job its TTL may
        # have removed), the old one deleted first: an init-error replacement keeps the name.
        assert job.options["replaceOnChanges"] == ["*"]
        assert job.options["deleteBeforeReplace"] is True
        assert job.inputs["metadata"]["annotations"]["pulumi.com/replaceUnready"] == "true"
        assert "pulumi.com/skipAwait" not in job.inputs["metadata"]["annotations"]


def test_images_come_from_settings():
    cfg = dev_config()
    cfg["validation"] = {
        "images": {
            "cuda": "registry.internal/cuda-sample:vectoradd",
            "toolbox": "registry.internal/cuda:base",
            "kubectl": "registry.internal/kubectl:v1.31.4",
        }
    }
    # images of the stack's own: each declared with what it carries (config/job-images.yaml knows none)
    cfg["images"] = {"jobImages": {
        "registry.internal/cuda-sample:vectoradd": {"shell": "bash", "programs": {"vectorAdd": "/cuda-samples/vectorAdd"}},
        "registry.internal/cuda:base": {"shell": "bash"},
        "registry.internal/kubectl:v1.31.4": {"shell": "busybox", "programs": {"kubectl": "/bin/kubectl"}, "kubectl": "1.31"},
    }}
    found = jobs(plan_of(cfg))
    assert container(found["validation-cuda-smoke"])["image"] == "registry.internal/cuda-sample:vectoradd"
    assert container(found["validation-sharing-pods-gpu-dev-1"])["image"] == "registry.internal/cuda-sample:vectoradd"
    assert container(found["validation-sharing-capacity"])["image"] == "registry.internal/kubectl:v1.31.4"
    assert container(found["validation-dcgm-metrics"])["image"] == "registry.internal/cuda:base"


def unmirrored(image: str) -> str:
    """The known image a mirrored name is a copy of (`<mirror>/nvidia/gpu-operator:v25.10.1`)."""
    from gpu_stack.config.job_images import table

    return next((name for name in table() if image.endswith("/" + name.split("/", 1)[1])), image)


def test_each_job_starts_the_shell_its_image_has():
    """The API Jobs start `sh` (the operator image has busybox's, no bash), the CUDA images' payloads
    `bash`; every image a committed stack's Jobs name has its row, and each row has what its Job starts."""
    from gpu_stack.config.job_images import contents_of

    for stack in ("dev", "staging", "prod"):
        for job in plan_stack_file(stack).of_type(JOB):
            c = container(job)
            shell = c["command"][0]
            row = contents_of(c["image"]) or contents_of(unmirrored(c["image"]))
            assert row is not None, (stack, c["image"])
            assert row.has(shell), (stack, job, c["image"], shell)
            if c["image"].endswith("gpu-operator:v25.10.1"):
                assert shell == "sh"


def test_a_job_image_without_a_row_is_refused_naming_the_setting_to_give():
    cfg = dev_config()
    cfg["mig"] = {**cfg.get("mig", {}), "rollout": {"image": "registry.internal/tools:1.0"}}
    assert_refused(cfg, 'gpu-stack:mig.rollout.image = \'registry.internal/tools:1.0\': is no image whose contents gpu-stack knows')
    assert_refused(cfg, 'images.jobImages["registry.internal/tools:1.0"]')
    cfg = dev_config()
    cfg["validation"] = {"images": {"kubectl": "registry.k8s.io/kubectl:v1.34.4"}}
    assert_refused(cfg, "gpu-stack:validation.images.kubectl = 'registry.k8s.io/kubectl:v1.34.4': lacks sh")
    cfg = dev_config()
    cfg["validation"] = {"images": {"toolbox": "nvcr.io/nvidia/gpu-operator:v25.10.1"}}
    assert_refused(cfg, "gpu-stack:validation.images.toolbox = 'nvcr.io/nvidia/gpu-operator:v25.10.1': lacks bash")


def test_the_jobs_image_does_not_follow_the_chart_version():
    """What the operator image holds changes between releases (26.3.0 drops kubectl): the Jobs'
    default image is a literal with a row, not derived from the chart's version."""
    from gpu_stack.config import types
    from gpu_stack.config.job_images import table

    assert types.KUBECTL_IMAGE == "nvcr.io/nvidia/gpu-operator:v25.10.1"
    row = table()[types.KUBECTL_IMAGE]
    assert (row.shell, row.kubectl, row.user, dict(row.programs)["kubectl"]) == ("busybox", "1.34", (65532, 65532), "/usr/bin/kubectl")


def test_namespace_is_restricted_and_only_node_readers_get_an_api_token(dev_plan):
    ns = dev_plan.by_name("validation-namespace").inputs["metadata"]
    assert ns["name"] == "gpu-validation"
    for mode in ("enforce", "audit", "warn"):
        assert ns["labels"][f"pod-security.kubernetes.io/{mode}"] == "restricted"
    role = dev_plan.by_name("validation-node-reader-role").inputs
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"], "resourceNames": ["gpu-dev-1", "gpu-dev-2"]},
        # The free-capacity gate sums what the pods on a node request.
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    binding = dev_plan.by_name("validation-node-reader-binding").inputs
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "node-reader", "namespace": "gpu-validation"}]
    for job in jobs(dev_plan).values():
        pod = job.inputs["spec"]["template"]["spec"]
        if job.name in ("validation-sharing-capacity", "validation-mig-state", "validation-free-capacity"):
            assert pod["serviceAccountName"] == "node-reader" and pod["automountServiceAccountToken"] is True
            assert "validation-node-reader-binding" in job.depends_on
        else:
            assert "serviceAccountName" not in pod and pod["automountServiceAccountToken"] is False


def test_jobs_mount_exactly_the_payloads_in_the_configmap(dev_plan):
    cm = dev_plan.by_name("validation-payloads").inputs
    assert cm["data"] == payload_data()
    assert cm["immutable"] is True
    for job in jobs(dev_plan).values():
        pod = job.inputs["spec"]["template"]["spec"]
        volume = next(v for v in pod["volumes"] if v["name"] == "payloads")
        assert volume["configMap"]["name"] == cm["metadata"]["name"]
        script = container(job)["command"][-1].rsplit("/", 1)[-1]
        # the payload's own dialect: #!/bin/sh ones start under sh (the operator image has no bash)
        shell = "sh" if cm["data"][script].startswith("#!/bin/sh\n") else "bash"
        assert container(job)["command"][0] == shell and script in cm["data"]


def test_every_validation_manifest_is_valid_for_the_target_kubernetes(dev_plan, mig_plan):
    version = schema_version(load_settings(dev_config()).kubernetes.version)
    seen = set()
    for plan in (dev_plan, mig_plan):
        for resource in validation_resources(plan):
            seen.add(resource.type)
            kubernetes_validate.validate(resource.inputs, version, strict=True)
    assert seen == VALIDATION_TYPES


@pytest.mark.parametrize("minor", ["1.29", "1.34"])
def test_manifests_follow_the_configured_kubernetes_version(minor):
    cfg = dev_config()
    cfg["kubernetes"]["version"] = minor
    plan = plan_of(cfg)
    for resource in validation_resources(plan):
        kubernetes_validate.validate(resource.inputs, schema_version(minor), strict=True)


# --------------------------------------------------------------------------- MIG and DCGM
def test_mig_node_waits_for_success_then_requests_its_mig_resource(mig_plan):
    found = jobs(mig_plan)
    state, device = found["validation-mig-state"], found["validation-mig-device-gpu-mig-1"]
    # One cluster Job waits for every MIG node's state (and fails at once on `failed`); the pod
    # requesting the MIG resource (unschedulable until it is advertised) only comes after it.
    assert table_of(mig_plan, state) == "gpu-mig-1 halves\n"
    assert container(state)["command"][-1].endswith("/mig-state.sh")
    assert device.depends_on == ["validation-free-capacity"]
    assert "validation-mig-state" in found["validation-free-capacity"].depends_on
    assert container(device)["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == "1"
    assert env(device)["EXPECTED_MIG_DEVICES"] == "1"
    assert "gpu-mig-1" in mig_plan.by_name("validation-node-reader-role").inputs["rules"][0]["resourceNames"]
    # A node opted out of sharing gets no sharing Job; MIG GPUs are not counted for DCGM utilisation.
    assert "validation-sharing-pods-gpu-mig-1" not in found
    # ...but its advertised capacity is read like every node's: 2 GPUs x 2 instances.
    assert "gpu-mig-1 nvidia.com/mig-3g.40gb=4\n" in table_of(mig_plan, found["validation-sharing-capacity"])
    assert env(found["validation-dcgm-metrics"])["EXPECTED_GPUS"] == "3"


def test_a_shared_mig_node_proves_its_mig_device_through_its_sharing_pods(mig_config):
    cfg = copy.deepcopy(mig_config)
    cfg["nodes"][-1]["sharing"] = "mig-shared"
    cfg["validation"] = {"coverage": "full"}
    cfg["sharing"]["profiles"] = {"mig-shared": {"mode": "time-slicing", "resources": [{"name": "nvidia.com/mig-3g.40gb", "replicas": 2}]}}
    plan = plan_of(cfg)
    found = jobs(plan)
    pods = found["validation-sharing-pods-gpu-mig-1"]
    assert "validation-mig-device-gpu-mig-1" not in found
    assert container(pods)["resources"]["limits"]["nvidia.com/mig-3g.40gb"] == "1"
    assert pods.inputs["spec"]["completions"] == 2 * 2 * 2  # 2 GPUs x 2 instances x 2 replicas
    assert env(pods)["EXPECTED_MIG_DEVICES"] == "1"
    assert "validation-free-capacity" in pods.depends_on
    assert set(found["validation-free-capacity"].depends_on) >= {"validation-mig-state", "validation-sharing-capacity"}
    assert "gpu-mig-1 nvidia.com/mig-3g.40gb=8\n" in table_of(plan, found["validation-sharing-capacity"])


def test_mig_edit_reruns_only_the_mig_jobs(mig_config, mig_plan):
    cfg = copy.deepcopy(mig_config)
    cfg["mig"]["profiles"]["halves"] = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]
    edited = plan_of(cfg)
    # The node's advertised MIG capacity changes too: the capacity Job reads it again.
    assert rerun(mig_plan, edited) == {
        "validation-mig-state", "validation-mig-device-gpu-mig-1", "validation-free-capacity", "validation-sharing-capacity",
    }
    assert container(jobs(edited)["validation-mig-device-gpu-mig-1"])["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"


def test_dcgm_job_scrapes_the_operators_exporter_service(dev_plan):
    e = env(jobs(dev_plan)["validation-dcgm-metrics"])
    assert e["METRICS_HOST"] == "nvidia-dcgm-exporter.gpu-operator.svc"
    assert e["METRICS_PORT"] == "9400" and e["METRICS_PATH"] == "/metrics"
    assert e["METRIC"] == "DCGM_FI_DEV_GPU_UTIL"
    assert e["EXPECTED_GPUS"] == "3"


def test_no_dcgm_job_without_the_exporter():
    cfg = set_path(dev_config(), "dcgmExporter.enabled", False)
    set_path(cfg, "dcgmExporter.serviceMonitor.enabled", False)
    assert "validation-dcgm-metrics" not in jobs(plan_of(cfg))


def test_validation_can_be_switched_off():
    cfg = set_path(dev_config(), "validation.enabled", False)
    plan = plan_of(cfg)
    assert not [r for r in plan.resources if r.parent == "validation" or r.name == "validation"]
    # The one Job left sets the node labels; it validates nothing.
    assert [j.name for j in plan.of_type(JOB)] == ["gpu-operator-node-labels-job"]
    assert plan.outputs["validationJobs"] == {}


# --------------------------------------------------------------------------- re-runs
def job_names(plan) -> dict[str, str]:
    return {name: r.inputs["metadata"]["name"] for name, r in jobs(plan).items()}


def rerun(before, after) -> set[str]:
    """Jobs whose Kubernetes object is replaced (a new name, or any other input changed)."""
    a, b = jobs(before), jobs(after)
    assert set(a) == set(b)
    return {n for n in a if a[n].inputs != b[n].inputs}


def test_replicas_edit_reruns_only_the_sharing_jobs(dev_plan):
    edited = plan_of(set_path(dev_config(), "sharing.replicas", 8))
    changed = rerun(dev_plan, edited)
    assert changed == {
        "validation-sharing-capacity",
        "validation-free-capacity",
        "validation-sharing-pods-gpu-dev-1",
        "validation-sharing-pods-gpu-dev-2",
    }
    before, after = job_names(dev_plan), job_names(edited)
    assert all(before[n] != after[n] for n in changed)  # renamed: a new Job runs
    assert jobs(edited)["validation-sharing-pods-gpu-dev-1"].inputs["spec"]["completions"] == 16
    assert table_of(edited, jobs(edited)["validation-sharing-capacity"]) == "gpu-dev-1 nvidia.com/gpu=16\ngpu-dev-2 nvidia.com/gpu=8\n"
    # Besides the Jobs only the capacity table changes; the barrier Service and the RBAC stay.
    others = {r.name: r.inputs for r in validation_resources(dev_plan) if r.type != JOB}
    edited_others = {r.name: r.inputs for r in validation_resources(edited) if r.type != JOB}
    assert {n for n in others if others[n] != edited_others[n]} == {
        "validation-sharing-capacity-table",
        "validation-free-capacity-table",
    }


def test_dcgm_edit_reruns_only_the_dcgm_job(dev_plan):
    cfg = dev_config()
    set_path(cfg, "dcgmExporter.metrics", "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization.\nDCGM_FI_DEV_FB_USED, gauge, Framebuffer used.\n")
    assert rerun(dev_plan, plan_of(cfg)) == {"validation-dcgm-metrics"}
    cfg = set_path(dev_config(), "dcgmExporter.serviceMonitor.interval", "30s")
    assert rerun(dev_plan, plan_of(cfg)) == {"validation-dcgm-metrics"}


def test_one_nodes_gpu_count_reruns_only_what_counts_its_gpus(dev_plan):
    cfg = set_path(dev_config(), "nodes[1].gpu.count", 2)
    assert rerun(dev_plan, plan_of(cfg)) == {
        "validation-sharing-capacity",
        "validation-free-capacity",
        "validation-sharing-pods-gpu-dev-2",
        "validation-dcgm-metrics",
    }


def test_unrelated_edits_rerun_nothing(dev_plan):
    cfg = dev_config()
    cfg["operator"] = {"timeoutSeconds": 1200}
    set_path(cfg, "dcgmExporter.serviceMonitor.interval", "15s")  # same value, spelled again
    assert rerun(dev_plan, plan_of(cfg)) == set()


def test_job_names_hash_exactly_what_they_validate():
    a = {"check": "sharing", "node": "n1", "capacity": {"nvidia.com/gpu": 8}}
    assert job_name("sharing-pods", a, "n1") == job_name("sharing-pods", copy.deepcopy(a), "n1")
    b = dict(a, capacity={"nvidia.com/gpu": 16})
    assert job_name("sharing-pods", a, "n1") != job_name("sharing-pods", b, "n1")


def test_long_dotted_node_names_still_give_valid_job_and_pod_names():
    node = "gpu-node-with-a-very-long-name.rack-42.datacenter.example.internal"
    cfg = {
        "nodes": [{"name": node, "gpu": {"model": "L4", "count": 16}}],
        "sharing": {"mode": "time-slicing", "replicas": 64},
        "validation": {"coverage": "full"},
    }
    plan = derive(load_settings(cfg)).validation
    for job in plan.jobs:
        name = job.manifest["metadata"]["name"]
        assert DNS_LABEL.match(name), name
        if job.check == "sharing-pods":
            # Capped: a node cannot run 1024 pods; the capacity check still expects all of them.
            assert job.manifest["spec"]["completions"] == 64
            assert DNS_LABEL.match(f"{name}-{job.manifest['spec']['completions'] - 1}")
        if job.check == "sharing-capacity":
            assert job.table["data"] == {"nodes": f"{node} nvidia.com/gpu=1024\n"}
            assert job.table["metadata"]["name"] == name
    assert node_slug("a.b") == "a-b"


def test_capacity_check_expects_the_capacity_table():
    cfg = dev_config()
    cfg["sharing"]["renameByDefault"] = True
    s = load_settings(cfg)
    plan = derive(s).validation
    (capacity,) = [j for j in plan.jobs if j.check == "sharing-capacity"]
    lines = [f"{n.name} " + " ".join(f"{r}={c}" for r, c in sorted(node_capacity(s, n).items())) for n in s.nodes]
    assert capacity.table["data"]["nodes"] == "".join(f"{line}\n" for line in lines)
    assert all(" nvidia.com/gpu.shared=" in line for line in lines)
    for job in plan.jobs:
        if job.check == "sharing-pods":
            assert job.gpu_resource == "nvidia.com/gpu.shared"
    role = plan.cluster_role["rules"][0]
    assert role["verbs"] == ["get"] and role["resourceNames"] == ["gpu-dev-1", "gpu-dev-2"]


def test_payloads_give_up_before_kubernetes_does():
    for timeout in (60, 600, 7200):
        assert 30 <= payload_deadline(timeout) < timeout


def test_dcgm_job_checks_a_metric_the_custom_list_serves(dev_plan):
    cfg = dev_config()
    cfg.setdefault("dcgmExporter", {})["metrics"] = "# memory only\nDCGM_FI_DEV_FB_USED, gauge, Framebuffer used.\n"
    assert env(jobs(plan_of(cfg))["validation-dcgm-metrics"])["METRIC"] == "DCGM_FI_DEV_FB_USED"
    cfg["dcgmExporter"]["metrics"] = "DCGM_FI_DEV_FB_USED, gauge, Framebuffer used.\nDCGM_FI_DEV_GPU_UTIL, gauge, Utilization.\n"
    assert env(jobs(plan_of(cfg))["validation-dcgm-metrics"])["METRIC"] == "DCGM_FI_DEV_GPU_UTIL"


def test_validation_namespace_cannot_be_the_operators():
    cfg = set_path(dev_config(), "validation.namespace", "gpu-operator")
    assert_refused(cfg, "gpu-stack:validation.namespace = 'gpu-operator': must differ from operator.namespace")
