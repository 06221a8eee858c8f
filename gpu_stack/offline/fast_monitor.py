"""Every speed-up of the offline run, in one place: what each skips, and why that is safe.

Why this module exists: under Pulumi's mock runtime as it comes, most of a large plan's time
(1000 GPU nodes with validation Jobs; see bench/plan_scaling.py) goes to work nothing offline
reads. The runner itself stays on the public mock path (`pulumi.runtime.set_mocks(mocks,
monitor=...)`); each departure from the SDK's plain behaviour is here, and each falls back to the
SDK's own code where it cannot apply:

- `RecordingMonitor` answers a registration with its inputs as they came, instead of the
  SDK's MockMonitor deserializing them, calling the mocks and serializing the state again; with
  `answer_reads`, it answers a read itself too, the mocks' plain state serialized without the
  event loop (offline/fast_sdk.py calls the monitor on the loop's own thread, where the SDK's
  MockMonitor would drive the loop again from inside the call);
- `read_inputs` reads a registration's protobuf inputs directly (a third of the SDK reader's time),
  falling back to `rpc.deserialize_properties` for assets, archives, references and outputs;
- `quiet_runtime()` keeps the cyclic GC out of the run and stops the SDK from walking the
  Python stack for a source position on every registration (only the engine's errors show it).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from pulumi.runtime import mocks as pulumi_mocks, resource as pulumi_resource, rpc, settings as pulumi_settings
from pulumi.runtime.proto import resource_pb2

from .fast_sdk import NotPlain, plain_struct
from .plan import UNKNOWN


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """Keeps every registration; its state is its serialized inputs, sent back as they came.

    The SDK's MockMonitor would deserialize the inputs, hand them to the mocks and serialize the
    state again for every registration (an eighth of a 1000-node plan with validation Jobs, whose
    pod specs are large). The inputs are read and scrubbed once, when the plan is built.
    """

    def __init__(self, mocks: pulumi_mocks.Mocks, answer_reads: bool = False):
        super().__init__(mocks)
        self.records: list[tuple[Any, str]] = []
        self.reads: list[Any] = []
        self.answer_reads = answer_reads

    def ReadResource(self, request):  # the gRPC method name
        """A `.get`: the engine reads the live object in preview and up; offline the mocks echo it.
        Kept so the plan shows what the program reads (and what waits for the read)."""
        self.reads.append(request)
        if self.answer_reads:
            # The SDK's MockMonitor.ReadResource, but a plain state is serialized without
            # `_sync_await` (which, called on the loop's thread, runs the loop's other work inside)
            args = pulumi_mocks.MockResourceArgs(
                typ=request.type, name=request.name, inputs=rpc.deserialize_properties(request.properties),
                provider=request.provider, resource_id=request.id,
            )
            resource_id, state = self.mocks.new_resource(args)
            try:
                properties = plain_struct(state)
            except NotPlain:
                return super().ReadResource(request)
            urn = self.make_urn(request.parent, request.type, request.name)
            self.resources[urn] = pulumi_mocks.MockMonitor.ResourceRegistration(urn, cast(str, resource_id), state)
            return resource_pb2.ReadResourceResponse(urn=urn, properties=properties)
        return super().ReadResource(request)

    def RegisterResource(self, request):  # the gRPC method name
        if request.type == "pulumi:pulumi:Stack":
            return super().RegisterResource(request)
        urn = self.make_urn(request.parent, request.type, request.name)
        self.records.append((request, urn))
        return resource_pb2.RegisterResourceResponse(urn=urn, id=f"{request.name}-id", object=request.object)


class _OtherSignature(Exception):
    """An asset, archive, resource reference or output value: left to the SDK's reader."""


def read_inputs(struct: Any) -> Any:
    """A registration's serialized inputs as `rpc.deserialize_properties` reads them (secrets
    wrapped, a secret inside a list or a nested object making all of it secret, unknowns and
    nulls dropped from objects), straight from the protobuf fields: a third of its time."""
    if _FAST_READER:
        try:
            return _read_struct(struct)
        except _OtherSignature:
            pass
    return rpc.deserialize_properties(struct)


# The fast reader leans on the SDK's wire-format constants; without them, the SDK's own reader.
_FAST_READER = all(hasattr(rpc, name) for name in ("_special_sig_key", "_special_secret_sig", "UNKNOWN"))


def _read_struct(struct: Any) -> Any:
    fields = struct.fields
    if rpc._special_sig_key in fields:
        if fields[rpc._special_sig_key].string_value != rpc._special_secret_sig:
            raise _OtherSignature
        return rpc.wrap_rpc_secret(_read_value(fields["value"]) if "value" in fields else None)
    out = {}
    for key, value in fields.items():
        read = _read_value(value)
        if read is not None:
            out[key] = read
    return out


def _read_value(value: Any) -> Any:
    kind = value.WhichOneof("kind")
    if kind == "string_value":
        text = value.string_value
        if text == rpc.UNKNOWN:
            # As the SDK reads it: kept (as the plan's marker) in a preview, dropped otherwise.
            return UNKNOWN if pulumi_settings.is_dry_run() else None
        return text
    if kind == "number_value":
        return value.number_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "struct_value":
        props = _read_struct(value.struct_value)
        if isinstance(props, dict) and any(rpc.is_rpc_secret(v) for v in props.values()):
            return rpc.wrap_rpc_secret({k: rpc.unwrap_rpc_secret(v) for k, v in props.items()})
        return props
    if kind == "list_value":
        items = [_read_value(v) for v in value.list_value.values]
        if any(rpc.is_rpc_secret(v) for v in items):
            return rpc.wrap_rpc_secret([rpc.unwrap_rpc_secret(v) for v in items])
        return items
    return None


def _no_stack_trace() -> Any:
    from pulumi.runtime.proto import source_pb2

    return source_pb2.StackTrace()


@contextmanager
def quiet_runtime() -> Iterator[None]:
    """No cyclic GC and no per-registration stack walk while a plan runs; both restored after."""
    # The cyclic GC's full collections rescan every SDK object for each few hundred resources
    # (a fifth of a 1000-node plan). A plan is short-lived: no collection while it runs, and at the
    # end its objects are frozen (kept out of collections) until the next plan in this process
    # hands them back to the collector; the CLI simply exits.
    gc.unfreeze()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    # Each registration walks the whole Python stack (a stat() per frame) for a source position
    # the engine shows in its errors; nothing offline reads it, and it costs a fifth of a plan.
    stack_trace = getattr(pulumi_resource, "_get_stack_trace", None)
    if stack_trace is not None:
        pulumi_resource._get_stack_trace = _no_stack_trace
    try:
        yield
    finally:
        if stack_trace is not None:
            pulumi_resource._get_stack_trace = stack_trace
        gc.freeze()
        if gc_was_enabled:
            gc.enable()
