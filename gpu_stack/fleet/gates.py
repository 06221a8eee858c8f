"""The gate between waves: validation passed (waves.validation_gate), then the soak: the stack's GPU
alerts (its `alertRules` output) must not fire for `soakSeconds`, read from its Prometheus when the
fleet names one (`prometheus:`); without one the soak only waits. A Prometheus that cannot be read
does not pass the gate: a gate that cannot be checked is not a passed gate."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from collections.abc import Callable

from ..config.fleet import Fleet, Gate
from ..config.safe_input import escape
from .waves import GateCheck, StepResult, validation_gate

Firing = Callable[[str, list[str]], list[str]]
"""(Prometheus URL, alert names) -> the names among them firing now (raises OSError/ValueError)."""


def prometheus_firing(url: str, names: list[str], timeout: float = 10) -> list[str]:
    """The stack's alerts firing now: Prometheus's `ALERTS{alertstate="firing"}` series."""
    query = urllib.parse.urlencode({"query": 'ALERTS{alertstate="firing"}'})
    with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query?{query}", timeout=timeout) as resp:
        doc = json.loads(resp.read().decode("utf-8"))
    if doc.get("status") != "success":
        raise ValueError(f"Prometheus answered status {doc.get('status')!r}")
    found = {str(r.get("metric", {}).get("alertname")) for r in doc.get("data", {}).get("result", [])}
    return sorted(n for n in names if n in found)


def gate_check(
    fleet: Fleet,
    firing: Firing = prometheus_firing,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    on_progress: Callable[[str], None] = lambda line: None,
) -> GateCheck:
    """The fleet's gate: validation, then the soak with the stack's Prometheus when it has one."""

    def check(stack: str, gate: Gate, up: StepResult) -> str | None:
        why = validation_gate(stack, gate, up)
        if why or gate.soak_seconds <= 0:
            return why
        url = fleet.prometheus.get(stack)
        names = [str(n) for n in (up.outputs.get("alertRules") or [])]
        on_progress(f"[{stack}] soak: {gate.soak_seconds}s" + (f", watching {len(names)} GPU alerts at {url}" if url else " (no Prometheus named for it: waiting only)"))
        end = clock() + gate.soak_seconds
        while True:
            if url and names:
                try:
                    fired = firing(url, names)
                except (OSError, ValueError) as exc:
                    return f"the soak could not read Prometheus at {url}: {escape(str(exc))[:200]}"
                if fired:
                    return f"GPU alert(s) fired during the soak: {', '.join(fired)}"
            left = end - clock()
            if left <= 0:
                return None
            sleep(min(gate.poll_seconds, left))

    return check
