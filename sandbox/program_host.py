"""Serves the project's `__main__.py` to the Pulumi CLI as its language runtime, the way the
Automation API serves an inline program: the pinned Python SDK's own `LanguageServer` on
127.0.0.1, the CLI connecting with `--client` (no `pulumi-language-python` binary needed).

Usage (by sandbox/pulumi_cli.py): `python -m sandbox.program_host PROJECT_DIR`; prints the port
on its first line, serves until stdin closes.
"""

from __future__ import annotations

import os
import runpy
import sys
from concurrent import futures
from pathlib import Path


def main(project_dir: str) -> int:
    import grpc
    from pulumi.automation._server import LanguageServer
    from pulumi.runtime._grpc_settings import _GRPC_CHANNEL_OPTIONS
    from pulumi.runtime.proto import language_pb2_grpc

    root = Path(project_dir).resolve()
    os.chdir(root)
    sys.path.insert(0, str(root))

    def program() -> None:
        runpy.run_path(str(root / "__main__.py"), run_name="__main__")

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=_GRPC_CHANNEL_OPTIONS)
    language_pb2_grpc.add_LanguageRuntimeServicer_to_server(LanguageServer(program), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    server.stop(0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
