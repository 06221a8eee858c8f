"""What `run.py` needs on a GPU machine, in one folder, made where the toolchain is built:

    python -m sandbox.gpu_node_check.bundle [DIR] [--stack dev] [--node NAME --model H200 --count 1] [--debs DIR]

DIR (default .gpu-node-check, git-ignored):
  meta/        bundle.json (node, model, versions), node-command.txt (the node's `create` command
               from the stack's offline plan: the dev stack's config with its nodes replaced by this
               one node), node-prep.sh (the script that command checks by sha256), payloads/ (the
               validation payloads the containers run), device-plugin.yaml and device-plugin.env
               (the sharing config the stack generates for this node, and the plugin's environment
               as the GPU Operator sets it)
  debs/        Debian's containerd and runc (`apt-get download`, or the .debs of --debs)
  bin/         toolkit.tar.xz (nvidia-ctk, nvidia-cdi-hook, nvidia-container-runtime and its hook),
               crictl.tar.xz
  alt/         other OCI runtimes runc-probe tries where Debian's runc cannot start a container
               (--alt-debs: e.g. an older runc, crun and its libyajl2)
  kube/        kubelet.tar.xz, device-plugin.tar.xz (the kubelet stage; left out with --no-kube)

The binaries come from the toolchain cache (toolchain/build.sh; kubelet and crictl:
sandbox/gpu_node_check/build-node-tools.sh). Each part is its own path, so a machine that takes
a limited size per transfer can be sent them in turns.
"""

from __future__ import annotations

import argparse
import copy
import io
import json
import lzma
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

from gpu_stack.config.stack_files import read_stack
from gpu_stack.offline.runner import PROJECT_DIR, run_program
from sandbox import toolchain

PAYLOADS = ("cuda-smoke.sh", "no-gpu.sh", "vector-add.cu")
TOOLKIT = ("nvidia-ctk", "nvidia-cdi-hook", "nvidia-container-runtime", "nvidia-container-runtime-hook")
COMMAND = "command:remote:Command"
RELEASE = "kubernetes:helm.sh/v3:Release"


def node_plan(stack: str, node: str, model: str, count: int) -> Any:
    """The stack's offline plan with its nodes replaced by this one node (its other settings as they are)."""
    cfg = read_stack(PROJECT_DIR, stack)
    nodes = cfg.values.get("gpu-stack:nodes") or [{}]
    one = copy.deepcopy(nodes[0])
    one.update(name=node, address="127.0.0.1", gpu={"model": model, "count": count})
    one.pop("sharing", None)
    cfg.values["gpu-stack:nodes"] = [one]
    return run_program(cfg, PROJECT_DIR)


def node_command(plan: Any, node: str) -> str:
    (cmd,) = [r for r in plan.resources if r.type == COMMAND and r.name == f"node-prep-{node}"]
    return str(cmd.inputs["create"])


def device_plugin(plan: Any) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The device plugin's config for the node (the sharing ConfigMap's default key), its
    environment (tests/deviceplugin/cases.py: as operator v25.10.1 sets it), and the capacity row."""
    from tests.deviceplugin.cases import plugin_env

    (release,) = [r for r in plan.resources if r.type == RELEASE]
    values = release.inputs["values"]
    dp = values["devicePlugin"]["config"]
    (configmap,) = [r for r in plan.resources if r.inputs.get("metadata", {}).get("name") == dp["name"]]
    (row,) = [r for r in plan.capacity if r["node"] != "TOTAL"]
    return configmap.inputs["data"][dp["default"]], plugin_env(values), row


def xz_tar(dest: Path, files: list[Path]) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for f in files:
            tar.add(f, arcname=f.name)
    if shutil.which("xz"):  # multi-threaded: the kubelet alone takes minutes with one core
        dest.write_bytes(subprocess.run(["xz", "-6", "-T0", "-c"], input=buf.getvalue(), capture_output=True, check=True).stdout)
    else:
        dest.write_bytes(lzma.compress(buf.getvalue(), preset=6))


def tool(component: str, name: str, version_key: str, prefix: str) -> Path:
    version = toolchain.versions()[version_key]
    path = toolchain.cache_dir() / f"{prefix}-{version}" / name
    if not path.exists():
        raise SystemExit(f"{path} is missing: build it ({component}: `make e2e-tools`, or "
                         "`bash sandbox/gpu_node_check/build-node-tools.sh` for kubelet and crictl)")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", type=Path, default=PROJECT_DIR / ".gpu-node-check")
    ap.add_argument("--stack", default="dev")
    ap.add_argument("--node", default="gpu-node-check")
    ap.add_argument("--model", default="H200", help="the GPU model the node declares (config/gpu-models.yaml)")
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument("--debs", type=Path, help="a folder with containerd_*.deb and runc_*.deb (else apt-get download)")
    ap.add_argument("--no-kube", action="store_true", help="leave the kubelet stage's binaries out")
    ap.add_argument("--alt-debs", type=Path, help="other OCI runtimes for runc-probe to try (runc_*.deb, crun_*.deb with libyajl2_*.deb)")
    args = ap.parse_args(argv)
    out: Path = args.dir
    for part in ("meta", "debs", "bin", "kube", "alt"):
        shutil.rmtree(out / part, ignore_errors=True)
        (out / part).mkdir(parents=True)

    plan = node_plan(args.stack, args.node, args.model, args.count)
    meta = out / "meta"
    (meta / "node-command.txt").write_text(node_command(plan, args.node))
    shutil.copyfile(PROJECT_DIR / "config" / "node-scripts" / "node-prep.sh", meta / "node-prep.sh")
    (meta / "payloads").mkdir()
    # the payloads the containers run, with every helper they source (all the folder's scripts)
    for f in sorted((PROJECT_DIR / "config" / "validation").iterdir()):
        if f.suffix == ".sh" or f.name in PAYLOADS:
            shutil.copyfile(f, meta / "payloads" / f.name)
    config, env, row = device_plugin(plan)
    (meta / "device-plugin.yaml").write_text(config)
    (meta / "device-plugin.env").write_text(json.dumps(env, indent=1, sort_keys=True) + "\n")

    if args.debs:
        for pattern in ("containerd_*.deb", "runc_*.deb"):
            for deb in sorted(args.debs.glob(pattern)):
                shutil.copyfile(deb, out / "debs" / deb.name)
    else:
        subprocess.run(["apt-get", "download", "containerd", "runc"], cwd=out / "debs", check=True)
    for deb in sorted(args.alt_debs.glob("*.deb")) if args.alt_debs else []:
        shutil.copyfile(deb, out / "alt" / deb.name)
    debs = sorted(p.name for p in (out / "debs").glob("*.deb"))
    if len(debs) != 2:
        raise SystemExit(f"expected one containerd and one runc package in {out / 'debs'}, found {debs}")

    pins = toolchain.versions()
    xz_tar(out / "bin" / "toolkit.tar.xz", [tool("nvidia-ctk", n, "NVIDIA_CONTAINER_TOOLKIT_VERSION", "nvidia-container-toolkit") for n in TOOLKIT])
    cri = f"1.{pins['KUBERNETES_VERSION'].split('.')[1]}.0"
    crictl = toolchain.cache_dir() / f"cri-tools-{cri}" / "crictl"
    if not crictl.exists():
        raise SystemExit(f"{crictl} is missing: bash sandbox/gpu_node_check/build-node-tools.sh crictl")
    xz_tar(out / "bin" / "crictl.tar.xz", [crictl])
    if not args.no_kube:
        xz_tar(out / "kube" / "kubelet.tar.xz", [tool("kubelet", "kubelet", "KUBERNETES_VERSION", "kubelet")])
        xz_tar(out / "kube" / "device-plugin.tar.xz",
               [tool("device-plugin", "nvidia-device-plugin", "NVIDIA_DEVICE_PLUGIN_VERSION", "nvidia-device-plugin")])
    info = {
        "stack": args.stack, "node": args.node, "model": args.model, "count": args.count, "debs": debs,
        "toolkit": pins["NVIDIA_CONTAINER_TOOLKIT_VERSION"], "kubernetes": pins["KUBERNETES_VERSION"], "cri_tools": cri,
        "device_plugin": pins["NVIDIA_DEVICE_PLUGIN_VERSION"], "advertises": row.get("advertises"),
    }
    (meta / "bundle.json").write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
    for part in ("meta", "debs", "bin", "kube", "alt"):
        size = sum(f.stat().st_size for f in (out / part).rglob("*") if f.is_file())
        print(f"{out / part}: {size / 2**20:.1f} MiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
