"""The dcgm-metrics check: the exporter serves its metric for every GPU it watches.

Which metric: from the custom list the stack derived once (`DcgmMetricsConfig.listed`), and the
GPUs counted from the node facts."""

from __future__ import annotations

from collections.abc import Sequence

from ...config.gpu_models import ALL_DISABLED
from ...config.monitoring import DcgmExporterSettings
from ..capacity import NodeFacts
from ..dcgm import SERVICE_NAME as DCGM_SERVICE, SERVICE_PORT as DCGM_PORT, DcgmMetricsConfig
from .manifests import (
    MIG_METRIC,
    SMALL,
    UTIL_METRIC,
    JobContext,
    ValidationJob,
    container_spec,
    job_manifest,
    job_name,
    payload_deadline,
    pod_spec,
)


def whole_gpus(nodes: Sequence[NodeFacts]) -> int:
    """The GPUs of nodes without MIG (no MIG config, or all-disabled)."""
    return sum(f.node.gpu.count for f in nodes if f.node.mig in (None, ALL_DISABLED))


def dcgm_expected_gpus(nodes: Sequence[NodeFacts], whole: int) -> int:
    """GPUs that must report the Job's metric: every GPU of nodes without MIG (`whole`); on a
    cluster whose GPUs are all in MIG mode, every GPU (its instances report under the parent
    GPU's UUID)."""
    if whole == 0:
        return max(1, sum(f.node.gpu.count for f in nodes))
    return whole


def dcgm_metric(listed: Sequence[str], whole: int, any_nodes: bool) -> str:
    """The metric the DCGM Job looks for: GPU utilisation where whole GPUs report it; on an
    all-MIG cluster (MIG GPUs do not report DCGM_FI_DEV_GPU_UTIL) framebuffer use, which MIG
    instances do report. A custom list (`listed`, in its order; () without one) that leaves the
    metric out: its first other metric."""
    wanted = UTIL_METRIC if whole > 0 or not any_nodes else MIG_METRIC
    names = list(listed)
    if wanted in names or not names:
        return wanted
    others = [n for n in names if n != UTIL_METRIC or wanted == UTIL_METRIC]
    return others[0] if others else names[0]


def dcgm_metrics(
    ctx: JobContext,
    configmap: str,
    exporter: DcgmExporterSettings,
    dcgm: DcgmMetricsConfig,
    nodes: Sequence[NodeFacts],
    operator_namespace: str,
) -> ValidationJob | None:
    if not exporter.enabled:
        return None
    v = ctx.validation
    host = f"{DCGM_SERVICE}.{operator_namespace}.svc"
    whole = whole_gpus(nodes)
    expected = dcgm_expected_gpus(nodes, whole)
    metric = dcgm_metric(dcgm.listed, whole, bool(nodes))
    validates = {
        "check": "dcgm-metrics",
        "dcgm": exporter.model_dump(mode="json"),
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
        manifest=job_manifest(ctx, name, "dcgm-metrics", None, pod_spec(configmap, container)),
        gpu_resource=None,
        validates=validates,
    )
