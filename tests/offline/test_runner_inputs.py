"""The runner reads each registration's inputs itself: exactly what the SDK's reader gives."""

from __future__ import annotations

from typing import Any

import pulumi
import pytest
from google.protobuf import struct_pb2
from pulumi.runtime import rpc

from gpu_stack.offline import fast_monitor
from gpu_stack.offline.plan import UNKNOWN

from ..helpers import dev_config, plan_of, plan_stack_file

SIG = rpc._special_sig_key
SECRET = {SIG: rpc._special_secret_sig, "value": "s3cret"}


def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


@pytest.mark.parametrize(
    "value",
    [
        {"a": "x", "n": 3, "f": 1.5, "b": False, "none": None, "unknown": rpc.UNKNOWN},
        {"conn": {"host": "h", "key": SECRET}},  # a secret inside an object makes all of it secret
        {"list": ["a", SECRET, None, rpc.UNKNOWN]},  # ...and inside a list
        {"top": SECRET, "deep": {"x": [{"y": [SECRET]}]}},
        {"secretObject": {SIG: rpc._special_secret_sig, "value": {"k": "v", "l": [1, 2]}}},
        {"empty": {}, "emptyList": [], "__internal": "kept"},
    ],
)
def test_inputs_are_read_as_the_sdk_reads_them(value):
    struct = _struct(value)
    # The SDK keeps an unknown as an Unknown object in a preview (as the runner plans), the
    # runner as its plan marker "[unknown]".
    assert fast_monitor.read_inputs(struct) == _marked(rpc.deserialize_properties(struct))


def _marked(value: Any) -> Any:
    if isinstance(value, pulumi.output.Unknown):
        return UNKNOWN
    if isinstance(value, dict):
        return {k: _marked(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_marked(v) for v in value]
    return value


def test_an_asset_is_left_to_the_sdk_reader():
    (asset,) = fast_monitor.read_inputs(_struct({"asset": {SIG: rpc._special_asset_sig, "text": "hello"}})).values()
    assert isinstance(asset, pulumi.StringAsset) and asset.text == "hello"


def _assets_by_path(value: Any) -> Any:
    """Inputs with each FileAsset as its path (assets compare by identity)."""
    if isinstance(value, pulumi.FileAsset):
        return ("FileAsset", value.path)
    if isinstance(value, dict):
        return {k: _assets_by_path(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_assets_by_path(v) for v in value]
    return value


def test_every_registration_of_real_plans_reads_the_same(monkeypatch):
    seen: list[Any] = []
    original = fast_monitor.RecordingMonitor.RegisterResource

    def register(monitor, request):
        seen.append(request.object)
        return original(monitor, request)

    monkeypatch.setattr(fast_monitor.RecordingMonitor, "RegisterResource", register)
    cfg = dev_config()
    ssh = {**cfg.pop("ssh"), "privateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----\n"}
    plan_of(cfg, secrets={"ssh": ssh, "kubernetes": {**cfg.pop("kubernetes", {}), "kubeconfig": "apiVersion: v1"}})
    for stack in ("staging", "prod"):
        plan_stack_file(stack)
    assert len(seen) > 50
    secret_seen = False
    for struct in seen:
        sdk = rpc.deserialize_properties(struct)
        assert _assets_by_path(fast_monitor.read_inputs(struct)) == _assets_by_path(sdk)
        secret_seen = secret_seen or any(rpc.is_rpc_secret(v) for v in sdk.values())
    assert secret_seen  # the node commands' connection and the provider's kubeconfig
