"""The whole `gpu-stack:*` config namespace: `Settings`, one field per top-level key."""

from __future__ import annotations

from pydantic import PrivateAttr

from .cluster import DriverSettings, KubernetesSettings, OperatorSettings, ToolkitSettings
from .dra import DraSettings
from .images import ImageSettings
from .mig import MigSettings
from .monitoring import AlertSettings, DcgmExporterSettings
from .nodes import NodeSettings, SshSettings
from .sharing import SharingSettings
from .types import ConfigModel
from .validation import ValidationSettings


# --------------------------------------------------------------------------- root
class Settings(ConfigModel):
    """The whole stack config. Keys are the `gpu-stack:<key>` config keys."""

    kubernetes: KubernetesSettings = KubernetesSettings()
    operator: OperatorSettings = OperatorSettings()
    driver: DriverSettings = DriverSettings()
    toolkit: ToolkitSettings = ToolkitSettings()
    ssh: SshSettings = SshSettings()
    nodes: tuple[NodeSettings, ...] = ()
    """The GPU nodes of the cluster, one entry per Kubernetes node."""
    sharing: SharingSettings = SharingSettings()
    mig: MigSettings = MigSettings()
    dra: DraSettings = DraSettings()
    """GPUs allocated through Dynamic Resource Allocation: which nodes, NVIDIA's DRA driver chart
    and its feature gates, and the rollout between the device plugin and DRA."""
    dcgm_exporter: DcgmExporterSettings = DcgmExporterSettings()
    """The DCGM exporter: whether it runs, its ServiceMonitor and a custom metric list."""
    validation: ValidationSettings = ValidationSettings()
    """The validation Jobs `pulumi up` runs after the release to prove the platform works."""
    alerts: AlertSettings = AlertSettings()
    images: ImageSettings = ImageSettings()
    """Where the cluster pulls images from: a private mirror, per-image overrides, pull secrets."""

    _secret_shapes: frozenset[str] = PrivateAttr(default_factory=frozenset)
    _offline_stand_ins: frozenset[str] = PrivateAttr(default_factory=frozenset)
    """Secret keys whose offline placeholder was replaced by a valid stand-in (secrets.py)."""

    def is_secret(self, shape: str) -> bool:
        """True when the value at `shape` (e.g. `kubernetes.context`, `nodes[*].address`) is a secret."""
        return shape in self._secret_shapes

    @property
    def host_managed(self) -> bool:
        """True when the driver or the toolkit lives on the host and nodes need SSH preparation."""
        return self.driver.placement == "host" or self.toolkit.placement == "host"


TOP_LEVEL_KEYS = tuple(f.alias or name for name, f in Settings.model_fields.items())
