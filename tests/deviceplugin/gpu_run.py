"""The run on a GPU machine (as root): the real device plugin v0.18.1 as a host process, once per
case of cases.py, against the stand-in kubelet; the real MPS control daemon of the same module
for MPS cases; then `nvidia-ctk cdi generate` the way the node script runs it. Prints the record
(docs/gpu-runs/device-plugin-h200.txt): readable lines, and one `RESULT {json}` line per case that
tests/test_device_plugin_run.py reads.

    python -m tests.deviceplugin.bundle .devrun      # here: binaries, stubs, cases; prints the rest
    python3 -m deviceplugin.gpu_run --bin bin --stubs stubs --cases cases.json   # there, in .devrun

Leaves the GPU as it found it: the MPS control daemon sets EXCLUSIVE_PROCESS while it runs and
DEFAULT when stopped (checked at the end); MIG mode is never touched.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import record
from .kubelet_standin import StandInKubelet

PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
CDI_DIR = Path("/var/run/cdi")
MPS_CONTAINER_ROOT = Path("/mps")
"""The MPS daemon's and the plugin's own root (a volume in their pods; here the host's /mps)."""
HOST_PROCESS_ENV = {"NVIDIA_DRIVER_ROOT": "/", "DRIVER_ROOT_CTR_PATH": "/"}
"""Only because the plugin runs on the host, not in its pod: the driver root is / here."""
INTERESTING = ("rror", "arn", "Registered", "Starting to serve", "MPS", "refus", "invalid", "exceed", "CDI spec", "No devices")


def log_lines(path: Path, limit: int = 14) -> list[str]:
    """The lines of a log that say what happened (the last `limit`), noise folded."""
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    picked = record.fold([ln for ln in lines if any(w in ln for w in INTERESTING)])
    return (picked or lines)[-limit:]


def stop(proc: subprocess.Popen[bytes] | None, wait: float = 15) -> int | None:
    if proc is None:
        return None
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def start(binary: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LD_LIBRARY_PATH": os.environ.get("LD_LIBRARY_PATH", ""), **env}
    return subprocess.Popen([str(binary)], env=full, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def clean() -> None:
    """Empty plugin and MPS folders, no spec of the plugin's (the folders may be mount points)."""
    for d in (PLUGIN_DIR, MPS_CONTAINER_ROOT):
        d.mkdir(parents=True, exist_ok=True)
        for child in d.iterdir():
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    for spec in CDI_DIR.glob("k8s.device-plugin.nvidia.com-*"):
        spec.unlink()


def cdi_spec_devices() -> dict[str, list[str]]:
    """Qualified CDI device names per spec file the plugin wrote (JSON or YAML; names read by line)."""
    out: dict[str, list[str]] = {}
    for spec in sorted(CDI_DIR.glob("k8s.device-plugin.nvidia.com-*")):
        out[spec.name] = _spec_names(spec.read_text())
    return out


def _spec_names(text: str) -> list[str]:
    try:
        try:
            doc = json.loads(text)
        except ValueError:
            import yaml  # the device's image has PyYAML

            doc = yaml.safe_load(text)
        kind = doc.get("kind", "")
        return [f"{kind}={d['name']}" for d in doc.get("devices", [])]
    except Exception as err:  # a record of what was there beats a run that stops here
        return [f"unreadable spec: {err!r}"]


def run_case(case: dict[str, Any], bins: Path, stubs: Path, work: Path) -> dict[str, Any]:
    clean()
    here = work / case["name"]
    here.mkdir(parents=True)
    config = here / "config.yaml"
    config.write_text(case["config"])
    observed: dict[str, Any] = {}
    kubelet = StandInKubelet(PLUGIN_DIR, stubs)
    kubelet.start()
    daemon = plugin = None
    try:
        if case["expect"]["mps"]:
            env = {"CONFIG_FILE": str(config), "MIG_STRATEGY": case["env"]["MIG_STRATEGY"]}
            daemon = start(bins / "mps-control-daemon", env, here / "mps-daemon.log")
            deadline = time.monotonic() + 30
            while not (MPS_CONTAINER_ROOT / ".ready").exists() and daemon.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            observed["mps_daemon"] = {"ready": (MPS_CONTAINER_ROOT / ".ready").exists(), "exited": daemon.poll()}
            observed["compute_mode_during"] = smi("compute_mode")
            observed["mps_limits"] = mps_limits(MPS_CONTAINER_ROOT / case["expect"]["resource"] / "pipe")
        plugin = start(bins / "nvidia-device-plugin", {**case["env"], **HOST_PROCESS_ENV, "CONFIG_FILE": str(config)}, here / "plugin.log")
        request = registration(kubelet, plugin, 45 if observed.get("mps_daemon", {}).get("ready", True) else 20)
        if request is None:
            observed["error"] = "the plugin did not register"
        else:
            observed |= kubelet.exercise(request)
            if case["expect"]["cdi"]:
                observed["plugin_cdi_spec"] = cdi_spec_devices()
        observed["refused_by_kubelet"] = kubelet.refused
        observed["plugin_exited"] = plugin.poll()
    finally:
        kubelet.stop()
        stop(plugin)
        if daemon is not None:
            observed["mps_daemon_exit"] = stop(daemon)
            observed["compute_mode_after"] = smi("compute_mode")
    observed["plugin_log"] = log_lines(here / "plugin.log")
    if daemon is not None:
        observed["mps_daemon_log"] = log_lines(here / "mps-daemon.log", 8)
    return observed


def mps_limits(pipe: Path) -> dict[str, str]:
    """What the MPS control daemon gives each client by default (the plugin's per-replica limits)."""
    out = {}
    for command in ("get_default_active_thread_percentage", "get_default_device_pinned_mem_limit 0"):
        try:
            answer = subprocess.run(["nvidia-cuda-mps-control"], input=command, capture_output=True, text=True, timeout=20,
                                    env={**os.environ, "CUDA_MPS_PIPE_DIRECTORY": str(pipe)})
            out[command] = (answer.stdout or answer.stderr).strip()
        except (OSError, subprocess.TimeoutExpired) as err:
            out[command] = f"failed: {err}"
    return out


def registration(kubelet: StandInKubelet, plugin: subprocess.Popen[bytes], timeout: float) -> Any:
    """The plugin's RegisterRequest, or None when it exits or `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            return kubelet.wait_registration(0.5)
        except queue.Empty:
            if plugin.poll() is not None:
                return None
    return None


def smi(*fields: str) -> str:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader", "-i", "0"], capture_output=True, text=True)
    except OSError as err:
        return f"nvidia-smi: {err}"
    return (out.stdout or out.stderr).strip()


def cdi_generate(bins: Path, work: Path) -> dict[str, Any]:
    """The node script's `nvidia-ctk cdi generate --output=<root>/var/run/cdi/nvidia.yaml`."""
    spec = CDI_DIR / "nvidia.yaml"
    spec.unlink(missing_ok=True)
    CDI_DIR.mkdir(parents=True, exist_ok=True)
    out = subprocess.run([str(bins / "nvidia-ctk"), "cdi", "generate", f"--output={spec}"], capture_output=True, text=True)
    listed = subprocess.run([str(bins / "nvidia-ctk"), "cdi", "list"], capture_output=True, text=True)
    result: dict[str, Any] = {
        "rc": out.returncode,
        "log": [ln for ln in (out.stdout + out.stderr).splitlines() if ln.strip()][-12:],
        "list": [ln for ln in listed.stdout.splitlines() if ln.strip()],
    }
    if spec.exists():
        shutil.copy(spec, work / "nvidia.yaml")
        result["devices"] = _spec_names(spec.read_text())
    return result


def summarized(obs: dict[str, Any]) -> dict[str, Any]:
    """The observation with its device list folded (a 1024-replica list is 1024 lines)."""
    if "devices" not in obs:
        return obs
    devices = obs["devices"]
    out = {k: v for k, v in obs.items() if k != "devices"}
    out["advertised"] = {
        "count": len(devices),
        "healthy": sum(d.get("health") == "Healthy" for d in devices),
        "distinct_ids": len({d["ID"] for d in devices}),
        "first_ids": [d["ID"] for d in devices[:3]],
        "gpu_uuids": sorted({d["ID"].split("::")[0] for d in devices}),
        "topology": sorted({json.dumps(d.get("topology", {}), sort_keys=True) for d in devices}),
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", type=Path, required=True, help="nvidia-device-plugin, mps-control-daemon, nvidia-ctk")
    parser.add_argument("--stubs", type=Path, required=True)
    parser.add_argument("--cases", type=Path, required=True)
    parser.add_argument("--work", type=Path, default=Path("/tmp/device-plugin-run"))
    parser.add_argument("--only", nargs="*", help="case names (default: all)")
    args = parser.parse_args(argv)
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    cases = [c for c in json.loads(args.cases.read_text()) if not args.only or c["name"] in args.only]
    before = smi("name", "driver_version", "memory.total", "compute_cap", "compute_mode", "mig.mode.current")
    print(record.GPU_HEADER)
    print(before)
    for case in cases:
        obs = summarized(run_case(case, args.bin, args.stubs, args.work))
        print("\n".join(record.case_lines(case, obs)))
        print(record.result_line(case, obs))
        sys.stdout.flush()
    print("\n".join(record.cdi_lines(cdi_generate(args.bin, args.work))))
    after = smi("name", "driver_version", "memory.total", "compute_cap", "compute_mode", "mig.mode.current")
    print(f"{record.AFTER}{after}")
    clean()
    return 0


if __name__ == "__main__":
    sys.exit(main())
