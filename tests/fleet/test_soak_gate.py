"""The soak gate (issue 41, item 8): the stack's GPU alerts must not fire during the soak nor still
be pending when it ends, read from its own Prometheus, or, where stacks share one, only the alerts
carrying the stack's `alertLabels`. Prometheus itself is a small HTTP server here answering
`/api/v1/query` as Prometheus does (the ALERTS series with its `alertstate` label, filtered by the
query's label matchers)."""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from gpu_stack.config.fleet import FleetError, Gate, parse_fleet
from gpu_stack.fleet.gates import alerts_query, gate_check, prometheus_alerts
from gpu_stack.fleet.waves import StepResult

from .test_waves import OUTPUTS, STACKS, _fleet

UP = StepResult(True, outputs=OUTPUTS)  # alertRules: GpuXidError, GpuHot


class FakePrometheus:
    """The ALERTS series of `series` (label dicts), answered for `ALERTS{a="x",b=~"y|z"}` queries."""

    def __init__(self) -> None:
        self.series: list[dict[str, str]] = []
        self.queries: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = urllib.parse.parse_qs(urllib.parse.urlparse(self.path).query)["query"][0]
                outer.queries.append(query)
                body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
                    {"metric": {"__name__": "ALERTS", **s}, "value": [0, "1"]} for s in outer.series if outer.matches(query, s)
                ]}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def matches(query: str, series: dict[str, str]) -> bool:
        inner = re.fullmatch(r"ALERTS\{(.*)\}", query)
        assert inner, query
        for name, op, value in re.findall(r'(\w+)(=~|=)"((?:[^"\\]|\\.)*)"', inner.group(1)):
            value = value.replace('\\"', '"').replace("\\\\", "\\")
            have = series.get(name, "")
            if not (re.fullmatch(value, have) if op == "=~" else have == value):
                return False
        return True


@pytest.fixture
def prometheus() -> Iterator[FakePrometheus]:
    prom = FakePrometheus()
    yield prom
    prom.server.shutdown()


def _clock():
    now = [0.0]
    return now, (lambda: now[0]), (lambda s: now.__setitem__(0, now[0] + s))


def test_the_soak_fails_on_a_firing_gpu_alert_and_passes_when_quiet():
    fleet = _fleet(prometheus={"canary": "http://127.0.0.1:9090"})
    now, clock, sleep = _clock()
    asked: list[float] = []

    def alerts(url, names, labels):
        asked.append(now[0])
        assert url == "http://127.0.0.1:9090" and names == ["GpuXidError", "GpuHot"] and labels == {}
        return {"GpuXidError": "firing"} if now[0] >= 40 else {}

    check = gate_check(fleet, alerts=alerts, sleep=sleep, clock=clock)
    assert check("canary", Gate(soak_seconds=30, poll_seconds=10), UP) is None
    assert asked == [0, 10, 20, 30]
    now[0] = 0.0
    assert check("canary", Gate(soak_seconds=120, poll_seconds=20), UP) == "GPU alert(s) fired during the soak: GpuXidError"

    def down(url, names, labels):
        raise OSError("connection refused")

    assert "could not read Prometheus at http://127.0.0.1:9090" in (gate_check(fleet, alerts=down, sleep=sleep, clock=clock)(
        "canary", Gate(soak_seconds=5), UP) or "")
    waited = [0.0]
    no_url = gate_check(fleet, alerts=down, sleep=lambda s: waited.__setitem__(0, waited[0] + s), clock=lambda: waited[0])
    assert no_url("eu", Gate(soak_seconds=45, poll_seconds=15), UP) is None and waited[0] == 45


def test_an_alert_still_pending_when_the_soak_ends_fails_the_gate(prometheus):
    # GpuHot's expression holds from the start but its `for:` (10m) outlasts the 60 s soak: it is
    # pending all along, and the old gate (firing alerts only) passed it
    prometheus.series = [{"alertname": "GpuHot", "alertstate": "pending", "severity": "warning"},
                         {"alertname": "SomeoneElsesAlert", "alertstate": "firing"}]
    fleet = _fleet(prometheus={"canary": prometheus.url})
    _now, clock, sleep = _clock()
    check = gate_check(fleet, sleep=sleep, clock=clock)
    why = check("canary", Gate(soak_seconds=60, poll_seconds=30), UP)
    assert why == ("GPU alert(s) still pending when the soak ended: GpuHot (their `for:` outlasts the soak; a longer "
                   "soakSeconds lets them fire or clear)")
    assert len(prometheus.queries) == 3  # at 0, 30 and 60 s: pending at 0 and 30 s does not fail yet
    # pending that clears before the end passes; pending that fires fails as fired
    prometheus.series = []
    assert gate_check(fleet, sleep=sleep, clock=clock)("canary", Gate(soak_seconds=60, poll_seconds=30), UP) is None
    prometheus.series = [{"alertname": "GpuHot", "alertstate": "firing"}, {"alertname": "GpuHot", "alertstate": "pending"}]
    assert prometheus_alerts(prometheus.url, ["GpuHot", "GpuXidError"], {}) == {"GpuHot": "firing"}


def test_stacks_sharing_one_prometheus_are_told_apart_by_their_alert_labels(prometheus):
    prometheus.series = [{"alertname": "GpuXidError", "alertstate": "firing", "cluster": "eu"}]
    fleet = _fleet(prometheus={"eu": prometheus.url, "us": prometheus.url},
                   alertLabels={"eu": {"cluster": "eu"}, "us": {"cluster": "us"}})
    _now, clock, sleep = _clock()
    check = gate_check(fleet, sleep=sleep, clock=clock)
    assert check("us", Gate(soak_seconds=10, poll_seconds=10), UP) is None  # eu's alert is not us's
    assert check("eu", Gate(soak_seconds=10, poll_seconds=10), UP) == "GPU alert(s) fired during the soak: GpuXidError"
    assert 'cluster="us"' in prometheus.queries[0]
    assert alerts_query({"cluster": 'a"b\\c'}) == 'ALERTS{alertstate=~"firing|pending",cluster="a\\"b\\\\c"}'


def test_a_shared_prometheus_without_alert_labels_that_tell_the_stacks_apart_is_refused():
    url = "http://prometheus.example:9090"
    with pytest.raises(FleetError) as err:
        _fleet(prometheus={"eu": url, "us": url + "/"}, alertLabels={"eu": {"cluster": "x"}})
    text = str(err.value)
    assert ("alertLabels.us: us shares its Prometheus (the same URL) with eu: give each stack alert "
            "labels of its own (e.g. alertLabels: {us: {cluster: us}})") in text
    assert "alertLabels.eu" not in text  # eu has labels of its own
    with pytest.raises(FleetError, match=r"alertLabels.us = \{'cluster': 'x'\}: us shares .* with eu"):
        _fleet(prometheus={"eu": url, "us": url}, alertLabels={"eu": {"cluster": "x"}, "us": {"cluster": "x"}})
    _fleet(prometheus={"eu": url, "us": url}, alertLabels={"eu": {"cluster": "eu"}, "us": {"cluster": "us"}})  # told apart


@pytest.mark.parametrize(("labels", "message"), [
    ({"eu": {"__name__": "x"}}, r"alertLabels.eu.__name__\.\[key\] = '__name__': must be a Prometheus label name"),
    ({"eu": {"9lives": "x"}}, r"alertLabels.eu.9lives\.\[key\] = '9lives': must be a Prometheus label name"),
    ({"eu": {"alertstate": "firing"}}, r"alertstate.*is set by Prometheus on every ALERTS series"),
    ({"nowhere": {"cluster": "x"}}, r"alertLabels.nowhere = 'nowhere': is not a stack of any wave"),
    ({"us": {"cluster": "x"}}, r"alertLabels.us = \{'cluster': 'x'\}: has no Prometheus to match in: set prometheus.us too"),
])
def test_bad_alert_labels_are_refused_naming_key_value_and_what_is_allowed(labels, message):
    with pytest.raises(FleetError, match=message):
        parse_fleet({"waves": [{"name": "all", "stacks": STACKS}], "prometheus": {"eu": "http://127.0.0.1:9090"},
                     "alertLabels": labels}, sorted(STACKS))
