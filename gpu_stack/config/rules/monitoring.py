"""Rules on the DCGM exporter's metric list and on the validation namespace."""

from __future__ import annotations

from ..dcgm_csv import csv_errors
from ..errors import MISSING, Problem, config_key
from ..root import Settings


def dcgm_rules(settings: Settings) -> list[Problem]:
    exporter = settings.dcgm_exporter
    if exporter.metrics is None:
        return []
    key = config_key(("dcgmExporter", "metrics"))
    if not exporter.enabled:
        return [Problem(key=key, value=MISSING, message="has no effect while dcgmExporter.enabled is false; remove it or enable the exporter")]
    errors = csv_errors(exporter.metrics)
    if not errors:
        return []
    return [Problem(key=key, value=MISSING, message="invalid metrics CSV: " + "; ".join(errors))]


BENCHMARK_ROUNDS = 3
"""K = 1, 2 and the replica count: the windows of one benchmark pod are rounds x sizes."""
BENCHMARK_SLACK_SECONDS = 120
"""What a benchmark Job needs besides its windows: the barrier, the sample's start, the settle."""


def benchmark_seconds(settings: Settings) -> int:
    """How long the benchmark pods run: every window plus the slack."""
    b = settings.validation.sharing_benchmark
    return BENCHMARK_ROUNDS * len(b.sizes) * b.seconds_per_window + BENCHMARK_SLACK_SECONDS


def validation_rules(settings: Settings) -> list[Problem]:
    v = settings.validation
    problems: list[Problem] = []
    b = v.sharing_benchmark
    names = [s.name for s in b.sizes]
    if len(set(names)) != len(names):
        problems.append(Problem(
            key=config_key(("validation", "sharingBenchmark", "sizes")), value=names, message="size names must be unique"
        ))
    if v.enabled and b.enabled and benchmark_seconds(settings) > v.timeout_seconds:
        problems.append(Problem(
            key=config_key(("validation", "sharingBenchmark", "secondsPerWindow")),
            value=b.seconds_per_window,
            message=(
                f"{BENCHMARK_ROUNDS} rounds x {len(b.sizes)} size(s) x {b.seconds_per_window}s + {BENCHMARK_SLACK_SECONDS}s "
                f"= {benchmark_seconds(settings)}s does not fit validation.timeoutSeconds ({v.timeout_seconds}): "
                "lower it, drop a size, or raise validation.timeoutSeconds"
            ),
        ))
    if v.enabled and v.namespace == settings.operator.namespace:
        return problems + [
            Problem(
                key=config_key(("validation", "namespace")),
                value=v.namespace,
                message=(
                    "must differ from operator.namespace: the validation namespace enforces the restricted "
                    "pod-security level, the operator's namespace must stay privileged"
                ),
            )
        ]
    return problems
