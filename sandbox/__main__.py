"""`python -m sandbox up|down|status --stack S`: a simulated cluster for one stack, kept running in
the background, to rehearse `pulumi preview` / `up` with the real engine (`make sandbox STACK=S`);
with `--fleet`, one simulated cluster per stack of the fleet (fleet.yaml) and one project folder
and backend for all of them, to rehearse `python -m gpu_stack fleet up` (`make sandbox FLEET=1`).

`up` starts a background server (the control plane and the node agents), waits until it is ready
and prints the lines to `export` for the toolchain's or your own `pulumi`; `down` stops it and
removes its files. Everything listens on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from . import reference
from .harness import CHART_DIR, Sandbox
from .toolchain import PROJECT_DIR, ToolchainMissing, find

DRA_CHART_DIR = reference.path(reference.DRA_CHART)

ROOT = PROJECT_DIR / ".sandbox"


def _dir(stack: str) -> Path:
    return ROOT / stack


FLEET = "fleet"
"""The folder name (under .sandbox/) and `--stack` value of the fleet's sandbox."""


def serve_fleet() -> int:
    """The fleet's sandboxes, in the foreground until SIGTERM."""
    from gpu_stack.config.fleet import load_fleet

    from .fleet import FleetSandbox

    workdir = _dir(FLEET)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    fleet, _ = load_fleet(PROJECT_DIR)
    with FleetSandbox(tuple(fleet.stacks), workdir / "run") as sandboxes:
        (workdir / "env.sh").write_text(
            f"# gpu-stack sandbox of the fleet ({', '.join(fleet.stacks)}): source this file, then run "
            "python -m gpu_stack fleet preview|up, or pulumi -s STACK\n" + sandboxes.exports()
        )
        while not stop["now"]:
            time.sleep(0.5)
    return 0


def serve(stack: str) -> int:
    """Run in the foreground until SIGTERM: what `up` starts in the background."""
    if stack == FLEET:
        return serve_fleet()
    workdir = _dir(stack)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    config: dict[str, Any] = {"operator": {"chartPath": str(CHART_DIR)}} if CHART_DIR.joinpath("Chart.yaml").exists() else {}
    if DRA_CHART_DIR.joinpath("Chart.yaml").exists():
        # NVIDIA's DRA driver chart from the reference copy too (used where a node allocates through DRA)
        config["dra"] = {"chartPath": str(DRA_CHART_DIR)}
    with Sandbox(stack, workdir=workdir / "run", config=config) as box:
        (workdir / "env.sh").write_text(
            f"# gpu-stack sandbox of stack '{stack}': source this file, then run pulumi as usual\n" + box.exports()
        )
        while not stop["now"]:
            time.sleep(0.5)
    return 0


def up(stack: str) -> int:
    try:
        find()
    except ToolchainMissing as exc:
        print(f"sandbox: {exc}", file=sys.stderr)
        return 2
    workdir = _dir(stack)
    if (workdir / "pid").exists():
        print(f"sandbox: stack '{stack}' already has a sandbox; `make sandbox-down STACK={stack}` first", file=sys.stderr)
        return 1
    workdir.mkdir(parents=True, exist_ok=True)
    log = open(workdir / "server.log", "w")  # noqa: SIM115 - the server's stdout for its whole life, past this function
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "serve", "--stack", stack],
        cwd=PROJECT_DIR, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    (workdir / "pid").write_text(str(proc.pid))
    deadline = time.monotonic() + 600
    while not (workdir / "env.sh").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            print(f"sandbox: failed to start; see {workdir / 'server.log'}", file=sys.stderr)
            print((workdir / "server.log").read_text()[-3000:], file=sys.stderr)
            down(stack)
            return 1
        time.sleep(0.5)
    print(f"# sandbox of stack '{stack}' is up. To use it with pulumi:")
    print(f"source {workdir / 'env.sh'}")
    print((workdir / "env.sh").read_text())
    if stack == FLEET:
        print("# then e.g.: python -m gpu_stack fleet preview   (stop it with: make sandbox-down FLEET=1)")
        return 0
    print(f"# then e.g.: pulumi preview --diff   (stop it with: make sandbox-down STACK={stack})")
    return 0


def down(stack: str) -> int:
    workdir = _dir(stack)
    pid_file = workdir / "pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        try:
            os.kill(pid, signal.SIGTERM)
            for _ in range(240):
                os.kill(pid, 0)
                time.sleep(0.5)
        except ProcessLookupError:
            pass
    subprocess.run(["rm", "-rf", str(workdir)], check=False)
    print(f"sandbox of stack '{stack}' stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("up", "down", "serve"))
    parser.add_argument("--stack", "-s", default="dev")
    parser.add_argument("--fleet", action="store_true", help="every stack of the fleet (fleet.yaml), one cluster each")
    args = parser.parse_args(argv)
    return {"up": up, "down": down, "serve": serve}[args.command](FLEET if args.fleet else args.stack)


if __name__ == "__main__":
    sys.exit(main())
