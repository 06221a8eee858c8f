"""The Pulumi SDK's own work in an offline run, done the short way where the values are plain.

Why this module exists: once the recording monitor (offline/fast_monitor.py) answers every
registration, three quarters of a warm offline run is still the SDK's generic machinery, most of
it spent on values that hold no Output, resource, asset or input class (bench/fleet_plan.py and
BENCHMARKS.md, "The fleet plan: 20 distinct stacks against one"). `lean_sdk()` installs, for the
length of one run, a shorter path for each of these, and gives the SDK its own functions back after:

- `rpc.serialize_property` of a plain value (str, number, bool, None, and lists and dicts of them)
  returns it as the SDK's would, with the same key translation, without a coroutine, an await and
  a dozen type checks per leaf; anything else (an Output, a resource, an asset, an input class, a
  type the SDK would refuse) goes to the SDK's function, whole;
- `rpc.deserialize_properties` (the SDK reading a registration's answer back) reads the protobuf
  fields straight, as fast_monitor.read_inputs does, with the SDK's meaning (`Unknown` where the
  engine knows the value later, secrets pushed up to their list or object); a signature (asset,
  archive, reference, secret at the top) goes to the SDK's function;
- `loop.run_in_executor(None, call)`, which the SDK uses to send each request to the monitor on a
  thread, calls the recording monitor at once: it answers from memory, and the thread hop (a
  handover of the GIL, a wake-up of the event loop through its pipe) cost more than the answer;
- `pulumi.log.debug` does nothing: each call built a protobuf LogRequest that the mock engine
  then dropped (the offline logger shows warnings only);
- the SDK's pure functions of a type annotation (`unwrap_type`, `unwrap_optional_type`,
  `get_origin`), asked again for every value, answer from memory;
- a `depends_on` that is a plain list of resources is that set of resources, and the URN of a
  resource named by strings is that string in a resolved Output, without the chains of Outputs
  (and their tasks) the SDK builds to reach the same values.

Each departure must give the plan of the SDK's own path, byte for byte:
tests/offline/test_lean_sdk.py plans every committed stack and the bench's 20 distinct stacks
both ways (`run_program(lean=False)` is the SDK's path).
"""

from __future__ import annotations

import asyncio
import typing
from collections import abc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, get_args, get_origin

import pulumi
from google.protobuf import struct_pb2
from pulumi import _types
from pulumi.runtime import _depends_on, known_types, resource as sdk_resource, rpc, settings as pulumi_settings
from pulumi.runtime.sync_await import _ensure_event_loop


class NotPlain(Exception):
    """A value the short path does not take: the SDK's own function serializes it."""


_SCALARS = (str, int, float, bool)
_MAPPING_ORIGINS = (dict, typing.Dict, abc.Mapping, typing.Mapping)  # noqa: UP006 - as the SDK compares


def _memo(function: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`function` of one annotation, remembered for this process by the annotation's identity (not
    its equality: `Union[A, None]` equals `Union[None, A]`, and the SDK's unwrapping reads the
    order). What raises is not remembered: it raises again."""
    memo: dict[int, tuple[Any, Any]] = {}

    def remembered(typ: Any) -> Any:
        seen = memo.get(id(typ))
        if seen is not None and seen[0] is typ:
            return seen[1]
        out = function(typ)
        memo[id(typ)] = (typ, out)  # the annotation kept: its id is not reused while remembered
        return out

    return remembered


# The short paths lean on these SDK internals (pulumi 3.259.0); without any of them, the SDK's path as it is.
AVAILABLE = all(hasattr(module, name) for module, names in (
    (rpc, ("get_origin", "serialize_property", "deserialize_properties", "_get_list_element_type", "_special_sig_key",
           "UNKNOWN")),
    (_types, ("unwrap_type", "unwrap_optional_type", "is_input_type", "input_type_py_to_pulumi_names", "input_type_types")),
    (_depends_on, ("_resolve_depends_on",)),
    (sdk_resource, ("create_urn",)),
) for name in names)

_unwrap_type, _unwrap_optional_type, _get_origin = (
    _memo(getattr(module, name, lambda typ: typ))
    for module, name in ((_types, "unwrap_type"), (_types, "unwrap_optional_type"), (rpc, "get_origin"))
)
"""The SDK's pure functions of an annotation, asked for every value it serializes or reads back."""


def _unwrapped(typ: Any) -> Any:
    """`_types.unwrap_type(typ)` (Any as None), as serialize_property starts."""
    try:
        typ = _unwrap_type(typ)
    except Exception:  # the SDK's function raises it, with its own message
        raise NotPlain from None
    return None if typ is Any else typ


def plain(value: Any, input_transformer: Callable[[str], str] | None = None, typ: Any = None) -> Any:
    """`rpc.serialize_property(value, ...)` for a plain value, without awaiting; raises NotPlain
    for anything else. The same key translation: an input class's names where `typ` is one, none
    inside a `dict[str, T]`, the resource's `input_transformer` where there is no type."""
    kind = type(value)
    if value is None or kind in _SCALARS:
        if typ is not None:
            _unwrapped(typ)  # what the SDK's function would raise on, it raises on here too
        return value
    typ = _unwrapped(typ) if typ is not None else None
    if kind is list or kind is tuple:
        try:
            element = rpc._get_list_element_type(typ)
        except AssertionError:
            raise NotPlain from None
        return [plain(v, input_transformer, element) for v in value]
    if kind is not dict:
        raise NotPlain
    translate: Callable[[str], str] | None = input_transformer
    get_type: Callable[[str], Any] | None = None
    if typ is not None:
        if _types.is_input_type(typ):
            names = _types.input_type_py_to_pulumi_names(typ)
            get_type = _types.input_type_types(typ).get
            translate = lambda k: names.get(k) or k  # noqa: E731 - as the SDK's
        else:
            translate = None
            if typ is dict or get_origin(typ) in _MAPPING_ORIGINS:
                args = get_args(typ)
                if len(args) == 2 and args[0] is str:
                    get_type = lambda k: args[1]  # noqa: E731
    out = {}
    for key in value:
        name = translate(key) if translate is not None else key
        out[name] = plain(value[key], input_transformer, get_type(name) if get_type is not None else None)
    return out


def plain_struct(state: Any) -> struct_pb2.Struct:
    """`rpc.serialize_properties(state, {})` of a plain mapping (keys as they are, a None value
    left out), without the event loop; raises NotPlain for anything else."""
    if type(state) is not dict:
        raise NotPlain
    struct = struct_pb2.Struct()
    for key in state:
        value = plain(state[key])
        if value is not None:
            struct[key] = value
    return struct


def _serialize_property(sdk: Callable[..., Any]) -> Callable[..., Any]:
    async def serialize_property(
        value: Any, deps: Any, property_key: Any, resource_obj: Any = None,
        input_transformer: Any = None, typ: Any = None, keep_output_values: bool = False,
        exclude_resource_refs_from_deps: bool = False, return_protobuf_value: bool = False,
    ) -> Any:
        if not return_protobuf_value:
            try:
                return plain(value, input_transformer, typ)
            except NotPlain:
                pass
        return await sdk(value, deps, property_key, resource_obj, input_transformer, typ, keep_output_values,
                         exclude_resource_refs_from_deps, return_protobuf_value)

    return serialize_property


class _OtherValue(Exception):
    """A protobuf value the short reader does not take: the SDK's reader reads the whole struct."""


def _deserialize_properties(sdk: Callable[..., Any]) -> Callable[..., Any]:
    from pulumi.output import Unknown

    def read(value: Any, keep_unknowns: Any) -> Any:
        kind = value.WhichOneof("kind")
        if kind == "string_value":
            text = value.string_value
            if text == rpc.UNKNOWN:
                return Unknown() if pulumi_settings.is_dry_run() or keep_unknowns else None
            return text
        if kind == "number_value":
            return value.number_value
        if kind == "bool_value":
            return value.bool_value
        if kind == "null_value":
            return None
        if kind == "struct_value":
            props = deserialize_properties(value.struct_value, keep_unknowns)
            if isinstance(props, dict) and any(rpc.is_rpc_secret(v) for v in props.values()):
                return rpc.wrap_rpc_secret({k: rpc.unwrap_rpc_secret(v) for k, v in props.items()})
            return props
        if kind == "list_value":
            items = [read(v, keep_unknowns) for v in value.list_value.values]
            if any(rpc.is_rpc_secret(v) for v in items):
                return rpc.wrap_rpc_secret([rpc.unwrap_rpc_secret(v) for v in items])
            return items
        raise _OtherValue  # a Value with nothing set: the SDK's reader says what it says

    def deserialize_properties(props_struct: Any, keep_unknowns: Any = None, keep_internal: Any = True) -> Any:
        fields = props_struct.fields
        if keep_internal is False or rpc._special_sig_key in fields:
            return sdk(props_struct, keep_unknowns, keep_internal)
        try:
            out = {}
            for key, value in fields.items():
                read_value = read(value, keep_unknowns)
                if read_value is not None:
                    out[key] = read_value
            return out
        except _OtherValue:
            return sdk(props_struct, keep_unknowns, keep_internal)

    return deserialize_properties


def _run_at_once(sdk_run: Callable[..., Any], loop: asyncio.AbstractEventLoop) -> Callable[..., Any]:
    def run_in_executor(executor: Any, func: Callable[..., Any], *args: Any) -> Any:
        if executor is not None:
            return sdk_run(executor, func, *args)
        future = loop.create_future()
        try:
            future.set_result(func(*args))
        except Exception as exc:  # as a thread would: the awaiting coroutine raises it
            future.set_exception(exc)
        return future

    return run_in_executor


def _no_debug(*args: Any, **kwargs: Any) -> None:
    return None


def _resolve_depends_on(sdk: Callable[..., Any]) -> Callable[..., Any]:
    async def resolve_depends_on(depends_on: Any) -> Any:
        # The SDK's: each resource made an Output, awaited for its resources and its value (itself)
        if type(depends_on) is list and all(known_types.is_resource(r) for r in depends_on):
            return set(depends_on)
        return await sdk(depends_on)

    return resolve_depends_on


def _create_urn(sdk: Callable[..., Any]) -> Callable[..., Any]:
    def create_urn(name: Any, type_: Any, parent: Any = None, project: Any = None, stack: Any = None) -> Any:
        if type(name) is not str or type(type_) is not str or (parent is not None and type(parent) is not str):
            return sdk(name, type_, parent, project, stack)  # a resource or an Output among them
        if parent is not None:
            prefix = parent[0 : parent.rfind("::")] + "$"
        else:
            stack = pulumi_settings.get_stack() if stack is None else stack
            project = pulumi_settings.get_project() if project is None else project
            prefix = "urn:pulumi:" + stack + "::" + project + "::"
        return pulumi.Output.from_input(prefix + type_ + "::" + name)

    return create_urn


@contextmanager
def lean_sdk(enabled: bool = True) -> Iterator[None]:
    """The short paths above for the length of one offline run; the SDK's own afterwards."""
    if not (enabled and AVAILABLE):
        yield
        return
    loop = _ensure_event_loop()  # the loop the run's _sync_await drives
    short: list[tuple[Any, str, Any]] = [
        (_types, "unwrap_type", _unwrap_type),
        (_types, "unwrap_optional_type", _unwrap_optional_type),
        (rpc, "get_origin", _get_origin),
        (rpc, "serialize_property", _serialize_property(rpc.serialize_property)),
        (rpc, "deserialize_properties", _deserialize_properties(rpc.deserialize_properties)),
        (pulumi.log, "debug", _no_debug),
        (_depends_on, "_resolve_depends_on", _resolve_depends_on(_depends_on._resolve_depends_on)),
        (sdk_resource, "create_urn", _create_urn(sdk_resource.create_urn)),
    ]
    saved = [(module, name, getattr(module, name)) for module, name, _ in short]
    own_run = loop.__dict__.get("run_in_executor")
    for module, name, function in short:
        setattr(module, name, function)
    loop.run_in_executor = _run_at_once(loop.run_in_executor, loop)  # type: ignore[method-assign]
    try:
        yield
    finally:
        for module, name, function in saved:
            setattr(module, name, function)
        if own_run is None:
            del loop.run_in_executor
        else:
            loop.run_in_executor = own_run  # type: ignore[method-assign]
