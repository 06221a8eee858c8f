"""DCGM exporter custom metrics: the CSV the exporter reads, in a content-named ConfigMap.

The CSV is read and checked the way dcgm-exporter reads it in dcgm_csv.py (a data module the
config rules use too); this module builds the ConfigMap and says which fields a stack reports
(`DcgmMetricsConfig.fields`, read once per derive(): the alerts, the dashboard and the
dcgm-metrics check all take it from there).
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
from ..config.monitoring import DcgmExporterSettings
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
    fields: frozenset[str] = frozenset()
    """The metric fields the exporter of this stack reports (`configured_fields`)."""
    listed: tuple[str, ...] = ()
    """The fields of the custom list (`dcgmExporter.metrics`), in its order; () without one."""


def build_dcgm(exporter: DcgmExporterSettings) -> DcgmMetricsConfig:
    """The metrics ConfigMap (custom list only) and the fields the exporter reports, read once."""
    fields, listed = configured_fields(exporter)
    if not exporter.enabled or exporter.metrics is None:
        return DcgmMetricsConfig(configmap_name=None, fields=fields, listed=listed)
    text = exporter.metrics if exporter.metrics.endswith("\n") else exporter.metrics + "\n"
    data = {CSV_KEY: text}
    return DcgmMetricsConfig(configmap_name=content_name(CONFIGMAP_PREFIX, data), data=data, fields=fields, listed=listed)


def configured_fields(exporter: DcgmExporterSettings) -> tuple[frozenset[str], tuple[str, ...]]:
    """(the metric fields the exporter reports, the custom list's fields in order): none with the
    exporter off, the custom list when `dcgmExporter.metrics` is set, else the exporter's default
    list (and no custom list). The CSV is read once, as the exporter reads it; a list the stack
    accepted always parses, an unparsable one lists nothing."""
    if not exporter.enabled:
        return frozenset(), ()
    if exporter.metrics is None:
        return default_fields(), ()
    try:
        listed = tuple(fields[0].strip(" ") for _, fields in go_csv_records(exporter.metrics) if fields)
    except CsvSyntaxError:
        return frozenset(), ()
    return frozenset(listed), listed
