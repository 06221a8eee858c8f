"""The fleet with the real engine: four simulated clusters (the operator-placement stacks `staging`
and `k3s`, and two copies of k3s under other names), one project folder with one backend, and
`python -m gpu_stack fleet up` driving the Pulumi CLI 3.259.0 through the Automation API.

1. A change that validates (the first deploy) goes out wave by wave, in the fleet file's order.
2. A change that breaks validation on the canary (the DCGM exporter turned on everywhere; the
   canary's simulated kubelet fails its `dcgm-metrics` check): the canary's `up` fails, the
   roll-up says where and why, and no later stack is touched (its history has no new update).
3. The fix (the canary keeps the exporter off) and `fleet up --resume` finishes the rest; a second
   `--resume` finds every stack done for this change and runs nothing.
4. A cluster that is down: skipped and said so under `onUnreachable: skip` (the others updated),
   the rollout stopped before any update under `stop`.
"""

from __future__ import annotations

import json
import subprocess
import sys
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


def _fleet(fleet: FleetSandbox, *args: str) -> subprocess.CompletedProcess[str]:
    # the CLI's environment (file backend, passphrase, no plugin download); KUBECONFIG points nowhere:
    # each stack reaches its own cluster through its own kubernetes.kubeconfig
    env = {**fleet.env(), "PYTHONPATH": str(PROJECT_DIR)}
    assert fleet.tools is not None
    cmd = [sys.executable, "-m", "gpu_stack", "--project-dir", str(fleet.project.project_dir), "fleet", "up",
           "--pulumi", str(fleet.tools["pulumi"]), *args]
    return subprocess.run(cmd, cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=1800)


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


def test_a_fleet_rolls_out_in_waves_stops_at_a_failed_canary_and_resumes_after_the_fix(tools, e2e_tmp):
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

        # 3. the fix: the canary keeps the exporter off; --resume finishes the rest
        _set_dcgm(fleet.project, CANARY, False)
        start = time.monotonic()
        resumed = _fleet(fleet, "--resume")
        timings["fleet up --resume (4 stacks)"] = time.monotonic() - start
        assert resumed.returncode == 0, resumed.stdout[-6000:] + resumed.stderr[-3000:]
        updates = _updates(fleet)
        assert [u["result"] for u in updates[CANARY]] == ["succeeded", "failed", "succeeded"]
        assert all(len(updates[s]) == 2 and updates[s][1]["result"] == "succeeded" for s in (*REGIONS, LAST)), updates
        assert _epoch(updates[CANARY][2]["endTime"]) <= min(_epoch(updates[s][1]["startTime"]) for s in REGIONS)
        assert max(_epoch(updates[s][1]["endTime"]) for s in REGIONS) <= _epoch(updates[LAST][1]["startTime"])

        start = time.monotonic()
        again = _fleet(fleet, "--resume")
        timings["fleet up --resume (all done)"] = time.monotonic() - start
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert again.stdout.count("already done") >= 4 and "up (wave" not in again.stdout
        assert {s: len(u) for s, u in _updates(fleet).items()} == {CANARY: 3, "staging": 2, "k3s": 2, LAST: 2}

        # 4. the last cluster goes down and a change reaches k3s and k3s-eu: as the fleet file says,
        # skipped (and said), or the rollout stops there
        next(b for b in fleet.boxes if b.stack == LAST).cluster.stop()
        for stack in ("k3s", LAST):
            _set_validation_timeout(fleet.project, stack, 240)
        (fleet.project.project_dir / "fleet.yaml").write_text(yaml.safe_dump({**FLEET_FILE, "onUnreachable": "skip"}))
        start = time.monotonic()
        skipped = _fleet(fleet, "--resume")
        timings["fleet up --resume (one cluster down, skipped)"] = time.monotonic() - start
        assert skipped.returncode == 0, skipped.stdout[-6000:] + skipped.stderr[-3000:]
        rollup = skipped.stdout.split("Fleet roll-up:")[1]
        assert f"{LAST} (wave last): skipped" in rollup and "cluster unreachable, skipped (onUnreachable: skip)" in rollup
        assert "k3s (wave regions): done" in rollup and f"{CANARY} (wave canary): already done" in rollup
        (fleet.project.project_dir / "fleet.yaml").write_text(yaml.safe_dump(FLEET_FILE))  # onUnreachable: stop
        stopped = _fleet(fleet, "--resume")
        assert stopped.returncode == 1, stopped.stdout[-6000:] + stopped.stderr[-3000:]
        assert f"Stopped: the preview of {LAST} failed: no stack was updated" in stopped.stdout
        assert f"{LAST} (wave last): failed" in stopped.stdout and "cluster unreachable: " in stopped.stdout
        assert {s: len(u) for s, u in _updates(fleet).items()} == {CANARY: 3, "staging": 2, "k3s": 3, LAST: 2}
    finally:
        fleet.stop()
        print("fleet e2e timings (s): " + json.dumps({k: round(v, 1) for k, v in timings.items()}), file=sys.stderr)
