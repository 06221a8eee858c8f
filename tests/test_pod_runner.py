"""The pod runner (sandbox/pod_runner.py) runs an API-talking pod as the kubelet would: with the
kubectl of its image's tag, under its container's memory limit, as its user."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from gpu_stack.config.stack_files import list_stacks
from gpu_stack.offline.runner import PROJECT_DIR
from sandbox.cluster import RUNNER_CHECKS, RUNNER_PARTS
from sandbox.pod_runner import (
    Launch,
    MemoryCgroups,
    image_files,
    kubectl_refusal,
    launch,
    memory_bytes,
    run_as,
    start_error,
)
from sandbox.toolchain import versions

from .helpers import plan_stack_file

TOOLCHAIN_KUBECTL = versions()["KUBERNETES_VERSION"]
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="starting a process as another user, in a cgroup, needs root")


def test_the_runner_knows_each_image_from_the_one_table():
    kubectl = image_files("registry.k8s.io/kubectl:v1.34.4")
    assert kubectl is not None and kubectl.kubectl == "1.34" and kubectl.shell == "none" and not kubectl.has("sh")
    # a mirror's copy is the image it copies
    assert image_files("mirror.internal:5000/k8s/kubectl:v1.34.4") == kubectl
    operator = image_files("mirror.internal:5000/nvidia/gpu-operator:v25.10.1")
    assert operator is not None and (operator.shell, operator.utilities, operator.kubectl) == ("busybox", "busybox", "1.34")
    assert operator.has("sh") and operator.has("kubectl") and not operator.has("bash")
    assert operator.user == (65532, 65532)
    for unknown in ("registry.k8s.io/kubectl:latest", "registry.k8s.io/kubectl:v1.31.4",
                    "registry.k8s.io/kubectl@sha256:" + "a" * 64, "nvcr.io/nvidia/gpu-operator:v24.9.0"):
        assert image_files(unknown) is None, unknown


def test_the_runner_refuses_an_image_whose_kubectl_it_does_not_have():
    assert kubectl_refusal(f"registry.k8s.io/kubectl:v{TOOLCHAIN_KUBECTL}", TOOLCHAIN_KUBECTL) is None
    # the operator image's kubectl is its build's stable release: the toolchain's of that minor stands in
    assert kubectl_refusal("nvcr.io/nvidia/gpu-operator:v25.10.1", "1.34.4") is None
    assert "carries kubectl v1.34" in (kubectl_refusal("nvcr.io/nvidia/gpu-operator:v25.10.1", "1.35.0") or "")
    assert "carries no kubectl" in (kubectl_refusal("nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04", "1.34.4") or "")
    assert "not an image this runner knows" in (kubectl_refusal("team/tools:3", "1.34.4") or "")


def test_a_command_its_image_does_not_have_fails_to_start_as_on_a_node():
    # registry.k8s.io/kubectl is distroless: no shell, so a script never starts there
    message = start_error("registry.k8s.io/kubectl:v1.34.4", ["sh", "/rollout/mig-rollout.sh"])
    assert message is not None and 'exec: "sh": executable file not found in $PATH' in message
    assert start_error("registry.k8s.io/kubectl:v1.34.4", ["kubectl", "version"]) is None
    # the operator image: busybox's sh and applets by name, under /busybox by path; no bash, no /bin/sh
    operator = "nvcr.io/nvidia/gpu-operator:v25.10.1"
    assert 'exec: "bash": executable file not found in $PATH' in (start_error(operator, ["bash", "/rollout/x.sh"]) or "")
    by_path = start_error(operator, ["/bin/bash", "/rollout/x.sh"])
    assert by_path is not None and 'exec: "/bin/bash": stat /bin/bash: no such file or directory: unknown' in by_path
    assert start_error(operator, ["/bin/sh", "-c", "true"]) is not None
    assert start_error(operator, ["sh", "/rollout/x.sh"]) is None
    assert start_error(operator, ["kubectl", "version"]) is None
    assert start_error(operator, ["/usr/bin/kubectl", "version"]) is None
    if shutil.which("busybox"):
        assert start_error(operator, ["/busybox/sh", "-c", "true"]) is None
        assert start_error(operator, ["sleep", "1"]) is None
    # an Ubuntu image: bash is there
    assert start_error("nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04", ["bash", "/payloads/x.sh"]) is None


@pytest.mark.parametrize("stack", list_stacks(PROJECT_DIR))
def test_every_api_talking_job_of_every_stack_runs_with_the_kubectl_the_tier_has(stack):
    # The end-to-end tier runs these pods for real with the toolchain's kubectl: a default image of
    # another kubectl would be refused there (and untested against the API server it talks to).
    jobs = plan_stack_file(stack).of_type("kubernetes:batch/v1:Job")
    kubectl_pods = []
    for job in jobs:
        template = job.inputs["spec"]["template"]
        pod, labels = template["spec"], template["metadata"].get("labels") or {}
        runs_here = labels.get("gpu-stack/check") in RUNNER_CHECKS or labels.get("app.kubernetes.io/part-of") in RUNNER_PARTS
        for container in pod["containers"]:
            # every command starts in its image (a bash script on a shell-less image would not)
            assert start_error(container["image"], container["command"]) is None, (job.name, container["image"])
            if runs_here:
                kubectl_pods.append(job.name)
                assert kubectl_refusal(container["image"], TOOLCHAIN_KUBECTL) is None, (job.name, container["image"])
                # and they run as the kubelet will run them: as nobody, under a memory limit
                assert run_as(pod, container, image_files(container["image"]).user) == (65534, 65534, None), job.name  # type: ignore[union-attr]
                assert memory_bytes(container["resources"]["limits"]["memory"]), job.name
    assert kubectl_pods, "every stack has API-talking Jobs (the label Job at least)"


def test_memory_quantities_read_as_the_api_server_reads_them():
    assert memory_bytes("128Mi") == 128 * 2**20
    assert memory_bytes("1G") == 10**9
    assert memory_bytes("1.5Gi") == 3 * 2**29
    assert memory_bytes(4096) == 4096
    assert memory_bytes(None) is None
    with pytest.raises(ValueError):
        memory_bytes("lots")


def test_run_as_takes_the_containers_user_over_the_pods_and_refuses_root_under_run_as_non_root():
    pod = {"securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534}}
    assert run_as(pod, {}) == (65534, 65534, None)
    assert run_as(pod, {"securityContext": {"runAsUser": 1000}}) == (1000, 65534, None)
    # the image's user (root in the kubectl image) under runAsNonRoot: the kubelet never starts it
    assert run_as({"securityContext": {"runAsNonRoot": True}}, {}) == (0, 0, "container has runAsNonRoot and image will run as root")
    # no runAsUser: the image's USER (the operator image runs as 65532), which runAsNonRoot accepts
    assert run_as({"securityContext": {"runAsNonRoot": True}}, {}, (65532, 65532)) == (65532, 65532, None)
    assert run_as(pod, {"securityContext": {"runAsUser": 0}})[2] == "container's runAsUser breaks non-root policy"
    assert run_as({}, {}) == (0, 0, None)


HOG = [sys.executable, "-c", "b = bytearray(192 * 2**20); b[::4096] = b'x' * len(b[::4096]); print('allocated')"]


@AS_ROOT
def test_a_container_over_its_memory_limit_is_killed_and_one_within_it_is_not(tmp_path):
    cgroups = MemoryCgroups.create(f"gpu-stack-test-{os.getpid()}")
    try:
        env = {"PATH": os.environ["PATH"]}
        over = launch(Launch(HOG, env, tmp_path, memory=64 * 2**20), cgroups, "over")
        within = launch(Launch(HOG, env, tmp_path, memory=512 * 2**20), cgroups, "within")
    finally:
        if cgroups is not None:
            cgroups.close()
    assert within.returncode == 0 and "allocated" in within.stdout, within.stderr
    assert over.returncode != 0 and "allocated" not in over.stdout
    if cgroups is not None:
        # as on a node: the kernel's OOM killer, exit code 137, reason OOMKilled
        assert (over.returncode, over.oom_killed) == (137, True), over.stderr
        assert not (cgroups.base / "over").exists(), "each pod's cgroup is removed after it"
    else:  # RLIMIT_DATA: the allocation fails inside the process
        assert "MemoryError" in over.stderr


@AS_ROOT
def test_a_container_runs_as_the_pods_user_without_root_groups():
    # pytest's tmp_path sits under a folder only root may enter: a pod's folder is the runner's own
    folder = Path(tempfile.mkdtemp(prefix="pod-user-"))
    try:
        owned = folder / "emptydir"
        owned.mkdir()
        os.chown(owned, 65534, 65534)
        folder.chmod(0o755)
        script = f"id -u; id -g; id -G; touch {owned}/ok && echo wrote-own; touch /root/gpu-stack-test 2>/dev/null || echo refused-root"
        ran = launch(Launch(["sh", "-c", script], {"PATH": "/usr/bin:/bin"}, folder, uid=65534, gid=65534), None, "user")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["65534", "65534", "65534", "wrote-own", "refused-root"]
    assert not Path("/root/gpu-stack-test").exists()


def test_without_a_memory_cgroup_the_limit_still_bounds_the_process(tmp_path):
    # RLIMIT_DATA (not RLIMIT_AS, which stops a Go binary such as kubectl before main)
    env = {"PATH": os.environ["PATH"]}
    over = launch(Launch(HOG, env, tmp_path, memory=64 * 2**20), None, "rlimit")
    within = launch(Launch(HOG, env, tmp_path, memory=512 * 2**20), None, "rlimit")
    assert over.returncode != 0 and "MemoryError" in over.stderr
    assert within.returncode == 0, within.stderr
