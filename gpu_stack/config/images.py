"""Settings of where the cluster pulls images from (a private mirror), and the chart's images.

`CHART_IMAGES` lists every image the GPU Operator chart v25.10.1 can make the cluster pull, by the
values key that sets it (tests check the table against the chart's own values.yaml). The
operator builds each operand's DaemonSet from the ClusterPolicy's `<component>.repository`,
`.image` and `.version`; the driver's tag gets `-<os>` of the GPU nodes appended (`580.105.08-ubuntu22.04`:
the first GPU node's OS, one OS per cluster), with usePrecompiled `-<kernel>-<os>` per kernel.
`KATA_RUNTIME_CLASSES` are the kata manager's artifacts (OCI images), mapped under the mirror too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

from .grammars import NAME_LIMIT, PATH_COMPONENT, check_registry, image, is_registry_host, parse_image, url_credentials
from .safe_input import PlainStr, SecretLine
from .types import CHART_VERSION, DNS_SUBDOMAIN_RE, ConfigModel

NFD_VERSION = "v0.18.2"


@dataclass(frozen=True)
class ChartImage:
    """One image of the chart: where its values live and what it is by default."""

    key: str
    """The values key of the component (`devicePlugin`, `driver.manager`, `node-feature-discovery`)."""
    repository: str
    """The whole repository by default (`nvcr.io/nvidia/k8s-device-plugin`)."""
    tag: str
    pull_secrets: str | None
    """The values key whose `imagePullSecrets` its pods use (a parent's for an init container)."""
    when: str
    """Which ClusterPolicy switch makes the operator run it: `always`, `<component>.enabled`,
    `sandboxWorkloads.enabled`, or `openshift` (never here: the operator adds this init container
    to the DCGM exporter on OpenShift only, transformDCGMExporterForOpenShift, and the stack does
    not target OpenShift)."""


_NV = "nvcr.io/nvidia"
CHART_IMAGES: tuple[ChartImage, ...] = (
    ChartImage("operator", f"{_NV}/gpu-operator", CHART_VERSION, "operator", "always"),
    ChartImage("validator", f"{_NV}/gpu-operator", CHART_VERSION, "validator", "always"),
    ChartImage("operator.initContainer", f"{_NV}/cuda", "13.0.1-base-ubi9", "operator.initContainer", "openshift"),
    ChartImage("driver", f"{_NV}/driver", "580.105.08", "driver", "driver.enabled"),
    ChartImage("driver.manager", f"{_NV}/cloud-native/k8s-driver-manager", "v0.9.1", "driver", "driver.enabled"),
    ChartImage("toolkit", f"{_NV}/k8s/container-toolkit", "v1.18.1", "toolkit", "toolkit.enabled"),
    ChartImage("devicePlugin", f"{_NV}/k8s-device-plugin", "v0.18.1", "devicePlugin", "devicePlugin.enabled"),
    ChartImage("gfd", f"{_NV}/k8s-device-plugin", "v0.18.1", "gfd", "gfd.enabled"),
    ChartImage("dcgm", f"{_NV}/cloud-native/dcgm", "4.4.2-1-ubuntu22.04", "dcgm", "dcgm.enabled"),
    ChartImage("dcgmExporter", f"{_NV}/k8s/dcgm-exporter", "4.4.2-4.7.0-distroless", "dcgmExporter", "dcgmExporter.enabled"),
    ChartImage("migManager", f"{_NV}/cloud-native/k8s-mig-manager", "v0.13.1", "migManager", "migManager.enabled"),
    ChartImage("nodeStatusExporter", f"{_NV}/gpu-operator", CHART_VERSION, "nodeStatusExporter", "nodeStatusExporter.enabled"),
    ChartImage("gds", f"{_NV}/cloud-native/nvidia-fs", "2.26.6", "gds", "gds.enabled"),
    ChartImage("gdrcopy", f"{_NV}/cloud-native/gdrdrv", "v2.5.1", "gdrcopy", "gdrcopy.enabled"),
    ChartImage("vgpuManager.driverManager", f"{_NV}/cloud-native/k8s-driver-manager", "v0.9.1", "vgpuManager", "sandboxWorkloads.enabled"),
    ChartImage("vgpuDeviceManager", f"{_NV}/cloud-native/vgpu-device-manager", "v0.4.1", "vgpuDeviceManager", "sandboxWorkloads.enabled"),
    ChartImage("vfioManager", f"{_NV}/cuda", "13.0.1-base-ubi9", "vfioManager", "sandboxWorkloads.enabled"),
    ChartImage("vfioManager.driverManager", f"{_NV}/cloud-native/k8s-driver-manager", "v0.9.1", "vfioManager", "sandboxWorkloads.enabled"),
    ChartImage("kataManager", f"{_NV}/cloud-native/k8s-kata-manager", "v0.2.3", "kataManager", "sandboxWorkloads.enabled"),
    ChartImage("sandboxDevicePlugin", f"{_NV}/kubevirt-gpu-device-plugin", "v1.4.0", "sandboxDevicePlugin", "sandboxWorkloads.enabled"),
    ChartImage("ccManager", f"{_NV}/cloud-native/k8s-cc-manager", "v0.1.1", "ccManager", "ccManager.enabled"),
    ChartImage("node-feature-discovery", "registry.k8s.io/nfd/node-feature-discovery", NFD_VERSION, "node-feature-discovery", "nfd.enabled"),
)
"""`vgpuManager` itself has no default image (the user builds the vGPU driver image), so no row."""


@dataclass(frozen=True)
class KataRuntimeClass:
    """One runtime class of the chart's `kataManager.config.runtimeClasses`: the kata manager
    (sandbox workloads) pulls its artifacts, an OCI image reference, with ORAS (k8s-kata-manager
    v0.2.3 cmd/k8s-kata-manager/main.go), with the Secret named in `pullSecret`."""

    name: str
    node_selector: tuple[tuple[str, str], ...]
    artifacts: str


KATA_RUNTIME_CLASSES: tuple[KataRuntimeClass, ...] = (
    KataRuntimeClass("kata-nvidia-gpu", (), f"{_NV}/cloud-native/kata-gpu-artifacts:ubuntu22.04-535.54.03"),
    KataRuntimeClass(
        "kata-nvidia-gpu-snp", (("nvidia.com/cc.capable", "true"),),
        f"{_NV}/cloud-native/kata-gpu-artifacts:ubuntu22.04-535.86.10-snp",
    ),
)
"""The chart's default runtime classes (values.yaml `kataManager.config.runtimeClasses`); under a
mirror the stack sends the list with each artifact mapped, as a list value replaces the chart's."""

def _name_parts(value: str) -> list[str]:
    """`host[:port]/path/...` split at '/', each path part checked by the reference grammar."""
    parts = value.split("/")
    for part in parts[1:]:
        if not PATH_COMPONENT.fullmatch(part):
            raise ValueError(
                f"its path part {part[:40]!r} is not a path component: lowercase letters and digits, "
                "separated by '.', '_', '__' or dashes"
            )
    return parts


def _registry_first(value: str, what: str) -> None:
    """The first part of `value` must be a registry host as a container runtime reads it."""
    first = value.split("/", 1)[0]
    if not is_registry_host(first):
        hub = f"docker.io/{value}" if "/" in value else f"docker.io/library/{value}"
        raise ValueError(
            f"must begin with a registry host: {first[:60]!r} has no '.' or ':' and is not 'localhost', so a "
            f"container runtime reads the {what} as {hub[:120]!r} on Docker Hub; write the host in full "
            "(registry.example.internal, registry:5000, localhost:5000)"
        )
    if first != first.lower():
        raise ValueError(f"its registry host {first[:60]!r} must be lowercase (registry.example.internal)")
    try:
        check_registry(first)
    except ValueError as exc:
        raise ValueError(f"must begin with a registry host; {exc}") from None


def _mirror(value: str) -> str:
    if "://" in value:
        raise ValueError("must be a registry host with an optional path (registry.example.internal:5000/gpu), without a scheme")
    if url_credentials("x://" + value) is not None or "@" in value:
        raise ValueError(
            "carries credentials; set images.registryCredentials.username and, as a secret, "
            "images.registryCredentials.password instead"
        )
    if value.endswith("/") or "//" in value:
        raise ValueError("must be a registry host with an optional path, without an empty part ('//' or a trailing '/')")
    _registry_first(value, "mirror")
    try:
        _name_parts(value)
    except ValueError as exc:
        hint = " (no tag: registry.example.internal or registry.example.internal:5000/gpu)" if ":" in value.split("/", 1)[-1] else ""
        raise ValueError(f"must be a registry host with an optional path, lowercase; {exc}{hint}") from None
    if len(value) >= NAME_LIMIT:
        raise ValueError(f"is {len(value)} characters: every image name under it would be over the {NAME_LIMIT}-character limit")
    return value


def _repository(value: str) -> str:
    try:
        _domain, _path, tag, digest = parse_image(value)
    except ValueError as exc:
        raise ValueError(
            f"must be an image repository without tag or digest, as `registry/path/name` "
            f"(nvcr.io/nvidia/driver, registry.example.internal/nvidia/driver); {exc}"
        ) from None
    if tag is not None or digest is not None:
        raise ValueError(
            "must be an image repository without tag or digest, as `registry/path/name` "
            "(nvcr.io/nvidia/driver); the tag of the image it replaces is kept"
        )
    return value


def _registry_repository(value: str) -> str:
    _repository(value)
    _registry_first(value, "repository")
    return value


def _secret_name(value: str) -> str:
    if len(value) > 253 or not DNS_SUBDOMAIN_RE.fullmatch(value):
        raise ValueError("must be a Secret name: lowercase letters, digits, '-' and '.', at most 253 characters")
    return value


Repository = Annotated[PlainStr, AfterValidator(_repository)]
"""An image repository (no tag, no digest) as the stack pulls it: a Docker Hub one may omit the host."""
RegistryRepository = Annotated[PlainStr, AfterValidator(_registry_repository)]
"""An image repository that names its registry host (where a mirror or an override points)."""
SecretName = Annotated[PlainStr, AfterValidator(_secret_name)]
Mirror = Annotated[PlainStr, AfterValidator(_mirror)]


class RegistryCredentials(ConfigModel):
    """A login to the mirror, from which the stack makes the pull Secret."""

    username: PlainStr = Field(min_length=1)
    """The mirror user (may be set with --secret); no ':', which ends the user in the registry's
    basic authentication (`user:password`)."""
    password: SecretLine = Field(min_length=1)
    """Its password or token; must be a Pulumi secret
    (`pulumi config set --secret --path 'gpu-stack:images.registryCredentials.password'`)."""

    @field_validator("username")
    @classmethod
    def _no_colon(cls, v: str) -> str:
        if ":" in v:
            raise ValueError(
                "must not hold ':': the registry's basic authentication is `user:password`, so the part after ':' "
                "would be read as the password"
            )
        return v


ImageName = Annotated[PlainStr, AfterValidator(image)]
"""A container image reference with a tag or digest (the names the Job image settings take)."""


_PROGRAM_PATH = re.compile(r"(?:/[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}){1,16}")
ID_LIMIT = 2**31 - 1
"""The largest uid or gid Kubernetes takes (runAsUser, runAsGroup: 0 to 2147483647)."""


def _program_path(value: str) -> str:
    if not _PROGRAM_PATH.fullmatch(value) or any(part in (".", "..") for part in value.split("/")):
        raise ValueError(
            "must be the absolute path of a file in the image, such as /usr/local/bin/kubectl: parts of letters, "
            "digits and '._-', no empty, '.' or '..' part, not ending in '/'"
        )
    return value


def _image_user(value: str) -> str:
    if not re.fullmatch(r"[0-9]{1,10}(?::[0-9]{1,10})?", value) or any(int(n) > ID_LIMIT for n in value.split(":")):
        raise ValueError(f"must be uid or uid:gid, each a number from 0 to {ID_LIMIT} (as Kubernetes takes them), such as 65532:65532")
    return value


class JobImageDeclaration(ConfigModel):
    """What an image of the stack's own carries, for a Job to run on it (config/job-images.yaml
    holds the images gpu-stack knows, with the evidence; a declaration is the stack's word)."""

    shell: Literal["bash", "busybox"]
    """What `sh` is in it: bash (bash and sh) or busybox (its sh and applets only)."""
    programs: dict[Annotated[PlainStr, Field(pattern=r"^[A-Za-z0-9._-]{1,64}$")], Annotated[PlainStr, AfterValidator(_program_path)]] = Field(default_factory=dict)
    """Its own programs the Jobs start, name -> absolute path of the file (kubectl, vectorAdd, nbody):
    parts of letters, digits and `._-`, no empty, `.` or `..` part, not ending in '/'."""
    user: Annotated[PlainStr, AfterValidator(_image_user)] = "0:0"
    """uid:gid of the image's USER, each 0 to 2147483647 as Kubernetes takes them (the stack's
    pods run as 65534 whatever it is)."""
    kubectl: Annotated[PlainStr, Field(pattern=r"^1\.[0-9]{1,3}$")] | None = None
    """The minor of its kubectl (`1.34`), where it has one; a record, named in the message when an
    image lacks what its Job starts (the Jobs use only GA core APIs, as the default image's kubectl
    1.34 does on every Kubernetes version the stack supports: gpu_stack/config/types.py KUBECTL_IMAGE)."""


class ImageSettings(ConfigModel):
    """Where the cluster pulls every image from: the chart's operator and operands, NFD, the
    validation Jobs and the MIG rollout Job (`python -m gpu_stack images --stack S` lists them)."""

    mirror: Mirror | None = None
    """A registry (with an optional path) holding a copy of every image: each image is pulled as
    `<mirror>/<its path without the registry host>:<its tag>` (`nvcr.io/nvidia/driver:580.105.08-ubuntu22.04`
    becomes `<mirror>/nvidia/driver:580.105.08-ubuntu22.04`). An image already under the mirror is kept."""
    overrides: dict[Repository, RegistryRepository] = Field(default_factory=dict)
    """Where a mirror lays an image out differently: the image's repository as the stack would pull
    it (without tag) -> the repository to pull instead; the tag is kept."""
    pull_secrets: tuple[SecretName, ...] = ()
    """Names of existing `kubernetes.io/dockerconfigjson` Secrets, in both the operator and the
    validation namespace, that every pod of the stack pulls with."""
    registry_credentials: RegistryCredentials | None = None
    """A login to the mirror: the stack creates the pull Secret `gpu-stack-mirror-pull` from it in the
    operator and validation namespaces (before anything pulls) and every pod pulls with it."""
    job_images: dict[ImageName, JobImageDeclaration] = Field(default_factory=dict, max_length=16)
    """Images of your own for the Jobs (validation.images.*, mig.rollout.image,
    validation.sharingBenchmark.image), by the name you give there, with what each carries; the
    images gpu-stack knows need none (config/job-images.yaml)."""

    @field_validator("pull_secrets")
    @classmethod
    def _unique(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(v)) != len(v):
            raise ValueError("lists a Secret twice")
        return v


# --------------------------------------------------------------------------- driver OS tags
DRIVER_OS_RE = re.compile(r"(?:ubuntu[0-9]{2}\.[0-9]{2}|rhel(?:8|9|10)\.[0-9]{1,2}|rhcos4\.[0-9]{1,2}|sles15\.[0-9])")
"""The OS tags the operator appends to the driver image's tag (`-<ID><VERSION_ID>` of the node's
os-release as NFD labels it): ubuntu20.04, ubuntu22.04, ubuntu24.04, rhel8.10, rhel9.6, rhcos4.18."""


def driver_os_tag(value: str) -> str:
    """An OS tag of the driver image (`ubuntu22.04`), else ValueError saying what is allowed: a value
    that ends up in an image tag, never text that can add a line, a path or an option."""
    if not DRIVER_OS_RE.fullmatch(value):
        raise ValueError(
            "is not an OS tag of the driver image: ubuntu<YY.MM> (ubuntu22.04, ubuntu24.04), rhel<major.minor> "
            "(rhel9.6), rhcos4.<minor> (rhcos4.18) or sles15.<sp>, as the operator appends to the driver's tag"
        )
    return value


# --------------------------------------------------------------------------- the mapping
def image_path(repository: str) -> str:
    """The repository without its registry host (a first part that is a registry host)."""
    first, _, rest = repository.partition("/")
    if rest and is_registry_host(first):
        return rest
    return repository


def mirror_repository(repository: str, images: ImageSettings) -> str:
    """Where the stack pulls `repository` from: its override, else `<mirror>/<path>`, else itself
    (an image already under the mirror is kept)."""
    if repository in images.overrides:
        return images.overrides[repository]
    mirror = images.mirror
    if mirror is None or repository == mirror or repository.startswith(mirror + "/"):
        return repository
    return f"{mirror}/{image_path(repository)}"
