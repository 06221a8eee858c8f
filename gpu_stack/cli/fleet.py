"""`python -m gpu_stack fleet plan|preview|up`: every stack of the fleet (fleet.yaml, or the
default order), planned offline together, or previewed and rolled out in waves through Pulumi's
Automation API."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..config.fleet import Fleet, FleetError, committed_stacks, listed, load_fleet, not_stack_note
from ..config.package_data import default_project_dir
from ..config.stack_files import StackFileError
from ..fleet.plan import DEFAULT_JOBS, plan_fleet
from ..fleet.report import render_markdown, render_text, to_json
from ..fleet.state import StateRefused
from ..offline.git_plan import GitPlanError, default_base, resolve
from .diff import add_chart_dir_option
from .options import count, existing, nonempty, stack_like

MAX_JOBS = 64
"""The most worker processes `fleet plan --jobs` starts."""


def _fleet(args: argparse.Namespace) -> tuple[Fleet, str]:
    """The fleet (config/fleet.load_fleet), after one line on stderr naming each file that looks
    like a stack file but whose name is no stack name (not part of the fleet)."""
    note = not_stack_note(committed_stacks(args.project_dir)[1])
    if note is not None:
        print(note, file=sys.stderr)
    return load_fleet(args.project_dir, args.fleet_file)


def _stacks(args: argparse.Namespace) -> list[str]:
    fleet, _ = _fleet(args)
    if not args.stack:
        return fleet.stacks
    unknown = [s for s in args.stack if s not in fleet.stacks]
    if unknown:
        raise FleetArgError(f"--stack {unknown[0]}: not a stack of the fleet (stacks: {listed(fleet.stacks)})")
    return [s for s in fleet.stacks if s in args.stack]


class FleetArgError(Exception):
    """A command-line argument the fleet cannot use."""


def _plan(args: argparse.Namespace) -> int:
    stacks = _stacks(args)
    revision = resolve(args.project_dir, args.base) if args.base is not None else default_base(args.project_dir)
    result = plan_fleet(args.project_dir, stacks, revision, args.chart_dir, jobs=args.jobs)
    if args.format == "json":
        doc = to_json(result.base_label, result.outcomes)
        doc["chartRenders"] = result.renders
        doc["programRuns"] = result.runs
        print(json.dumps(doc, indent=2))
    elif args.format == "markdown":
        sys.stdout.write(render_markdown(result.base_label, result.outcomes))
    else:
        sys.stdout.write(render_text(result.base_label, result.outcomes))
    if any(o.error is not None for o in result.outcomes):
        return 2
    return 1 if (args.exit_code and any(o.has_changes for o in result.outcomes)) else 0


INTERRUPTING = (signal.SIGINT, signal.SIGTERM)
"""The signals that interrupt a fleet: Ctrl-C (SIGINT, to the PID or the process group) and
SIGTERM (`timeout`, systemd, a CI runner's cancel)."""


@contextmanager
def interruptible(interrupt: Callable[[], Any]) -> Iterator[list[int]]:
    """Within: SIGINT and SIGTERM call `interrupt()` (fleet/automation: nothing new starts, one
    SIGINT to each CLI under way) instead of stopping the process, each time one comes (the CLIs
    cancel on the first and terminate on the second, as the Pulumi CLI does on its own); yields
    the signals received, in order. Installed even where the fleet was started with SIGINT
    ignored (a background job of a non-interactive shell inherits that): the Pulumi CLIs cancel
    on it regardless (Go's signal.Notify takes it back), so the fleet must know too. The handlers
    before are put back after."""
    got: list[int] = []

    def handler(signum: int, frame: object) -> None:
        got.append(signum)
        interrupt()

    before = {sig: signal.signal(sig, handler) for sig in INTERRUPTING}
    try:
        yield got
    finally:
        for sig, old in before.items():
            signal.signal(sig, old)


def _roll(args: argparse.Namespace) -> int:
    """`fleet preview` and `fleet up [--resume]`: the scheduler (fleet/waves.py) over the Automation API."""
    from ..fleet.automation import AutomationRunner, EngineUnavailable
    from ..fleet.gates import gate_check
    from ..fleet.progress import PlainView, progress_view
    from ..fleet.rollup import render_rollup
    from ..fleet.state import change_keys, forget, load_done, read_state, record_done, writable_problem
    from ..fleet.waves import roll_out

    fleet, source = _fleet(args)
    if args.wave is not None:
        names = [w.name for w in fleet.waves]
        if args.wave not in names:
            raise FleetArgError(f"--wave {args.wave}: not a wave of the fleet (waves: {listed(names)})")
        # one wave on its own: a CI job per GitHub environment runs the fleet's wave it holds the secrets of
        fleet = fleet.model_copy(update={"waves": [w for w in fleet.waves if w.name == args.wave]})
        source += f", wave {args.wave} only"
    preview_only = args.fleet_command == "preview"
    resume = getattr(args, "resume", False)
    if not preview_only:  # the state file: checked before anything runs (fleet/state.py)
        unsafe = writable_problem(args.project_dir)
        if unsafe is not None:
            raise StateRefused(f"the fleet's state file cannot be written: {unsafe}")
        if resume:
            read_state(args.project_dir)
    say = PlainView(sys.stdout).line
    # a live table on a terminal, plain lines in CI or a pipe (fleet/progress.py)
    view = progress_view(sys.stdout, os.environ, fleet, mode=args.progress, verbose=args.verbose)
    try:
        runner = AutomationRunner(args.project_dir, cli=None if args.pulumi is None else str(args.pulumi), on_output=view.engine)
    except EngineUnavailable as exc:
        view.close()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    # the CLI's version is part of each stack's change (fleet/state.py)
    keys = change_keys(args.project_dir, fleet.stacks, runner.cli_version)
    done = load_done(args.project_dir, keys) if resume else set()
    head = f"Fleet of {len(fleet.stacks)} stacks from {source}"
    if resume:
        head += "; resuming, already done: " + listed([s for s in fleet.stacks if s in done])
    say(head)
    for i, wave in enumerate(fleet.waves):
        say(f"  wave {i + 1} {wave.name}: {listed(wave.stacks)} (parallel {wave.parallel})")
    stop = runner.interrupted

    def record(stack: str) -> None:
        if not stop.is_set():  # nothing is recorded done once the fleet is interrupted
            record_done(args.project_dir, keys[stack], stack, {"wave": fleet.wave_of(stack).name})

    with interruptible(runner.interrupt) as signals:
        result = roll_out(
            fleet, runner, done=done, gate_check=gate_check(fleet, on_progress=view.line, interrupted=stop),
            on_progress=view.line, on_done=record, on_start=lambda stack: forget(args.project_dir, stack),
            on_state=view.state, preview_only=preview_only, interrupted=stop,
        )
    view.close()
    command = resume_command(args)
    sys.stdout.write("\n" + render_rollup(result, command, preview_only=preview_only))
    if signals or result.interrupted:
        first = signals[0] if signals else signal.SIGINT
        # each CLI under way got one SIGINT and cancelled its update; what was done is recorded
        print(f"\ninterrupted ({signal.Signals(first).name}): a stack whose up was under way may hold a lock or a "
              "partial update: `pulumi cancel -s STACK --yes` where the stack says it is locked, then "
              f"`{command} --resume` (docs/fleet.md, Interrupted)", file=sys.stderr)
        return 128 + int(first)
    return 0 if result.stopped is None and not result.none_updated else 1


def resume_command(args: argparse.Namespace) -> str:
    """The command that runs this rollout again, each argument quoted for a POSIX shell
    (shlex.quote), for the user to paste; `prog` stays as written (`python -m gpu_stack`). It
    parses back to this rollout's options (tests/fleet/test_hostile_round5_rollout.py)."""
    def option(flag: str, value: str) -> list[str]:
        # `--wave=-x`: a value that starts with '-' would read as an option of its own
        return [f"{flag}={value}"] if value.startswith("-") else [flag, value]

    words: list[str] = []
    if Path(args.project_dir).resolve() != default_project_dir():
        words += option("--project-dir", str(args.project_dir))
    words += ["fleet", "up"]
    if args.fleet_file is not None:
        words += option("--fleet-file", str(args.fleet_file))
    if args.wave is not None:
        words += option("--wave", args.wave)
    # `gpu-stack` where it is the installed command
    return getattr(args, "prog", "python -m gpu_stack") + " " + shlex.join(words)


def _fleet_file_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fleet-file", type=existing("--fleet-file", "fleet file", "file"), metavar="FILE", default=None,
        help="the fleet file (default: fleet.yaml beside Pulumi.yaml; without it: dev, staging, other stacks, prod)",
    )


def _common(parser: argparse.ArgumentParser) -> None:
    _fleet_file_option(parser)
    parser.add_argument("--stack", "-s", action="append", metavar="STACK", type=stack_like("--stack", "stack"),
                        help="only this stack of the fleet (repeatable)")


def add_fleet_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "fleet",
        help="every stack of the fleet: offline plan together, or preview and up in gated waves",
        description="The fleet's stacks (fleet.yaml, or dev, staging, other stacks, prod) planned offline "
        "together (`plan`), or previewed and rolled out wave by wave through Pulumi's Automation API.",
    )
    sub = parser.add_subparsers(dest="fleet_command", required=True)
    plan = sub.add_parser(
        "plan",
        help="the offline diff of every stack against a git revision, identical changes grouped",
        description="Offline (no CLI, cluster or credentials): every stack planned in the working tree and at "
        "a git revision (default: the merge-base with main), in parallel; identical changes across stacks are "
        "said once, then what differs per stack.",
    )
    _common(plan)
    plan.add_argument("--base", metavar="REF", type=nonempty("--base", "revision"),
                      help="git revision to compare with (default: merge-base with main, or HEAD)")
    plan.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    plan.add_argument("--jobs", "-j", type=count("--jobs", 1, MAX_JOBS), default=DEFAULT_JOBS, metavar="N",
                      help=f"worker processes, 1 to {MAX_JOBS} (default {DEFAULT_JOBS})")
    add_chart_dir_option(plan)
    plan.add_argument("--exit-code", action="store_true", help="exit 1 when any stack has changes (0 when none; 2 on an error)")
    plan.set_defaults(func=_plan, errors=(FleetError, FleetArgError, GitPlanError, StackFileError))
    for name, text in (
        ("preview", "preview every stack of the fleet with the real engine (Automation API), bounded in parallel"),
        ("up", "preview every stack, then up wave by wave; a failed up or gate stops the rollout before the next wave"),
    ):
        sub_parser = sub.add_parser(name, help=text, description=text + ". Needs the Pulumi CLI and each stack's "
                                    "backend, secrets and cluster credentials (its own config or ESC environment).")
        _fleet_file_option(sub_parser)
        sub_parser.add_argument("--pulumi", metavar="CLI", type=existing("--pulumi", "Pulumi CLI"),
                                help="the Pulumi CLI to run (a binary or its folder; default: pulumi on PATH)")
        sub_parser.add_argument("--verbose", "-v", action="store_true", help="also print the engine's own lines, prefixed by the stack")
        sub_parser.add_argument(
            "--progress", choices=("auto", "table", "lines"), default="auto",
            help="a live table (one row per stack) or plain lines; auto: the table on a terminal outside CI",
        )
        sub_parser.add_argument("--wave", metavar="NAME", type=stack_like("--wave", "wave"),
                                help="only this wave of the fleet (a CI job per environment runs its own wave)")
        if name == "up":
            sub_parser.add_argument("--resume", action="store_true", help="skip the stacks already done for this change (.gpu-stack/fleet-state.json)")
        sub_parser.set_defaults(func=_roll, errors=(FleetError, FleetArgError, StateRefused))
    return parser
