"""A stand-in for the Pulumi CLI, run by the real Automation API (tests/fleet/test_automation.py,
test_interrupt.py): it answers what the SDK asks (`version`, `stack select`, `preview`, `up`,
`stack output`, `stack history`) from a script, writes the script's engine events to the event
log the SDK gives it (a file: it says it is 3.200.0, before the SDK's gRPC event stream), and
records each command it ran and each signal it got.

FAKE_PULUMI_DIR holds `script.json`:
  {"missing": [stacks], "<stack>": {"preview"|"up": {"events": [...], "stdout": [...],
   "stderr": [...], "code": 0, "block": seconds}, "outputs": {...}}}
A step with `block` waits that long for SIGINT/SIGTERM (each recorded in `signals`, as
`<stack> <op> <SIGNAME> <pgid==pid>`), then exits 255 a second after the first ("cancelled"), or
0 when none came. Every command is appended to `calls` (`<op> <stack>`).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

HERE = Path(os.environ["FAKE_PULUMI_DIR"])
VERSION = "v3.200.0"


def _arg(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args and args.index(name) + 1 < len(args) else None


def _append(name: str, line: str) -> None:
    with (HERE / name).open("a", encoding="utf-8") as f:
        f.write(line + "\n")


def _step(stack: str, op: str, spec: dict, log: str | None) -> int:
    got: list[str] = []

    def on_signal(signum: int, frame: object) -> None:
        got.append(signal.Signals(signum).name)
        _append("signals", f"{stack} {op} {signal.Signals(signum).name} {os.getpgrp() == os.getpid()}")

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    for line in spec.get("stdout", []):
        print(line, flush=True)
    events = list(spec.get("events", []))
    code = int(spec.get("code", 0))
    if spec.get("block"):
        end = time.monotonic() + float(spec["block"])
        while time.monotonic() < end and not got:
            time.sleep(0.05)
        if got:
            time.sleep(1.0)  # a second signal within this second would be recorded too
            print("^C received; cancelling.", flush=True)
            events, code = [], 255
    if log:  # the engine's events, then the cancel event that ends every event log
        with open(log, "a", encoding="utf-8") as f:
            for i, event in enumerate([*events, {"cancelEvent": {}}]):
                f.write(json.dumps({"sequence": i, "timestamp": 0, **event}) + "\n")
    for line in spec.get("stderr", []):
        print(line, file=sys.stderr, flush=True)
    return code


def main(args: list[str]) -> int:
    args = [a for a in args if a != "--non-interactive"]
    if args[:1] == ["version"]:
        print(VERSION)
        return 0
    script = json.loads((HERE / "script.json").read_text())
    stack = _arg(args, "--stack") or ""
    if args[:2] == ["stack", "select"]:
        _append("calls", f"select {stack}")
        if stack in script.get("missing", []):
            print(f"error: no stack named '{stack}' found", file=sys.stderr)
            return 255
        return 0
    if args[:2] == ["stack", "output"]:
        print(json.dumps(script.get(stack, {}).get("outputs", {})))
        return 0
    if args[:2] == ["stack", "history"]:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        print(json.dumps([{"version": 1, "kind": "update", "startTime": stamp, "endTime": stamp, "message": "",
                           "environment": {}, "config": {}, "result": "succeeded", "resourceChanges": {"update": 1}}]))
        return 0
    if args[:1] in (["preview"], ["up"]):
        op = args[0]
        _append("calls", f"{op} {stack}")
        return _step(stack, op, script.get(stack, {}).get(op, {}), _arg(args, "--event-log"))
    print(f"fake pulumi: {' '.join(args)} not scripted", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
