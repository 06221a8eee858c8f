"""The fleet's StackRunner on Pulumi's own engine: the Automation API of the pinned SDK
(`pulumi.automation`), a LocalWorkspace over the project folder, the Pulumi CLI it finds (on PATH,
or `--pulumi`), the backend, secrets provider and plugins of the caller's environment
(`PULUMI_BACKEND_URL`, `PULUMI_CONFIG_PASSPHRASE`, `PULUMI_HOME`, ...).

Stacks are selected, never created: a stack missing from the backend is an error for that stack.
Secrets are never printed: `up` runs with `show_secrets=False`, a secret output is kept as
`[secret]`, and the engine's own output (which masks secrets) is what the progress lines show.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pulumi import automation as auto

from ..config.safe_input import escape
from .waves import StepResult

UNREACHABLE = re.compile(
    r"cluster is unreachable|unreachable cluster|unable to connect to the server|connection refused|no such host|i/o timeout"
    r"|Kubernetes cluster unreachable|failed to connect|dial tcp",
    re.IGNORECASE,
)
"""What the kubernetes provider and client-go say when a cluster's API server cannot be reached."""
ERROR_LINES = 12


class EngineUnavailable(Exception):
    """The Pulumi CLI cannot be run (missing, or older than the SDK needs)."""


def pulumi_command(cli: str | None) -> auto.PulumiCommand:
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
        return auto.PulumiCommand(root=root)
    except (OSError, subprocess.CalledProcessError, auto.InvalidVersionError) as exc:
        where = cli or "pulumi on PATH"
        raise EngineUnavailable(f"the Pulumi CLI ({escape(where)}) cannot be run: {escape(str(exc))[:300]}; "
                                "install it or pass --pulumi PATH") from None


def _error_text(exc: BaseException, output: list[str]) -> str:
    """The engine's error lines (not the whole log), one per line, escaped."""
    text = "\n".join(output) + "\n" + str(exc)
    lines = [line.strip() for line in text.splitlines() if re.search(r"\berror\b|failed|FAIL", line)]
    seen: list[str] = []
    for line in lines:
        if line and line not in seen:
            seen.append(line)
    return " | ".join(escape(line) for line in seen[-ERROR_LINES:]) or escape(str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__)


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

    def _stack(self, name: str) -> auto.Stack:
        opts = auto.LocalWorkspaceOptions(work_dir=self.project_dir, pulumi_command=self.command)
        return auto.select_stack(stack_name=name, work_dir=self.project_dir, opts=opts)

    def _lines(self, stack: str, sink: list[str]) -> Callable[[str], None]:
        def out(line: str) -> None:
            sink.append(line.rstrip("\n"))
            if self.on_output is not None:
                self.on_output(stack, line.rstrip("\n"))

        return out

    def preview(self, stack: str) -> StepResult:
        start, seen = time.monotonic(), []  # type: ignore[var-annotated]
        try:
            result = self._stack(stack).preview(color="never", on_output=self._lines(stack, seen), message=self.message)
        except Exception as exc:  # the engine's CommandError, or a stack missing from the backend
            error = _error_text(exc, seen)
            return StepResult(False, error=error, unreachable=bool(UNREACHABLE.search(error)), seconds=time.monotonic() - start)
        # The provider previews an unreachable cluster with a warning and unknowns: the up would fail.
        unreachable = next((line for line in seen if UNREACHABLE.search(line)), None)
        return StepResult(
            unreachable is None, changes=_changes(result.change_summary), unreachable=unreachable is not None,
            error=escape(unreachable.strip()) if unreachable else None, seconds=time.monotonic() - start,
        )

    def up(self, stack: str) -> StepResult:
        start, seen = time.monotonic(), []  # type: ignore[var-annotated]
        try:
            result = self._stack(stack).up(
                color="never", on_output=self._lines(stack, seen), show_secrets=False, message=self.message,
            )
        except Exception as exc:
            error = _error_text(exc, seen)
            return StepResult(False, error=error, unreachable=bool(UNREACHABLE.search(error)), seconds=time.monotonic() - start)
        return StepResult(
            result.summary.result == "succeeded", changes=_changes(result.summary.resource_changes),
            outputs=_outputs(result.outputs), seconds=time.monotonic() - start,
        )
