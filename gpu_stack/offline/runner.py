"""Run the real `__main__.py` under Pulumi's mock runtime and record what it registers.

No CLI, no cluster, no credentials: the program runs as in `pulumi preview` (`preview=True`) on
the public mock path (`pulumi.runtime.set_mocks`, offline/runtime.py); a recording monitor
(offline/fast_monitor.py, with every speed-up) keeps each registration, and the plan
(offline/plan.py, the JSON contract) is built from them once the program has finished
(offline/records.py), secrets scrubbed (offline/scrub.py).

An output the provider only computes when the resource exists (a command's stdout) is unknown,
and the plan shows it as `[unknown]`, never as null. Reads (`Node.get`) are answered with a
minimal object of that id and listed under `reads`.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path
from typing import Any

import pulumi

from ..components import engine
from ..config.package_data import CLONE_ROOT
from ..config.stack_files import StackConfig, read_stack
from .fast_monitor import RecordingMonitor, quiet_runtime
from .fast_sdk import lean_sdk
from .plan import Plan
from .records import read_records, resource_records
from .runtime import EchoMocks, mock_runtime, resolved, run_main
from .scrub import Scrubber

PROJECT_DIR = CLONE_ROOT if CLONE_ROOT is not None else Path(".")
"""The project planned when none is named: in a clone, the clone's own (Pulumi.yaml beside gpu_stack/);
where the package is installed, the working directory's (the command line's default is
config/package_data.py's default_project_dir: the nearest Pulumi.yaml at or above it)."""


class PlanError(Exception):
    """The program refused the stack config (or the stack files): one clear message, no plan."""

    def __init__(self, message: str, registered: int = 0):
        super().__init__(message)
        self.registered = registered
        """How many resources the program had registered before it stopped (must be 0)."""


def run_program(
    stack_config: StackConfig,
    project_dir: Path | str = PROJECT_DIR,
    extra_secret_values: set[str] | None = None,
    offline: bool = True,
    lean: bool = True,
) -> Plan:
    """Run `<project_dir>/__main__.py` for one stack's config under mocks; return what it registered.

    Raises PlanError with the program's own message when it rejects the config. `offline=False`
    runs it as under the real engine (a missing secret is an error, not a placeholder): for tests.
    `lean=False` runs it on the SDK's own paths, without offline/fast_sdk.py's (the same plan,
    slower: tests/offline/test_lean_sdk.py compares the two).
    """
    project_dir = Path(project_dir)
    main = project_dir / "__main__.py"
    if not main.is_file():
        from ..config.safe_input import escape

        raise PlanError(
            f"{escape(str(main))}: no such file; the offline plan runs the project's program, the "
            "__main__.py beside its Pulumi.yaml (run it in your Pulumi project's folder, or pass --project-dir)"
        )
    scrub = Scrubber(stack_config.secret_values | (extra_secret_values or set()))
    monitor = RecordingMonitor(EchoMocks(), answer_reads=lean)
    resolved_outputs: dict[str, Any] = {}
    with (
        mock_runtime(stack_config, project_dir, monitor) as (exports, warnings),
        quiet_runtime(),
        lean_sdk(lean),
        engine.offline() if offline else nullcontext(),
    ):
        try:
            run_main(project_dir / "__main__.py")
        except pulumi.RunError as exc:
            raise PlanError(scrub.text(str(exc)), registered=len(monitor.records)) from None
        for key, value in exports.items():
            resolved_outputs[key] = resolved(value)

    for env in getattr(stack_config, "environments", ()):
        warnings.append(
            f"the stack imports the ESC environment {env!r}: the offline plan cannot open it, so config "
            "values it provides are missing here (secrets among them show as placeholders)"
        )
    return Plan(
        project=stack_config.project,
        stack=stack_config.stack,
        resources=resource_records(monitor.records, scrub),
        outputs=scrub.plain(resolved_outputs),
        warnings=[scrub.plain(w) for w in warnings],
        reads=read_records(monitor.reads),
    )


def plan_stack(stack: str, project_dir: Path | str = PROJECT_DIR) -> Plan:
    """Read `Pulumi.yaml` + `Pulumi.<stack>.yaml` from project_dir and run the program offline."""
    return run_program(read_stack(project_dir, stack), project_dir)
