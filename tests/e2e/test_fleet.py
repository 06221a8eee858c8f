"""The fleet with the real engine: four simulated clusters (the operator-placement stacks `staging`
and `k3s`, and two copies of k3s under other names), one project folder with one backend, and
`python -m gpu_stack fleet up` driving the Pulumi CLI 3.259.0 through the Automation API. One
flow, one cluster start-up, each run proving what the one before left:

1. A change that validates (the first deploy) goes out wave by wave, in the fleet file's order.
2. A change that breaks validation on the canary (the DCGM exporter turned on everywhere; the
   canary's simulated kubelet fails its `dcgm-metrics` check): the canary's `up` fails, the
   roll-up says where and why, and no later stack is touched (its history has no new update).
3. The fix (the canary keeps the exporter off) and `fleet up --resume`, interrupted by SIGINT to the
   fleet's PID alone (`kill -INT`, no signal to the CLIs) while the regions wave runs: exit 130 and
   the way out said; each region's CLI under way cancelled once (never terminated), the canary
   done, the last wave untouched, each region done or its update ended by the engine's cancel.
4. The documented recovery (`pulumi cancel` where a lock was left, then `fleet up --resume`)
   finishes the rest: every stack done for this change.
5. A change of the canary alone, its `fleet up --resume` stopped by SIGTERM to the fleet's PID (what
   `timeout` and CI cancellations send) while the canary's `up` runs: exit 143, the canary's CLI
   cancelled once, its update ended by the cancel and not recorded done, no later wave started;
   the recovery finishes it.
6. The last wave's cluster down and a change only it has: skipped and said so under
   `onUnreachable: skip` (the three others already done, nothing run for them), the rollout
   stopped before any update under `stop`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Any

import yaml

from sandbox.fleet import FleetSandbox
from sandbox.harness import PROJECT_DIR
from sandbox.pulumi_cli import PulumiProject

CANARY, REGIONS, LAST = "k3s-canary", ("staging", "k3s"), "k3s-eu"
STACKS = (CANARY, *REGIONS, LAST)
COPIES = {CANARY: "k3s", LAST: "k3s"}
FAST = {"timeoutSeconds": 180}
FLEET_FILE = {
    "waves": [
        {"name": "canary", "stacks": [CANARY]},
        {"name": "regions", "stacks": list(REGIONS), "parallel": 2},
        {"name": "last", "stacks": [LAST]},
    ],
}


def _set_dcgm(project: PulumiProject, stack: str, enabled: bool) -> None:
    path = project.project_dir / f"Pulumi.{stack}.yaml"
    doc = yaml.safe_load(path.read_text())
    cfg = doc["config"]
    cfg["gpu-stack:dcgmExporter"] = {**(cfg.get("gpu-stack:dcgmExporter") or {}), "enabled": enabled}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _set_validation_timeout(project: PulumiProject, stack: str, seconds: int) -> None:
    path = project.project_dir / f"Pulumi.{stack}.yaml"
    doc = yaml.safe_load(path.read_text())
    cfg = doc["config"]
    cfg["gpu-stack:validation"] = {**(cfg.get("gpu-stack:validation") or {}), "timeoutSeconds": seconds}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def _command(fleet: FleetSandbox, *args: str) -> tuple[list[str], dict[str, str]]:
    # the CLI's environment (file backend, passphrase, no plugin download); KUBECONFIG points nowhere:
    # each stack reaches its own cluster through its own kubernetes.kubeconfig
    env = {**fleet.env(), "PYTHONPATH": str(PROJECT_DIR)}
    assert fleet.tools is not None
    cmd = [sys.executable, "-m", "gpu_stack", "--project-dir", str(fleet.project.project_dir), "fleet", "up",
           "--pulumi", str(fleet.tools["pulumi"]), *args]
    return cmd, env


def _fleet(fleet: FleetSandbox, *args: str) -> subprocess.CompletedProcess[str]:
    cmd, env = _command(fleet, *args)
    return subprocess.run(cmd, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=1800)


def _in_flight(stacks: tuple[str, ...]) -> re.Pattern[str]:
    """An engine line of one of `stacks`' `up` with a resource operation under way."""
    return re.compile(rf"^\[({'|'.join(stacks)})\] \| .*\b(creating|updating|replacing|deleting)\b")


CANCELLED, TERMINATED = "received; cancelling", "received; terminating"
"""What the Pulumi CLI says on its first signal (it cancels) and on its second (it terminates at
once), pkg/backend/cancellation_scope.go."""


def _interrupted(
    fleet: FleetSandbox, *args: str, sig: signal.Signals = signal.SIGINT, wave: str = "regions",
    stacks: tuple[str, ...] = REGIONS,
) -> tuple[int, list[str], int]:
    """`fleet up ARGS` in a session of its own, and `sig` to the fleet's PID alone (not to its
    process group: no signal reaches the Pulumi CLIs but what the fleet forwards) once the `up` of
    one of `stacks` (in `wave`) has a resource operation under way; (exit code, output lines, how
    many lines came before the signal)."""
    cmd, env = _command(fleet, "--verbose", "--progress", "lines", *args)
    proc = subprocess.Popen(cmd, cwd=PROJECT_DIR, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines: list[str] = []
    started, under_way = threading.Event(), threading.Event()
    in_flight = _in_flight(stacks)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            if line.startswith(tuple(f"[{s}] up (wave {wave}): started" for s in stacks)):
                started.set()
            if in_flight.match(line):
                under_way.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert started.wait(900), f"no up of {stacks} started:\n" + "\n".join(lines[-60:])
        under_way.wait(90)  # an operation under way (the engine's own line), or a while into the up
        sent = len(lines)
        os.kill(proc.pid, sig)
        code = proc.wait(timeout=600)  # the engines cancel: the operations under way finish first
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    reader.join(timeout=30)
    return code, lines, sent


def _locked(stdout: str) -> list[str]:
    """The stacks the roll-up says are locked (an interrupted CLI left the lock)."""
    stacks, current = [], None
    for line in stdout.split("Fleet roll-up:", 1)[-1].splitlines():
        if not line.startswith(" "):
            current = line.split(" (wave ", 1)[0] if " (wave " in line else None
        elif current and "currently locked" in line and current not in stacks:
            stacks.append(current)
    return stacks


def _recover(fleet: FleetSandbox) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """docs/fleet.md, Interrupted: `fleet up --resume`; where it says a stack is locked (the
    interrupted CLI left its lock), `pulumi cancel` for that stack and `fleet up --resume` again."""
    run = _fleet(fleet, "--resume")
    locked = _locked(run.stdout) if run.returncode != 0 else []
    for stack in locked:
        fleet.stack(stack).run("cancel", "--yes")
    return (_fleet(fleet, "--resume") if locked else run), locked


def _state(fleet: FleetSandbox) -> dict[str, Any]:
    """The stacks the resume file records as done (.gpu-stack/fleet-state.json)."""
    path = fleet.project.project_dir / ".gpu-stack" / "fleet-state.json"
    return json.loads(path.read_text())["stacks"] if path.exists() else {}


def _updates(fleet: FleetSandbox) -> dict[str, list[dict[str, Any]]]:
    """Each stack's `update` entries, oldest first (`pulumi stack history` lists the newest first)."""
    out = {}
    for stack in STACKS:
        history = json.loads(fleet.stack(stack).run("stack", "history", "--json").stdout or "[]")
        out[stack] = [h for h in reversed(history) if h.get("kind") == "update"]
    return out


def _epoch(stamp: Any) -> float:
    if isinstance(stamp, (int, float)):
        return float(stamp)
    from datetime import datetime

    return datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()


def _in_wave_order(updates: dict[str, list[dict[str, Any]]], index: int) -> None:
    """Update number `index` of each stack: the canary's ended before a region's started, and both
    regions' ended before the last wave's started."""
    canary, last = updates[CANARY][index], updates[LAST][index]
    for region in REGIONS:
        update = updates[region][index]
        assert _epoch(canary["endTime"]) <= _epoch(update["startTime"]), (CANARY, region, canary, update)
        assert _epoch(update["endTime"]) <= _epoch(last["startTime"]), (region, LAST, update, last)


def test_a_fleet_rolls_out_in_waves_stops_at_a_failed_canary_survives_an_interrupt_and_skips_a_cluster_that_is_down(tools, e2e_tmp):
    timings: dict[str, float] = {}
    start = time.monotonic()
    fleet = FleetSandbox(
        STACKS, e2e_tmp / "fleet", tools, copies=COPIES, failing_checks={CANARY: ("dcgm-metrics",)},
        config={"validation": FAST, "dcgmExporter": {"enabled": False}}, fleet_file=FLEET_FILE,
    )
    try:
        fleet.start()
        timings["4 sandboxes and the fleet project"] = time.monotonic() - start
        # 1. a change that validates: every stack, wave by wave
        start = time.monotonic()
        first = _fleet(fleet)
        timings["fleet up (4 stacks created)"] = time.monotonic() - start
        assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
        out = first.stdout
        assert "Every stack of the fleet is done for this change." in out
        for stack in STACKS:
            assert f"{stack} (wave " in out and "validation: passed" in out
        updates = _updates(fleet)
        assert all(len(updates[s]) == 1 and updates[s][0]["result"] == "succeeded" for s in STACKS), updates
        _in_wave_order(updates, 0)
        assert out.index(f"[{CANARY}] up (wave canary): started") < out.index(f"[{LAST}] up (wave last): started")

        # 2. the DCGM exporter on every stack: the canary's check fails, nothing after it is touched
        for stack in STACKS:
            _set_dcgm(fleet.project, stack, True)
        start = time.monotonic()
        broken = _fleet(fleet)
        timings["fleet up (canary fails)"] = time.monotonic() - start
        assert broken.returncode == 1, broken.stdout[-6000:] + broken.stderr[-3000:]
        lines = broken.stdout.splitlines()
        assert f"{CANARY} (wave canary): failed" in " ".join(lines)
        assert "dcgm-metrics" in broken.stdout and "Stopped: wave canary: k3s-canary failed; no later wave was started" in lines
        assert any(line.endswith(" fleet up --resume") and line.startswith("Resume after the fix") for line in lines)
        updates = _updates(fleet)
        assert [u["result"] for u in updates[CANARY]] == ["succeeded", "failed"]
        for stack in (*REGIONS, LAST):
            assert len(updates[stack]) == 1, f"{stack} was touched after the canary failed: {updates[stack]}"
            assert f"{stack} (wave " in broken.stdout

        # 3. the fix (the canary keeps the exporter off); its --resume interrupted by SIGINT to the
        # fleet's PID alone while the regions wave runs
        _set_dcgm(fleet.project, CANARY, False)
        recorded = _state(fleet)  # what the resume file said before: each stack's last change done
        start = time.monotonic()
        code, output, sent = _interrupted(fleet, "--resume")
        timings["fleet up --resume, SIGINT to the PID in the regions wave"] = time.monotonic() - start
        text = "\n".join(output)
        print(f"SIGINT after: {output[sent - 1] if sent else '(nothing)'}", file=sys.stderr)
        assert code == 130, text[-6000:]
        # each region's CLI under way got the one SIGINT the fleet forwarded: cancelled, never terminated
        assert any(line.startswith(tuple(f"[{r}] | " for r in REGIONS)) and CANCELLED in line for line in output[sent:]), text[-6000:]
        assert TERMINATED not in text
        assert f"[{LAST}] up (wave" not in text  # the last wave never started
        assert "interrupted (SIGINT)" in text and "fleet up --resume" in text
        assert "Interrupted: the fleet was interrupted in wave regions" in text
        before = "\n".join(output[:sent])
        updates, done = _updates(fleet), _state(fleet)
        # the canary: done (its update succeeded before the regions started, and it is recorded)
        assert [u["result"] for u in updates[CANARY]] == ["succeeded", "failed", "succeeded"] and CANARY in done
        # the last wave: untouched (its record still the first change's)
        assert len(updates[LAST]) == 1 and done[LAST] == recorded[LAST]
        # each region: done (its update finished, recorded), or its update ended by the engine's
        # cancel and the stack not recorded as done (what `fleet up --resume` takes up again)
        interrupted = []
        for region in REGIONS:
            assert f"[{region}] up (wave regions): started" in before
            new = updates[region][1:]
            assert len(new) <= 1, (region, new)
            if new and new[0]["result"] == "succeeded":
                assert done[region]["change"] != recorded[region]["change"], region  # done for this change
            else:  # its update ended by the cancel (or not begun): no longer recorded as done
                assert region not in done, region
                interrupted.append(region)
        assert any(len(updates[r]) == 2 for r in interrupted), f"SIGINT reached no region's update while it ran: {updates}"

        # 4. the documented recovery finishes the rest
        start = time.monotonic()
        resumed, locked = _recover(fleet)
        timings["fleet up --resume (recovery)"] = time.monotonic() - start
        print(f"locks left by the interrupt: {locked or 'none'}", file=sys.stderr)
        assert resumed.returncode == 0, resumed.stdout[-6000:] + resumed.stderr[-3000:]
        assert "Every stack of the fleet is done for this change." in resumed.stdout
        assert f"{CANARY} (wave canary): already done" in resumed.stdout
        updates = _updates(fleet)
        assert [u["result"] for u in updates[CANARY]] == ["succeeded", "failed", "succeeded"]
        for stack in (*REGIONS, LAST):
            assert updates[stack][-1]["result"] == "succeeded", (stack, updates[stack])
            pending = fleet.stack(stack).export()["deployment"].get("pending_operations") or []
            assert pending == [], (stack, pending)
        assert len(updates[LAST]) == 2 and all(len(updates[r]) in (2, 3) for r in interrupted)
        assert max(_epoch(updates[r][-1]["endTime"]) for r in REGIONS) <= _epoch(updates[LAST][-1]["startTime"])

        # 5. a change of the canary alone; its --resume stopped by SIGTERM to the fleet's PID while
        # the canary's up runs; then the recovery
        _set_validation_timeout(fleet.project, CANARY, 200)
        recorded = _state(fleet)
        start = time.monotonic()
        code, output, sent = _interrupted(fleet, "--resume", sig=signal.SIGTERM, wave="canary", stacks=(CANARY,))
        timings["fleet up --resume, SIGTERM to the PID in the canary's up"] = time.monotonic() - start
        text = "\n".join(output)
        print(f"SIGTERM after: {output[sent - 1] if sent else '(nothing)'}", file=sys.stderr)
        assert code == 143, text[-6000:]
        assert any(line.startswith(f"[{CANARY}] | ") and CANCELLED in line for line in output[sent:]), text[-6000:]
        assert TERMINATED not in text
        assert "up (wave regions)" not in text and "up (wave last)" not in text  # nothing started after it
        assert "interrupted (SIGTERM)" in text and "Interrupted: the fleet was interrupted in wave canary" in text
        updates, done = _updates(fleet), _state(fleet)
        assert len(updates[CANARY]) == 4, updates[CANARY]  # its update ended by the cancel (or, at the last
        assert CANARY not in done  # operation, just done), and it is not recorded done: its gate never ran
        assert all(done[s] == recorded[s] for s in (*REGIONS, LAST))
        assert f"{CANARY} (wave canary): interrupted" in text
        start = time.monotonic()
        resumed, locked = _recover(fleet)
        timings["fleet up --resume (recovery after SIGTERM)"] = time.monotonic() - start
        print(f"locks left by SIGTERM: {locked or 'none'}", file=sys.stderr)
        assert resumed.returncode == 0, resumed.stdout[-6000:] + resumed.stderr[-3000:]
        assert f"{CANARY} (wave canary): done" in resumed.stdout
        assert all(f"{s} (wave {w}): already done" in resumed.stdout for s, w in ((REGIONS[0], "regions"), (REGIONS[1], "regions"), (LAST, "last")))
        updates = _updates(fleet)
        assert updates[CANARY][-1]["result"] == "succeeded" and CANARY in _state(fleet)
        assert (fleet.stack(CANARY).export()["deployment"].get("pending_operations") or []) == []
        counts = {s: len(u) for s, u in updates.items()}

        # 6. the last cluster goes down with a change only it has: as the fleet file says, skipped
        # (and said; the others already done: nothing run for them), or the rollout stops there
        next(b for b in fleet.boxes if b.stack == LAST).cluster.stop()
        _set_validation_timeout(fleet.project, LAST, 240)
        (fleet.project.project_dir / "fleet.yaml").write_text(yaml.safe_dump({**FLEET_FILE, "onUnreachable": "skip"}))
        start = time.monotonic()
        skipped = _fleet(fleet, "--resume")
        timings["fleet up --resume (one cluster down, skipped)"] = time.monotonic() - start
        assert skipped.returncode == 0, skipped.stdout[-6000:] + skipped.stderr[-3000:]
        rollup = skipped.stdout.split("Fleet roll-up:")[1]
        assert f"{LAST} (wave last): skipped" in rollup and "cluster unreachable, skipped (onUnreachable: skip)" in rollup
        assert f"{CANARY} (wave canary): already done" in rollup
        assert all(f"{r} (wave regions): already done" in rollup for r in REGIONS)
        assert f"skipped, not updated: {LAST}" in rollup and "up (wave" not in skipped.stdout
        (fleet.project.project_dir / "fleet.yaml").write_text(yaml.safe_dump(FLEET_FILE))  # onUnreachable: stop
        start = time.monotonic()
        stopped = _fleet(fleet, "--resume")
        timings["fleet up --resume (one cluster down, stopped)"] = time.monotonic() - start
        assert stopped.returncode == 1, stopped.stdout[-6000:] + stopped.stderr[-3000:]
        assert f"Stopped: the preview of {LAST} failed: no stack was updated" in stopped.stdout
        assert f"{LAST} (wave last): failed" in stopped.stdout and "cluster unreachable: " in stopped.stdout
        assert {s: len(u) for s, u in _updates(fleet).items()} == counts
    finally:
        fleet.stop()
        print("fleet e2e timings (s): " + json.dumps({k: round(v, 1) for k, v in timings.items()}), file=sys.stderr)
