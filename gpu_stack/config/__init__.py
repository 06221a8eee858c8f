"""The stack config: the `gpu-stack:*` namespace as pydantic models, its rules and its errors.

Nothing here imports a builder, a component or Pulumi: the package sits at the bottom of
gpu_stack, above only the data modules (the GPU catalog, the DCGM field lists).

  safe_input   one-line strings, whole numbers, flags, addresses; how user text is shown
  host_keys    a node's pinned SSH host key, parsed (type, blob, curve point, the keyscan host field)
  files        how every file is read (no FIFO, device or folder; a size bound)
  types        the base model, constants and reusable annotated types (label value, image, ...)
  cluster      kubernetes, operator, driver (and its upgrade policy), toolkit
  driver_files the driver container's package sources and CA certificates (repoConfig, certConfig)
  nodes        nodes[] and ssh
  sharing      sharing (device-plugin time-slicing / MPS profiles)
  mig          mig (strategy, manager, rollout, custom mig-parted configs)
  monitoring   dcgmExporter, alerts and dashboard
  validation   validation (the Jobs `pulumi up` runs after the release)
  images       images (a private mirror, overrides, pull secrets) and the chart's image table
  root         Settings, the whole namespace
  facts        readings of the settings both rules and builders use (profiles, MIG layouts)
  rules/       every cross-field rule, listed in RULES; advisories (warnings)
  errors       Problem, SettingsError, config_key and how problems are shown
  translate    pydantic errors into Problems (one table of wordings)
  secrets      where a secret may be set; secret values hidden in errors
  load         load_settings: raw config -> Settings or SettingsError
  fleet        the fleet file (fleet.yaml): waves, parallelism, gates, failure policy; the default order
"""

from __future__ import annotations

from .cluster import (
    DrainSettings,
    DriverSettings,
    DriverUpgradePolicy,
    GpuPodDeletion,
    KubernetesSettings,
    OperatorSettings,
    RepositoryCredentials,
    ToolkitSettings,
    WaitForCompletion,
)
from .errors import MISSING, Problem, SettingsError, config_key, render_problems
from .images import CHART_IMAGES, ChartImage, ImageSettings, RegistryCredentials
from .load import load_settings, namespace_problems
from .mig import MigDeviceGroup, MigManagerSettings, MigRolloutSettings, MigSettings
from .monitoring import (
    ALERT_DEFAULTS,
    AlertRule,
    AlertRules,
    AlertSettings,
    DashboardSettings,
    DcgmExporterSettings,
    RatioAlert,
    Relabeling,
    ServiceMonitorSettings,
    ThresholdAlert,
    XidAlert,
)
from .nodes import GpuSpec, NodeSettings, SshSettings
from .root import TOP_LEVEL_KEYS, Settings
from .rules import RULES, advisories, check_settings
from .secrets import SECRET_CAPABLE, SECRET_FIELDS
from .sharing import SharedResource, SharingProfile, SharingSettings
from .types import CHART_REPOSITORY, CHART_VERSION, MPS_MAX_REPLICAS, NAMESPACE, RESERVED_SHARING_KEYS, TOOLKIT_VERSION
from .validation import ValidationImages, ValidationSettings

__all__ = [
    "ALERT_DEFAULTS",
    "CHART_IMAGES",
    "CHART_REPOSITORY",
    "CHART_VERSION",
    "MISSING",
    "MPS_MAX_REPLICAS",
    "NAMESPACE",
    "RESERVED_SHARING_KEYS",
    "RULES",
    "SECRET_CAPABLE",
    "SECRET_FIELDS",
    "TOOLKIT_VERSION",
    "TOP_LEVEL_KEYS",
    "AlertRule",
    "AlertRules",
    "AlertSettings",
    "ChartImage",
    "DashboardSettings",
    "DcgmExporterSettings",
    "DrainSettings",
    "DriverSettings",
    "DriverUpgradePolicy",
    "GpuPodDeletion",
    "GpuSpec",
    "ImageSettings",
    "KubernetesSettings",
    "MigDeviceGroup",
    "MigManagerSettings",
    "MigRolloutSettings",
    "MigSettings",
    "NodeSettings",
    "OperatorSettings",
    "Problem",
    "RatioAlert",
    "RegistryCredentials",
    "Relabeling",
    "RepositoryCredentials",
    "ServiceMonitorSettings",
    "Settings",
    "SettingsError",
    "SharedResource",
    "SharingProfile",
    "SharingSettings",
    "SshSettings",
    "ThresholdAlert",
    "ToolkitSettings",
    "ValidationImages",
    "ValidationSettings",
    "WaitForCompletion",
    "XidAlert",
    "advisories",
    "check_settings",
    "config_key",
    "load_settings",
    "namespace_problems",
    "render_problems",
]
