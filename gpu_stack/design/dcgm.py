"""DCGM exporter custom metrics: the CSV the exporter reads, in a content-named ConfigMap.

The CSV is read and checked the way dcgm-exporter reads it in dcgm_csv.py (a data module the
config rules use too); this module builds the ConfigMap and says which fields a stack reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config.dcgm_csv import (  # noqa: F401  (the reader, re-exported for its users)
    DEFAULT_METRICS_PATH,
    FIELDS_PATH,
    METRIC_TYPES,
    CsvSyntaxError,
    csv_errors,
    csv_fields,
    default_fields,
    go_csv_records,
    known_fields,
    metric_names,
)
from ..config.root import Settings
from .naming import content_name

CSV_KEY = "dcgm-metrics.csv"
CONFIGMAP_PREFIX = "dcgm-metrics"
SERVICE_NAME = "nvidia-dcgm-exporter"
SERVICE_PORT = 9400


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


def configured_fields(settings: Settings) -> frozenset[str]:
    """The metric fields the exporter of this stack reports: none with the exporter off, the custom
    list when `dcgmExporter.metrics` is set, else the exporter's default list."""
    exporter = settings.dcgm_exporter
    if not exporter.enabled:
        return frozenset()
    if exporter.metrics is None:
        return default_fields()
    return csv_fields(exporter.metrics)
