"""Rules on the DCGM exporter's metric list and on the validation namespace."""

from __future__ import annotations

from ...dcgm_csv import csv_errors
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


def validation_rules(settings: Settings) -> list[Problem]:
    v = settings.validation
    if v.enabled and v.namespace == settings.operator.namespace:
        return [
            Problem(
                key=config_key(("validation", "namespace")),
                value=v.namespace,
                message=(
                    "must differ from operator.namespace: the validation namespace enforces the restricted "
                    "pod-security level, the operator's namespace must stay privileged"
                ),
            )
        ]
    return []
