"""The gate between waves: validation passed (waves.validation_gate), then the soak: the stack's GPU
alerts (its `alertRules` output) must not fire for `soakSeconds`, and none may still be pending
when the soak ends, read from its Prometheus when the fleet names one (`prometheus:`, with the
stack's `alertLabels` where stacks share one); without one the soak only waits. A Prometheus that
cannot be read does not pass the gate: a gate that cannot be checked is not a passed gate.

An alert is `pending` from the first evaluation its expression holds until its `for:` has passed,
then `firing` (Prometheus's ALERTS series, `alertstate`). A soak shorter than an alert's `for:`
would end with the alert pending and pass: so pending at the end fails the gate too.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping

from ..config.fleet import Fleet, Gate
from ..config.safe_input import escape
from .waves import GateCheck, StepResult, validation_gate

FIRING, PENDING = "firing", "pending"
Alerts = Callable[[str, list[str], Mapping[str, str]], dict[str, str]]
"""(Prometheus URL, alert names, label matchers) -> {alert name: `firing` or `pending`} for the
names among them active now with those labels (raises OSError/ValueError)."""


def _quoted(value: str) -> str:
    """A PromQL string literal."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def alerts_query(labels: Mapping[str, str]) -> str:
    """The ALERTS series of active alerts (firing or pending) carrying `labels`."""
    matchers = ['alertstate=~"firing|pending"', *(f"{name}={_quoted(value)}" for name, value in sorted(labels.items()))]
    return "ALERTS{" + ",".join(matchers) + "}"


def prometheus_alerts(url: str, names: list[str], labels: Mapping[str, str], timeout: float = 10) -> dict[str, str]:
    """The stack's alerts active now: Prometheus's ALERTS series with the stack's labels; an alert
    with series in both states is `firing`."""
    query = urllib.parse.urlencode({"query": alerts_query(labels)})
    with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query?{query}", timeout=timeout) as resp:
        doc = json.loads(resp.read().decode("utf-8"))
    if doc.get("status") != "success":
        raise ValueError(f"Prometheus answered status {doc.get('status')!r}")
    found: dict[str, str] = {}
    for series in doc.get("data", {}).get("result", []):
        metric = series.get("metric", {}) if isinstance(series, dict) else {}
        name, state = str(metric.get("alertname")), str(metric.get("alertstate"))
        if name in names and state in (FIRING, PENDING) and found.get(name) != FIRING:
            found[name] = state
    return found


def gate_check(
    fleet: Fleet,
    alerts: Alerts = prometheus_alerts,
    sleep: Callable[[float], object] | None = None,
    clock: Callable[[], float] = time.monotonic,
    on_progress: Callable[[str], None] = lambda line: None,
    interrupted: threading.Event | None = None,
) -> GateCheck:
    """The fleet's gate: validation, then the soak with the stack's Prometheus when it has one.
    `interrupted` cuts the soak short (it then does not pass); `sleep` defaults to waiting on it."""
    stop = interrupted if interrupted is not None else threading.Event()
    wait = sleep if sleep is not None else stop.wait

    def check(stack: str, gate: Gate, up: StepResult) -> str | None:
        why = validation_gate(stack, gate, up)
        if why or gate.soak_seconds <= 0:
            return why
        url = fleet.prometheus.get(stack)
        labels = dict(fleet.alert_labels.get(stack, {}))
        names = [str(n) for n in (up.outputs.get("alertRules") or [])]
        where = f" with {', '.join(f'{k}={v}' for k, v in sorted(labels.items()))}" if labels else ""
        on_progress(f"[{stack}] soak: {gate.soak_seconds}s" + (
            f", watching {len(names)} GPU alerts at {url}{where}" if url else " (no Prometheus named for it: waiting only)"))
        end = clock() + gate.soak_seconds
        while True:
            if stop.is_set():
                return "the soak was cut short by the interrupt"
            left = end - clock()
            if url and names:
                try:
                    active = alerts(url, names, labels)
                except (OSError, ValueError) as exc:
                    return f"the soak could not read Prometheus at {url}: {escape(str(exc))[:200]}"
                fired = sorted(n for n, state in active.items() if state == FIRING)
                if fired:
                    return f"GPU alert(s) fired during the soak: {', '.join(fired)}"
                pending = sorted(n for n, state in active.items() if state == PENDING)
                if pending and left <= 0:
                    return (f"GPU alert(s) still pending when the soak ended: {', '.join(pending)} (their `for:` "
                            "outlasts the soak; a longer soakSeconds lets them fire or clear)")
            if left <= 0:
                return None
            wait(min(gate.poll_seconds, left))

    return check
