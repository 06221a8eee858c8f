"""What the operator's driver container reads besides its image: the site's package sources and CA
certificates, each a ConfigMap in the operator namespace whose name the chart gets
(`driver.repoConfig.configMapName`, `driver.certConfig.name`).

The operator mounts every key of the named ConfigMap as one file (subPath) into the driver
container: into /etc/apt/sources.list.d or /etc/yum.repos.d for the repositories, into
/usr/local/share/ca-certificates or /etc/pki/ca-trust/extracted/pem for the certificates, the
folder chosen by the os-release of the node the operator runs on (gpu-operator v25.10.1
controllers/object_controls.go: RepoConfigPathMap, CertConfigPathMap, createConfigMapVolumeMounts).
It lists the keys when it builds the DaemonSet, so the name carries a hash of the content: an edit
gives a new name, the ClusterPolicy changes, and the driver pods are rolled (per
driver.upgradePolicy) onto files that all exist, never onto a stale list of keys.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config.cluster import DriverSettings
from .naming import content_name

REPO_CONFIGMAP_PREFIX = "driver-repo-config"
CERT_CONFIGMAP_PREFIX = "driver-cert-config"


@dataclass(frozen=True)
class DriverFiles:
    """The driver container's package sources and CA certificates, as ConfigMaps."""

    repo_configmap: str | None = None
    """The package sources' ConfigMap; None without driver.repoConfig."""
    repo_data: dict[str, str] = field(default_factory=dict)
    cert_configmap: str | None = None
    """The CA certificates' ConfigMap; None without driver.certConfig."""
    cert_data: dict[str, str] = field(default_factory=dict)


def build_driver_files(driver: DriverSettings) -> DriverFiles:
    """The ConfigMaps of driver.repoConfig and driver.certConfig (none for a host driver)."""
    if driver.placement != "operator":
        return DriverFiles()
    repo = dict(sorted(driver.repo_config.files.items())) if driver.repo_config is not None else {}
    certs = dict(sorted(driver.cert_config.files.items())) if driver.cert_config is not None else {}
    return DriverFiles(
        repo_configmap=content_name(REPO_CONFIGMAP_PREFIX, repo) if repo else None,
        repo_data=repo,
        cert_configmap=content_name(CERT_CONFIGMAP_PREFIX, certs) if certs else None,
        cert_data=certs,
    )
