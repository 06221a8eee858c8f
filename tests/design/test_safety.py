"""Safety of what the stack applies, over every stack file: pod security, least privilege, resource
limits, Helm's rollback on failure, and `protect` where a delete would hurt."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpu_stack.config.stack_files import list_stacks

from ..helpers import PROJECT_DIR, dev_config, plan_of, plan_stack_file

NAMESPACE = "kubernetes:core/v1:Namespace"
RELEASE = "kubernetes:helm.sh/v3:Release"
JOB = "kubernetes:batch/v1:Job"
POD_CARRIERS = {
    JOB: ("spec", "template", "spec"),
    "kubernetes:core/v1:Pod": ("spec",),
    "kubernetes:apps/v1:Deployment": ("spec", "template", "spec"),
    "kubernetes:apps/v1:DaemonSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:StatefulSet": ("spec", "template", "spec"),
}
RBAC = "kubernetes:rbac.authorization.k8s.io/v1:"
PSS_MODES = ("enforce", "audit", "warn")
STACKS = list_stacks(PROJECT_DIR)


@pytest.fixture(scope="module", params=STACKS)
def plan(request):
    return plan_stack_file(request.param)


def _operator_namespace(plan) -> str:
    return plan.outputs["operatorNamespace"]


def _namespaces(plan) -> dict[str, dict[str, str]]:
    return {r.inputs["metadata"]["name"]: r.inputs["metadata"].get("labels", {}) for r in plan.of_type(NAMESPACE)}


def _pod_specs(plan) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """(resource name, namespace, pod spec) of everything that runs pods."""
    for r in plan.resources:
        path = POD_CARRIERS.get(r.type)
        if path is None:
            continue
        spec: Any = r.inputs
        for part in path:
            spec = spec[part]
        yield r.name, r.inputs["metadata"]["namespace"], spec


def test_stacks_are_checked():
    assert {"dev", "prod"} <= set(STACKS)


# --------------------------------------------------------------------------- pod security
def test_every_namespace_has_pod_security_labels_and_only_the_operators_is_privileged(plan):
    namespaces = _namespaces(plan)
    assert _operator_namespace(plan) in namespaces
    for name, labels in namespaces.items():
        levels = {labels.get(f"pod-security.kubernetes.io/{mode}") for mode in PSS_MODES}
        assert len(levels) == 1 and None not in levels, f"namespace {name}: {labels}"
        (level,) = levels
        if name == _operator_namespace(plan):
            assert level == "privileged"  # driver, toolkit and device plugin pods need the host
        else:
            assert level == "restricted", f"namespace {name} is {level}"


RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What the `restricted` Pod Security Standard (Kubernetes 1.25+) refuses in a pod spec."""
    out = []
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key):
            out.append(key)
    for v in pod.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            out.append(f"volume {v['name']}: {kinds}")
    pod_sc = pod.get("securityContext", {})
    if pod_sc.get("runAsUser") == 0:
        out.append("pod runAsUser 0")
    for c in [*pod.get("initContainers", []), *pod["containers"]]:
        sc = c.get("securityContext", {})
        name = c["name"]
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation must be false")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            out.append(f"{name}: must drop ALL capabilities")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            out.append(f"{name}: adds {caps['add']}")
        if not (sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))):
            out.append(f"{name}: runAsNonRoot")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            out.append(f"{name}: runAsUser 0")
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: seccompProfile {seccomp}")
        for port in c.get("ports", []):
            if port.get("hostPort"):
                out.append(f"{name}: hostPort")
    return out


def test_every_pod_the_stack_runs_is_admitted_by_its_namespace(plan):
    namespaces = _namespaces(plan)
    pods = list(_pod_specs(plan))
    assert pods, "the stack validates itself with Jobs"
    for name, namespace, pod in pods:
        assert namespace in namespaces, f"{name} runs in {namespace}, a namespace the stack does not label"
        if namespaces[namespace].get("pod-security.kubernetes.io/enforce") == "restricted":
            assert restricted_violations(pod) == [], name


def test_the_restricted_check_refuses_what_it_should():
    pod = {"containers": [{"name": "c", "securityContext": {"privileged": True}}], "hostNetwork": True,
           "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}
    found = restricted_violations(pod)
    assert "hostNetwork" in found and "c: privileged" in found and any("hostPath" in f for f in found)


# --------------------------------------------------------------------------- resource limits
def test_every_container_has_cpu_and_memory_requests_and_limits(plan):
    for name, _, pod in _pod_specs(plan):
        for c in [*pod.get("initContainers", []), *pod["containers"]]:
            resources = c.get("resources", {})
            for kind in ("requests", "limits"):
                assert {"cpu", "memory"} <= set(resources.get(kind, {})), f"{name}/{c['name']}: {kind}"
            gpus = {k: v for k, v in resources["limits"].items() if k.startswith("nvidia.com/")}
            # Extended resources cannot be overcommitted: a GPU request equals its limit.
            assert all(resources["requests"].get(k) == v for k, v in gpus.items()), f"{name}/{c['name']}"
        for v in pod.get("volumes", []):
            if "emptyDir" in v:
                assert v["emptyDir"].get("sizeLimit"), f"{name}: emptyDir {v['name']} without sizeLimit"


def test_every_job_ends(plan):
    for r in plan.of_type(JOB):
        spec = r.inputs["spec"]
        assert spec["activeDeadlineSeconds"] > 0, r.name
        assert spec["backoffLimit"] <= 2, r.name
        assert spec["template"]["spec"]["restartPolicy"] == "Never", r.name
        assert spec.get("ttlSecondsAfterFinished", 0) > 0, r.name


# --------------------------------------------------------------------------- RBAC
def test_rbac_is_read_only_named_and_bound_to_the_stacks_own_service_account(plan):
    roles = [r for r in plan.resources if r.type in (RBAC + "ClusterRole", RBAC + "Role")]
    bindings = [r for r in plan.resources if r.type in (RBAC + "ClusterRoleBinding", RBAC + "RoleBinding")]
    accounts = {(r.inputs["metadata"]["namespace"], r.inputs["metadata"]["name"]) for r in plan.of_type("kubernetes:core/v1:ServiceAccount")}
    role_names = {r.inputs["metadata"]["name"] for r in roles}
    # The only writes: the MIG rollout's (cordon/label its named nodes, evict pods, restart the MIG
    # manager pod in the operator's namespace: a Role, not a ClusterRole) and the label Job's
    # (label the stack's nodes, by name).
    rollout_writes = {
        (RBAC + "ClusterRole", "nodes"): {"patch"},
        (RBAC + "ClusterRole", "pods/eviction"): {"create"},
        (RBAC + "Role", "pods"): {"delete"},
    }
    for role in roles:
        for rule in role.inputs["rules"]:
            writes = set(rule["verbs"]) - {"get", "list", "watch"}
            if role.parent == "mig-rollout":
                for resource in rule["resources"]:
                    assert writes <= rollout_writes.get((role.type, resource), set()), (role.name, rule)
            elif role.parent == "gpu-operator-node-labels":
                assert role.type == RBAC + "ClusterRole" and rule["resources"] == ["nodes"] and writes == {"patch"}, (role.name, rule)
            else:
                assert not writes, (role.name, rule)
            for key in ("verbs", "resources", "apiGroups", "resourceNames"):
                assert "*" not in rule.get(key, []), (role.name, rule)
            assert not {"secrets", "pods/exec", "nodes/proxy"} & set(rule["resources"]), (role.name, rule)
            if "nodes" in rule["resources"]:
                # Only the stack's own GPU nodes, by name.
                assert set(rule["resourceNames"]) <= set(plan.outputs["nodeLabels"]) | {row["node"] for row in plan.capacity}
    for binding in bindings:
        assert binding.inputs["roleRef"]["name"] in role_names, "binds only roles the stack defines (never cluster-admin)"
        for subject in binding.inputs["subjects"]:
            assert subject["kind"] == "ServiceAccount"
            assert (subject["namespace"], subject["name"]) in accounts


def test_only_pods_that_read_the_api_get_a_token(plan):
    for r in plan.of_type("kubernetes:core/v1:ServiceAccount"):
        assert r.inputs.get("automountServiceAccountToken") is False, r.name
    for name, _, pod in _pod_specs(plan):
        if pod.get("automountServiceAccountToken") is not False:
            # A token is mounted: it must be the read-only node reader's, never the default account.
            assert pod.get("serviceAccountName") not in (None, "default"), name


# --------------------------------------------------------------------------- Helm and protect
def test_the_release_rolls_back_on_failure(plan):
    (release,) = plan.of_type(RELEASE)
    inputs = release.inputs
    assert inputs["atomic"] is True and inputs["cleanupOnFail"] is True
    assert inputs["createNamespace"] is False
    assert inputs["timeout"] >= 600
    # helm.v3.Release ignores customTimeouts (its `timeout` input rules): none are set.
    assert "customTimeouts" not in release.options


def test_prod_protects_the_operator_namespace_and_release():
    plan = plan_stack_file("prod")
    namespace = next(r for r in plan.of_type(NAMESPACE) if r.inputs["metadata"]["name"] == _operator_namespace(plan))
    (release,) = plan.of_type(RELEASE)
    assert namespace.options.get("protect") is True
    assert release.options.get("protect") is True


def test_protect_follows_operator_protect():
    cfg = dev_config()
    plain = plan_of(cfg)
    cfg["operator"] = {"protect": True}
    protected = plan_of(cfg)
    for plan, expected in ((plain, None), (protected, True)):
        ns = next(r for r in plan.of_type(NAMESPACE) if r.inputs["metadata"]["name"] == "gpu-operator")
        (release,) = plan.of_type(RELEASE)
        assert ns.options.get("protect") is expected and release.options.get("protect") is expected
    # Nothing else is protected: validation and ConfigMaps stay disposable.
    others = [r.name for r in protected.resources if r.options.get("protect") and r.type not in (NAMESPACE, RELEASE)]
    assert others == []


# --------------------------------------------------------------------------- advisories
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f"  # a 32-byte key blob


def test_unpinned_ssh_host_keys_are_a_warning_in_the_plan():
    cfg = dev_config()
    plan = plan_of(cfg)
    (warning,) = [w for w in plan.warnings if "SSH host keys are not pinned" in w]
    assert "nodes[0] (gpu-dev-1), nodes[1] (gpu-dev-2)" in warning
    cfg["nodes"][0]["hostKey"] = HOST_KEY
    (warning,) = [w for w in plan_of(cfg).warnings if "SSH host keys are not pinned" in w]
    assert "nodes[1] (gpu-dev-2)" in warning and "gpu-dev-1" not in warning
    cfg["nodes"][1]["hostKey"] = HOST_KEY
    pinned = plan_of(cfg)
    assert not [w for w in pinned.warnings if "SSH host keys" in w]


def test_no_ssh_warning_when_nothing_is_prepared_over_ssh():
    cfg = dev_config()
    cfg["driver"] = {"placement": "operator"}
    cfg["toolkit"] = {"placement": "operator"}
    assert not [w for w in plan_of(cfg).warnings if "SSH" in w]
