"""What a GPU machine needs for the run of gpu_run.py, in one folder (it has no Go, no grpcio-tools
and no network): the binaries from the toolchain cache, the generated stubs, the cases of today's
stack, this package. Made where the toolchain is built:

    python -m tests.deviceplugin.bundle .devrun      # then, on the GPU machine, the command it prints

grpcio and protobuf for the machine's Python are carried as wheels (pip download, as printed).
"""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
from pathlib import Path

from sandbox import toolchain
from tests.deviceplugin import cases, stubs

COMPONENTS = ("device-plugin", "mps-control-daemon", "nvidia-ctk")
BINARIES = ("nvidia-device-plugin", "mps-control-daemon", "nvidia-ctk", "nvidia-cdi-hook")
PACKAGE = Path(__file__).resolve().parent
RUN_COMMAND = (
    "cd {dest} && mkdir -p bin && tar -xzf bin.tar.gz -C bin && "
    "python3 -m pip install -q --no-index --no-deps --target /tmp/site whl/*.whl && "
    "PYTHONPATH=/tmp/site:$PWD PATH=$PWD/bin:$PATH python3 -m deviceplugin.gpu_run --bin bin --stubs stubs --cases cases.json"
)
WHEELS = (
    "python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "
    "--platform manylinux2014_x86_64 -d {dest}/whl grpcio=={grpcio} protobuf=={protobuf}"
)


def make(dest: Path) -> None:
    tools = toolchain.find(COMPONENTS)
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    with tarfile.open(dest / "bin.tar.gz", "w:gz") as tar:
        for name in BINARIES:
            tar.add(tools[name], arcname=name)
    generated = stubs.generate(stubs.api_proto(tools.pins["NVIDIA_DEVICE_PLUGIN_VERSION"]), dest / "stubs")
    shutil.rmtree(generated / "proto")
    shutil.copytree(PACKAGE, dest / "deviceplugin", ignore=shutil.ignore_patterns("__pycache__", "cases.py", "bundle.py"))
    (dest / "cases.json").write_text(json.dumps(cases.all_cases(), indent=1) + "\n")


if __name__ == "__main__":
    import google.protobuf
    import grpc

    target = Path(sys.argv[1] if len(sys.argv) > 1 else ".devrun")
    make(target)
    print(WHEELS.format(dest=target, grpcio=grpc.__version__, protobuf=google.protobuf.__version__))
    print(RUN_COMMAND.format(dest=target))
