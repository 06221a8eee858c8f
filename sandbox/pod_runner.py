"""A kubelet stand-in for the pods that only talk to the Kubernetes API (the MIG rollout, the
free-capacity gate, the capacity checks): their container command runs here, for real, with the
toolchain's `kubectl` on PATH, as the pod's own ServiceAccount (a token from the TokenRequest
API, so the RBAC the program grants is what is tested), with its ConfigMap and emptyDir volumes
materialised in a temp folder (mount paths in the command and env point there). The pod then
gets the phase, exit code and termination message the kubelet would write.

kwok leaves these pods Running (sandbox/cluster.py's stages); every other pod is kwok's.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .cluster import RUNNER_CHECKS, RUNNER_PARTS, Cluster


def service_account_kubeconfig(cluster: Cluster, ns: str, sa: str, folder: Path) -> Path:
    """A kubeconfig that talks to the API server as ServiceAccount `ns/sa` (a TokenRequest token),
    as a pod of that account does: what the API server allows it is what its RBAC grants."""
    token = cluster.kubectl("create", "token", sa, "-n", ns, "--duration=2h").stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    doc = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "in-cluster", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": "in-cluster", "context": {"cluster": "in-cluster", "user": sa, "namespace": ns}}],
        "current-context": "in-cluster",
    }
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return path


def _text(output: bytes | str | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def _mapper(mounts: dict[str, Path]):
    ordered = sorted(mounts, key=len, reverse=True)

    def remap(value: str) -> str:
        for mount in ordered:
            if value == mount or value.startswith(mount + "/"):
                return str(mounts[mount]) + value[len(mount):]
        return value

    return remap


@dataclass
class PodRunner:
    cluster: Cluster
    interval: float = 0.5
    runs: dict[str, subprocess.CompletedProcess] = field(default_factory=dict)
    """"namespace/pod" -> the finished run (for tests and for reading a failure)."""
    _seen: set[str] = field(default_factory=set, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _threads: list[threading.Thread] = field(default_factory=list, init=False)

    def start(self) -> None:
        t = threading.Thread(target=self._loop, name="pod-runner", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)

    def _loop(self) -> None:
        selectors = [f"gpu-stack/check in ({','.join(RUNNER_CHECKS)})", f"app.kubernetes.io/part-of in ({','.join(RUNNER_PARTS)})"]
        while not self._stop.is_set():
            for selector in selectors:
                proc = self.cluster.kubectl("get", "pods", "-A", "-l", selector, "-o", "json", check=False)
                if proc.returncode != 0:
                    continue
                for pod in json.loads(proc.stdout).get("items") or []:
                    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
                    if pod.get("status", {}).get("phase") == "Running" and key not in self._seen:
                        self._seen.add(key)
                        t = threading.Thread(target=self._run, args=(pod,), name=f"run {key}", daemon=True)
                        t.start()
                        self._threads.append(t)
            self._stop.wait(self.interval)

    def _kubeconfig(self, ns: str, sa: str, folder: Path) -> Path:
        return service_account_kubeconfig(self.cluster, ns, sa, folder)

    def _run(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        ns = meta["namespace"]
        with tempfile.TemporaryDirectory(prefix=f"pod-{meta['name']}-") as tmp:
            folder = Path(tmp)
            volumes: dict[str, Path] = {}
            for vol in spec.get("volumes") or []:
                target = folder / "volumes" / vol["name"]
                target.mkdir(parents=True)
                if "configMap" in vol:
                    data = self.cluster.get_json("configmap", vol["configMap"]["name"], "-n", ns).get("data") or {}
                    for key, text in data.items():
                        (target / key).write_text(text)
                volumes[vol["name"]] = target
            (container,) = spec["containers"][:1]
            mounts = {m["mountPath"]: volumes[m["name"]] for m in container.get("volumeMounts") or [] if m["name"] in volumes}
            remap = _mapper(mounts)
            env = {"PATH": f"{self.cluster.tools['kubectl'].parent}{os.pathsep}{os.environ.get('PATH', '')}"}
            for item in container.get("env") or []:
                if "value" in item:
                    env[item["name"]] = remap(item["value"])
                elif (item.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
                    env[item["name"]] = spec.get("nodeName", "")
            termination = folder / "termination-log"
            env["TERMINATION_LOG"] = str(termination)
            env["KUBECONFIG"] = str(self._kubeconfig(ns, spec.get("serviceAccountName") or "default", folder))
            argv = [remap(a) for a in (container.get("command") or []) + (container.get("args") or [])]
            try:
                run = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600, cwd=str(folder))
            except subprocess.TimeoutExpired as exc:
                # TimeoutExpired holds bytes whatever `text` was
                run = subprocess.CompletedProcess(argv, 124, _text(exc.stdout), _text(exc.stderr))
            message = termination.read_text() if termination.exists() else (run.stdout + run.stderr)[-4000:]
        self.runs[f"{ns}/{meta['name']}"] = run
        self._finish(pod, container, run.returncode, message)

    def _finish(self, pod: dict[str, Any], container: dict[str, Any], code: int, message: str) -> None:
        now = subprocess.run(["date", "-u", "+%Y-%m-%dT%H:%M:%SZ"], capture_output=True, text=True).stdout.strip()
        # The kubelet turns a finished pod's Ready and ContainersReady to False (PodCompleted): the
        # kubernetes provider reports a failed Job's pod, its termination message included, only
        # from a Ready condition that is not True (cloud-ready-checks v1.3.0 pod/check.go podReady).
        conditions = [
            {**c, "status": "False", "reason": "PodCompleted", "lastTransitionTime": now} if c.get("type") in ("Ready", "ContainersReady") else c
            for c in (pod.get("status") or {}).get("conditions") or []
        ]
        status = {
            "phase": "Succeeded" if code == 0 else "Failed",
            **({"conditions": conditions} if conditions else {}),
            "containerStatuses": [{
                "name": container["name"], "image": container["image"], "imageID": "", "ready": False,
                "restartCount": 0, "started": False,
                "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                         "message": message, "startedAt": now, "finishedAt": now}},
            }],
        }
        self.cluster.kubectl(
            "patch", "pod", pod["metadata"]["name"], "-n", pod["metadata"]["namespace"], "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": status}), check=False,
        )
