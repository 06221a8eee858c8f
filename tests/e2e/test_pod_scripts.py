"""The scripts that run inside pods and talk to the API (the free-capacity gate, the node-capacity
check, the MIG rollout) run here with the toolchain's real `kubectl` against the real API server,
outside a pod (simulated pods run no code), under the real busybox as on the GPU Operator's
image, with the MIG manager stand-in answering the label
protocol from its ClusterPolicy-named ConfigMap, its log served to `kubectl logs` by kwok."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
import yaml

from sandbox.cluster import Cluster
from sandbox.gpu_nodes import MIG_CONFIG, MIG_STATE, Hardware, NodeAgents, node_manifest
from sandbox.harness import REFERENCE
from sandbox.toolchain import PROJECT_DIR

from ..busybox_image import image_bin, run_sh

SCRIPTS = PROJECT_DIR / "config"
NS = "gpu-operator"
PARTED = """version: v1
mig-configs:
  all-disabled:
  - devices: all
    mig-enabled: false
  inference:
  - devices: all
    mig-enabled: true
    mig-devices:
      1g.10gb: 2
      3g.40gb: 1
"""
REQUIRED_POLICY_FIELDS = ("daemonsets", "dcgm", "dcgmExporter", "driver", "gfd", "nodeStatusExporter", "operator", "toolkit")
"""What the ClusterPolicy CRD requires (the chart renders all of them)."""
HARDWARE = [Hardware("mig-1", "A100-80GB", 2), Hardware("mig-2", "A100-80GB", 2), Hardware("mig-3", "A100-80GB", 2),
            Hardware("plain-1", "L40S", 4)]


@pytest.fixture(scope="module")
def cluster(tools, e2e_tmp):
    c = Cluster(name="gs-scripts", workdir=e2e_tmp / "scripts", tools=tools, context="scripts")
    try:
        c.start()
        c.apply((REFERENCE / "gpu-operator-v25.10.1" / "crd-clusterpolicies.yaml").read_text())
        c.kubectl("create", "namespace", NS)
        for hw in HARDWARE:
            c.kubectl("create", "-f", "-", input=yaml.safe_dump(node_manifest(hw)))
        c.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "mig-parted-config", "namespace": NS},
                 "data": {"config.yaml": PARTED}})
        c.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plugin-config", "namespace": NS},
                 "data": {"default": "version: v1\nflags:\n  migStrategy: mixed\n"}})
        c.apply({"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
                 "spec": {**{k: {} for k in REQUIRED_POLICY_FIELDS}, "mig": {"strategy": "mixed"},
                          "migManager": {"enabled": True, "config": {"name": "mig-parted-config", "default": "all-disabled"}},
                          "devicePlugin": {"enabled": True, "config": {"name": "plugin-config", "default": "default"}}}})
        agents = NodeAgents(c, HARDWARE, interval=0.5)
        agents.start()
        c.agents = agents  # type: ignore[attr-defined]
        wait_for(lambda: allocatable(c, "plain-1").get("nvidia.com/gpu") == "4", "the device plugin stand-in")
        yield c
    finally:
        if getattr(c, "agents", None):
            c.agents.stop()  # type: ignore[attr-defined]
        c.stop()


def wait_for(predicate, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


def allocatable(c: Cluster, node: str) -> dict[str, str]:
    return c.get_json("node", node)["status"].get("allocatable") or {}


def run_script(c: Cluster, script: Path, tmp_path: Path, table: str, **env: str) -> subprocess.CompletedProcess:
    table_file = tmp_path / "table"
    table_file.write_text(table)
    full = {**c.env(), "KUBECTL": str(c.tools["kubectl"]), "TERMINATION_LOG": str(tmp_path / "termination-log"),
            "MIG_CONFIGMAP": "mig-parted-config", "MANAGER_TIMEOUT_SECONDS": "60", **env}
    full.setdefault("EXPECTED_FILE", str(table_file))
    full.setdefault("NODES_FILE", str(table_file))
    if script.parent.name == "mig-rollout":
        # as its ConfigMap mounts it: the script beside the helpers it sources (config/validation/common.sh)
        from gpu_stack.design.mig_rollout import script_data

        mounted = tmp_path / "rollout"
        mounted.mkdir(exist_ok=True)
        for name, text in script_data(script.name).items():
            (mounted / name).write_text(text)
        script = mounted / script.name
    # as on the operator image: busybox's sh with only its applets and the (toolchain's) kubectl on PATH
    image = image_bin(tmp_path / "image-bin", {"kubectl": Path(c.tools["kubectl"])})
    return run_sh(script, full, image, timeout=180)


def gpu_pod(c: Cluster, name: str, node: str, gpus: int, resource: str = "nvidia.com/gpu") -> None:
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": {"app": name}},
             "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
                                                       "resources": {"limits": {resource: str(gpus)}}}]}})
    wait_for(lambda: c.get_json("pod", name, "-n", "default").get("status", {}).get("phase") == "Running", f"pod {name} Running")


def test_free_capacity_gate_passes_then_fails_naming_the_busy_node(cluster, tmp_path):
    script = SCRIPTS / "validation" / "free-capacity.sh"
    ok = run_script(cluster, script, tmp_path, "plain-1 nvidia.com/gpu=3\n", DEADLINE_SECONDS="0")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    gpu_pod(cluster, "busy", "plain-1", 2)
    try:
        busy = run_script(cluster, script, tmp_path, "plain-1 nvidia.com/gpu=3\n", DEADLINE_SECONDS="0", CHECK_NAME="free-capacity")
    finally:
        cluster.kubectl("delete", "pod", "busy", "-n", "default", "--wait=false")
    assert busy.returncode == 1
    assert "node plain-1 has 2 of 4 nvidia.com/gpu free (2 requested by other pods), the validation sample needs 3" in busy.stdout


def test_node_capacity_check_reads_what_the_plugin_advertises(cluster, tmp_path):
    script = SCRIPTS / "validation" / "node-capacity.sh"
    ok = run_script(cluster, script, tmp_path, "plain-1 nvidia.com/gpu=4\n", DEADLINE_SECONDS="0")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    cluster.agents.missing_gpus["plain-1"] = 1  # a GPU fell off the bus
    try:
        wait_for(lambda: allocatable(cluster, "plain-1").get("nvidia.com/gpu") == "3", "the plugin to advertise 3")
        bad = run_script(cluster, script, tmp_path, "plain-1 nvidia.com/gpu=4\n", DEADLINE_SECONDS="0")
    finally:
        cluster.agents.missing_gpus.clear()
    assert bad.returncode == 1
    assert "node plain-1 advertises 3 nvidia.com/gpu, expected 4" in bad.stdout


def labels(c: Cluster, node: str) -> dict[str, str]:
    return c.get_json("node", node)["metadata"].get("labels") or {}


def test_a_mig_wave_cordons_evicts_relabels_waits_and_uncordons(cluster, tmp_path):
    gpu_pod(cluster, "trainer", "mig-1", 1)
    table = "mig-1 set inference nvidia.com/mig-1g.10gb=4 nvidia.com/mig-3g.40gb=2\n"
    run = run_script(cluster, SCRIPTS / "mig-rollout" / "mig-rollout.sh", tmp_path, table, POLL_SECONDS="1", TIMEOUT_SECONDS="60")
    assert run.returncode == 0, run.stdout + run.stderr
    node = cluster.get_json("node", "mig-1")
    assert node["metadata"]["labels"][MIG_CONFIG] == "inference"
    assert node["metadata"]["labels"][MIG_STATE] == "success"
    assert not node["spec"].get("unschedulable"), "the node is uncordoned after success"
    assert node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "4"
    pods = cluster.get_json("pods", "-n", "default", "--field-selector", "spec.nodeName=mig-1")["items"]
    assert [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")] == [], "the GPU pod was evicted"


def test_a_failed_mig_node_stays_cordoned_and_the_wave_fails_naming_it(cluster, tmp_path):
    cluster.agents.fail_mig_profiles.add("inference")
    try:
        table = "mig-2 set inference nvidia.com/mig-1g.10gb=4 nvidia.com/mig-3g.40gb=2\n"
        run = run_script(cluster, SCRIPTS / "mig-rollout" / "mig-rollout.sh", tmp_path, table, POLL_SECONDS="1", TIMEOUT_SECONDS="60")
    finally:
        cluster.agents.fail_mig_profiles.clear()
    assert run.returncode == 1
    message = (tmp_path / "termination-log").read_text()
    assert message.startswith("FAIL mig-rollout: node mig-2") and "failed" in message, message
    node = cluster.get_json("node", "mig-2")
    assert node["spec"].get("unschedulable") is True, "a failed node stays cordoned"
    assert node["metadata"]["labels"][MIG_STATE] == "failed"


def test_a_mig_manager_that_gives_up_fails_the_wave_at_once_and_the_next_run_restarts_it(cluster, tmp_path):
    # k8s-mig-manager v0.13.1 returns early when an operand pod is slow to go: state pending, the
    # operands paused, its log ending in its error and "Waiting for change ..."
    cluster.agents.give_up["mig-3"] = "pending"
    table = "mig-3 set inference nvidia.com/mig-1g.10gb=4 nvidia.com/mig-3g.40gb=2\n"
    script = SCRIPTS / "mig-rollout" / "mig-rollout.sh"
    failed = run_script(cluster, script, tmp_path, table, POLL_SECONDS="1", TIMEOUT_SECONDS="300")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    message = (tmp_path / "termination-log").read_text()
    # read from the manager's own log through the API server (kwok serves it), not after 300 s
    assert message.startswith("FAIL mig-rollout: node mig-3: its MIG manager gave up applying MIG config 'inference' "
                              "(nvidia.com/mig.config.state=pending, the device plugin, GFD and the exporter left paused): "
                              "Error: failed to wait for pods to be deleted: device-plugin pod did not shutdown"), message
    node = cluster.get_json("node", "mig-3")
    assert node["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "paused-for-mig-change"
    assert "nvidia.com/mig-1g.10gb" not in node["status"]["allocatable"] and node["spec"].get("unschedulable") is True
    again = run_script(cluster, script, tmp_path, table, POLL_SECONDS="1", TIMEOUT_SECONDS="120")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "node mig-3: its MIG manager nvidia-mig-manager-" in again.stdout and "restarting it" in again.stdout
    node = cluster.get_json("node", "mig-3")
    labels = node["metadata"]["labels"]
    assert labels[MIG_STATE] == "success" and labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "4" and not node["spec"].get("unschedulable")


def test_the_api_server_enforces_rbac_so_the_jobs_runs_prove_the_stacks_roles(cluster, tmp_path, tools):
    # Every API-talking pod runs as its own ServiceAccount (sandbox/pod_runner.py); that proves the
    # stack's Roles only if the API server refuses an account the stack granted nothing.
    from sandbox.pod_runner import service_account_kubeconfig

    cluster.kubectl("create", "serviceaccount", "granted-nothing", "-n", NS)
    config = service_account_kubeconfig(cluster, NS, "granted-nothing", tmp_path)

    def as_account(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(tools["kubectl"]), "--kubeconfig", str(config), *args], capture_output=True, text=True, timeout=60)

    refused = as_account("get", "nodes")
    assert refused.returncode != 0 and "Forbidden" in refused.stderr and "granted-nothing" in refused.stderr, refused.stderr
    assert as_account("label", "node", "plain-1", "x=y").returncode != 0
    # granted exactly `get/list nodes`, it may read them and still not write them
    cluster.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "read-nodes"},
                   "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]})
    cluster.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "read-nodes"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "read-nodes"},
                   "subjects": [{"kind": "ServiceAccount", "name": "granted-nothing", "namespace": NS}]})
    wait_for(lambda: as_account("get", "nodes").returncode == 0, "the binding to take effect")
    denied = as_account("label", "node", "plain-1", "x=y")
    assert denied.returncode != 0 and "Forbidden" in denied.stderr


def _runner_pod(name: str, image: str, command: list[str], *, memory: str = "128Mi", security: dict | None = None) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"gpu-stack/check": "node-capacity"}},
        "spec": {
            "nodeName": "plain-1", "restartPolicy": "Never", "serviceAccountName": "runner-test",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534} if security is None else security,
            "containers": [{"name": "c", "image": image, "command": command,
                            "resources": {"limits": {"memory": memory}}}],
        },
    }


def test_the_pod_runner_runs_a_pod_as_the_kubelet_would(cluster, tools):
    # sandbox/pod_runner.py: the files of the pod's image as config/job-images.yaml says them (the
    # operator's: busybox's sh and applets and a v1.34 kubectl, user 65532; Kubernetes' kubectl
    # image: no shell, user 0), the container's memory limit, the pod's user; what it cannot run as
    # the pod says, it refuses as the kubelet would.
    from gpu_stack.config.types import KUBECTL_IMAGE as OPERATOR_IMAGE
    from sandbox.pod_runner import PodRunner

    cluster.kubectl("create", "serviceaccount", "runner-test", "-n", NS)
    hog = "awk 'BEGIN { s = sprintf(\"%268435456s\", \"\"); print \"allocated\" }'"  # a 256 MiB string
    kubectl_image = f"registry.k8s.io/kubectl:v{tools.kube_version}"
    pods = [
        _runner_pod("as-nobody", OPERATOR_IMAGE, ["sh", "-c", (
            "id -u; kubectl version --client -o yaml | grep gitVersion; "
            "touch /etc/x || echo read-only; kubectl auth whoami -o jsonpath='{.status.userInfo.username}'")]),
        _runner_pod("over-limit", OPERATOR_IMAGE, ["sh", "-c", hog], memory="48Mi"),
        _runner_pod("unknown-image", "registry.k8s.io/kubectl:v1.31.4", ["kubectl", "version", "--client"]),
        _runner_pod("no-shell", kubectl_image, ["sh", "-c", "true"]),
        # the operator image has no bash: by name it never starts, and a bash construct under its sh fails
        _runner_pod("no-bash", OPERATOR_IMAGE, ["bash", "-c", "true"]),
        _runner_pod("bash-construct", OPERATOR_IMAGE, ["sh", "-c", 'names=(a b); echo "${names[1]}"']),
        # no runAsUser: the image's own USER (65532 in the operator image, root in the kubectl image)
        _runner_pod("image-user", OPERATOR_IMAGE, ["sh", "-c", "id -u"], security={"runAsNonRoot": True}),
        _runner_pod("as-root", kubectl_image, ["kubectl", "version", "--client"], security={"runAsNonRoot": True}),
    ]
    runner = PodRunner(cluster, interval=0.3)
    runner.start()
    try:
        for pod in pods:
            cluster.apply(pod)

        def status(name: str) -> dict:
            return cluster.get_json("pod", name, "-n", NS).get("status") or {}

        def state(name: str) -> dict:
            return ((status(name).get("containerStatuses") or [{}])[0]).get("state") or {}

        def settled(name: str) -> bool:
            return "terminated" in state(name) or (f"{NS}/{name}" in runner.refused and "waiting" in state(name))

        wait_for(lambda: all(settled(p["metadata"]["name"]) for p in pods), "the runner to settle every pod", 90)
        ran = runner.runs[f"{NS}/as-nobody"]
        assert ran.returncode == 0 and ran.stdout.split()[:3] == ["65534", "gitVersion:", f"v{tools.kube_version}"], ran.stdout + ran.stderr
        # it reached the API server as its own ServiceAccount (the CA and token readable by nobody)
        assert ran.stdout.split()[3:] == ["read-only", f"system:serviceaccount:{NS}:runner-test"], ran.stdout + ran.stderr
        assert status("as-nobody")["phase"] == "Succeeded"
        over = state("over-limit")["terminated"]
        assert status("over-limit")["phase"] == "Failed" and over["exitCode"] != 0
        if runner.memory_enforcement.startswith("cgroup"):
            assert (over["exitCode"], over["reason"]) == (137, "OOMKilled"), over
        unknown = state("unknown-image")["terminated"]
        assert status("unknown-image")["phase"] == "Failed"
        assert "is not an image this runner knows the files of (config/job-images.yaml" in unknown["message"]
        assert f"{NS}/unknown-image" not in runner.runs, "never run with files nobody checked"
        # Kubernetes' kubectl image has no shell: the runtime cannot start the command
        no_shell = state("no-shell")["terminated"]
        assert status("no-shell")["phase"] == "Failed" and (no_shell["exitCode"], no_shell["reason"]) == (128, "StartError")
        assert 'exec: "sh": executable file not found in $PATH' in no_shell["message"]
        assert f"{NS}/no-shell" not in runner.runs
        no_bash = state("no-bash")["terminated"]
        assert (no_bash["exitCode"], no_bash["reason"]) == (128, "StartError"), no_bash
        assert 'exec: "bash": executable file not found in $PATH' in no_bash["message"]
        construct = runner.runs[f"{NS}/bash-construct"]
        assert status("bash-construct")["phase"] == "Failed" and construct.returncode != 0
        assert "syntax error" in construct.stderr, construct.stderr
        image_user = runner.runs[f"{NS}/image-user"]
        assert image_user.returncode == 0 and image_user.stdout.split() == ["65532"], image_user.stdout + image_user.stderr
        root = state("as-root")["waiting"]
        assert (root["reason"], root["message"]) == ("CreateContainerConfigError", "container has runAsNonRoot and image will run as root")
        assert status("as-root")["phase"] == "Pending" and f"{NS}/as-root" not in runner.runs
    finally:
        runner.stop()
        for pod in pods:
            cluster.kubectl("delete", "pod", pod["metadata"]["name"], "-n", NS, "--wait=false", check=False)
