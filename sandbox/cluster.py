"""A local Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and kwok's simulated kubelets, started by `kwokctl --runtime binary` from the
toolchain's own binaries (fresh certificates and service-account keys per cluster), with a
kubeconfig whose context is the stack's `kubernetes.context`.

Nothing listens beyond loopback (`bindAddress: 127.0.0.1`), and the cluster gets no admission
webhooks or aggregated APIs of its own, so the API server never dials a Service or pod address.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpu_stack.components.kube_api import KubeApiError, connect, get_json

from .toolchain import Toolchain


class ClusterError(RuntimeError):
    pass


RUNNER_CHECKS = ("free-capacity", "mig-state", "sharing-capacity", "node-capacity")
"""Checks (label gpu-stack/check) whose pods only talk to the API: sandbox/pod_runner.py runs them."""
RUNNER_PARTS = ("gpu-mig-rollout", "gpu-mig-layout-guard", "gpu-node-labels", "gpu-dra-rollout")
"""The same, by label app.kubernetes.io/part-of."""


def _expr(key: str, op: str, values: list[str] | None = None) -> dict[str, Any]:
    return {"key": key, "operator": op, **({"values": values} if values else {})}


def stages(tools: Toolchain, failing_checks: tuple[str, ...] = (), held_checks: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """kwok's own node and pod stages, except that Job pods of the API-script checks (run for real
    by the pod runner), of `failing_checks` and of `held_checks` are not completed by kwok; those of
    `failing_checks` fail instead (exit code 1, a termination message naming the check); those of
    `held_checks` keep running until the test completes them (`Cluster.complete_pod`), as a slow
    GPU check does."""
    folder = tools["pod-complete.yaml"].parent
    docs = [yaml.safe_load((folder / f"{name}.yaml").read_text()) for name in
            ("node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-delete")]
    check, part = '.metadata.labels["gpu-stack/check"]', '.metadata.labels["app.kubernetes.io/part-of"]'
    complete = next(d for d in docs if d["metadata"]["name"] == "pod-complete")
    exprs = complete["spec"]["selector"]["matchExpressions"]
    exprs.append(_expr(check, "NotIn", [*RUNNER_CHECKS, *failing_checks, *held_checks]))
    exprs.append(_expr(part, "NotIn", list(RUNNER_PARTS)))
    if failing_checks:
        docs.append({
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Stage",
            "metadata": {"name": "pod-fail-check"},
            "spec": {
                "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
                "selector": {"matchExpressions": [
                    _expr(".metadata.deletionTimestamp", "DoesNotExist"),
                    _expr(".status.phase", "In", ["Running"]),
                    _expr(check, "In", list(failing_checks)),
                ]},
                "next": {"statusTemplate": (
                    "{{ $now := Now }}\ncontainerStatuses:\n{{ range .spec.containers }}\n"
                    "- image: {{ .image | Quote }}\n  name: {{ .name | Quote }}\n  ready: false\n  restartCount: 0\n"
                    "  started: false\n  state:\n    terminated:\n      exitCode: 1\n      finishedAt: {{ $now | Quote }}\n"
                    "      reason: Error\n      message: \"FAIL simulated: the simulated kubelet failed this check pod\"\n"
                    "      startedAt: {{ $now | Quote }}\n{{ end }}\nphase: Failed\n"
                    # as the kubelet: a finished pod is no longer Ready (the provider reports a
                    # failed Job's pod, termination message included, only from a Ready not True)
                    "conditions:\n"
                    "- type: Initialized\n  status: \"True\"\n  lastTransitionTime: {{ $now | Quote }}\n"
                    "- type: PodScheduled\n  status: \"True\"\n  lastTransitionTime: {{ $now | Quote }}\n"
                    "- type: Ready\n  status: \"False\"\n  reason: PodCompleted\n  lastTransitionTime: {{ $now | Quote }}\n"
                    "- type: ContainersReady\n  status: \"False\"\n  reason: PodCompleted\n  lastTransitionTime: {{ $now | Quote }}\n"
                )},
            },
        })
    return docs


def kwokctl_config(tools: Toolchain) -> dict[str, Any]:
    """The KwokctlConfiguration: binary runtime, every binary local, loopback only."""
    kube = tools["kube-apiserver"].parent
    return {
        "kind": "KwokctlConfiguration",
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "options": {
            "runtime": "binary",
            "bindAddress": "127.0.0.1",
            "kubeVersion": f"v{tools.kube_version}",
            "kubeBinaryPrefix": str(kube),
            "kubeApiserverBinary": str(kube / "kube-apiserver"),
            "kubeControllerManagerBinary": str(kube / "kube-controller-manager"),
            "kubeSchedulerBinary": str(kube / "kube-scheduler"),
            "kubectlBinary": str(tools["kubectl"]),
            "etcdBinary": str(tools["etcd"]),
            "kwokControllerBinary": str(tools["kwok"]),
            "securePort": True,
            # short node-monitor grace and lease: a node that leaves is seen quickly
            "nodeLeaseDurationSeconds": 40,
            "quietPull": True,
            # kwok serves a pod's `kubectl logs` from a file a Logs object names: the MIG manager
            # stand-in writes its pods' logs so (sandbox/gpu_nodes.py), which the rollout reads
            "enableCRDs": ["Logs"],
        },
        # in a network namespace with only loopback there is no default route to pick an address
        # from: the API server advertises 127.0.0.1
        "componentsPatches": [
            {"name": "kube-apiserver", "extraArgs": [{"key": "advertise-address", "value": "127.0.0.1"}]},
        ],
    }


@dataclass
class Cluster:
    """One simulated cluster, its files under `workdir` (kwokctl's work dir, the kubeconfig)."""

    name: str
    workdir: Path
    tools: Toolchain
    context: str = "kwok"
    failing_checks: tuple[str, ...] = ()
    held_checks: tuple[str, ...] = ()
    started: bool = field(default=False, init=False)
    _api: Any = field(default=None, init=False, repr=False)

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig.yaml"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "KWOK_WORKDIR": str(self.workdir / "kwok"),
            "KWOK_KUBECTL_BINARY": str(self.tools["kubectl"]),
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{self.tools['kubectl'].parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }

    def _kwokctl(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
        cmd = [str(self.tools["kwokctl"]), "--name", self.name, "--config", str(self.workdir / "kwokctl.yaml"),
               *args, "--kubeconfig", str(self.workdir / "kwok.kubeconfig")]
        proc = subprocess.run(cmd, env=self.env(), capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise ClusterError(f"kwokctl {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "kwokctl.yaml"
        config.write_text(yaml.safe_dump_all([kwokctl_config(self.tools), *stages(self.tools, self.failing_checks, self.held_checks)], sort_keys=False))
        self.started = True  # from here on stop() must clean up, even if create fails half-way
        self._kwokctl("create", "cluster", "--wait", "120s", timeout=300)
        self._write_kubeconfig()
        self.wait_ready()

    def _write_kubeconfig(self) -> None:
        """kwokctl's kubeconfig with its one context renamed to the stack's `kubernetes.context`."""
        doc = yaml.safe_load((self.workdir / "kwok.kubeconfig").read_text())
        (ctx,) = [c for c in doc["contexts"] if c["name"] == f"kwok-{self.name}"]
        ctx["name"] = self.context
        doc["contexts"] = [ctx]
        doc["current-context"] = self.context
        self.kubeconfig.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            proc = self.kubectl("get", "--raw", "/readyz", check=False)
            if proc.returncode == 0 and proc.stdout.strip() == "ok":
                # the default ServiceAccount exists once the controller-manager runs
                sa = self.kubectl("get", "serviceaccount", "default", "-n", "default", check=False)
                if sa.returncode == 0:
                    return
            if time.monotonic() > deadline:
                raise ClusterError(f"API server not ready after {timeout:.0f}s: {proc.stderr.strip()}")
            time.sleep(0.5)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = [str(self.tools["kubectl"]), "--kubeconfig", str(self.kubeconfig), *args]
        proc = subprocess.run(cmd, env=self.env(), input=input, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {proc.stderr.strip()}")
        return proc

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def read(self, path: str, label_selector: str | None = None, timeout: float = 30) -> Any:
        """GET `path` from the API server in this process (`/api/v1/nodes`, a list or one object),
        as the admin; None when it answers 404 (a kind whose CRD is not installed, an object that
        is gone). For the stand-ins' polling loops: one request costs a millisecond of CPU where a
        kubectl process costs tens (four sandboxes polling with kubectl kept 1.5 of 2 cores busy)."""
        if self._api is None:
            self._api = connect(str(self.kubeconfig), self.context)
        query = f"?{urllib.parse.urlencode({'labelSelector': label_selector})}" if label_selector else ""
        try:
            return get_json(self._api, path + query, timeout=timeout)
        except KubeApiError as exc:
            if exc.status == 404:
                return None
            raise ClusterError(str(exc)) from None

    def apply(self, manifest: dict[str, Any] | list[dict[str, Any]] | str, server_side: bool = True) -> None:
        text = manifest if isinstance(manifest, str) else yaml.safe_dump_all(manifest if isinstance(manifest, list) else [manifest])
        args = ["apply", "-f", "-"] + (["--server-side", "--force-conflicts", "--field-manager=gpu-stack-sandbox"] if server_side else [])
        self.kubectl(*args, input=text)

    def complete_pod(self, namespace: str, name: str) -> None:
        """Ends a running pod's containers with exit code 0, as its kubelet reports a check that
        passed (the Job controller then counts it succeeded)."""
        pod = self.get_json("pod", name, "-n", namespace)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        statuses = [{"name": c["name"], "image": c["image"], "ready": False, "restartCount": 0,
                     "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now}}}
                    for c in pod["spec"]["containers"]]
        patch = {"status": {"phase": "Succeeded", "containerStatuses": statuses}}
        self.kubectl("patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(patch))

    def stop(self) -> None:
        if not self.started:
            return
        self.started = False
        with contextlib.suppress(ClusterError, subprocess.TimeoutExpired):
            self._kwokctl("delete", "cluster", timeout=120)
