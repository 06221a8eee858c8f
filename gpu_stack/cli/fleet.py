"""`python -m gpu_stack fleet plan|preview|up`: every stack of the fleet (fleet.yaml, or the
default order), planned offline together, or previewed and rolled out in waves through Pulumi's
Automation API."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..config.fleet import FleetError, load_fleet
from ..config.stack_files import StackFileError
from ..fleet.plan import DEFAULT_JOBS, plan_fleet
from ..fleet.report import render_markdown, render_text, to_json
from ..offline.git_plan import GitPlanError, default_base, resolve
from .diff import add_chart_dir_option


def _stacks(args: argparse.Namespace) -> list[str]:
    fleet, _ = load_fleet(args.project_dir, args.fleet_file)
    if not args.stack:
        return fleet.stacks
    unknown = [s for s in args.stack if s not in fleet.stacks]
    if unknown:
        raise FleetArgError(f"--stack {unknown[0]}: not a stack of the fleet (stacks: {', '.join(fleet.stacks)})")
    return [s for s in fleet.stacks if s in args.stack]


class FleetArgError(Exception):
    """A command-line argument the fleet cannot use."""


def _plan(args: argparse.Namespace) -> int:
    stacks = _stacks(args)
    revision = resolve(args.project_dir, args.base) if args.base else default_base(args.project_dir)
    result = plan_fleet(args.project_dir, stacks, revision, args.chart_dir, jobs=args.jobs)
    if args.format == "json":
        doc = to_json(result.base_label, result.outcomes)
        doc["chartRenders"] = result.renders
        print(json.dumps(doc, indent=2))
    elif args.format == "markdown":
        sys.stdout.write(render_markdown(result.base_label, result.outcomes))
    else:
        sys.stdout.write(render_text(result.base_label, result.outcomes))
    if any(o.error is not None for o in result.outcomes):
        return 2
    return 1 if (args.exit_code and any(o.has_changes for o in result.outcomes)) else 0


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--fleet-file", type=Path, metavar="FILE", default=None,
        help="the fleet file (default: fleet.yaml beside Pulumi.yaml; without it: dev, staging, other stacks, prod)",
    )
    parser.add_argument("--stack", "-s", action="append", metavar="STACK", help="only this stack of the fleet (repeatable)")


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
    plan.add_argument("--base", metavar="REF", help="git revision to compare with (default: merge-base with main, or HEAD)")
    plan.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    plan.add_argument("--jobs", "-j", type=int, default=DEFAULT_JOBS, metavar="N", help=f"worker processes (default {DEFAULT_JOBS})")
    add_chart_dir_option(plan)
    plan.add_argument("--exit-code", action="store_true", help="exit 1 when any stack has changes (0 when none; 2 on an error)")
    plan.set_defaults(func=_plan, errors=(FleetError, FleetArgError, GitPlanError, StackFileError))
    return parser
