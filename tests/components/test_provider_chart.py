"""The real kubernetes provider (pulumi-kubernetes 4.25.0, built by toolchain/build.sh) loads the
release the stack registers for a local chart, folder or .tgz, from disk with no network (every
connection goes to an unroutable proxy), and refuses what the stack refuses first: a chart
without its NFD subchart (even with NFD off) and a path that does not exist."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ..helpers import CHART_REF, built_tool, dev_config, plan_of, reference_dir, require_reference

CHART = reference_dir() / "chart"
RELEASE_URN = "urn:pulumi:test::gpu-stack::kubernetes:helm.sh/v3:Release::gpu-operator-release"
KUBECONFIG = (
    "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
    "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
)


@pytest.fixture(scope="module")
def provider(tmp_path_factory) -> Iterator[Any]:
    require_reference(CHART_REF)
    binary = built_tool("pulumi-kubernetes", "PULUMI_KUBERNETES_VERSION", "pulumi-resource-kubernetes")
    import grpc
    from google.protobuf import struct_pb2
    from pulumi.runtime.proto import provider_pb2, provider_pb2_grpc

    home = tmp_path_factory.mktemp("provider-home")
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    proc = subprocess.Popen([str(binary)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    try:
        port = proc.stdout.readline().strip()  # type: ignore[union-attr]
        stub = provider_pb2_grpc.ResourceProviderStub(grpc.insecure_channel(f"127.0.0.1:{port}"))

        def struct(d: dict[str, Any]) -> Any:
            s = struct_pb2.Struct()
            s.update(d)
            return s

        stub.Configure(provider_pb2.ConfigureRequest(
            variables={"kubernetes:config:kubeconfig": KUBECONFIG}, args=struct({"kubeconfig": KUBECONFIG}),
            acceptSecrets=True, acceptResources=True,
        ))

        def check(inputs: dict[str, Any]) -> list[tuple[str, str]]:
            request = provider_pb2.CheckRequest(urn=RELEASE_URN, olds=struct({}), news=struct(inputs), randomSeed=b"0" * 32)
            return [(f.property, f.reason) for f in stub.Check(request).failures]

        yield check
    finally:
        proc.kill()
        proc.wait()


def _release_inputs(chart_path: Path, **operator: Any) -> dict[str, Any]:
    cfg = dev_config()
    cfg["operator"] = {"chartPath": str(chart_path), **operator}
    inputs = plan_of(cfg).by_name("gpu-operator-release").inputs
    return {k: inputs[k] for k in ("chart", "version", "name", "namespace", "values")}


@pytest.mark.parametrize("form", ["folder", "tgz"])
def test_the_provider_loads_the_stacks_local_chart_offline(provider, tmp_path: Path, form: str):
    source: Path = CHART
    if form == "tgz":
        source = tmp_path / "gpu-operator-v25.10.1.tgz"
        with tarfile.open(source, "w:gz") as tar:
            tar.add(CHART, arcname="gpu-operator")
    inputs = _release_inputs(source)
    assert "repositoryOpts" not in inputs and inputs["chart"] == str(source)
    assert provider(inputs) == []


def test_the_provider_refuses_a_chart_without_its_nfd_subchart_even_with_nfd_off(provider, tmp_path: Path):
    bare = shutil.copytree(CHART, tmp_path / "gpu-operator", ignore=shutil.ignore_patterns("node-feature-discovery"))
    inputs = {"chart": str(bare), "version": "v25.10.1", "name": "gpu-operator", "namespace": "gpu-operator", "values": {"nfd": {"enabled": False}}}
    ((prop, reason),) = provider(inputs)
    assert prop == "chart" and "missing in charts/ directory: node-feature-discovery" in reason
    missing = {**inputs, "chart": str(tmp_path / "nowhere")}
    assert provider(missing)[0][1].startswith(f'path "{tmp_path / "nowhere"}" not found')
