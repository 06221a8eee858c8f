"""`python -m gpu_stack diff`: what a change would do to a stack, offline, for a reviewer."""

from __future__ import annotations

import argparse
import sys

from ..config.stack_files import StackFileError
from ..offline.chart import ChartRenderError
from ..offline.diff import DiffError, diff_plans, render
from ..offline.effects import add_objects_and_effects
from ..offline.git_plan import GitPlanError, default_base, plan_at, resolve
from ..offline.runner import PlanError, plan_stack
from .options import existing, nonempty, stack_like


def _side(stack: str, project_dir, role: str):
    """The working tree's plan of `stack`; a refusal names the stack and which side it is."""
    try:
        return plan_stack(stack, project_dir)
    except (PlanError, StackFileError) as exc:
        raise _SideRefused(f"stack {stack!r} ({role}) cannot be planned: {exc}") from None


class _SideRefused(Exception):
    pass


def _diff(args: argparse.Namespace) -> int:
    project_dir = args.project_dir
    try:
        if args.against is not None:
            base = _side(args.against, project_dir, "--against, the base of the comparison")
            head = _side(args.stack, project_dir, "--stack, the working tree")
            # Read as "what changes when going from the other stack to this one".
            result = diff_plans(
                base, head, base_label=f"stack {args.against}", head_label=f"stack {args.stack}", same_stack=False
            )
        else:
            # The revision first: a missing git or an unknown revision is said before any planning.
            revision = resolve(project_dir, args.base) if args.base is not None else default_base(project_dir)
            head = _side(args.stack, project_dir, "working tree")
            base_doc = plan_at(project_dir, revision, args.stack)
            result = diff_plans(base_doc, head, base_label=revision.label, head_label="working tree")
            base = base_doc
        add_objects_and_effects(result, base, head, args.chart_dir)
        sys.stdout.write(render(result, args.format))
    except (GitPlanError, DiffError, _SideRefused, ChartRenderError) as exc:
        print(f"error: {_terminal_safe(str(exc))}", file=sys.stderr)
        return 2
    return 1 if (args.exit_code and result.has_changes) else 0


def _terminal_safe(text: str) -> str:
    from ..config.safe_input import escape

    return "\n".join(escape(line) for line in text.split("\n"))


def add_diff_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "diff",
        help="compare a stack's plan with a git revision (default) or with another stack",
        description=(
            "Compare the offline plan of a stack in the working tree with its plan at a git revision "
            "(default: the merge-base with main) or with another stack's plan. Prints a summary "
            "(N to create, update, replace, delete), then each changed resource with its changed inputs."
        ),
    )
    parser.add_argument("--stack", "-s", default="dev", type=stack_like("--stack", "stack"), help="the stack to plan (default: dev)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--base", metavar="REF", type=nonempty("--base", "revision"),
                       help="git revision to compare with (default: merge-base with main, or HEAD)")
    which.add_argument("--against", metavar="STACK", type=stack_like("--against", "stack"),
                       help="compare with another stack of the working tree instead")
    parser.add_argument("--format", choices=("text", "markdown"), default="text")
    add_chart_dir_option(parser)
    parser.add_argument("--exit-code", action="store_true", help="exit 1 when there are changes (0 when none)")
    parser.set_defaults(func=_diff)
    return parser


def add_chart_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--chart-dir",
        type=existing("--chart-dir", "local copy of the chart"),
        metavar="DIR",
        default=None,
        help=(
            "a local copy of the release's chart, to show the objects it creates "
            "(default: $GPU_STACK_CHART_DIR, else the chart pulled once into the user cache)"
        ),
    )
