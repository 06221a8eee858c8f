"""`python -m gpu_stack images --stack S [--format json]`: the images to copy into a mirror.

The stack is planned offline, its Helm release rendered with the real chart (the release's own
local chart, `--chart-dir`, or the chart pulled once into the user cache) and every image read
from the rendered objects, the ClusterPolicy and the stack's Jobs (offline/images.py). One image
per line, for `skopeo copy` or `crane copy`; `--format json` says where each one is used and what
it is a copy of, `--format copy` prints `SOURCE MIRRORED` pairs (the stack planned a second time
without `images.mirror` and `images.overrides` gives each image's source).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

from ..config.safe_input import escape
from ..offline.chart import ChartRenderError
from ..offline.images import DRIVER_KERNEL_PLACEHOLDER, DRIVER_OS_PLACEHOLDER, ImageUse, plan_images, release_images


class ImagesUnavailable(Exception):
    """The list would be incomplete: the chart could not be rendered (one line why)."""


def stack_images(
    stack: str, project_dir: Any, chart_dir: Any = None, driver_os: tuple[str, ...] = (), *, unmirrored: bool = False,
    kernels: tuple[str, ...] = (),
) -> list[ImageUse]:
    """Every image use of the stack; `unmirrored`: as the stack would pull them with no
    `images.mirror` and no `images.overrides` (where each mirrored image is copied from)."""
    from ..config.stack_files import read_stack
    from ..offline.objects import plan_objects, release_renderer
    from ..offline.runner import run_program

    config = read_stack(project_dir, stack)
    key = "gpu-stack:images"
    if unmirrored and isinstance(config.values.get(key), dict):
        # The mirror login goes too: it needs a mirror, and pulls nothing itself.
        config.values[key] = {k: v for k, v in config.values[key].items() if k not in ("mirror", "overrides", "registryCredentials")}
        config.secret_keys.discard(key)  # the login was its only secret part
    plan = run_program(config, project_dir).to_json()
    uses: list[ImageUse] = []
    for release, objects in plan_objects(plan, release_renderer(chart_dir)):
        if isinstance(objects, str):
            raise ImagesUnavailable(f"release {release}: {objects}")
        uses.extend(release_images(objects, driver_os, kernels))
    uses.extend(plan_images(plan))
    return uses


def _grouped(uses: list[ImageUse]) -> list[dict[str, Any]]:
    by: dict[str, dict[str, Any]] = {}
    for u in uses:
        if not u.runs:
            continue
        entry = by.setdefault(u.image, {"image": u.image, "usedBy": [], "notes": []})
        if u.source not in entry["usedBy"]:
            entry["usedBy"].append(u.source)
        if u.note and u.note not in entry["notes"]:
            entry["notes"].append(u.note)
    return [by[k] for k in sorted(by)]


def copied_from(images: list[str], originals: list[str], settings: Any) -> dict[str, str]:
    """Mirrored image -> the image it is a copy of (the one that maps onto it)."""
    from ..design.images import mirror_ref

    return {m: o for o in originals for m in images if mirror_ref(o, settings) == m}


def _image_settings(stack: str, project_dir: Any) -> Any:
    from ..config import ImageSettings
    from ..config.stack_files import read_stack

    raw = read_stack(project_dir, stack).values.get("gpu-stack:images") or {}
    return ImageSettings.model_validate(raw if isinstance(raw, dict) else {})


def _driver_os(values: list[str] | None) -> tuple[str, ...]:
    """Each --driver-os checked as an OS tag: it becomes part of an image tag, never more."""
    from ..config.images import driver_os_tag
    from ..config.safe_input import escape

    out = []
    for value in values or ():
        try:
            out.append(driver_os_tag(value))
        except ValueError as exc:
            raise ImagesUnavailable(f"--driver-os {escape(repr(value[:80]))} {exc}") from None
    return tuple(dict.fromkeys(out))


KERNEL_RE = re.compile(r"[0-9]+\.[0-9]+[A-Za-z0-9._-]{0,60}")
"""A kernel release as `uname -r` prints it and an image tag can carry it (5.15.0-1048-aws)."""


def _kernels(values: list[str] | None) -> tuple[str, ...]:
    """Each --driver-kernel checked: it becomes part of an image tag, never more."""
    out = []
    for value in values or ():
        if not KERNEL_RE.fullmatch(value):
            raise ImagesUnavailable(
                f"--driver-kernel {escape(repr(value[:80]))} is not a kernel release as `uname -r` prints it on a GPU "
                "node (5.15.0-1048-aws, 6.8.0-51-generic): digits, letters, '.', '_' and '-'"
            )
        out.append(value)
    return tuple(dict.fromkeys(out))


ONE_OS_NOTE = (
    "the operator's ClusterPolicy driver runs one OS per cluster: one driver DaemonSet tagged with the OS "
    "of the first GPU node it lists, on every GPU node, so nodes of another OS fail their driver install; "
    "a mixed fleet needs NVIDIA's NVIDIADriver CRD or driver.placement host (docs/air-gapped.md)"
)


def _images(args: argparse.Namespace) -> int:
    try:
        driver_os = _driver_os(args.driver_os)
        kernels = _kernels(args.driver_kernel)
        uses = stack_images(args.stack, args.project_dir, args.chart_dir, driver_os, kernels=kernels)
        settings = _image_settings(args.stack, args.project_dir)
        mirrored = settings.mirror is not None or bool(settings.overrides)
        origin: dict[str, str] = {}
        if mirrored and args.format != "text":
            originals = sorted({
                u.image for u in stack_images(args.stack, args.project_dir, args.chart_dir, driver_os, unmirrored=True, kernels=kernels)
            })
            origin = copied_from(sorted({u.image for u in uses}), originals, settings)
    except (ImagesUnavailable, ChartRenderError) as exc:
        print(f"error: cannot list the images: {escape(str(exc))}", file=sys.stderr)
        return 2
    entries = _grouped(uses)
    placeholders = (DRIVER_OS_PLACEHOLDER, DRIVER_KERNEL_PLACEHOLDER)
    concrete = [e for e in entries if not any(p in e["image"] for p in placeholders)]
    templates = [e["image"] for e in entries if DRIVER_OS_PLACEHOLDER in e["image"]]
    kernel_templates = [e["image"] for e in entries if DRIVER_KERNEL_PLACEHOLDER in e["image"]]
    if args.format == "json":
        for e in concrete:
            e["copyOf"] = origin.get(e["image"], e["image"])
        doc = {"stack": args.stack, "images": concrete, "needDriverOs": templates, "needDriverKernel": kernel_templates}
        print(json.dumps(doc, indent=2))
    elif args.format == "copy":
        for e in concrete:
            print(f"{origin.get(e['image'], e['image'])} {e['image']}")
    else:
        for e in concrete:
            print(e["image"])
    for template in templates:
        print(
            f"note: the operator appends the GPU nodes' OS to the driver image's tag ({template}); "
            "list it with --driver-os OS, the OS of your GPU nodes (such as ubuntu22.04, ubuntu24.04, rhel9.6): "
            "one OS per cluster",
            file=sys.stderr,
        )
    for template in kernel_templates:
        print(
            f"note: with driver.usePrecompiled the operator runs one driver image per kernel ({template}); "
            "list them with --driver-kernel KERNEL for each kernel of your GPU nodes (`uname -r`, such as 5.15.0-1048-aws)",
            file=sys.stderr,
        )
    if len(driver_os) > 1:
        print(f"note: --driver-os names {len(driver_os)} OSes, but {ONE_OS_NOTE}", file=sys.stderr)
    return 0


def add_images_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    from .diff import add_chart_dir_option
    from .options import stack_like

    parser = subparsers.add_parser(
        "images",
        help="list every image a `pulumi up` of the stack makes the cluster pull (to mirror them)",
        description=(
            "Plan the stack offline, render its Helm release with the real chart and print every image "
            "(with tag) the cluster pulls: the chart's objects, the ClusterPolicy's components and the "
            "stack's Jobs. One per line, for skopeo copy or crane copy; --format json for tools."
        ),
    )
    parser.add_argument("--stack", "-s", default="dev", type=stack_like("--stack", "stack"), help="the stack to plan (default: dev)")
    parser.add_argument(
        "--format", choices=("text", "json", "copy"), default="text",
        help="text: one image per line; json: each with where it is used and what it is a copy of; "
        "copy: `SOURCE MIRRORED` per line, for a copy loop",
    )
    parser.add_argument(
        "--driver-os", action="append", metavar="OS",
        help="the OS of your GPU nodes as the driver image tags it (ubuntu22.04, rhel9.6). The operator's "
        "ClusterPolicy driver supports one OS per cluster (it tags its one driver DaemonSet with the first GPU "
        "node's OS); a mixed fleet needs NVIDIA's NVIDIADriver CRD or driver.placement host",
    )
    parser.add_argument(
        "--driver-kernel", action="append", metavar="KERNEL",
        help="with driver.usePrecompiled: a kernel of your GPU nodes (`uname -r`, 5.15.0-1048-aws); the "
        "operator runs one precompiled driver image per kernel; repeat for each",
    )
    add_chart_dir_option(parser)
    parser.set_defaults(func=_images)
    return parser
