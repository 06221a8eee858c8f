"""Run the real `__main__.py` under Pulumi's mock runtime and record what it registers.

No CLI, no cluster, no credentials: the mock monitor echoes each resource's inputs back as its
state (a secret input gives a secret output, as under the engine), and a recording monitor keeps
the type token, name, parent, dependencies, options and inputs of each registration. Secret inputs
(Pulumi secrets, and any string carrying a secret config value) are recorded as `[secret]`.

The program runs as in `pulumi preview` (`preview=True`): an output the provider only computes
when the resource exists (a command's stdout) is unknown, and the plan shows it as `[unknown]`,
never as null. Reads (`Node.get`) are answered with a minimal object of that id and listed under
`reads`. Resources are listed in one stable order (providers first, then depth-first by name),
whatever order the SDK's concurrent registrations took.
"""

from __future__ import annotations

import gc
import logging
import os
import runpy
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Iterator

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import resource as pulumi_resource
from pulumi.runtime import rpc
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.proto import resource_pb2
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from .. import engine
from ..stack_files import StackConfig, read_stack
from .plan import SECRET, UNKNOWN, Plan, ResourceRecord

PROJECT_DIR = Path(__file__).resolve().parents[2]


class PlanError(Exception):
    """The program refused the stack config (or the stack files): one clear message, no plan."""

    def __init__(self, message: str, registered: int = 0):
        super().__init__(message)
        self.registered = registered
        """How many resources the program had registered before it stopped (must be 0)."""


class _Scrubber:
    """Replaces Pulumi secrets and known secret strings by `[secret]`, recursively."""

    def __init__(self, secret_values: set[str]):
        self.secret_values = {v for v in secret_values if v}

    def __call__(self, value: Any) -> Any:
        if rpc.is_rpc_secret(value):
            return SECRET
        if isinstance(value, dict):
            return {k: self(value[k]) for k in sorted(value)}
        if isinstance(value, float) and value.is_integer():
            # The wire format carries every number as a double; show whole numbers as such.
            return int(value)
        if isinstance(value, (list, tuple)):
            return [self(v) for v in value]
        if isinstance(value, str) and any(s in value for s in self.secret_values):
            return SECRET
        return value

    def text(self, message: str) -> str:
        """A message with every known secret string cut out (the rest stays readable)."""
        for secret in sorted(self.secret_values, key=len, reverse=True):
            message = message.replace(secret, SECRET)
        return message

    def plain(self, value: Any) -> Any:
        """Outputs: unwrap nothing, just scrub known secret strings."""
        if isinstance(value, dict):
            return {k: self.plain(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.plain(v) for v in value]
        if isinstance(value, str) and any(s in value for s in self.secret_values):
            return SECRET
        return value


class _EchoMocks(pulumi.runtime.Mocks):
    """A read resource's state is its inputs (secrets unwrapped); invokes return nothing.

    Registrations never reach it: _RecordingMonitor answers them itself.
    """

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        if args.resource_id:
            # A read (`Node.get(name, id)`): the object exists, named as asked.
            return args.resource_id, _read_state(args.typ, args.resource_id)
        return f"{args.name}-id", _unwrap(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


def _read_state(type_token: str, resource_id: str) -> dict[str, Any]:
    """What a read of `resource_id` returns offline: for a Kubernetes object, its apiVersion, kind
    and metadata (name, namespace from a `namespace/name` id)."""
    if not type_token.startswith("kubernetes:"):
        return {"id": resource_id}
    group_version, kind = type_token.split(":", 1)[1].rsplit(":", 1)
    group, version = group_version.rsplit("/", 1)
    namespace, _, name = resource_id.rpartition("/")
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {"apiVersion": version if group == "core" else f"{group}/{version}", "kind": kind, "metadata": metadata}


def _unwrap(value: Any) -> Any:
    if rpc.is_rpc_secret(value):
        return _unwrap(rpc.unwrap_rpc_secret(value))
    if isinstance(value, dict):
        return {k: _unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unwrap(v) for v in value]
    return value


class _OtherSignature(Exception):
    """An asset, archive, resource reference or output value: left to the SDK's reader."""


def _read_inputs(struct: Any) -> Any:
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


def _urn_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def _urn_type(urn: str) -> str:
    return urn.rsplit("::", 2)[-2].rsplit("$", 1)[-1]


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    """Keeps every registration; its state is its serialized inputs, sent back as they came.

    The SDK's MockMonitor would deserialize the inputs, hand them to the mocks and serialize the
    state again for every registration (an eighth of a 1000-node plan with validation Jobs, whose
    pod specs are large). The inputs are read and scrubbed once, when the plan is built.
    """

    def __init__(self, mocks: _EchoMocks):
        super().__init__(mocks)
        self.records: list[tuple[Any, str]] = []
        self.reads: list[Any] = []

    def ReadResource(self, request):  # noqa: N802 - the gRPC method name
        """A `.get`: the engine reads the live object in preview and up; offline the mocks echo it.
        Kept so the plan shows what the program reads (and what waits for the read)."""
        self.reads.append(request)
        return super().ReadResource(request)

    def RegisterResource(self, request):  # noqa: N802 - the gRPC method name
        if request.type == "pulumi:pulumi:Stack":
            return super().RegisterResource(request)
        urn = self.make_urn(request.parent, request.type, request.name)
        self.records.append((request, urn))
        return resource_pb2.RegisterResourceResponse(urn=urn, id=f"{request.name}-id", object=request.object)



def _options(request: Any) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if request.protect:
        opts["protect"] = True
    if request.deleteBeforeReplace:
        opts["deleteBeforeReplace"] = True
    if list(request.replaceOnChanges):
        opts["replaceOnChanges"] = sorted(request.replaceOnChanges)
    if list(request.ignoreChanges):
        opts["ignoreChanges"] = sorted(request.ignoreChanges)
    if list(request.additionalSecretOutputs):
        opts["additionalSecretOutputs"] = sorted(request.additionalSecretOutputs)
    timeouts = request.customTimeouts
    if timeouts and (timeouts.create or timeouts.update or timeouts.delete):
        opts["customTimeouts"] = {
            k: v for k, v in (("create", timeouts.create), ("update", timeouts.update), ("delete", timeouts.delete)) if v
        }
    if request.provider:
        # "<provider urn>::<provider id>": the provider's name is the urn's last segment.
        opts["provider"] = request.provider.split("::")[-2]
    if request.retainOnDelete:
        opts["retainOnDelete"] = True
    return opts


@contextmanager
def _captured(stack_config: StackConfig) -> Iterator[tuple[dict[str, Any], list[str]]]:
    exports: dict[str, Any] = {}
    warnings: list[str] = []
    original_export = pulumi.export

    def export(name: str, value: Any) -> None:
        exports[name] = value
        original_export(name, value)

    class _Warnings(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                warnings.append(record.getMessage())

    handler = _Warnings()
    logger = logging.getLogger("gpu-stack.offline")
    logger.addHandler(handler)
    logger.propagate = False
    pulumi.export = export  # type: ignore[assignment]
    try:
        yield exports, warnings
    finally:
        pulumi.export = original_export  # type: ignore[assignment]
        logger.removeHandler(handler)


def _no_stack_trace() -> Any:
    from pulumi.runtime.proto import source_pb2

    return source_pb2.StackTrace()


async def _resolve(value: Any) -> Any:
    if isinstance(value, pulumi.Output):
        if not await value.is_known():
            return UNKNOWN
        return await _resolve(await value.future())
    if isinstance(value, dict):
        return {k: await _resolve(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [await _resolve(v) for v in value]
    return value


def run_program(
    stack_config: StackConfig,
    project_dir: Path | str = PROJECT_DIR,
    extra_secret_values: set[str] | None = None,
    offline: bool = True,
) -> Plan:
    """Run `<project_dir>/__main__.py` for one stack's config under mocks; return what it registered.

    Raises PlanError with the program's own message when it rejects the config. `offline=False`
    runs it as under the real engine (a missing secret is an error, not a placeholder): for tests.
    """
    project_dir = Path(project_dir)
    scrub = _Scrubber(stack_config.secret_values | (extra_secret_values or set()))
    mocks = _EchoMocks()
    monitor = _RecordingMonitor(mocks)

    pulumi_settings.ROOT.set(None)
    pulumi.runtime.set_all_config(stack_config.as_runtime_config(), sorted(stack_config.secret_keys))
    saved_env = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("PULUMI_CONFIG")}
    logger = logging.getLogger("gpu-stack.offline")
    pulumi.runtime.set_mocks(
        mocks,
        project=stack_config.project,
        stack=stack_config.stack,
        preview=True,
        logger=logger,
        monitor=monitor,
    )
    main = project_dir / "__main__.py"
    sys_path_added = str(project_dir) not in sys.path
    if sys_path_added:
        sys.path.insert(0, str(project_dir))
    resolved_outputs: dict[str, Any] = {}
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
        with _captured(stack_config) as (exports, warnings), (engine.offline() if offline else nullcontext()):

            def program() -> None:
                runpy.run_path(str(main), run_name="__main__")

            try:
                _sync_await(run_pulumi_func(program))
            except pulumi.RunError as exc:
                raise PlanError(scrub.text(str(exc)), registered=len(monitor.records)) from None
            for key, value in exports.items():
                resolved_outputs[key] = _sync_await(_resolve(value))
    finally:
        if stack_trace is not None:
            pulumi_resource._get_stack_trace = stack_trace
        gc.freeze()
        if gc_was_enabled:
            gc.enable()
        os.environ.update(saved_env)
        if sys_path_added:
            sys.path.remove(str(project_dir))

    urn_names = {urn: _urn_name(urn) for _, urn in monitor.records}
    records: list[ResourceRecord] = []
    for request, urn in monitor.records:
        parent = request.parent
        parent_name = None if not parent or _urn_type(parent) == "pulumi:pulumi:Stack" else _urn_name(parent)
        deps = sorted({urn_names.get(d, _urn_name(d)) for d in request.dependencies if _urn_type(d) != "pulumi:pulumi:Stack"})
        inputs = scrub(_read_inputs(request.object)) if request.custom else {}
        records.append(
            ResourceRecord(
                type=request.type,
                name=request.name,
                parent=parent_name,
                inputs=inputs,
                depends_on=deps,
                options=_options(request),
                custom=request.custom,
            )
        )
    reads = [
        {
            "type": r.type,
            "name": r.name,
            "id": r.id,
            "parent": None if not r.parent or _urn_type(r.parent) == "pulumi:pulumi:Stack" else _urn_name(r.parent),
        }
        for r in monitor.reads
    ]
    for env in getattr(stack_config, "environments", ()):
        warnings.append(
            f"the stack imports the ESC environment {env!r}: the offline plan cannot open it, so config "
            "values it provides are missing here (secrets among them show as placeholders)"
        )
    return Plan(
        project=stack_config.project,
        stack=stack_config.stack,
        resources=_stable_order(records),
        outputs=scrub.plain(resolved_outputs),
        warnings=[scrub.plain(w) for w in warnings],
        reads=sorted(reads, key=lambda r: (r["type"], r["name"])),
    )


def _stable_order(records: list[ResourceRecord]) -> list[ResourceRecord]:
    """Providers first, then every resource after its parent, siblings by name: the same list
    whatever order the registrations arrived in (they race on their dependencies)."""
    by_name = {r.name: r for r in records}

    def key(r: ResourceRecord) -> tuple[Any, ...]:
        chain, seen = [r], {r.name}
        while chain[-1].parent in by_name and chain[-1].parent not in seen:
            seen.add(chain[-1].parent)
            chain.append(by_name[chain[-1].parent])
        return tuple((0 if c.type.startswith("pulumi:providers:") else 1, c.name, c.type) for c in reversed(chain))

    return sorted(records, key=key)


def plan_stack(stack: str, project_dir: Path | str = PROJECT_DIR) -> Plan:
    """Read `Pulumi.yaml` + `Pulumi.<stack>.yaml` from project_dir and run the program offline."""
    return run_program(read_stack(project_dir, stack), project_dir)
