"""Only pods that request a GPU get one: the real nvidia-container-runtime v1.18.1 decides, on every
path the stack configures, with the toolkit config the stack writes.

A CUDA image sets NVIDIA_VISIBLE_DEVICES=all. For each path (toolkit on the host with containerd,
cri-o, Docker or k3s; the operator's toolkit; CDI on and off) the test takes the toolkit config the
stack leaves (host: node-prep.sh run by the real nvidia-ctk on a fake node; operator: the chart's
toolkit.env applied the way nvidia-ctk-installer maps it, cmd/nvidia-ctk-installer/toolkit/
toolkit.go), builds the OCI spec the kubelet and runtime would hand the nvidia runtime for three
pods (one that requested a GPU, in the form the device plugin's strategy for that path gives it;
one that did not; a privileged one that did not) and runs the real `nvidia-container-runtime
create` on it. What it asks for is read from its own debug log ("Creating CDI modifier for
devices: [...]" / "No devices requested", internal/modifier/cdi.go), or, in legacy mode, from the
`--device` its real prestart hook passes to nvidia-container-cli.

Stand-ins, each for a part that needs a GPU or runs containers: `runc` (runs the spec's prestart
hooks as runc does, then stops), `nvidia-container-cli` (records its arguments; the real one loads
the driver). The CDI specs are small files in place of the ones generated from the GPUs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpu_stack.config import load_settings
from gpu_stack.design.derive import derive
from gpu_stack.design.node_prep import host_values, node_values, render_script

from ..helpers import dev_config
from ..node_fakes import FakeNode
from ..toolchain import tool

FAKE_RUNC = f"""#!{sys.executable}
import json, os, subprocess, sys
args = sys.argv[1:]
bundle = args[args.index("--bundle") + 1] if "--bundle" in args else "."
spec = json.load(open(os.path.join(bundle, "config.json")))
for hook in (spec.get("hooks") or {{}}).get("prestart", []):
    state = json.dumps({{"ociVersion": "1.0.2", "id": "c", "status": "creating", "pid": 1, "bundle": bundle}})
    subprocess.run([hook["path"], *hook.get("args", [])[1:]], input=state, text=True, check=True)
    open(os.path.join(bundle, "..", "hook-ran"), "a").write(hook["path"] + "\\n")
"""
FAKE_CLI = '#!/bin/sh\nprintf \'%s\\n\' "$@" > "$(dirname "$0")/../cli-args"\n'
PLUGIN_SPEC = """cdiVersion: 0.5.0
kind: k8s.device-plugin.nvidia.com/gpu
devices:
- name: GPU-1
  containerEdits:
    deviceNodes: [{path: /dev/nvidia1, hostPath: /dev/null}]
"""
HOST_SPEC = """cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: all
  containerEdits:
    deviceNodes: [{path: /dev/nvidia0, hostPath: /dev/null}, {path: /dev/nvidia1, hostPath: /dev/null}]
"""
# nvidia-ctk-installer: env -> config key (toolkit.go, configValues); NVIDIA_CONTAINER_RUNTIME_MODE
# is the operator's own (controllers/object_controls.go, transformToolkitCtrForCDI).
INSTALLER_KEYS = {
    "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED": "accept-nvidia-visible-devices-envvar-when-unprivileged",
    "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS": "accept-nvidia-visible-devices-as-volume-mounts",
}


def settings_for(placement: str, runtime: str, cdi: bool, accept: bool = False):
    cfg = dev_config()
    cfg["toolkit"] = {"placement": placement, "cdi": cdi, "acceptEnvvarWhenUnprivileged": accept}
    if placement == "operator":
        cfg["driver"] = {"placement": "operator"}
    for node in cfg["nodes"]:
        node["runtime"] = runtime
    return load_settings(cfg)


def host_toolkit_config(tmp_path: Path, settings) -> str:
    """/etc/nvidia-container-runtime/config.toml after node-prep.sh's runtime phase."""
    node = FakeNode(tmp_path / "node")
    node.set_toolkit("1.18.1")
    runtime = settings.nodes[0].runtime
    if runtime in ("k3s", "rke2"):
        node.write(f"var/lib/rancher/{runtime}/agent/etc/containerd/config.toml",
                   'version = 3\n[plugins.\'io.containerd.cri.v1.runtime\'.containerd.runtimes.\'nvidia\']\n')
        node.add_stub(runtime)
    elif runtime == "crio":
        node.add_stub("crio")
    values = node_values(settings.nodes[0], host_values(settings.toolkit, settings.driver))
    values["GPU_STACK_EXPECT_NAMES"] = ""  # the fake node's GPUs are L4s
    values["GPU_STACK_EXPECT_COUNT"] = ""
    result = node.run(render_script(values))
    assert result.rc == 0, result.stderr
    return node.read("etc/nvidia-container-runtime/config.toml") or ""


def operator_toolkit_config(tmp_path: Path, values: dict[str, Any]) -> tuple[str, str]:
    """(config.toml the operator's toolkit writes from the chart's toolkit.env, runtime mode)."""
    path = tmp_path / "operator-config.toml"
    env = {e["name"]: e["value"] for e in values["toolkit"].get("env", [])}
    sets = [f"--set={INSTALLER_KEYS[k]}={v}" for k, v in env.items() if k in INSTALLER_KEYS]
    subprocess.run([str(tool("nvidia-ctk")), "config", f"--config-file={path}", "--in-place", *sets], check=True, capture_output=True)
    return path.read_text(), "cdi" if values["cdi"]["enabled"] else "auto"


def plugin_strategy(values: dict[str, Any]) -> str:
    """The device plugin's DEVICE_LIST_STRATEGY under these chart values (object_controls.go:
    CDI sets cdi-annotations,cdi-cri; devicePlugin.env is applied after it; default envvar)."""
    env = {e["name"]: e["value"] for e in values["devicePlugin"].get("env", [])}
    return env.get("DEVICE_LIST_STRATEGY", "cdi-annotations" if values["cdi"]["enabled"] else "envvar")


def pod_spec(kind: str, strategy: str) -> dict[str, Any]:
    """The OCI spec the nvidia runtime gets for a CUDA-image container (NVIDIA_VISIBLE_DEVICES=all)."""
    env = ["PATH=/usr/bin:/bin", "NVIDIA_VISIBLE_DEVICES=all"]
    spec: dict[str, Any] = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "linux": {},
                            "process": {"args": ["nvidia-smi"], "cwd": "/", "env": env}}
    if kind == "privileged":
        spec["process"]["capabilities"] = {"bounding": ["CAP_SYS_ADMIN"]}
    if kind != "asked":
        return spec
    # What the plugin's Allocate answer adds for GPU-1 (k8s-device-plugin internal/plugin/server.go).
    if strategy == "cdi-annotations":
        spec["annotations"] = {"cdi.k8s.io/nvidia-device-plugin_0": "k8s.device-plugin.nvidia.com/gpu=GPU-1"}
    elif strategy == "volume-mounts":
        env[1] = "NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"
        spec["mounts"] = [{"destination": "/var/run/nvidia-container-devices/GPU-1", "source": "/dev/null",
                           "type": "bind", "options": ["bind"]}]
    else:
        env[1] = "NVIDIA_VISIBLE_DEVICES=GPU-1"
    return spec


class Runtime:
    """The real nvidia-container-runtime (and hook) with one toolkit config, in a scratch folder."""

    def __init__(self, base: Path, config_text: str, mode: str):
        self.base = base
        (base / "bin").mkdir(parents=True)
        (base / "cdi").mkdir()
        (base / "bundle" / "rootfs").mkdir(parents=True)
        for name, text in (("runc", FAKE_RUNC), ("nvidia-container-cli", FAKE_CLI)):
            (base / "bin" / name).write_text(text)
            (base / "bin" / name).chmod(0o755)
        (base / "cdi" / "plugin.yaml").write_text(PLUGIN_SPEC)
        (base / "cdi" / "nvidia.yaml").write_text(HOST_SPEC)
        self.config = base / "config.toml"
        self.config.write_text(config_text)
        harness = {  # where the stand-ins are; the isolation keys stay as the stack wrote them
            "nvidia-container-runtime.runtimes": str(base / "bin" / "runc"),
            "nvidia-container-runtime.modes.cdi.spec-dirs": str(base / "cdi"),
            "nvidia-container-runtime.debug": str(base / "runtime.log"),
            "nvidia-container-runtime.log-level": "debug",
            "nvidia-container-runtime.mode": mode,
            "nvidia-container-runtime-hook.path": str(tool("nvidia-container-runtime-hook")),
            "nvidia-container-cli.path": str(base / "bin" / "nvidia-container-cli"),
        }
        subprocess.run([str(tool("nvidia-ctk")), "config", f"--config-file={self.config}", "--in-place",
                        *(f"--set={k}={v}" for k, v in harness.items())], check=True, capture_output=True)

    def requested(self, spec: dict[str, Any]) -> list[str]:
        """The devices the runtime asks for this container ([] for none)."""
        bundle = self.base / "bundle"
        (bundle / "config.json").write_text(json.dumps(spec))
        for name in ("runtime.log", "cli-args", "hook-ran"):
            (self.base / name).unlink(missing_ok=True)
        env = {"PATH": f"{self.base / 'bin'}:/usr/bin:/bin", "NVIDIA_CTK_CONFIG_FILE_PATH": str(self.config)}
        subprocess.run([str(tool("nvidia-container-runtime")), "create", "--bundle", str(bundle), "c1"],
                       env=env, capture_output=True, text=True, timeout=60)
        log = (self.base / "runtime.log").read_text()
        if (self.base / "hook-ran").exists():  # legacy mode: the real hook ran (and maybe the cli)
            cli = self.base / "cli-args"
            args = cli.read_text().split() if cli.exists() else []
            return [d for a in args if a.startswith("--device=") for d in a.removeprefix("--device=").split(",")]
        if "No devices requested" in log:
            return []
        found = re.search(r"Creating CDI modifier for devices: \[([^\]]*)\]", log)
        assert found, log
        return [d.split("=", 1)[1] for d in found.group(1).split()]


PATHS = [
    ("host", "containerd", True), ("host", "containerd", False), ("host", "crio", True), ("host", "crio", False),
    ("host", "docker", True), ("host", "docker", False), ("host", "k3s", True), ("host", "k3s", False),
    ("operator", "containerd", True), ("operator", "containerd", False), ("operator", "k3s", True),
]


def runtime_for(tmp_path: Path, placement: str, runtime: str, cdi: bool, accept: bool = False) -> tuple[Runtime, str]:
    settings = settings_for(placement, runtime, cdi, accept)
    values = derive(settings).values
    if placement == "host":
        text, mode = host_toolkit_config(tmp_path, settings), "auto"
    else:
        text, mode = operator_toolkit_config(tmp_path, values)
    return Runtime(tmp_path / "rt", text, mode), plugin_strategy(values)


@pytest.mark.parametrize("placement,runtime,cdi", PATHS, ids=[f"{p}-{r}-cdi-{c}" for p, r, c in PATHS])
def test_only_the_pod_that_asked_gets_a_gpu(tmp_path, placement, runtime, cdi):
    rt, strategy = runtime_for(tmp_path, placement, runtime, cdi)
    assert rt.requested(pod_spec("asked", strategy)) == ["GPU-1"]
    assert rt.requested(pod_spec("none", strategy)) == []
    # documented exception: a privileged container may still name GPUs by the variable
    assert rt.requested(pod_spec("privileged", strategy)) == ["all"]


@pytest.mark.parametrize("placement,runtime,cdi", [("host", "containerd", False), ("operator", "containerd", True)])
def test_with_the_toolkits_default_every_pod_gets_every_gpu(tmp_path, placement, runtime, cdi):
    """The hole is real: acceptEnvvarWhenUnprivileged true (the toolkit's default) opens it again."""
    rt, strategy = runtime_for(tmp_path, placement, runtime, cdi, accept=True)
    assert rt.requested(pod_spec("none", strategy)) == ["all"]
    assert rt.requested(pod_spec("asked", strategy)) == ["GPU-1"]


def test_closing_the_variable_without_the_volume_mounts_strategy_blocks_the_pod_that_asked(tmp_path):
    """Why CDI-off paths also switch the plugin to volume-mounts (NVIDIA/aicr#1354): with the envvar
    strategy, the pod that requested a GPU is unprivileged too and gets none."""
    rt, strategy = runtime_for(tmp_path, "host", "containerd", False)
    assert strategy == "volume-mounts"
    assert rt.requested(pod_spec("asked", "envvar")) == []


def test_the_legacy_hook_obeys_the_same_settings(tmp_path):
    """A host whose runtime is set to legacy mode by hand: the real prestart hook decides alike."""
    settings = settings_for("host", "containerd", False)
    rt = Runtime(tmp_path / "rt", host_toolkit_config(tmp_path, settings), "legacy")
    assert rt.requested(pod_spec("asked", "volume-mounts")) == ["GPU-1"]
    assert rt.requested(pod_spec("none", "volume-mounts")) == []
    assert rt.requested(pod_spec("privileged", "volume-mounts")) == ["all"]
