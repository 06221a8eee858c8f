"""The kubelet stage of run.py: the kubelet standalone (no API server) on the containerd the node
script configured, the real device plugin as a host process with the config the stack generates
for this node's sharing (meta/device-plugin.yaml, its environment as the GPU Operator sets it:
meta/device-plugin.env), and static pods that each ask for one `nvidia.com/gpu`, as many as the
node advertises, all running the CUDA smoke payload at once (each waits until all have started).

Standard library only. The kubelet's cgroup driver follows containerd's runc option
(SystemdCgroup); the pods use the host network (no CNI on this machine), the validation Jobs'
security context, and the payload image run.py built (imagePullPolicy Never).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .run import Check

MANIFESTS = Path("/etc/kubernetes/manifests")
KUBELET_DIR = Path("/var/lib/kubelet")
PLUGIN_DIR = KUBELET_DIR / "device-plugins"
CHECKPOINT = PLUGIN_DIR / "kubelet_internal_checkpoint"
NAMESPACE = "gpu-node-check"
HOST_PROCESS_ENV = {"NVIDIA_DRIVER_ROOT": "/", "DRIVER_ROOT_CTR_PATH": "/"}
"""As tests/deviceplugin/gpu_run.py: only because the plugin runs on the host, not in its pod."""


def kubelet_config(cgroup_driver: str, resolv: Path, oom_lower_allowed: bool = True) -> str:
    """A KubeletConfiguration (kubelet.config.k8s.io/v1beta1) for a standalone kubelet (its own
    oomScoreAdj left at 0 where root may not lower it, see run.py's containerd stage)."""
    return "\n".join([
        *([] if oom_lower_allowed else ["oomScoreAdj: 0"]),
        "apiVersion: kubelet.config.k8s.io/v1beta1",
        "kind: KubeletConfiguration",
        f"cgroupDriver: {cgroup_driver}",
        "containerRuntimeEndpoint: unix:///run/containerd/containerd.sock",
        f"staticPodPath: {MANIFESTS}",
        "fileCheckFrequency: 2s",
        "syncFrequency: 5s",
        "address: 127.0.0.1",
        "readOnlyPort: 10255",
        "authentication:",
        "  anonymous:",
        "    enabled: true",
        "  webhook:",
        "    enabled: false",
        "authorization:",
        "  mode: AlwaysAllow",
        "failSwapOn: false",
        f"resolvConf: {resolv}",
        "evictionHard:",
        '  memory.available: "100Mi"',
        '  nodefs.available: "1%"',
        '  imagefs.available: "1%"',
        '  nodefs.inodesFree: "1%"',
        "",
    ])


def barrier_command(peers: int, limit: int = 120) -> str:
    """bash: mark this pod started, wait (bounded) until `peers` pods have, then run the smoke payload."""
    return (
        f'touch "/sync/$POD_NAME"; shopt -s nullglob; start=$SECONDS; '
        f'until f=(/sync/*); (( ${{#f[@]}} >= {peers} )); do '
        f'(( SECONDS - start < {limit} )) || {{ echo "FAIL cuda-smoke: only ${{#f[@]}} of {peers} pods started within {limit}s"; exit 1; }}; '
        f'sleep 0.2; done; echo "all {peers} pods started (waited $(( SECONDS - start ))s)"; exec bash /payloads/cuda-smoke.sh'
    )


def static_pod(index: int, peers: int, image: str, resource: str, payloads: Path, tmp: Path, sync: Path,
               real_smi: str | None = None) -> dict[str, Any]:
    """One static pod asking for one `resource`; `real_smi`: the binary a wrapper /usr/bin/nvidia-smi
    execs (run.py's wrapped_smi), mounted at its own path."""
    pod = _static_pod(index, peers, image, resource, payloads, tmp, sync)
    if real_smi:
        pod["spec"]["volumes"].append({"name": "smi", "hostPath": {"path": real_smi}})
        pod["spec"]["containers"][0]["volumeMounts"].append({"name": "smi", "mountPath": real_smi, "readOnly": True})
    return pod


def _static_pod(index: int, peers: int, image: str, resource: str, payloads: Path, tmp: Path, sync: Path) -> dict[str, Any]:
    name = f"gpu-smoke-{index}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "hostNetwork": True,
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65534, "runAsGroup": 65534, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "cuda-smoke",
                "image": image,
                "imagePullPolicy": "Never",
                "command": ["bash", "-c", barrier_command(peers)],
                "env": [{"name": "CHECK_NAME", "value": f"cuda-smoke-{index}"}, {"name": "POD_NAME", "value": name},
                        {"name": "EXPECTED_GPUS", "value": "1"}, {"name": "VECTOR_ADD", "value": "/cuda-samples/vectorAdd"}],
                "resources": {"limits": {resource: "1"}, "requests": {resource: "1"}},
                "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "payloads", "mountPath": "/payloads", "readOnly": True},
                                 {"name": "tmp", "mountPath": "/tmp"}, {"name": "sync", "mountPath": "/sync"}],
            }],
            "volumes": [{"name": "payloads", "hostPath": {"path": str(payloads)}},
                        {"name": "tmp", "hostPath": {"path": str(tmp)}},
                        {"name": "sync", "hostPath": {"path": str(sync)}}],
        },
    }


def registered_devices(checkpoint_text: str) -> dict[str, list[str]]:
    """The device IDs per resource in the kubelet's device-manager checkpoint."""
    data = json.loads(checkpoint_text)
    return dict((data.get("Data") or {}).get("RegisteredDevices") or {})


def interesting(path: Path, words: tuple[str, ...], limit: int = 25) -> list[str]:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    picked = [ln for ln in lines if any(w in ln for w in words)]
    return picked[-limit:]


def stop(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run(check: Check) -> dict[str, Any]:
    from .run import OPT, PAYLOAD_IMAGE, SYS_PATH, WORK

    check.section("kubelet standalone + the device plugin with the stack's sharing config")
    facts: dict[str, Any] = {"ok": False}
    bins = OPT / "bin"
    for b in ("kubelet", "nvidia-device-plugin"):
        if not (bins / b).exists():
            raise RuntimeError(f"{bins / b} is missing: the bundle's kube/ part was not carried")
    facts["kubelet"] = check.sh([str(bins / "kubelet"), "--version"]).stdout.strip()
    facts["device_plugin"] = check.sh([str(bins / "nvidia-device-plugin"), "--version"], check=False).stdout.strip().splitlines()[:1]
    meta = check.meta_dir
    resource, count = next(iter((check.meta.get("advertises") or {"nvidia.com/gpu": 1}).items()))
    dump = check.sh(["containerd", "config", "dump"], quiet=True).stdout
    systemd_cgroup = bool(re.search(r"SystemdCgroup\s*=\s*true", dump))
    driver = "systemd" if systemd_cgroup else "cgroupfs"
    facts["cgroup_driver"] = driver
    check.say(f"  the kubelet's cgroup driver: {driver} (containerd's runc SystemdCgroup = {str(systemd_cgroup).lower()})")

    # what an earlier call left: its pods (and the logs containerd would append to)
    old = json.loads(check.crictl("pods", "-o", "json", "--namespace", NAMESPACE, quiet=True, check=False).stdout or "{}")
    for p in old.get("items", []):
        check.crictl("rmp", "-f", p["id"], quiet=True, check=False)
    for d in Path("/var/log/pods").glob(f"{NAMESPACE}_*"):
        shutil.rmtree(d, ignore_errors=True)
    for d in (MANIFESTS, PLUGIN_DIR):
        d.mkdir(parents=True, exist_ok=True)
    # an earlier kubelet's sockets and checkpoint would read as this one's (the second kubelet call
    # on the H200 found them and waited for nothing)
    for f in [*PLUGIN_DIR.glob("*.sock"), CHECKPOINT]:
        f.unlink(missing_ok=True)
    for f in MANIFESTS.iterdir():
        f.unlink()
    kdir = WORK / "kubelet"
    kdir.mkdir(parents=True, exist_ok=True)
    resolv = kdir / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\n")
    cfg = kdir / "config.yaml"
    cfg.write_text(kubelet_config(driver, resolv, bool(check.facts.get("oom_lower_allowed", True))))
    payloads, tmp = check.payload_dirs()
    sync = WORK / "sync"
    shutil.rmtree(sync, ignore_errors=True)
    sync.mkdir()
    sync.chmod(0o1777)
    env = {"PATH": SYS_PATH, "HOME": "/root"}
    klog, plog = check.out / "kubelet.log", check.out / "device-plugin.log"
    kubelet = plugin = None
    t0 = time.monotonic()
    try:
        kubelet = subprocess.Popen([str(bins / "kubelet"), f"--config={cfg}", f"--hostname-override={check.meta.get('node', 'gpu-node-check')}", "--v=2"],
                                   env=env, stdout=klog.open("wb"), stderr=subprocess.STDOUT, start_new_session=True)
        sock = PLUGIN_DIR / "kubelet.sock"
        end = time.monotonic() + 90
        while time.monotonic() < end and not sock.exists() and kubelet.poll() is None:
            time.sleep(0.5)
        facts["kubelet_up_s"] = round(time.monotonic() - t0, 2)
        if not sock.exists():
            check.say(f"  the kubelet did not open {sock} (exit {kubelet.poll()}); its last lines:")
            for ln in interesting(klog, ("E1", "F1", "rror", "ailed"), 30):
                check.say(f"    {ln[:400]}")
            facts["kubelet_exit"] = kubelet.poll()
            return facts
        check.say(f"  kubelet up (device-plugin socket) in {facts['kubelet_up_s']} s")
        penv = {**json.loads((meta / "device-plugin.env").read_text()), **HOST_PROCESS_ENV, "CONFIG_FILE": str(meta / "device-plugin.yaml"), **env}
        check.say(f"  device plugin env: {penv}")
        t1 = time.monotonic()
        plugin = subprocess.Popen([str(bins / "nvidia-device-plugin")], env=penv, stdout=plog.open("wb"), stderr=subprocess.STDOUT,
                                  start_new_session=True)
        devices: dict[str, list[str]] = {}
        end = time.monotonic() + 90
        while time.monotonic() < end and plugin.poll() is None:
            if CHECKPOINT.exists():
                try:
                    devices = registered_devices(CHECKPOINT.read_text())
                except ValueError:
                    devices = {}
                if len(devices.get(resource, [])) >= count:
                    break
            time.sleep(0.5)
        facts["registered_s"] = round(time.monotonic() - t1, 2)
        facts["registered"] = {k: len(v) for k, v in devices.items()}
        for ln in interesting(plog, ("Registered", "Starting to serve", "rror", "CDI spec", "replicas", "timeSlicing"), 12):
            check.say(f"    plugin| {ln[:300]}")
        check.say(f"  the kubelet's device manager has {facts['registered']} (checkpoint), {facts['registered_s']} s after the plugin started; "
                  f"the stack's capacity table: {resource}: {count}")
        if len(devices.get(resource, [])) != count:
            return facts
        # as many pods as replicas, each asking for one
        t2 = time.monotonic()
        for i in range(count):
            pod = static_pod(i, count, PAYLOAD_IMAGE, resource, payloads, tmp, sync, check.wrapped_smi())
            (MANIFESTS / f"gpu-smoke-{i}.json").write_text(json.dumps(pod, indent=1))
        results: dict[str, Any] = {}
        end = time.monotonic() + 240
        while time.monotonic() < end:
            ps = json.loads(check.crictl("ps", "-a", "-o", "json", "--label", f"io.kubernetes.pod.namespace={NAMESPACE}", quiet=True).stdout or "{}")
            exited = [c for c in ps.get("containers", []) if c["state"] == "CONTAINER_EXITED"]
            if len(exited) >= count:
                break
            if kubelet.poll() is not None:
                break
            time.sleep(1)
        facts["pods_s"] = round(time.monotonic() - t2, 2)
        ps = json.loads(check.crictl("ps", "-a", "-o", "json", "--label", f"io.kubernetes.pod.namespace={NAMESPACE}", quiet=True).stdout or "{}")
        for c in ps.get("containers", []):
            pod = c["labels"].get("io.kubernetes.pod.name", c["id"][:12])
            info = json.loads(check.crictl("inspect", "-o", "json", c["id"], quiet=True).stdout)
            status = info["status"]
            cfg_info = (info.get("info") or {}).get("config") or {}
            log = check.crictl("logs", c["id"], check=False, quiet=True)
            lines = (log.stdout + log.stderr).strip().splitlines()
            verdict = next((ln for ln in reversed(lines) if ln.startswith(("PASS ", "FAIL "))), None)
            results[pod] = {
                "exit_code": status.get("exitCode"), "started": status.get("startedAt"), "finished": status.get("finishedAt"),
                "cdi_devices": [d.get("name") for d in cfg_info.get("CDI_devices") or []],
                "cdi_annotations": {k: v for k, v in (cfg_info.get("annotations") or {}).items() if k.startswith("cdi.k8s.io/")},
                "verdict": verdict, "log": lines[-8:],
            }
        for name in sorted(results):
            r = results[name]
            check.say(f"  {name}: exit {r['exit_code']}, {r['started']} -> {r['finished']}; CDI {r['cdi_devices'] or r['cdi_annotations']}")
            for ln in r["log"]:
                check.say(f"    | {ln}")
        if len(results) < count:
            check.say(f"  only {len(results)} of {count} pods' containers were created; the kubelet's errors:")
            for ln in interesting(klog, ("E1", "rror", "ailed", "OutOf", "nvidia.com"), 30):
                check.say(f"    {ln[:400]}")
        facts["pods"] = results
        facts["ok"] = len(results) == count and all(r["exit_code"] == 0 and (r["verdict"] or "").startswith("PASS") for r in results.values())
        return facts
    finally:
        for f in MANIFESTS.glob("gpu-smoke-*.json"):
            f.unlink()
        if kubelet is not None and kubelet.poll() is None:
            end = time.monotonic() + 60
            while time.monotonic() < end:
                ps = json.loads(check.crictl("pods", "-o", "json", "--namespace", NAMESPACE, quiet=True, check=False).stdout or "{}")
                if not [p for p in ps.get("items", []) if p.get("state") == "SANDBOX_READY"]:
                    break
                time.sleep(1)
        stop(plugin)
        stop(kubelet)
        check.say(f"  kubelet log: {klog.name} ({os.path.getsize(klog) if klog.exists() else 0} bytes), plugin log: {plog.name}")
