"""`pulumi` for a sandbox shell when the CLI is the toolchain's (built without a Python language
host): passes every command through, serving the program itself for `preview` and `up`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .pulumi_cli import run_cli
from .toolchain import find


def main() -> int:
    pulumi = find(("pulumi",))["pulumi"]
    proc = run_cli(pulumi, sys.argv[1:], Path.cwd(), dict(os.environ), capture=False)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
