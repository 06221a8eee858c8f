"""Write the generated reference of the stack's interface: `docs/configuration.md` (every config key,
rendered by config/docs.py from the settings models, then an Outputs section from outputs.py's
table) and `docs/stack-config.schema.json`. Here, not in config/: the outputs table lives in the
design, beside the code that returns them, and config/ imports nothing above it.

`python -m gpu_stack.design.docs` (`make docs`) rewrites them; `--check` fails when they are stale.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path

from ..config.docs import (
    DOCS_DIR,
    FLEET_MARKDOWN_PATH,
    MARKDOWN_PATH,
    SCHEMA_PATH,
    render_fleet_markdown,
    render_markdown,
    settings_schema,
    stack_file_schema,
)
from ..config.package_data import CLONE_ROOT
from .outputs import OUTPUTS

COMMAND = "python -m gpu_stack.design.docs"


def render_outputs(outputs: Mapping[str, str]) -> str:
    """The Outputs section: one row per output, in the order the stack exports them."""
    lines = [
        "## Outputs",
        "",
        "What `pulumi stack output` shows after an `up` (and the offline plan's `outputs`), in the order the",
        "stack exports them; described in [gpu_stack/design/outputs.py](../gpu_stack/design/outputs.py),",
        "beside the code that returns them.",
        "",
        "| output | description |",
        "| --- | --- |",
    ]
    lines += [f"| `{key}` | {text.replace('|', chr(92) + '|')} |" for key, text in outputs.items()]
    return "\n".join(lines) + "\n"


def rendered() -> dict[Path, str]:
    return {
        MARKDOWN_PATH: render_markdown(settings_schema()) + "\n" + render_outputs(OUTPUTS),
        FLEET_MARKDOWN_PATH: render_fleet_markdown(),
        SCHEMA_PATH: json.dumps(stack_file_schema(), indent=2, sort_keys=True) + "\n",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the committed docs are stale")
    args = parser.parse_args(argv)
    if not args.check and CLONE_ROOT is None:
        print(f"{COMMAND} rewrites a clone's docs/; this gpu-stack is an installed package: run it in a clone", file=sys.stderr)
        return 2
    stale = []
    for path, text in rendered().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current != text:
            stale.append(path)
            if not args.check:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
    if args.check and stale:
        names = ", ".join(str(p.relative_to(DOCS_DIR.parent)) for p in stale)
        print(f"stale generated docs: {names}; run `make docs` ({COMMAND})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
