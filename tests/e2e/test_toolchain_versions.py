"""The toolchain the harness runs is the pinned one: the CLI, the language host beside it and both
provider plugins report the versions of toolchain/versions.env (a version stamp is an -X flag
that -trimpath keeps out of the build info, so the running binaries are asked)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import grpc
from google.protobuf import empty_pb2
from pulumi.runtime.proto import provider_pb2_grpc


def _plugin_version(binary: Path) -> str:
    """GetPluginInfo of a provider plugin started as the engine starts it (it prints its port)."""
    proc = subprocess.Popen([str(binary)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = int((proc.stdout.readline() if proc.stdout else "").strip())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            info = provider_pb2_grpc.ResourceProviderStub(channel).GetPluginInfo(empty_pb2.Empty(), timeout=30)
        return info.version
    finally:
        proc.kill()
        proc.wait()


def test_the_cli_and_its_language_host_are_the_pinned_release(tools):
    cli = subprocess.run([str(tools["pulumi"]), "version"], capture_output=True, text=True, check=True).stdout.strip()
    assert cli == f"v{tools.pulumi_version}"
    # the language host the CLI starts is the one beside it (the released layout)
    host = tools["pulumi"].parent / "pulumi-language-python"
    assert tools["pulumi-language-python"] == host
    version = subprocess.run([str(host), "-version"], capture_output=True, text=True, check=True).stdout.strip()
    assert version.lstrip("v") == tools.pulumi_version
    assert (host.parent / "pulumi-language-python-exec").is_file()


def test_both_provider_plugins_report_the_pinned_versions(tools):
    assert _plugin_version(tools["pulumi-resource-kubernetes"]) == tools.kubernetes_provider_version
    assert _plugin_version(tools["pulumi-resource-command"]) == tools.command_provider_version
