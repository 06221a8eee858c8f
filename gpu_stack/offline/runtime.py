"""Pulumi's mock runtime, set up for one offline run of the program and put back afterwards.

`EchoMocks` answers what the mock runtime asks (a read returns the object asked for; invokes
return nothing). `mock_runtime()` sets the stack's config, installs the mocks and a monitor with
`pulumi.runtime.set_mocks` (preview mode, as `pulumi preview`), hides `PULUMI_CONFIG*` from the
environment, puts the project on `sys.path` and captures the program's exports and warnings.
`run_main` runs the program in it; `resolved` reads an export once the program has run.
"""

from __future__ import annotations

import logging
import os
import runpy
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import rpc, settings as pulumi_settings
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await

from ..config.stack_files import StackConfig
from .plan import UNKNOWN

LOGGER = "gpu-stack.offline"
ENV_PATHS_FROM = "GPU_STACK_PATHS_FROM"
"""The folder relative config paths (operator.chartPath, operator.repositoryCaFile) are taken from
in an offline plan, instead of the project folder planned."""


class EchoMocks(pulumi.runtime.Mocks):
    """A read resource's state is its inputs (secrets unwrapped); invokes return nothing.

    Registrations never reach it: the recording monitor (offline/fast_monitor.py) answers them itself.
    """

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        if args.resource_id:
            # A read (`Node.get(name, id)`): the object exists, named as asked.
            return args.resource_id, read_state(args.typ, args.resource_id)
        return f"{args.name}-id", _unwrap(args.inputs)

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


def read_state(type_token: str, resource_id: str) -> dict[str, Any]:
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


@contextmanager
def _captured() -> Iterator[tuple[dict[str, Any], list[str]]]:
    """The program's `pulumi.export`s and the warnings it logs, while it runs."""
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
    logger = logging.getLogger(LOGGER)
    logger.addHandler(handler)
    logger.propagate = False
    pulumi.export = export  # type: ignore[assignment]
    try:
        yield exports, warnings
    finally:
        pulumi.export = original_export  # type: ignore[assignment]
        logger.removeHandler(handler)


@contextmanager
def mock_runtime(
    stack_config: StackConfig, project_dir: Path, monitor: Any
) -> Iterator[tuple[dict[str, Any], list[str]]]:
    """The runtime of one preview of `stack_config` answered by `monitor` (and its mocks); yields
    the exports and warnings as captured."""
    pulumi_settings.ROOT.set(None)
    pulumi.runtime.set_all_config(stack_config.as_runtime_config(), sorted(stack_config.secret_keys))
    saved_env = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("PULUMI_CONFIG")}
    pulumi.runtime.set_mocks(
        monitor.mocks,
        project=stack_config.project,
        stack=stack_config.stack,
        preview=True,
        logger=logging.getLogger(LOGGER),
        monitor=monitor,
    )
    # What `pulumi.get_root_directory()` answers under the engine: the folder of Pulumi.yaml, which
    # a relative path in the config (operator.chartPath) is relative to, whatever the CWD.
    # A revision planned from its git archive takes them from the working tree's project folder
    # (ENV_PATHS_FROM, set by git_plan): the same files, by the same absolute paths, at both sides.
    root = os.environ.get(ENV_PATHS_FROM) or str(project_dir)
    pulumi_settings.SETTINGS.root_directory = str(Path(root).resolve())
    sys_path_added = str(project_dir) not in sys.path
    if sys_path_added:
        sys.path.insert(0, str(project_dir))
    try:
        with _captured() as captured:
            yield captured
    finally:
        os.environ.update(saved_env)
        if sys_path_added:
            sys.path.remove(str(project_dir))


def run_main(main: Path) -> None:
    """Run `main` as the stack's program, as the language host does: inside the stack resource,
    returning once every registration has been answered (a refusal raises `pulumi.RunError`)."""

    def program() -> None:
        runpy.run_path(str(main), run_name="__main__")

    _sync_await(run_pulumi_func(program))


def resolved(value: Any) -> Any:
    """An export's value, its outputs awaited (see `resolve`)."""
    return _sync_await(resolve(value))


async def resolve(value: Any) -> Any:
    """An export's value with its outputs awaited; `[unknown]` where the engine knows it only later."""
    if isinstance(value, pulumi.Output):
        if not await value.is_known():
            return UNKNOWN
        return await resolve(await value.future())
    if isinstance(value, dict):
        return {k: await resolve(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [await resolve(v) for v in value]
    return value
