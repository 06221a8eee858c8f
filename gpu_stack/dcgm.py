"""DCGM exporter custom metrics: the CSV the exporter reads, in a content-named ConfigMap."""

from __future__ import annotations

from dataclasses import dataclass, field

from .naming import content_name
from .settings import Settings

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
