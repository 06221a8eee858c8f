"""Settings of the cluster, the operator release, the driver and the toolkit."""

from __future__ import annotations

import re
import urllib.parse
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator

from .driver_files import DriverCertConfig, DriverRepoConfig
from .grammars import URL_LIMIT, identity, is_registry_host, url_credentials, url_host_problem, url_without_credentials
from .safe_input import Flag, PlainStr, SecretLine, TextStr, WholeNumber, ascii_digits
from .types import (
    CHART_REPOSITORY,
    CHART_VERSION,
    PERCENT_RE,
    TOOLKIT_VERSION,
    ConfigModel,
    HelmReleaseName,
    LabelSelector,
    StackNamespace,
)

IdentityStr = Annotated[PlainStr, AfterValidator(identity)]
"""A name that decides what Pulumi keeps or replaces: visible ASCII, not blank, no look-alike."""
REPOSITORY_CREDENTIALS_REMEDY = (
    "remove them and set operator.repositoryCredentials.username and, as a secret, "
    "operator.repositoryCredentials.password (pulumi config set --secret --path "
    "'gpu-stack:operator.repositoryCredentials.password')"
)


def chart_repository_url(value: str) -> str:
    url_without_credentials(value, ("https", "oci"), "chart repository URL", REPOSITORY_CREDENTIALS_REMEDY, query=True)
    parts = urllib.parse.urlsplit(value)
    if parts.scheme == "oci" and not is_registry_host(parts.netloc):
        # Helm reads oci://<host>/<path>, but a registry client reads a first part without '.' or ':'
        # (not localhost) as a Docker Hub path: `oci://nvidia/gpu-operator` names docker.io/nvidia/...
        raise ValueError(
            f"must begin with the registry host after oci:// ({parts.netloc[:40]!r} has no '.' or ':' and is not "
            "localhost, so it reads as a Docker Hub path); write the host: oci://registry.example.internal/charts, "
            "oci://registry:5000/charts"
        )
    path = parts.path.rstrip("/")
    last = path.rsplit("/", 1)[-1]
    if value.startswith("oci://") and (last == "gpu-operator" or last.startswith("gpu-operator:") or ":" in last):
        raise ValueError(
            "must be the oci:// registry path that holds the chart, without the chart's name or a tag "
            "(oci://registry.example.internal/charts, not .../charts/gpu-operator or ...:v25.10.1): "
            "the stack appends gpu-operator and pins operator.chartVersion itself"
        )
    if last.endswith((".yaml", ".yml", ".tgz")):
        raise ValueError(
            f"must be the repository's URL, not a file in it ({last[:40]!r}): Helm reads <url>/index.yaml itself "
            "(https://helm.ngc.nvidia.com/nvidia, not .../index.yaml)"
        )
    return value


ChartRepositoryUrl = Annotated[PlainStr, AfterValidator(chart_repository_url)]
"""An https:// or oci:// chart repository URL without credentials in it."""

# --------------------------------------------------------------------------- kubernetes
class KubernetesSettings(ConfigModel):
    """How the stack reaches the cluster."""

    context: IdentityStr | None = None
    """kubeconfig context; None uses the current context (or the provider's own config)."""
    kubeconfig: TextStr | None = None
    """Path to a kubeconfig file, or its content (set it with --secret); None uses KUBECONFIG /
    ~/.kube/config. The provider always receives it as a Pulumi secret."""
    version: Literal["1.29", "1.30", "1.31", "1.32", "1.33", "1.34"] = "1.31"
    """Kubernetes minor version the manifests are validated against."""
    cluster_identifier: IdentityStr | None = None
    """The provider's `clusterIdentifier`: every resource is replaced only when it changes (never
    because a kubeconfig differs between machines). None: `<project>-<stack>`."""


# --------------------------------------------------------------------------- operator
class RepositoryCredentials(ConfigModel):
    """Basic-auth credentials of a private https chart repository (a token goes in `password`)."""

    username: PlainStr = Field(min_length=1)
    """The repository user (it may be set with --secret too); passed to the provider as a Pulumi secret."""
    password: SecretLine = Field(min_length=1)
    """The password or token: must be set with `pulumi config set --secret --path
    'gpu-stack:operator.repositoryCredentials.password'`; passed to the provider as a Pulumi secret,
    never shown in plan, diff or error output."""


class OperatorSettings(ConfigModel):
    """The GPU Operator Helm release."""

    namespace: StackNamespace = "gpu-operator"
    """Namespace of the operator and the ConfigMaps it mounts (pod-security privileged); not default or kube-*."""
    release_name: HelmReleaseName = "gpu-operator"
    """Name of the Helm release (Helm's rule: a DNS-1123 subdomain of at most 53 characters, which
    Helm checks only at install, after `pulumi preview` passed)."""
    chart_version: Literal["v25.10.1"] = CHART_VERSION
    """The GPU Operator chart version; the stack is built and checked against this one only."""
    repository: ChartRepositoryUrl = CHART_REPOSITORY
    """Helm repository the chart is fetched from (never with credentials in it): an https:// chart
    repository, or an oci:// registry path under which the chart is `gpu-operator` (the chart is
    then `<repository>/gpu-operator`)."""
    chart_path: PlainStr | None = None
    """A local copy of the chart instead of a repository (air-gapped clusters): a chart folder (with
    Chart.yaml, and its NFD subchart under charts/) or a packaged `.tgz` (`helm pull`). A relative
    path is relative to the project folder (where Pulumi.yaml is), whatever the working directory.
    The provider loads it from disk, with no network; the offline object view renders the same copy."""
    repository_credentials: RepositoryCredentials | None = None
    """Credentials of a private https repository; never written into the URL (a URL that carries
    credentials is refused). An oci:// registry reads Helm's registry login instead (`helm registry
    login` on the machine that runs pulumi)."""
    repository_ca_file: PlainStr | None = None
    """CA bundle (PEM file) that signs a private https repository's certificate, when the system
    trust store lacks it; a relative path is relative to the project folder. Read as a regular file
    of at most 256 KiB, each block parsed as an X.509 certificate."""
    timeout_seconds: WholeNumber = Field(900, ge=600, le=3600)
    """Helm wait timeout; the chart's hooks and DaemonSets need several minutes."""
    protect: Flag = False
    """Pulumi `protect` on the operator namespace and release (set it in production)."""
    node_feature_discovery: Flag = True
    """Deploy NFD with the operator (false when the cluster already runs NFD)."""
    upgrade_crd: Flag = Field(True, alias="upgradeCRD")
    """Chart value `operator.upgradeCRD`: a pre-upgrade hook Job applies the chart's CRDs before
    each chart upgrade (Helm itself never upgrades `crds/`), so an older ClusterPolicy schema
    cannot prune fields the new chart sets. The release then sets `disableOpenapiValidation`, as
    the chart asks; the kubernetes provider applies it on the first install only, not on upgrades."""

    @field_validator("chart_path", "repository_ca_file")
    @classmethod
    def _local(cls, v: str | None) -> str | None:
        if v is None:
            return v
        if not v.strip() or "://" in v:
            raise ValueError(
                "must be a local path (relative to the project folder), not a URL; "
                "a chart in a repository or registry goes in operator.repository"
            )
        return v


class WaitForCompletion(ConfigModel):
    """Before a node's driver is restarted: wait for these pods (Jobs) to finish."""

    timeout_seconds: WholeNumber = Field(0, ge=0, le=604800)
    """How long to wait; 0 waits forever (only matters with a podSelector)."""
    pod_selector: LabelSelector = ""
    """Label selector of the pods to wait for; empty: wait for none."""


class GpuPodDeletion(ConfigModel):
    """How the operator deletes the pods that use GPUs on a node before its driver restarts."""

    force: Flag = False
    """Delete pods not managed by a controller too (they are not recreated)."""
    timeout_seconds: WholeNumber = Field(300, ge=0, le=86400)
    """How long to wait for the pods to terminate; 0 waits forever."""
    delete_empty_dir: Flag = False
    """Delete pods with emptyDir volumes too (their local data is lost)."""


class DrainSettings(ConfigModel):
    """`kubectl drain` of a node before its driver restarts (needed only when deleting GPU pods is not enough)."""

    enable: Flag = False
    """Drain the node (`kubectl drain`) before its driver restarts."""
    force: Flag = False
    """Drain pods not managed by a controller too (they are not recreated)."""
    pod_selector: LabelSelector = ""
    """Label selector of the pods to drain; empty: every pod."""
    timeout_seconds: WholeNumber = Field(300, ge=0, le=86400)
    """Give up draining after this long; 0 waits forever (a drain that never ends blocks the upgrade)."""
    delete_empty_dir: Flag = False
    """Drain pods with emptyDir volumes too (their local data is lost)."""


class DriverUpgradePolicy(ConfigModel):
    """Chart values `driver.upgradePolicy.*`: how the operator rolls a driver change over the nodes.

    Defaults are the chart's own (one node at a time, GPU pods deleted before the driver restarts)."""

    auto_upgrade: Flag = True
    """The operator's upgrade controller cordons, empties and restarts one node's driver at a time.
    false: the driver DaemonSet waits (OnDelete) until someone deletes each driver pod by hand."""
    max_parallel_upgrades: WholeNumber = Field(1, ge=0, le=1000)
    """Nodes upgraded at once; 0 means all nodes at once."""
    max_unavailable: WholeNumber | PlainStr = "25%"
    """Nodes (number, or percentage such as '25%') that may be unavailable during the upgrade."""
    wait_for_completion: WaitForCompletion = WaitForCompletion()
    gpu_pod_deletion: GpuPodDeletion = GpuPodDeletion()
    drain: DrainSettings = DrainSettings()

    @field_validator("max_unavailable", mode="before")
    @classmethod
    def _max_unavailable(cls, v: Any) -> Any:
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
        if isinstance(v, str) and ascii_digits(v) and len(v) <= 9:
            return int(v)
        if isinstance(v, str) and PERCENT_RE.fullmatch(v):
            return v
        raise ValueError("must be a number of nodes (0 or more) or a percentage from 0% to 100%, such as 25%")


DRIVER_BRANCH_RE = re.compile(r"^[0-9]{3,4}$")
DRIVER_VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+){1,2}$")


class DriverSettings(ConfigModel):
    """Where the NVIDIA driver lives."""

    placement: Literal["host", "operator"] = "operator"
    """host: preinstalled on the node (checked over SSH); operator: the chart's driver DaemonSet."""
    version: PlainStr = "580.105.08"
    """Driver version the operator installs (placement=operator only); with usePrecompiled the
    driver branch (580), as the precompiled images are tagged."""
    upgrade_policy: DriverUpgradePolicy = DriverUpgradePolicy()
    """How a driver change rolls over the nodes (placement=operator only)."""
    use_precompiled: Flag = False
    """Chart value `driver.usePrecompiled` (a technology preview of the operator, Ubuntu x86_64
    nodes): the operator runs one driver DaemonSet per kernel of the GPU nodes, each from the image
    `<driver image>:<branch>-<kernel>-<os>` (`580-5.15.0-1048-aws-ubuntu22.04`), which holds the
    modules built for that kernel: the driver container installs no package and reaches no package
    repository. Each kernel's image must exist in the registry (or mirror); `python -m gpu_stack
    images --driver-os OS --driver-kernel KERNEL` lists them. placement=operator only."""
    repo_config: DriverRepoConfig | None = None
    """The site's OS package repositories for the driver container (placement=operator, without
    usePrecompiled): without them it reaches the distribution's public repositories to install each
    node's kernel headers. Needed with publicOsRepositories false unless usePrecompiled is set."""
    cert_config: DriverCertConfig | None = None
    """CA certificates the driver container trusts when it reaches the package repositories over
    https (placement=operator, without usePrecompiled)."""
    public_os_repositories: Flag = True
    """Whether the GPU nodes reach their distribution's public package repositories (the Ubuntu
    archive, RHEL's CDN with the node's entitlement), directly or through a proxy: where the
    operator's driver container (placement=operator, without usePrecompiled) installs each node
    kernel's headers and modules from unless repoConfig names the site's own. false: they do not (an
    air-gapped site): repoConfig or usePrecompiled is then required. images.mirror alone says nothing
    about it (a registry mirror or pull-through cache serves images, not OS packages): with a mirror,
    the default and no repoConfig, the plan warns what the driver container will fetch."""

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not (DRIVER_VERSION_RE.fullmatch(v) or DRIVER_BRANCH_RE.fullmatch(v)):
            raise ValueError("must be a driver version such as 580.105.08 (or, with driver.usePrecompiled, a branch such as 580)")
        return v


_PACKAGE_URL_RE = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/([A-Za-z0-9._~%+-]+|\$\(ARCH\)|\$basearch))*/?$")
_NODE_PATH_RE = re.compile(r"^(?!.*/\.\.?(?:/|$))/[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*$")
"""An absolute path on a node: no `.` or `..` part (a key path that climbs out of where it names)."""
_PSEUDO_FILESYSTEMS = ("/dev/", "/proc/", "/sys/")
"""Where a node keeps devices and kernel state: no file there is a key (node preparation also reads
the key only when it is a regular file, at most 1 MiB: config/node-scripts/node-prep.sh)."""


def _package_url(value: str) -> str:
    carried = url_credentials(value)
    if carried is not None:
        raise ValueError(f"carries credentials ({carried}); a package mirror is read without them (put them in the node's apt or dnf auth config)")
    if not _PACKAGE_URL_RE.fullmatch(value):
        raise ValueError(
            "must be an http:// or https:// repository URL of letters, digits and ./_~%+- "
            "(with apt's $(ARCH) or dnf's $basearch where the mirror keeps one folder per architecture)"
        )
    problem = url_host_problem(urllib.parse.urlsplit(value).netloc)
    if len(value) > URL_LIMIT or problem is not None:
        raise ValueError(
            "must be an http:// or https:// repository URL such as http://mirror.example.internal:8080/nvidia; "
            + (problem or f"at most {URL_LIMIT} characters")
        )
    return value


class ToolkitPackages(ConfigModel):
    """Where node preparation takes the toolkit packages from (toolkit.placement host)."""

    source: Literal["nvidia", "mirror", "preinstalled"] = "nvidia"
    """nvidia: NVIDIA's public package repository; mirror: the site's own repository (aptUrl and/or
    rpmUrl, and gpgKey); preinstalled: the node image already has the toolkit at `toolkit.version`:
    it is only checked (a node without it fails the preflight) and nothing is installed."""
    apt_url: PlainStr | None = None
    """source mirror: the apt repository for Debian and Ubuntu nodes, laid out as NVIDIA's
    (`<url> /` in the sources list, e.g. `http://mirror.example.internal/nvidia/stable/deb/$(ARCH)`)."""
    rpm_url: PlainStr | None = None
    """source mirror: the dnf/yum `baseurl` for RHEL-family and Amazon Linux nodes
    (e.g. `http://mirror.example.internal/nvidia/stable/rpm/$basearch`)."""
    gpg_key: PlainStr | None = None
    """source mirror: the repository's ASCII-armored signing key: an http(s) URL, or an absolute path
    of a file already on each node (then nothing is downloaded for it): a regular file of at most
    1 MiB, never under /dev, /proc or /sys."""

    @field_validator("apt_url", "rpm_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return v if v is None else _package_url(v)

    @field_validator("gpg_key")
    @classmethod
    def _key(cls, v: str | None) -> str | None:
        if v is not None and v.startswith(_PSEUDO_FILESYSTEMS):
            raise ValueError(
                f"names a file under /{v.split('/')[1]}, where the kernel keeps devices and process or system state "
                "(/dev/zero, /dev/stdin, /proc/self/fd/0), never a signing key: give the path of the key file on the "
                "node (/etc/pki/mirror.asc) or its http(s):// URL"
            )
        if v is None or _NODE_PATH_RE.fullmatch(v):
            return v
        if v.startswith(("http://", "https://")):
            return _package_url(v)
        raise ValueError("must be an http(s):// URL or an absolute path of a file on the node (/etc/pki/mirror.asc), with no '.' or '..' part")


class ToolkitSettings(ConfigModel):
    """Where the NVIDIA Container Toolkit lives."""

    placement: Literal["host", "operator"] = "operator"
    """host: installed over SSH with the node's package manager; operator: the chart's toolkit DaemonSet.
    With driver.placement 'operator' too, the host toolkit's `root` is pointed at /run/nvidia/driver."""
    version: Literal["1.18.1"] = TOOLKIT_VERSION
    """NVIDIA Container Toolkit version (placement host: the version installed on each node)."""
    cdi: Flag = True
    """The chart's `cdi.enabled` (its default): the device plugin hands out CDI devices only, so each
    node's runtime must process CDI (containerd 1.7+, Docker 25+, cri-o; host nodes are configured
    with `--cdi.enabled` and checked). false: the nvidia runtime becomes the default runtime instead."""
    packages: ToolkitPackages = ToolkitPackages()
    """placement host: where the packages come from (NVIDIA's repository, a mirror, or already installed)."""
    accept_envvar_when_unprivileged: Flag = False
    """false (the stack's default): an unprivileged container's `NVIDIA_VISIBLE_DEVICES` (every CUDA
    image sets it to `all`) selects no GPU, so only pods that request `nvidia.com/gpu` get one; set
    in the toolkit config of prepared hosts and in the operator's toolkit, with the device plugin's
    volume-mounts strategy where CDI is off. true: the toolkit's own default, where any pod that
    runs under the nvidia runtime sees every GPU of its node. Privileged pods always may name GPUs
    by the variable (docs/node-preparation.md)."""
