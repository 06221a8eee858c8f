"""The offline run's short paths through the Pulumi SDK (offline/fast_sdk.py) give the plan of the
SDK's own paths, byte for byte: for every committed stack, the bench's 20 distinct stacks, and
value by value against the SDK's serializer and reader."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pytest
import yaml
from google.protobuf import struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.sync_await import _ensure_event_loop, _sync_await

from gpu_stack.config.stack_files import read_stack
from gpu_stack.offline import fast_sdk
from gpu_stack.offline.runner import PROJECT_DIR, PlanError, run_program

from ..helpers import reference_dir

SAMPLES = PROJECT_DIR / "tests" / "stacks"
INPUT: Any = pulumi.Input  # the SDK's annotation, applied to types below as the generated SDKs do
SIG = rpc._special_sig_key
SECRET = {SIG: rpc._special_secret_sig, "value": "s3cret"}


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("fleet_plan_bench", PROJECT_DIR / "bench" / "fleet_plan.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _plan_both_ways(folder: Path, stack: str) -> tuple[str, str]:
    """The plan JSON (or the refusal) of `stack` in `folder` on the SDK's paths and on the short ones."""
    out = []
    for lean in (False, True):
        try:
            out.append(json.dumps(run_program(read_stack(folder, stack), folder, lean=lean).to_json(), sort_keys=True))
        except PlanError as exc:
            out.append(f"refused: {exc}")
    return out[0], out[1]


def _project_with(tmp: Path, files: Mapping[str, str]) -> Path:
    """A project folder with the program and the given stack files (name -> YAML text), and the
    reference chart where the air-gapped sample expects its local copy (when `make reference` put it there)."""
    tmp.mkdir(parents=True, exist_ok=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy(PROJECT_DIR / name, tmp / name)
    if (reference_dir() / "chart").is_dir():
        (tmp / "charts").mkdir()
        (tmp / "charts" / "gpu-operator").symlink_to(reference_dir() / "chart", target_is_directory=True)
    for name, text in files.items():
        (tmp / f"Pulumi.{name}.yaml").write_text(text)
    return tmp


def _committed_stacks() -> list[tuple[Path, str]]:
    own = [(PROJECT_DIR, p.name.split(".")[1]) for p in sorted(PROJECT_DIR.glob("Pulumi.*.yaml"))]
    samples = [(SAMPLES, p.name.split(".")[1]) for p in sorted(SAMPLES.glob("Pulumi.*.yaml"))]
    return own + samples


@pytest.mark.parametrize("where,stack", _committed_stacks(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_committed_stack_plans_the_same_on_the_short_paths(tmp_path, where, stack):
    folder = PROJECT_DIR if where == PROJECT_DIR else _project_with(
        tmp_path, {stack: (where / f"Pulumi.{stack}.yaml").read_text()})
    sdk, lean = _plan_both_ways(folder, stack)
    assert lean == sdk


def test_the_benchs_twenty_distinct_stacks_plan_the_same_on_the_short_paths(tmp_path):
    """bench/fleet_plan.py's stacks, before and after their edit: 40 plans, as `fleet plan` runs them."""
    bench = _bench()
    files = {}
    for i in range(17):
        base = bench.BASES[i % 3]
        doc = bench.distinct(yaml.safe_load((PROJECT_DIR / f"Pulumi.{base}.yaml").read_text()), i)
        files[f"{base}-{i:02d}"] = yaml.safe_dump(doc, sort_keys=False)
    files.update({base: (PROJECT_DIR / f"Pulumi.{base}.yaml").read_text() for base in bench.BASES})
    assert len(set(files.values())) == 20
    files.update({f"{name}-changed": bench._change(text) for name, text in list(files.items())})
    folder = _project_with(tmp_path / "fleet", files)
    differ = []
    for stack in files:
        sdk, lean = _plan_both_ways(folder, stack)
        assert not sdk.startswith("refused"), sdk
        if lean != sdk:
            differ.append(stack)
    assert differ == []


# Value by value: the short serializer against the SDK's serialize_property.

def _sdk_serialized(value: Any, transformer: Any = None, typ: Any = None) -> Any:
    return _sync_await(rpc.serialize_property(value, [], "key", None, transformer, typ))


@pytest.mark.parametrize(
    "value,transformer,typ",
    [
        ("x", None, None),
        (3, None, None),
        (1.5, None, INPUT[float]),
        (True, None, None),
        (None, None, None),
        ({"a_b": [1, "two", None, {"c_d": False}], "e": ()}, None, None),
        ({"a_b": {"c_d": 1}}, str.upper, None),  # the resource's own translation, all the way down
        ({"team_name": "x"}, str.upper, INPUT[Mapping[str, INPUT[str]]]),  # user keys kept
        ({"name": "n", "owner_references": [{"api_version": "v1", "block_owner_deletion": True}],
          "labels": {"app_kubernetes_io": "x"}}, None, INPUT[k8s.meta.v1.ObjectMetaArgs]),
        ((1, 2), None, list[INPUT[int]]),
    ],
)
def test_a_plain_value_is_serialized_as_the_sdk_serializes_it(value, transformer, typ):
    assert fast_sdk.plain(value, transformer, typ) == _sdk_serialized(value, transformer, typ)


def test_anything_but_a_plain_value_is_left_to_the_sdk():
    for value in (pulumi.Output.from_input("x"), {"deep": [pulumi.Output.secret("s")]}, pulumi.StringAsset("t"),
                  k8s.meta.v1.ObjectMetaArgs(name="n")):
        with pytest.raises(fast_sdk.NotPlain):
            fast_sdk.plain(value)
    # ...and through the installed function the SDK's answer comes back, outputs awaited
    with fast_sdk.lean_sdk():
        assert _sdk_serialized({"a": pulumi.Output.from_input("x"), "b": [1]}) == {"a": "x", "b": [1]}


def test_a_value_the_sdk_refuses_is_refused_on_the_short_path_too():
    with pytest.raises(AssertionError) as sdk:
        _sdk_serialized([1], None, str)
    with fast_sdk.lean_sdk(), pytest.raises(AssertionError) as lean:
        _sdk_serialized([1], None, str)
    assert str(lean.value) == str(sdk.value)


# The short reader against the SDK's deserialize_properties.

def _struct(value: dict[str, Any]) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    out.update(value)
    return out


def _comparable(value: Any) -> Any:
    if isinstance(value, pulumi.output.Unknown):
        return "<Unknown>"
    if rpc.is_rpc_secret(value):
        return {"<secret>": _comparable(rpc.unwrap_rpc_secret(value))}
    if isinstance(value, pulumi.StringAsset):
        return {"<asset>": value.text}
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_comparable(v) for v in value]
    return value


@pytest.mark.parametrize(
    "value",
    [
        {"a": "x", "n": 3, "f": 1.5, "b": False, "none": None, "unknown": rpc.UNKNOWN},
        {"conn": {"host": "h", "key": SECRET}},
        {"list": ["a", SECRET, None, rpc.UNKNOWN, [rpc.UNKNOWN]]},
        {"top": SECRET, "deep": {"x": [{"y": [SECRET]}]}},
        {"secretObject": {SIG: rpc._special_secret_sig, "value": {"k": "v", "l": [1, 2]}}},
        {"asset": {SIG: rpc._special_asset_sig, "text": "hello"}},
        {"empty": {}, "emptyList": [], "__internal": "kept"},
        SECRET,
    ],
)
@pytest.mark.parametrize("keep_unknowns", [None, True])
def test_an_answer_is_read_back_as_the_sdk_reads_it(value, keep_unknowns):
    struct = _struct(value)
    sdk_reader = rpc.deserialize_properties
    sdk = sdk_reader(struct, keep_unknowns)
    with fast_sdk.lean_sdk():
        assert rpc.deserialize_properties is not sdk_reader
        lean = rpc.deserialize_properties(struct, keep_unknowns)
    assert _comparable(lean) == _comparable(sdk)


def test_the_sdk_gets_its_own_functions_back_after_a_run():
    before = (rpc.serialize_property, rpc.deserialize_properties, pulumi.log.debug)
    loop = _ensure_event_loop()
    with fast_sdk.lean_sdk():
        assert (rpc.serialize_property, rpc.deserialize_properties, pulumi.log.debug) != before
        assert "run_in_executor" in loop.__dict__
    assert (rpc.serialize_property, rpc.deserialize_properties, pulumi.log.debug) == before
    assert "run_in_executor" not in loop.__dict__
    assert isinstance(loop, asyncio.AbstractEventLoop)


def test_one_walk_of_the_inputs_gives_the_scrubbed_inputs_and_the_fingerprints_of_two_walks():
    from gpu_stack.offline.scrub import Scrubber

    scrub = Scrubber({"hunter2"})
    secret = rpc.wrap_rpc_secret
    value = {
        "z": [1.0, 2.5, "pass=hunter2", (secret({"k": [1, {"m": "v"}]}), pulumi.FileAsset("/etc/x"))],
        "a": {"b.c": secret("s"), "b": {"c": "hunter2 again"}, "n": None, "e": secret([])},
    }
    inputs, prints = scrub.inputs(value)
    assert inputs == scrub(value)
    assert list(prints.items()) == list(scrub.fingerprints(value).items())  # the same paths, in the same order
    assert "a.b.c" in prints and "z[3][0].k[1].m" in prints


@pytest.mark.parametrize("parent", [None, "urn:pulumi:dev::gpu-stack::gpu-stack:index:GpuPlatform::gpu-stack", ""])
def test_a_urn_named_by_strings_is_the_sdks(parent):
    from pulumi.runtime import resource as sdk_resource

    args = ("gpu-operator", "kubernetes:helm.sh/v3:Release", parent, "gpu-stack", "dev")
    sdk_create_urn = sdk_resource.create_urn
    sdk = _sync_await(sdk_create_urn(*args).future())
    with fast_sdk.lean_sdk():
        assert sdk_resource.create_urn is not sdk_create_urn
        lean = _sync_await(sdk_resource.create_urn(*args).future())
    assert lean == sdk and lean.endswith("kubernetes:helm.sh/v3:Release::gpu-operator")
