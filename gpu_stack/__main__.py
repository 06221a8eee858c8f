"""Command line, `gpu-stack` once the package is installed (`python -m gpu_stack` in a clone):
`plan`, `diff` and `images`, offline (no Pulumi CLI, cluster or credentials); `advise`, which reads
the sharing benchmark's results; and `fleet`, which drives the Pulumi CLI over many stacks.

The project planned is the one around the working directory (the nearest Pulumi.yaml at or above
it, as the Pulumi CLI finds its project), else the clone this code is in; `--project-dir` names
another (config/package_data.py, default_project_dir)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .cli.options import OneLineParser, existing, stack_like
from .config.package_data import PROJECT_FILE, default_project_dir
from .config.stack_files import StackFileError
from .offline.runner import PlanError, plan_stack


def _plan(args: argparse.Namespace) -> int:
    from .offline.render import render_text

    plan = plan_stack(args.stack, args.project_dir)
    if args.format == "json":
        print(json.dumps(plan.to_json(), indent=2, sort_keys=False))
    else:
        objects = _objects_text(plan, getattr(args, "chart_dir", None))  # before printing: it may fail the plan
        print(render_text(plan), end="")
        print(objects, end="")
    return 0


def _objects_text(plan, chart_dir: Path | None) -> str:
    """The objects each Helm release creates (real chart), or one line saying why they are not shown."""
    try:
        from .offline.objects import plan_objects, release_renderer
    except ImportError as exc:  # pragma: no cover - PyYAML missing: the plan above already needed it
        return f"\nObjects of the Helm releases: not shown ({exc})\n"
    out = []
    for release, objects in plan_objects(plan.to_json(), release_renderer(chart_dir)):
        if isinstance(objects, str):
            out.append(f"Objects of release {release}: not shown: {objects}")
            continue
        out.append(f"Objects of release {release} (rendered with Helm): {len(objects)}")
        for obj in objects:
            out.append(f"  + {obj.key}" + (f" (hook {obj.hook})" if obj.hook else ""))
    return "\n" + "\n".join(out) + "\n" if out else ""


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog=_prog(),
        description="gpu-stack's commands: the offline plan, diff and image list of a stack (no Pulumi CLI, "
        "cluster or credentials), sharing advice from the benchmark's results, and fleet roll-outs over many "
        "stacks (these drive the Pulumi CLI).",
    )
    parser.add_argument(
        "--project-dir",
        type=existing("--project-dir", "project folder", "dir"),
        default=None,
        help="folder holding Pulumi.yaml (default: the nearest one at or above the working directory)",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    plan = sub.add_parser("plan", help="print every resource the stack would create, with its inputs")
    plan.add_argument("--stack", "-s", default="dev", type=stack_like("--stack", "stack"))
    plan.add_argument("--format", choices=("text", "json"), default="text")
    plan.add_argument(
        "--chart-dir",
        type=existing("--chart-dir", "local copy of the chart"),
        metavar="DIR",
        default=None,
        help="a local copy of the release's chart, to list the objects it creates (text format; "
        "default: $GPU_STACK_CHART_DIR, else the chart pulled once into the user cache)",
    )
    plan.set_defaults(func=_plan)
    try:
        from .cli.diff import add_diff_parser
        from .cli.images import add_images_parser
    except ImportError:
        pass
    else:
        add_diff_parser(sub)
        add_images_parser(sub)
        from .cli.fleet import add_fleet_parser

        add_fleet_parser(sub)
    from .cli.advise import add_advise_parser

    add_advise_parser(sub)
    return parser


COMMAND = "gpu-stack"
"""The console command pyproject.toml installs."""


def _prog() -> str:
    """`gpu-stack` as the installed command, `python -m gpu_stack` where it runs as a module."""
    return COMMAND if sys.argv and Path(sys.argv[0]).name == COMMAND else "python -m gpu_stack"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    args.prog = _prog()  # how the commands name themselves in the lines they print
    if args.project_dir is None:
        args.project_dir = default_project_dir()
        if not (args.project_dir / PROJECT_FILE).is_file():
            print(
                f"error: no {PROJECT_FILE} in {_terminal_safe(str(args.project_dir))} or a folder above it: run "
                f"{_prog()} in your Pulumi project's folder, or pass --project-dir DIR",
                file=sys.stderr,
            )
            return 2
    from .offline.chart import ChartRenderError

    try:
        return args.func(args)
    except (PlanError, StackFileError, ChartRenderError, *getattr(args, "errors", ())) as exc:
        print(f"error: {_terminal_safe(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `plan | head -1`: the reader has gone; say nothing more, and let no flush at exit raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (RecursionError, MemoryError) as exc:
        # A config deep or large enough to exhaust the interpreter is refused, not a traceback.
        print(f"error: the stack config is too large or too deeply nested to plan ({type(exc).__name__})", file=sys.stderr)
        return 2


def _terminal_safe(text: str) -> str:
    """Every line of an error, with control characters (ESC and the like) shown as escapes."""
    from .config.safe_input import escape

    return "\n".join(escape(line) for line in text.split("\n"))


if __name__ == "__main__":
    sys.exit(main())
