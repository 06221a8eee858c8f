"""DCGM exporter custom metrics: the CSV the exporter reads, in a content-named ConfigMap.

The CSV is checked line by line the way dcgm-exporter reads it (`FIELD, type, help`), so a bad
list fails at plan time naming the line instead of crash-looping the exporter pod.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from . import checks
from .naming import content_name
from .settings import _MISSING, Problem, Settings, config_key

CSV_KEY = "dcgm-metrics.csv"
CONFIGMAP_PREFIX = "dcgm-metrics"
SERVICE_NAME = "nvidia-dcgm-exporter"
SERVICE_PORT = 9400
METRIC_TYPES = ("gauge", "counter", "histogram", "summary", "label")
FIELD_RE = re.compile(r"^DCGM_FI_[A-Z0-9_]+$|^DCGM_EXP_(XID_ERRORS_COUNT|CLOCK_EVENTS_COUNT|GPU_HEALTH_STATUS|P2P_STATUS)$")
"""DCGM fields, and the exporter's own fields (dcgm-exporter internal/pkg/counters)."""


@dataclass(frozen=True)
class DcgmMetricsConfig:
    configmap_name: str | None
    """None when the exporter's built-in metric list is used."""
    data: dict[str, str] = field(default_factory=dict)


def build_dcgm(settings: Settings) -> DcgmMetricsConfig:
    exporter = settings.dcgm_exporter
    if not exporter.enabled or exporter.metrics is None:
        return DcgmMetricsConfig(configmap_name=None)
    text = exporter.metrics if exporter.metrics.endswith("\n") else exporter.metrics + "\n"
    data = {CSV_KEY: text}
    return DcgmMetricsConfig(configmap_name=content_name(CONFIGMAP_PREFIX, data), data=data)


DEFAULT_METRICS_PATH = Path(__file__).resolve().parents[1] / "config" / "dcgm-default-metrics.txt"


@lru_cache(maxsize=1)
def default_fields() -> frozenset[str]:
    """The fields the exporter collects without a custom list (config/dcgm-default-metrics.txt)."""
    lines = DEFAULT_METRICS_PATH.read_text().splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


def csv_fields(text: str) -> frozenset[str]:
    """The field names a metrics CSV lists (comments and blank lines skipped)."""
    out = set()
    for line in text.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            out.add(stripped.split(",", 1)[0].strip())
    return frozenset(out)


def configured_fields(settings: Settings) -> frozenset[str]:
    """The metric fields the exporter of this stack reports: none with the exporter off, the custom
    list when `dcgmExporter.metrics` is set, else the exporter's default list."""
    exporter = settings.dcgm_exporter
    if not exporter.enabled:
        return frozenset()
    if exporter.metrics is None:
        return default_fields()
    return csv_fields(exporter.metrics)


def csv_errors(text: str) -> list[str]:
    """Every problem of a dcgm-exporter metrics CSV, as 'line N: ...' (empty when valid)."""
    errors: list[str] = []
    seen: dict[str, int] = {}
    metrics = 0
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = [f.strip() for f in stripped.split(",")]
        if len(fields) != 3:
            extra = " (no comma inside the help text)" if len(fields) > 3 else ""
            errors.append(f"line {number}: {len(fields)} fields, need exactly 3: FIELD, type, help{extra}: {stripped!r}")
            continue
        name, kind, help_text = fields
        if not FIELD_RE.fullmatch(name):
            errors.append(f"line {number}: {name!r} is not a DCGM field name (DCGM_FI_...)")
        if kind not in METRIC_TYPES:
            errors.append(f"line {number}: type {kind!r} must be one of {', '.join(METRIC_TYPES)}")
        if not help_text:
            errors.append(f"line {number}: the help text is empty")
        if name in seen:
            errors.append(f"line {number}: {name} is already listed on line {seen[name]}")
        seen.setdefault(name, number)
        metrics += 1
    if metrics == 0 and not errors:
        errors.append("lists no metric (only comments or blank lines)")
    return errors


def _dcgm_rules(settings: Settings) -> list[Problem]:
    exporter = settings.dcgm_exporter
    if exporter.metrics is None:
        return []
    key = config_key(("dcgmExporter", "metrics"))
    if not exporter.enabled:
        return [Problem(key=key, value=_MISSING, message="has no effect while dcgmExporter.enabled is false; remove it or enable the exporter")]
    errors = csv_errors(exporter.metrics)
    if not errors:
        return []
    return [Problem(key=key, value=_MISSING, message="invalid metrics CSV: " + "; ".join(errors))]


checks.RULES.append(_dcgm_rules)
