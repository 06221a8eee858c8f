"""The fleet's StackRunner on Pulumi's own engine: the Automation API of the pinned SDK
(`pulumi.automation`), a LocalWorkspace over the project folder, the Pulumi CLI it finds (on PATH,
or `--pulumi`), the backend, secrets provider and plugins of the caller's environment
(`PULUMI_BACKEND_URL`, `PULUMI_CONFIG_PASSPHRASE`, `PULUMI_HOME`, ...).

Stacks are selected, never created: a stack missing from the backend is an error for that stack.
Secrets are never printed: `up` runs with `show_secrets=False`, a secret output is kept as
`[secret]`, and the engine's own output (which masks secrets) is what the progress lines show.

What the engine says is taken from the Automation API, not from its text: the typed errors of
`pulumi.automation.errors` (StackNotFoundError, ConcurrentUpdateError, CommandError) and the
engine's events (`on_event`): its error diagnostics are a failed step's error, and the kubernetes
provider's diagnostics that the cluster is unreachable mark the stack's cluster unreachable.

Interruption (`FleetCommand`): each CLI runs in a process group of its own, so that a signal to
the fleet (Ctrl-C on its terminal, `kill -INT` to its PID, SIGTERM from `timeout` or a CI runner)
reaches the CLIs only through `interrupt()`: one SIGINT to each CLI's group per signal the fleet
gets. The Pulumi CLI cancels on the first SIGINT or SIGTERM and terminates at once on the second
(pkg/backend/cancellation_scope.go), so a CLI that shared the fleet's group would get the
terminal's SIGINT and the fleet's forwarded one together and terminate instead of cancelling.
After `interrupt()` no new CLI starts.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from pulumi import automation as auto
from pulumi.automation import errors as auto_errors

from ..config.safe_input import escape
from .waves import StepResult

UNREACHABLE_DIAGNOSTICS = re.compile(r"cluster is unreachable|unreachable cluster|API server .*is unreachable", re.IGNORECASE)
"""What pulumi-kubernetes 4.25.0 (provider/pkg/provider) says in its diagnostics of a cluster it
cannot reach: a read's warning `configured Kubernetes cluster is unreachable: <reason>` and its
error `failed to read resource state due to unreachable cluster` (provider.go:1768-1789), a
create's `configured Kubernetes cluster is unreachable` (provider.go:1561, provider_construct.go:68),
a check's `Kubernetes API server at "<url>" is unreachable` (provider.go:1227), the Helm release's
`can't create|update Helm Release with unreachable cluster` (helm_release.go:881,1057) and the
warnings `Cluster is unreachable, skipping ...` (provider.go:1058,1490). Looked for only in the
diagnostics of the provider and of its resources (`KUBERNETES_TYPES`), never in the CLI's text."""
KUBERNETES_TYPES = ("kubernetes:", "pulumi:providers:kubernetes")
ERROR_LINES = 12
ERROR_WIDTH = 2000


class EngineUnavailable(Exception):
    """The Pulumi CLI cannot be run (missing, or older than the SDK needs)."""


class Interrupted(Exception):
    """The fleet was interrupted: no CLI starts any more."""


def _pump(stream: IO[str], callback: Callable[[str], Any] | None, sink: list[str]) -> None:
    for line in iter(stream.readline, ""):
        text = line.rstrip()
        if callback is not None:
            callback(text)
        sink.append(text)
    stream.close()


class FleetCommand(auto.PulumiCommand):
    """The SDK's PulumiCommand (same CLI, same version check, same arguments, environment and
    typed errors), but each CLI in a process group of its own, its stdin closed, and known while
    it runs, so that `interrupt()` can send it one SIGINT and nothing starts after it."""

    def __init__(self, root: str | None = None):
        super().__init__(root=root)
        self.interrupted = threading.Event()
        """Set by the first `interrupt()`: no CLI starts after it."""
        self._lock = threading.Lock()
        self._running: dict[int, subprocess.Popen[str]] = {}

    def run(
        self,
        args: list[str],
        cwd: str,
        additional_env: Mapping[str, str],
        on_output: Callable[[str], Any] | None = None,
        on_error: Callable[[str], Any] | None = None,
    ) -> auto.CommandResult:
        argv = list(args)
        end = argv.index("--") if "--" in argv else len(argv)
        if "--non-interactive" not in argv[:end]:
            argv.insert(0, "--non-interactive")  # fail rather than prompt, as the SDK runs it
        env = {**os.environ, **additional_env, "PULUMI_AUTOMATION_API": "true"}
        if os.path.isabs(self.command):  # the plugins bundled beside that CLI first, as the SDK does
            env["PATH"] = os.pathsep.join([os.path.dirname(self.command), env.get("PATH", "")])
        with self._lock:
            if self.interrupted.is_set():
                raise Interrupted("the fleet was interrupted: pulumi " + " ".join(args[:1]) + " not started")
            proc = subprocess.Popen(
                [self.command, *argv], cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, encoding="utf-8", errors="replace", process_group=0,
            )
            self._running[proc.pid] = proc
        out: list[str] = []
        err: list[str] = []
        try:
            assert proc.stdout is not None and proc.stderr is not None
            pumps = [threading.Thread(target=_pump, args=(proc.stdout, on_output, out), daemon=True),
                     threading.Thread(target=_pump, args=(proc.stderr, on_error, err), daemon=True)]
            for pump in pumps:
                pump.start()
            for pump in pumps:
                pump.join()
            code = proc.wait()
        finally:
            with self._lock:
                self._running.pop(proc.pid, None)
        result = auto.CommandResult(stdout="\n".join(out), stderr="\n".join(err), code=code)
        if code != 0:
            raise auto_errors.create_command_error(result)
        return result

    def interrupt(self) -> list[int]:
        """Nothing starts any more, and one SIGINT to the process group of each CLI under way (the
        CLI, its language host and providers: what Ctrl-C on a terminal reaches). Returns the CLIs'
        PIDs signalled."""
        with self._lock:
            self.interrupted.set()
            running = list(self._running)
        sent = []
        for pid in running:
            try:
                os.killpg(pid, signal.SIGINT)
                sent.append(pid)
            except (ProcessLookupError, PermissionError):
                pass  # it ended meanwhile
        return sent


def pulumi_command(cli: str | None) -> FleetCommand:
    """The CLI the Automation API runs: `cli` (a `pulumi` binary, a folder holding one, or a
    release's root with bin/pulumi), else `pulumi` on PATH. The CLI starts the language host found
    beside it, as a release does."""
    root = None
    if cli:
        path = Path(cli).expanduser()
        if (path / "bin" / "pulumi").is_file():
            root = str(path)
        else:
            folder = path if path.is_dir() else path.parent
            if not (folder / "pulumi").is_file():
                raise EngineUnavailable(f"the Pulumi CLI ({escape(cli)}) cannot be run: no pulumi there; "
                                        "install it or pass --pulumi PATH")
            # the CLI from that folder, and the language host beside it (a release's layout)
            os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
    try:
        return FleetCommand(root=root)
    except (OSError, subprocess.CalledProcessError, auto.InvalidVersionError) as exc:
        where = cli or "pulumi on PATH"
        raise EngineUnavailable(f"the Pulumi CLI ({escape(where)}) cannot be run: {escape(str(exc))[:300]}; "
                                "install it or pass --pulumi PATH") from None


def _urn_type(urn: str | None) -> str:
    """The type token of a URN (`urn:pulumi:<stack>::<project>::<parent$type>::<name>`)."""
    parts = (urn or "").split("::")
    return parts[2].rsplit("$", 1)[-1] if len(parts) >= 4 else ""


class EngineEvents:
    """What one preview or `up` said through the engine's event stream: its error diagnostics and
    whether the kubernetes provider said its cluster cannot be reached."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.unreachable: str | None = None
        self._lock = threading.Lock()  # events come on the SDK's gRPC threads

    def __call__(self, event: auto.EngineEvent) -> None:
        diag = event.diagnostic_event
        if diag is None:
            return
        message = " ".join(str(diag.message or "").split())
        if not message:
            return
        with self._lock:
            if diag.severity == "error" and message not in self.errors:
                self.errors.append(message)
            if (self.unreachable is None and _urn_type(diag.urn).startswith(KUBERNETES_TYPES)
                    and UNREACHABLE_DIAGNOSTICS.search(message)):
                self.unreachable = message


def _text(lines: list[str]) -> str:
    return escape(" | ".join(lines[-ERROR_LINES:]))[:ERROR_WIDTH]


def step_error(exc: BaseException, events: EngineEvents, stderr: list[str], stack: str) -> str:
    """One line for a failed step, from the SDK's typed error and the engine's diagnostics."""
    if isinstance(exc, Interrupted):
        return "not started: the fleet was interrupted"
    if isinstance(exc, auto_errors.StackNotFoundError):
        return (f"stack {escape(stack)} does not exist in this backend (the fleet selects stacks, never creates "
                f"them: `pulumi stack init {escape(stack)}` first, or check PULUMI_BACKEND_URL)")
    if isinstance(exc, auto_errors.ConcurrentUpdateError):
        return (f"the stack is currently locked by another update: make sure no other pulumi runs on it, then "
                f"`pulumi cancel -s {escape(stack)} --yes` ({_text([s for s in stderr if s.strip()][-2:])})")
    if events.errors:  # the engine's own errors: a resource's, then the update's
        return _text(events.errors)
    told = [line.strip() for line in stderr if line.strip()]
    if told:  # the CLI failed before the engine said anything (a config, a passphrase, a plugin)
        return _text(told)
    return escape(f"{type(exc).__name__}: {' '.join(str(exc).split())}")[:ERROR_WIDTH]


def _outputs(outputs: Any) -> dict[str, Any]:
    return {k: ("[secret]" if v.secret else v.value) for k, v in (outputs or {}).items()}


def _changes(summary: Any) -> dict[str, int]:
    return {str(getattr(k, "value", k)): int(v) for k, v in (summary or {}).items()}


class AutomationRunner:
    """`preview` and `up` of one stack each, through a LocalWorkspace on `project_dir`."""

    def __init__(
        self,
        project_dir: Path | str,
        cli: str | None = None,
        on_output: Callable[[str, str], None] | None = None,
        message: str = "gpu-stack fleet",
    ):
        self.project_dir = str(Path(project_dir).resolve())
        self.command = pulumi_command(cli)
        self.on_output = on_output
        self.message = message

    @property
    def cli_version(self) -> str:
        """The Pulumi CLI's version (part of each stack's resume key)."""
        return str(self.command.version or "")

    @property
    def interrupted(self) -> threading.Event:
        return self.command.interrupted

    def interrupt(self) -> list[int]:
        """fleet/automation.FleetCommand.interrupt: one SIGINT to each CLI under way, none started after."""
        return self.command.interrupt()

    def _stack(self, name: str) -> auto.Stack:
        opts = auto.LocalWorkspaceOptions(work_dir=self.project_dir, pulumi_command=self.command)
        return auto.select_stack(stack_name=name, work_dir=self.project_dir, opts=opts)

    def _lines(self, stack: str) -> Callable[[str], None]:
        def out(line: str) -> None:
            if self.on_output is not None:
                self.on_output(stack, line.rstrip("\n"))

        return out

    def _failed(self, exc: Exception, events: EngineEvents, stderr: list[str], stack: str, start: float) -> StepResult:
        return StepResult(
            False, error=step_error(exc, events, stderr, stack), unreachable=events.unreachable is not None,
            cancelled=self.interrupted.is_set(), seconds=time.monotonic() - start,
        )

    def preview(self, stack: str) -> StepResult:
        start, events, stderr = time.monotonic(), EngineEvents(), []  # type: ignore[var-annotated]
        try:
            result = self._stack(stack).preview(
                color="never", on_output=self._lines(stack), on_error=stderr.append, on_event=events,
                message=self.message,
            )
        except Exception as exc:  # the SDK's typed CommandErrors, Interrupted
            return self._failed(exc, events, stderr, stack, start)
        # The provider previews an unreachable cluster with a warning and unknowns: the up would fail.
        return StepResult(
            events.unreachable is None, changes=_changes(result.change_summary), unreachable=events.unreachable is not None,
            error=escape(events.unreachable) if events.unreachable else None, seconds=time.monotonic() - start,
        )

    def up(self, stack: str) -> StepResult:
        start, events, stderr = time.monotonic(), EngineEvents(), []  # type: ignore[var-annotated]
        try:
            result = self._stack(stack).up(
                color="never", on_output=self._lines(stack), on_error=stderr.append, on_event=events,
                show_secrets=False, message=self.message,
            )
        except Exception as exc:
            return self._failed(exc, events, stderr, stack, start)
        return StepResult(
            result.summary.result == "succeeded", changes=_changes(result.summary.resource_changes),
            outputs=_outputs(result.outputs), seconds=time.monotonic() - start,
        )
