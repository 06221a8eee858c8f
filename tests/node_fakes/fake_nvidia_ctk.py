"""A stand-in for `nvidia-ctk` v1.18.1 that changes files the way the real tool does.

Read from nvidia-container-toolkit v1.18.1 (cmd/nvidia-ctk/runtime/configure/configure.go,
pkg/config/engine/containerd/{containerd,config,config_v1,config_drop_in}.go, engine/crio,
engine/docker), the behaviours the node script depends on:

- `--config-source` defaults to `file`; `command` runs `containerd config dump`.
- The source's `version` decides the format: no keys at all -> 2; keys but no `version` -> 1;
  the CRI plugin is `cri` (v1), `io.containerd.grpc.v1.cri` (v2), `io.containerd.cri.v1.runtime` (v3).
- v1: no drop-in support; the whole source plus the runtime is saved to the output path, which is
  the drop-in path whenever one is set (so it lands in a file containerd never imports).
- v2/v3 with a drop-in: the drop-in holds `version` and the source's whole CRI plugin section plus
  the nvidia runtime (options copied from runc's) and, with `--cdi.enabled`, `enable_cdi = true`;
  the top-level file gets `imports = ["<drop-in dir>/*.toml"]` (and `version` when it was empty)
  and is re-saved on every run.
- `--drop-in-config=` (empty): the result is written into `--config` itself.
- docker: `runtimes.nvidia` in daemon.json; `--cdi.enabled` sets `features.cdi`.
- crio: the drop-in gets `[crio.runtime.runtimes.nvidia]`; `--cdi.enabled` is ignored.
- `config --in-place --set KEY=VALUE`: edits /etc/nvidia-container-runtime/config.toml.
- `cdi generate --output=FILE`: writes a CDI spec (a stand-in for the host's devices).

Files are written through a small TOML writer with a stable layout, so re-saving unchanged
content is byte-identical, as with the real tool. Paths are used as given (the tests pass
GPU_STACK_ROOT-prefixed ones); `containerd config dump` is run through the `containerd` on PATH.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
CRI_NAMES = {1: "cri", 2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}


# --------------------------------------------------------------------------- TOML writer
def _key(k: str) -> str:
    return k if k and all(c.isalnum() or c in "_-" for c in k) else json.dumps(k)


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {v!r}")


def dumps(tree: dict) -> str:
    out: list[str] = []

    def table(path: list[str], node: dict) -> None:
        scalars = {k: v for k, v in node.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in node.items() if isinstance(v, dict)}
        if path:
            out.append("")
            out.append("[" + ".".join(_key(p) for p in path) + "]")
        for k in sorted(scalars):
            out.append(f"{_key(k)} = {_value(scalars[k])}")
        for k in sorted(tables):
            table(path + [k], tables[k])

    table([], tree)
    return "\n".join(out).lstrip("\n") + "\n"


# --------------------------------------------------------------------------- helpers
def arg(args: list[str], name: str, default=None):
    for a in args:
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return default


def flag(args: list[str], *names: str) -> bool:
    return any(a in names or any(a == n + "=true" for n in names) for a in args)


def load(path: str) -> dict:
    p = Path(path)
    if not p.exists() or not p.read_text().strip():
        return {}
    return tomllib.loads(p.read_text())


def save(path: str, tree: dict) -> int:
    """Write `tree` (an empty tree removes the file, as the tool does); bytes written."""
    p = Path(path)
    if not tree:
        p.unlink(missing_ok=True)
        return 0
    text = dumps(tree)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return len(text)


def sub(tree: dict, *path: str) -> dict:
    node = tree
    for part in path:
        node = node.setdefault(part, {})
    return node


def get(tree: dict, *path: str):
    node = tree
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def command_source(executable: str | None) -> dict:
    proc = subprocess.run([executable or "containerd", "config", "dump"], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed to load config: containerd config dump: {proc.stderr.strip()}")
    return tomllib.loads(proc.stdout)


# --------------------------------------------------------------------------- containerd
def add_runtime(dest: dict, source: dict, version: int, cdi: bool, default: bool) -> None:
    cri = CRI_NAMES[version]
    dest["version"] = version
    options = None
    for name in ("runc", "runc-v2"):  # engine.GetLowLevelRuntimes: the default runtime, then runc
        found = get(source, "plugins", cri, "containerd", "runtimes", name)
        if found is not None:
            options = copy.deepcopy(found)
            break
    if options is None:
        options = {"runtime_type": "io.containerd.runc.v2", "runtime_root": "", "runtime_engine": "",
                   "privileged_without_host_devices": False}
    runtimes = sub(dest, "plugins", cri, "containerd", "runtimes")
    runtimes["nvidia"] = options
    sub(runtimes, "nvidia", "options")["BinaryName"] = RUNTIME_BINARY
    if version == 1:
        sub(runtimes, "nvidia", "options")["Runtime"] = RUNTIME_BINARY
    if default:
        sub(dest, "plugins", cri, "containerd")["default_runtime_name"] = "nvidia"
    elif get(dest, "plugins", cri, "containerd", "default_runtime_name") == "nvidia":
        del dest["plugins"][cri]["containerd"]["default_runtime_name"]
    if cdi:
        if version == 1:
            sub(dest, "plugins", cri, "containerd")["enable_cdi"] = True
        else:
            sub(dest, "plugins", cri)["enable_cdi"] = True


def configure_containerd(args: list[str]) -> None:
    config = arg(args, "--config", "/etc/containerd/config.toml")
    dropin = arg(args, "--drop-in-config", "/etc/containerd/conf.d/99-nvidia.toml")
    source_kind = arg(args, "--config-source", "file")
    if source_kind not in ("file", "command"):
        sys.exit(f"unrecognized Config Source: {source_kind}")
    cdi = flag(args, "--cdi.enabled", "--cdi.enable", "--enable-cdi")
    default = flag(args, "--set-as-default", "--nvidia-set-as-default")
    source = load(config) if source_kind == "file" else command_source(arg(args, "--executable-path"))
    if not source:
        version = 2
    elif "version" not in source:
        version = 1
    else:
        version = int(source["version"])
    print(f"INFO Using config version {version}", file=sys.stderr)
    if version == 1 or not dropin:
        # No drop-in: the whole source, modified, is saved to the output path.
        tree = copy.deepcopy(source)
        add_runtime(tree, source, version, cdi, default)
        out = dropin or config
        save(out, tree)
        print(f"INFO Wrote updated config to {out}", file=sys.stderr)
        return
    cri = CRI_NAMES[version]
    dest: dict = {}
    section = get(source, "plugins", cri)
    if section is not None:
        sub(dest, "plugins")[cri] = copy.deepcopy(section)
    add_runtime(dest, source, version, cdi, default)
    written = save(dropin, dest)
    top = load(config)
    if written:
        pattern = str(Path(dropin).parent) + "/*.toml"
        imports = list(top.get("imports", []))
        if pattern not in imports:
            if not top:
                top["version"] = version
            top["imports"] = imports + [pattern]
    save(config, top)
    print(f"INFO Wrote updated config to {dropin}", file=sys.stderr)


def configure_docker(args: list[str]) -> None:
    config = arg(args, "--config", "/etc/docker/daemon.json")
    p = Path(config)
    data = json.loads(p.read_text()) if p.exists() and p.read_text().strip() else {}
    data.setdefault("runtimes", {})["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
    if flag(args, "--set-as-default", "--nvidia-set-as-default"):
        data["default-runtime"] = "nvidia"
    if flag(args, "--cdi.enabled", "--cdi.enable", "--enable-cdi"):
        data.setdefault("features", {})["cdi"] = True
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(data, indent=4, sort_keys=True) + "\n")


def configure_crio(args: list[str]) -> None:
    dropin = arg(args, "--drop-in-config", "/etc/crio/conf.d/99-nvidia.toml")
    if flag(args, "--cdi.enabled", "--cdi.enable", "--enable-cdi"):
        print("WARN Ignoring cdi.enabled flag for crio", file=sys.stderr)
    dest = load(dropin)
    runtime = sub(dest, "crio", "runtime", "runtimes", "nvidia")
    runtime.update({"runtime_path": RUNTIME_BINARY, "runtime_type": "oci", "monitor_path": "/usr/libexec/crio/conmon"})
    if flag(args, "--set-as-default", "--nvidia-set-as-default"):
        sub(dest, "crio", "runtime")["default_runtime"] = "nvidia"
    save(dropin, dest)


def config_set(args: list[str], root: str) -> None:
    if "--in-place" not in args:
        sys.exit("fake nvidia-ctk: config without --in-place is not supported")
    path = arg(args, "--config-file", root + "/etc/nvidia-container-runtime/config.toml")
    tree = load(path)
    for a in args:
        if a.startswith("--set="):
            key, _, value = a[len("--set="):].partition("=")
            *parents, leaf = key.split(".")
            sub(tree, *parents)[leaf] = {"true": True, "false": False}.get(value, value)
    save(path, tree)


def main(argv: list[str]) -> None:
    root = os.environ.get("GPU_STACK_ROOT", "")
    if argv[:2] == ["runtime", "configure"]:
        runtime = arg(argv, "--runtime", "docker")
        {"containerd": configure_containerd, "docker": configure_docker, "crio": configure_crio}[runtime](argv[2:])
    elif argv[:1] == ["config"]:
        config_set(argv[1:], root)
    elif argv[:2] == ["cdi", "generate"]:
        out = Path(arg(argv, "--output", "/dev/stdout"))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text('cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: "0"\n- name: all\n')
    else:
        sys.exit(f"fake nvidia-ctk: unsupported: {' '.join(argv)}")


if __name__ == "__main__":
    main(sys.argv[1:])
