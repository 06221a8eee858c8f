"""Python stubs of the kubelet's device-plugin API (k8s.io/kubelet pkg/apis/deviceplugin/v1beta1),
generated with grpcio-tools from the api.proto of the Go module cache: the kubelet version the
device plugin v0.18.1 is built against (its go.mod), present once `toolchain/build.sh
device-plugin` has run (or fetched with `go mod download` when not). Nothing of the proto is committed; the stubs go to a temporary folder.

The gogoproto options of the file only steer Go code generation; they are dropped (with their
import, which names a Go import path Python cannot import) before protoc runs.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

PLUGIN_MODULE = "github.com/!n!v!i!d!i!a/k8s-device-plugin@v{version}"
PROTO_IN_KUBELET = Path("pkg/apis/deviceplugin/v1beta1/api.proto")


class ProtoMissing(RuntimeError):
    """The Go module cache holds no api.proto (the device plugin was never built here)."""


def go_mod_cache() -> Path:
    env = os.environ.get("GOMODCACHE")
    if env:
        return Path(env)
    try:
        out = subprocess.run(["go", "env", "GOMODCACHE"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return Path(out) if out else Path.home() / "go" / "pkg" / "mod"


def _download(module: str) -> None:
    """`go mod download` of one module into the module cache (a toolchain cache restored without
    the Go module cache, as CI may have it); nothing when Go is missing or the proxy refuses. The
    checksum database is skipped for it, as toolchain/build.sh does for the modules it builds."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(["go", "mod", "download", "-json", module], capture_output=True, timeout=300, cwd="/",
                       env={**os.environ, "GOTOOLCHAIN": "local", "GONOSUMDB": module.split("@")[0]})


def kubelet_version(plugin_version: str, cache: Path | None = None) -> str:
    """The k8s.io/kubelet version the device plugin's go.mod requires."""
    cache = cache or go_mod_cache()
    go_mod = cache / PLUGIN_MODULE.format(version=plugin_version) / "go.mod"
    if not go_mod.exists():
        _download(f"github.com/NVIDIA/k8s-device-plugin@v{plugin_version}")
    if not go_mod.exists():
        raise ProtoMissing(f"no {go_mod}: build the device plugin first (toolchain/build.sh device-plugin)")
    match = re.search(r"^\s*k8s\.io/kubelet\s+(v\S+)", go_mod.read_text(), re.M)
    if not match:
        raise ProtoMissing(f"{go_mod} requires no k8s.io/kubelet")
    return match.group(1)


def api_proto(plugin_version: str, cache: Path | None = None) -> Path:
    cache = cache or go_mod_cache()
    version = kubelet_version(plugin_version, cache)
    proto = cache / f"k8s.io/kubelet@{version}" / PROTO_IN_KUBELET
    if not proto.exists():
        _download(f"k8s.io/kubelet@{version}")
    if not proto.exists():
        raise ProtoMissing(f"no {proto}: build the device plugin first (toolchain/build.sh device-plugin)")
    return proto


_GOGO_IMPORT = re.compile(r'^import "github\.com/gogo/protobuf/gogoproto/gogo\.proto";\n', re.M)
_GOGO_FILE_OPTION = re.compile(r"^option \(gogoproto\.[a-z_]+\)\s*=\s*\w+;\n", re.M)
_GOGO_FIELD_OPTION = re.compile(r"\s*\[\(gogoproto\.[a-z_]+\)\s*=\s*\"[^\"]*\"\]")


def without_gogo(text: str) -> str:
    """The proto with its Go-only gogoproto options removed (the wire format is unchanged)."""
    text = _GOGO_FILE_OPTION.sub("", _GOGO_IMPORT.sub("", text))
    text = _GOGO_FIELD_OPTION.sub("", text)
    if "gogoproto" in text:
        raise ValueError("api.proto uses a gogoproto option this generator does not know how to drop")
    return text


def generate(proto: Path, dest: Path) -> Path:
    """api_pb2.py and api_pb2_grpc.py in `dest` (made with grpcio-tools' protoc); returns dest."""
    from grpc_tools import protoc  # grpcio-tools: requirements-dev.txt

    dest.mkdir(parents=True, exist_ok=True)
    src = dest / "proto"
    src.mkdir(exist_ok=True)
    (src / "api.proto").write_text(without_gogo(proto.read_text()))
    include = Path(protoc.__file__).parent / "_proto"
    rc = protoc.main(["protoc", f"-I{src}", f"-I{include}", f"--python_out={dest}", f"--grpc_python_out={dest}", str(src / "api.proto")])
    if rc != 0:
        raise RuntimeError(f"protoc failed ({rc}) on {proto}")
    return dest


def load(stubs_dir: Path) -> tuple[ModuleType, ModuleType]:
    """(api_pb2, api_pb2_grpc) from a folder `generate` filled (the generated grpc module imports
    `api_pb2` by its bare name, so the folder goes on sys.path)."""
    if str(stubs_dir) not in sys.path:
        sys.path.insert(0, str(stubs_dir))
    return importlib.import_module("api_pb2"), importlib.import_module("api_pb2_grpc")
