"""The dcgm-metrics check: the exporter serves its metric for every GPU it watches."""

from __future__ import annotations

from ...config.dcgm_csv import metric_names
from ...config.gpu_models import ALL_DISABLED
from ...config.root import Settings
from ..dcgm import SERVICE_NAME as DCGM_SERVICE, SERVICE_PORT as DCGM_PORT
from .manifests import (
    MIG_METRIC,
    SMALL,
    UTIL_METRIC,
    ValidationJob,
    container_spec,
    job_manifest,
    job_name,
    payload_deadline,
    pod_spec,
)


def _whole_gpus(settings: Settings) -> int:
    return sum(n.gpu.count for n in settings.nodes if n.mig in (None, ALL_DISABLED))


def dcgm_expected_gpus(settings: Settings) -> int:
    """GPUs that must report the Job's metric: every GPU of nodes without MIG; on a cluster whose
    GPUs are all in MIG mode, every GPU (its instances report under the parent GPU's UUID)."""
    whole = _whole_gpus(settings)
    if whole == 0:
        return max(1, sum(n.gpu.count for n in settings.nodes))
    return whole


def dcgm_metric(settings: Settings) -> str:
    """The metric the DCGM Job looks for: GPU utilisation where whole GPUs report it; on an
    all-MIG cluster (MIG GPUs do not report DCGM_FI_DEV_GPU_UTIL) framebuffer use, which MIG
    instances do report. A custom list that leaves the metric out: its first other metric."""
    wanted = UTIL_METRIC if _whole_gpus(settings) > 0 or not settings.nodes else MIG_METRIC
    custom = settings.dcgm_exporter.metrics
    if custom is None:
        return wanted
    names = metric_names(custom)
    if wanted in names or not names:
        return wanted
    others = [n for n in names if n != UTIL_METRIC or wanted == UTIL_METRIC]
    return others[0] if others else names[0]


def dcgm_metrics(settings: Settings, configmap: str) -> ValidationJob | None:
    if not settings.dcgm_exporter.enabled:
        return None
    v = settings.validation
    host = f"{DCGM_SERVICE}.{settings.operator.namespace}.svc"
    expected = dcgm_expected_gpus(settings)
    metric = dcgm_metric(settings)
    validates = {
        "check": "dcgm-metrics",
        "dcgm": settings.dcgm_exporter.model_dump(mode="json"),
        "service": f"{host}:{DCGM_PORT}",
        "metric": metric,
        "expected_gpus": expected,
        "image": v.images.toolbox,
    }
    name = job_name("dcgm-metrics", validates)
    container = container_spec(
        "dcgm-metrics",
        v.images.toolbox,
        "dcgm-metrics.sh",
        {
            "METRICS_HOST": host,
            "METRICS_PORT": DCGM_PORT,
            "METRICS_PATH": "/metrics",
            "METRIC": metric,
            "EXPECTED_GPUS": expected,
            "DEADLINE_SECONDS": payload_deadline(v.timeout_seconds),
        },
        resources=SMALL,
    )
    return ValidationJob(
        key="dcgm-metrics",
        check="dcgm-metrics",
        node=None,
        manifest=job_manifest(settings, name, "dcgm-metrics", None, pod_spec(configmap, container)),
        gpu_resource=None,
        validates=validates,
    )
