"""Helm values for the GPU Operator chart v25.10.1, built from the settings parts the chart reads
(operator, driver, toolkit, MIG, DCGM exporter) and the derived sharing, MIG and DCGM configs.

Only what differs from the chart's own defaults, or what the stack must pin, is set: the
values a reviewer reads in a diff are the decisions this stack makes. Nothing the chart no
longer reads (`operator.defaultRuntime`) is ever set.
"""

from __future__ import annotations

from typing import Any

from ..config.cluster import DriverSettings, OperatorSettings, ToolkitSettings
from ..config.facts import TOOLKIT_ENV_RUNTIMES
from ..config.gpu_models import ALL_DISABLED
from ..config.mig import MigSettings
from ..config.monitoring import DcgmExporterSettings
from .dcgm import DcgmMetricsConfig
from .driver import DriverFiles
from .labels import GPU_NODE_TOLERATION
from .mig import MigConfig
from .sharing import SharingConfig

# k3s and RKE2 keep their containerd elsewhere (TOOLKIT_ENV_RUNTIMES, config/facts.py).
RANCHER_SOCKET = "/run/k3s/containerd/containerd.sock"
RUNTIME_CLASS = "nvidia"


_CHART_CONTROL_PLANE_TOLERATIONS = [
    {"key": f"node-role.kubernetes.io/{role}", "operator": "Equal", "value": "", "effect": "NoSchedule"}
    for role in ("master", "control-plane")
]
OPERATOR_TOLERATIONS = [*_CHART_CONTROL_PLANE_TOLERATIONS, GPU_NODE_TOLERATION]
"""`operator.tolerations`: the chart's own (the control-plane taints, values.yaml) and the GPU
node pools' taint. A list value replaces the chart's, so its entries are repeated. Where every
Node is a tainted GPU node (a managed control plane), the operator's Deployment and the
pre-upgrade CRD hook Job would otherwise never be scheduled, and the release never gets ready."""
NFD_TOLERATIONS = {
    # the subchart's master tolerates the control-plane taint only, its garbage collector nothing
    "master": {"tolerations": [_CHART_CONTROL_PLANE_TOLERATIONS[1], GPU_NODE_TOLERATION]},
    "gc": {"tolerations": [GPU_NODE_TOLERATION]},
}
"""`node-feature-discovery.{master,gc}.tolerations`, for the same reason (its worker DaemonSet
already tolerates the GPU taint in the chart's values)."""


def toolkit_env(runtime: str) -> list[dict[str, str]]:
    """`toolkit.env` for an operator-installed toolkit on nodes running `runtime` ([] for plain containerd)."""
    distribution = TOOLKIT_ENV_RUNTIMES.get(runtime)
    if distribution is None:
        return []
    return [
        {"name": "CONTAINERD_CONFIG", "value": f"/var/lib/rancher/{distribution}/agent/etc/containerd/config.toml"},
        {"name": "CONTAINERD_SOCKET", "value": RANCHER_SOCKET},
        {"name": "CONTAINERD_RUNTIME_CLASS", "value": RUNTIME_CLASS},
    ]


def isolation_env(toolkit: ToolkitSettings) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(`toolkit.env`, `devicePlugin.env`) that keep GPUs from pods that did not request one.

    The toolkit reads `NVIDIA_VISIBLE_DEVICES` (every CUDA image sets it to `all`) of an unprivileged
    container only while accept-nvidia-visible-devices-envvar-when-unprivileged is true, its default
    (internal/config/image/cuda_image.go, VisibleDevices). Off, the device plugin's own channel must
    carry the devices: with CDI its CDI annotations/devices (the operator sets that strategy); without
    CDI the volume-mounts strategy, which the toolkit reads only with
    accept-nvidia-visible-devices-as-volume-mounts (the envvar strategy would then give the pods
    that asked no GPU either). docs/node-preparation.md, "Only pods that ask get a GPU".
    """
    if toolkit.accept_envvar_when_unprivileged:
        return [], []
    env = [{"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_ENVVAR_WHEN_UNPRIVILEGED", "value": "false"}]
    if toolkit.cdi:
        return env, []
    env.append({"name": "ACCEPT_NVIDIA_VISIBLE_DEVICES_AS_VOLUME_MOUNTS", "value": "true"})
    return env, [{"name": "DEVICE_LIST_STRATEGY", "value": "volume-mounts"}]


def build_values(
    sharing: SharingConfig,
    mig: MigConfig,
    dcgm: DcgmMetricsConfig,
    *,
    operator_settings: OperatorSettings,
    driver_settings: DriverSettings,
    toolkit_settings: ToolkitSettings,
    mig_settings: MigSettings,
    exporter: DcgmExporterSettings,
    runtime: str | None,
    driver_files: DriverFiles | None = None,
) -> dict[str, Any]:
    """The chart's values from the derived sharing, MIG and DCGM configs and the settings parts
    the chart reads; `runtime`: the first node's container runtime (None without nodes);
    `driver_files`: the driver container's package sources and CA ConfigMaps (design/driver.py)."""
    driver_on_host = driver_settings.placement == "host"
    toolkit_on_host = toolkit_settings.placement == "host"

    driver: dict[str, Any] = {"enabled": not driver_on_host}
    if not driver_on_host:
        driver["version"] = driver_settings.version
        if driver_settings.use_precompiled:
            # One DaemonSet per kernel, image <repository>/<image>:<branch>-<kernel>-<os>.
            driver["usePrecompiled"] = True
        files = driver_files or DriverFiles()
        if files.repo_configmap is not None:
            driver["repoConfig"] = {"configMapName": files.repo_configmap}
        if files.cert_configmap is not None:
            driver["certConfig"] = {"name": files.cert_configmap}
        driver["upgradePolicy"] = upgrade_policy_values(driver_settings)

    toolkit_isolation, plugin_isolation = isolation_env(toolkit_settings)
    device_plugin: dict[str, Any] = {"enabled": True}
    if plugin_isolation:
        device_plugin["env"] = plugin_isolation
    if sharing.configmap_name is not None:
        # create: false - the stack owns the ConfigMap (content-named); the chart never creates it.
        device_plugin["config"] = {
            "create": False,
            "name": sharing.configmap_name,
            "default": sharing.default_key,
        }

    mig_manager: dict[str, Any] = {"enabled": mig_settings.manager.enabled}
    if mig.configmap_name is not None:
        mig_manager["config"] = {"create": False, "name": mig.configmap_name, "default": ALL_DISABLED}
    if mig_settings.manager.with_reboot:
        mig_manager["env"] = [{"name": "WITH_REBOOT", "value": "true"}]

    dcgm_exporter: dict[str, Any] = {"enabled": exporter.enabled}
    if exporter.enabled:
        sm = exporter.service_monitor
        dcgm_exporter["serviceMonitor"] = {
            "enabled": sm.enabled,
            "interval": sm.interval,
            "honorLabels": sm.honor_labels,
            "additionalLabels": dict(sm.additional_labels),
        }
        if sm.relabelings:
            dcgm_exporter["serviceMonitor"]["relabelings"] = [
                r.model_dump(mode="json", by_alias=True, exclude_none=True) for r in sm.relabelings
            ]
        if dcgm.configmap_name is not None:
            dcgm_exporter["config"] = {"name": dcgm.configmap_name}

    toolkit: dict[str, Any] = {"enabled": not toolkit_on_host}
    if not toolkit_on_host:
        # The settings rules refuse a mix of k3s/RKE2 and other runtimes here: the first node speaks for all.
        env = (toolkit_env(runtime) if runtime is not None else []) + toolkit_isolation
        if env:
            toolkit["env"] = env

    values: dict[str, Any] = {
        # The pre-upgrade hook that applies the chart's CRDs before an upgrade (templates/upgrade_crd.yaml).
        "operator": {"upgradeCRD": operator_settings.upgrade_crd, "tolerations": [dict(t) for t in OPERATOR_TOLERATIONS]},
        "driver": driver,
        "toolkit": toolkit,
        # The chart's default, sent explicitly: host nodes are configured (and checked) to match it.
        "cdi": {"enabled": toolkit_settings.cdi},
        "devicePlugin": device_plugin,
        "mig": {"strategy": mig_settings.strategy},
        "migManager": mig_manager,
        "dcgmExporter": dcgm_exporter,
        # MPS needs GPU feature discovery; keep it on explicitly.
        "gfd": {"enabled": True},
        "nfd": {"enabled": operator_settings.node_feature_discovery},
    }
    if operator_settings.node_feature_discovery:
        values["node-feature-discovery"] = {part: {"tolerations": [dict(t) for t in v["tolerations"]]} for part, v in NFD_TOLERATIONS.items()}
    return values


def upgrade_policy_values(driver: DriverSettings) -> dict[str, Any]:
    """`driver.upgradePolicy` as the chart names it (the chart maps gpuPodDeletion to the CRD's podDeletion)."""
    p = driver.upgrade_policy
    return {
        "autoUpgrade": p.auto_upgrade,
        "maxParallelUpgrades": p.max_parallel_upgrades,
        "maxUnavailable": p.max_unavailable,
        "waitForCompletion": {
            "timeoutSeconds": p.wait_for_completion.timeout_seconds,
            "podSelector": p.wait_for_completion.pod_selector,
        },
        "gpuPodDeletion": {
            "force": p.gpu_pod_deletion.force,
            "timeoutSeconds": p.gpu_pod_deletion.timeout_seconds,
            "deleteEmptyDir": p.gpu_pod_deletion.delete_empty_dir,
        },
        "drain": {
            "enable": p.drain.enable,
            "force": p.drain.force,
            "podSelector": p.drain.pod_selector,
            "timeoutSeconds": p.drain.timeout_seconds,
            "deleteEmptyDir": p.drain.delete_empty_dir,
        },
    }
