"""Stack settings: the whole `gpu-stack:*` config namespace as pydantic models.

Every default lives here, next to the field it belongs to. `load_settings` turns the raw
config (one dict per top-level key, as Pulumi stores it) into `Settings`, or raises
`SettingsError` whose message names each bad key the way a user types it in
`pulumi config set --path`, the value found and what is allowed.

Cross-field rules (profile references, GPU model checks, driver/toolkit placement) run in
`check_settings` after the per-field validation, so one run reports every problem at once.
"""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from typing import Annotated, Any, Iterable, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from .safe_input import (
    Flag,
    PlainStr,
    TextStr,
    WholeNumber,
    check_address,
    check_ssh_public_key,
    escape,
    looks_like_key_material,
    shorten,
)

NAMESPACE = "gpu-stack"

# Kubernetes label values (and device-plugin config keys, which double as label values).
LABEL_VALUE_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)$")
# RFC 1123 subdomain: node names, namespaces are stricter (label) but we check them separately.
DNS_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$"
)
DNS_LABEL_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
POSIX_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._/:@-]{0,254}$")
DURATION_RE = re.compile(r"^(0|([0-9]+y)?([0-9]+w)?([0-9]+d)?([0-9]+h)?([0-9]+m)?([0-9]+s)?([0-9]+ms)?)$")
GPU_MODEL_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9 ._+-]{0,62}[A-Za-z0-9)])?$")
SEMVER_RE = re.compile(r"^v?[0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.-]+)?$")

CHART_VERSION = "v25.10.1"
CHART_REPOSITORY = "https://helm.ngc.nvidia.com/nvidia"
TOOLKIT_VERSION = "1.18.1"
MPS_MAX_REPLICAS = 48


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        str_strip_whitespace=False,
        use_attribute_docstrings=True,
    )


def _label_value(value: str) -> str:
    if not LABEL_VALUE_RE.fullmatch(value):
        raise ValueError(
            "must be a Kubernetes label value: at most 63 characters of letters, digits, "
            "'.', '_' and '-', beginning and ending with a letter or digit"
        )
    return value


def _dns_label(value: str) -> str:
    if not DNS_LABEL_RE.fullmatch(value):
        raise ValueError(
            "must be a DNS-1123 label: at most 63 lowercase letters, digits and '-', "
            "beginning and ending with a letter or digit"
        )
    return value


SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def _not_system_namespace(value: str) -> str:
    if value in SYSTEM_NAMESPACES or value.startswith("kube-"):
        raise ValueError(
            "is a Kubernetes system namespace (default and kube-* belong to the cluster); "
            "use a namespace of the stack's own, such as gpu-operator or gpu-validation"
        )
    return value


def _profile_names(profiles: dict[str, Any]) -> dict[str, Any]:
    """Profile names become node label values: each must be one."""
    for key in profiles:
        try:
            _label_value(key)
        except ValueError as exc:
            raise ValueError(f"profile name {key!r} {exc}") from None
    return profiles


# --------------------------------------------------------------------------- kubernetes
class KubernetesSettings(_Model):
    """How the stack reaches the cluster."""

    context: PlainStr | None = None
    """kubeconfig context; None uses the current context (or the provider's own config)."""
    kubeconfig: TextStr | None = None
    """Path to a kubeconfig file, or its content (set it with --secret); None uses KUBECONFIG /
    ~/.kube/config. The provider always receives it as a Pulumi secret."""
    version: Literal["1.29", "1.30", "1.31", "1.32", "1.33", "1.34"] = "1.31"
    """Kubernetes minor version the manifests are validated against."""
    cluster_identifier: str | None = Field(None, min_length=1, max_length=253)
    """The provider's `clusterIdentifier`: every resource is replaced only when it changes (never
    because a kubeconfig differs between machines). None: `<project>-<stack>`."""


# --------------------------------------------------------------------------- operator
class OperatorSettings(_Model):
    """The GPU Operator Helm release."""

    namespace: PlainStr = "gpu-operator"
    release_name: PlainStr = "gpu-operator"
    chart_version: Literal["v25.10.1"] = CHART_VERSION
    repository: PlainStr = CHART_REPOSITORY
    timeout_seconds: WholeNumber = Field(900, ge=600, le=3600)
    """Helm wait timeout; the chart's hooks and DaemonSets need several minutes."""
    protect: Flag = False
    """Pulumi `protect` on the operator namespace and release (set it in production)."""
    node_feature_discovery: Flag = True
    """Deploy NFD with the operator (false when the cluster already runs NFD)."""
    upgrade_crd: bool = Field(True, alias="upgradeCRD")
    """Chart value `operator.upgradeCRD`: a pre-upgrade hook Job applies the chart's CRDs before
    each chart upgrade (Helm itself never upgrades `crds/`), so an older ClusterPolicy schema
    cannot prune fields the new chart sets. The release then skips Helm's OpenAPI check of the
    rendered objects against the old schema (`disableOpenapiValidation`), as the chart requires."""

    @field_validator("namespace", "release_name")
    @classmethod
    def _names(cls, v: str) -> str:
        return _dns_label(v)

    _system_ns = field_validator("namespace")(classmethod(lambda cls, v: _not_system_namespace(v)))

    @field_validator("repository")
    @classmethod
    def _https(cls, v: str) -> str:
        if not re.fullmatch(r"^(https://|oci://)[^\s'\"`$;]+$", v):
            raise ValueError("must be an https:// or oci:// chart repository URL")
        return v


# Kubernetes label selector as the operator's upgrade controller parses it (metav1.ParseToLabelSelector
# syntax): comma-separated `key`, `!key`, `key=v`, `key==v`, `key!=v`, `key in (a,b)`, `key notin (a,b)`.
_SEL_KEY = r"(?:[a-z0-9](?:[a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?"
_SEL_VAL = r"(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?"
_SEL_REQ = (
    rf"(?:!\s*{_SEL_KEY}|{_SEL_KEY}\s*(?:(?:==?|!=)\s*{_SEL_VAL}|\s(?:in|notin)\s*"
    rf"\(\s*{_SEL_VAL}(?:\s*,\s*{_SEL_VAL})*\s*\))?)"
)
LABEL_SELECTOR_RE = re.compile(rf"^\s*{_SEL_REQ}(?:\s*,\s*{_SEL_REQ})*\s*$")
PERCENT_RE = re.compile(r"^(?:100|[1-9]?[0-9])%$")


def _selector(v: str) -> str:
    if v and not LABEL_SELECTOR_RE.fullmatch(v):
        raise ValueError(
            "must be a Kubernetes label selector such as 'app=training' or 'team in (a,b),!debug' "
            "(or empty for none)"
        )
    if v.lstrip().startswith("!"):
        # The chart writes the selector unquoted into the ClusterPolicy's YAML: a leading '!' is a tag.
        raise ValueError(
            "must not begin with '!': the chart writes it unquoted into YAML, where '!' starts a tag; "
            "put another requirement first, such as 'app=batch,!critical'"
        )
    return v


class WaitForCompletion(_Model):
    """Before a node's driver is restarted: wait for these pods (Jobs) to finish."""

    timeout_seconds: int = Field(0, ge=0, le=604800)
    """How long to wait; 0 waits forever (only matters with a podSelector)."""
    pod_selector: str = ""
    """Label selector of the pods to wait for; empty: wait for none."""
    _sel = field_validator("pod_selector")(classmethod(lambda cls, v: _selector(v)))


class GpuPodDeletion(_Model):
    """How the operator deletes the pods that use GPUs on a node before its driver restarts."""

    force: bool = False
    """Delete pods not managed by a controller too (they are not recreated)."""
    timeout_seconds: int = Field(300, ge=0, le=86400)
    """How long to wait for the pods to terminate; 0 waits forever."""
    delete_empty_dir: bool = False
    """Delete pods with emptyDir volumes too (their local data is lost)."""


class DrainSettings(_Model):
    """`kubectl drain` of a node before its driver restarts (needed only when deleting GPU pods is not enough)."""

    enable: bool = False
    force: bool = False
    pod_selector: str = ""
    """Label selector of the pods to drain; empty: every pod."""
    timeout_seconds: int = Field(300, ge=0, le=86400)
    """Give up draining after this long; 0 waits forever (a drain that never ends blocks the upgrade)."""
    delete_empty_dir: bool = False
    _sel = field_validator("pod_selector")(classmethod(lambda cls, v: _selector(v)))


class DriverUpgradePolicy(_Model):
    """Chart values `driver.upgradePolicy.*`: how the operator rolls a driver change over the nodes.

    Defaults are the chart's own (one node at a time, GPU pods deleted before the driver restarts)."""

    auto_upgrade: bool = True
    """The operator's upgrade controller cordons, empties and restarts one node's driver at a time.
    false: the driver DaemonSet waits (OnDelete) until someone deletes each driver pod by hand."""
    max_parallel_upgrades: int = Field(1, ge=0, le=1000)
    """Nodes upgraded at once; 0 means all nodes at once."""
    max_unavailable: int | str = "25%"
    """Nodes (number, or percentage such as '25%') that may be unavailable during the upgrade."""
    wait_for_completion: WaitForCompletion = WaitForCompletion()
    gpu_pod_deletion: GpuPodDeletion = GpuPodDeletion()
    drain: DrainSettings = DrainSettings()

    @field_validator("max_unavailable")
    @classmethod
    def _max_unavailable(cls, v: int | str) -> int | str:
        if isinstance(v, bool) or (isinstance(v, int) and v < 0) or (isinstance(v, str) and not PERCENT_RE.fullmatch(v)):
            raise ValueError("must be a number of nodes (0 or more) or a percentage from 0% to 100%, such as 25%")
        return v


class DriverSettings(_Model):
    """Where the NVIDIA driver lives."""

    placement: Literal["host", "operator"] = "operator"
    """host: preinstalled on the node (checked over SSH); operator: the chart's driver DaemonSet."""
    version: PlainStr = "580.105.08"
    """Driver version the operator installs (placement=operator only)."""
    upgrade_policy: DriverUpgradePolicy = DriverUpgradePolicy()
    """How a driver change rolls over the nodes (placement=operator only)."""

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not re.fullmatch(r"^[0-9]+(\.[0-9]+){1,2}$", v):
            raise ValueError("must be a driver version such as 580.105.08")
        return v


class ToolkitSettings(_Model):
    """Where the NVIDIA Container Toolkit lives."""

    placement: Literal["host", "operator"] = "operator"
    """host: installed over SSH with the node's package manager; operator: the chart's toolkit DaemonSet.
    With driver.placement 'operator' too, the host toolkit's `root` is pointed at /run/nvidia/driver."""
    version: Literal["1.18.1"] = TOOLKIT_VERSION
    cdi: bool = True
    """The chart's `cdi.enabled` (its default): the device plugin hands out CDI devices only, so each
    node's runtime must process CDI (containerd 1.7+, Docker 25+, cri-o; host nodes are configured
    with `--cdi.enabled` and checked). false: the nvidia runtime becomes the default runtime instead."""


# --------------------------------------------------------------------------- nodes
class SshSettings(_Model):
    """Stack-wide SSH defaults for node preparation (each node may override user/port)."""

    user: PlainStr = "root"
    port: WholeNumber = Field(22, ge=1, le=65535)
    private_key: SecretStr | None = None
    """The private key, only ever as a Pulumi secret (`pulumi config set --secret --path gpu-stack:ssh.privateKey`)."""
    timeout_seconds: int = Field(1200, ge=60, le=7200)
    """How long a node's preparation script may run (GNU `timeout` on the node) before it is
    stopped and reported as failed; a hung package install cannot block `pulumi up` for ever."""

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        if not POSIX_USER_RE.fullmatch(v):
            raise ValueError("must be a POSIX user name: lowercase letters, digits, '_' and '-', at most 32")
        return v


class GpuSpec(_Model):
    model: PlainStr = Field(min_length=1, max_length=64)
    """GPU model as the catalog in config/gpu-models.yaml names it (e.g. H100-80GB, L4, A100-40GB)."""
    count: WholeNumber = Field(ge=1, le=16)

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        # It reaches the node script and the plan: no quotes, `$`, `;`, newlines or other shell syntax.
        if not GPU_MODEL_RE.fullmatch(v):
            raise ValueError(
                "must be a GPU model name such as L4, H100-80GB or 'NVIDIA H100 NVL': letters, digits, "
                "spaces, '.', '_', '+' and '-'"
            )
        return v


Runtime = Literal["containerd", "docker", "crio", "k3s", "rke2"]


class NodeSettings(_Model):
    """One GPU node of the cluster."""

    name: PlainStr
    """The Kubernetes node name (metadata.name)."""
    address: PlainStr | None = None
    """SSH address; required when the driver or toolkit lives on the host."""
    user: PlainStr | None = None
    port: WholeNumber | None = Field(None, ge=1, le=65535)
    host_key: PlainStr | None = None
    """Pin the node's SSH host key (`ssh-ed25519 AAAA...`, from /etc/ssh/ssh_host_ed25519_key.pub);
    None: the SSH connection does not check the host key at all (pulumi-command's behaviour)."""
    gpu: GpuSpec
    runtime: Runtime = "containerd"
    sharing: PlainStr | None = None
    """Sharing profile key for this node (label nvidia.com/device-plugin.config); None: the cluster default."""
    mig: PlainStr | None = None
    """MIG config name for this node (label nvidia.com/mig.config); None: leave MIG as it is."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not DNS_SUBDOMAIN_RE.fullmatch(v) or len(v) > 253:
            raise ValueError(
                "must be a Kubernetes node name: lowercase letters, digits, '-' and '.', at most 253"
            )
        return v

    @field_validator("address")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        return None if v is None else check_address(v)

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        if v is not None and not POSIX_USER_RE.fullmatch(v):
            raise ValueError("must be a POSIX user name: lowercase letters, digits, '_' and '-', at most 32")
        return v

    @field_validator("host_key")
    @classmethod
    def _host_key(cls, v: str | None) -> str | None:
        return None if v is None else check_ssh_public_key(v)

    @field_validator("sharing", "mig")
    @classmethod
    def _profile_ref(cls, v: str | None) -> str | None:
        return None if v is None else _label_value(v)


# --------------------------------------------------------------------------- sharing
SharingMode = Literal["none", "time-slicing", "mps"]
# The device plugin advertises a MIG profile `1g.10gb+me` as `nvidia.com/mig-1g.10gb.me`.
RESOURCE_NAME_RE = re.compile(r"^nvidia\.com/(gpu|mig-[0-9]+g\.[0-9]+gb([.-][a-z]+)*)$")
MIG_PROFILE_RE = re.compile(r"^[0-9]+g\.[0-9]+gb([+-][a-z]+(\.[a-z]+)*)?$")
PCI_DEVICE_ID_RE = re.compile(r"^0x[0-9A-Fa-f]{8}$")


class SharedResource(_Model):
    """One advertised resource and how many replicas each of its devices is split into."""

    name: PlainStr = Field(max_length=63)
    replicas: WholeNumber = Field(ge=2, le=1024)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not RESOURCE_NAME_RE.fullmatch(v):
            raise ValueError(
                "must be nvidia.com/gpu or a MIG resource nvidia.com/mig-<N>g.<M>gb (e.g. nvidia.com/mig-1g.10gb)"
            )
        return v


class SharingProfile(_Model):
    """A device-plugin sharing config: one key of the sharing ConfigMap (`sharing.profiles.<key>`)."""

    mode: SharingMode = "time-slicing"
    """time-slicing, mps, or none (a profile that turns sharing off on the nodes that select it)."""
    replicas: WholeNumber | None = Field(None, ge=2, le=1024)
    """Replicas of every physical GPU (nvidia.com/gpu); omit when `resources` lists them."""
    rename_by_default: Flag = False
    """Advertise `<resource>.shared` instead of `<resource>`."""
    fail_requests_greater_than_one: Flag = False
    """Reject pods asking for more than one replica (always on under MPS)."""
    resources: tuple[SharedResource, ...] = ()
    """Per-resource replicas, e.g. MIG resources (nvidia.com/mig-1g.10gb) under the mixed strategy."""


RESERVED_SHARING_KEYS = ("default", "none")
"""ConfigMap keys the stack writes itself: the cluster-wide profile and the opt-out."""


class SharingSettings(_Model):
    """GPU sharing for the device plugin.

    The common case is one key: `sharing.replicas` with `sharing.mode: time-slicing` gives every
    node without a profile of its own (`nodes[i].sharing`) that many replicas per GPU.
    """

    mode: SharingMode = "none"
    """Cluster-wide default: none, time-slicing or mps (the ConfigMap key `default`)."""
    replicas: WholeNumber = Field(4, ge=2, le=1024)
    """Replicas of every GPU (nvidia.com/gpu) under the default profile. When `resources` is set
    and this is not, only `resources` are shared."""
    rename_by_default: Flag = False
    fail_requests_greater_than_one: Flag = False
    resources: tuple[SharedResource, ...] = ()
    profiles: dict[PlainStr, SharingProfile] = Field(default_factory=dict)
    """Extra named profiles a node selects with `nodes[i].sharing` (keys are label values)."""

    @field_validator("profiles")
    @classmethod
    def _keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _profile_names(v)


# --------------------------------------------------------------------------- MIG
class MigDeviceGroup(BaseModel):
    """One entry of a mig-parted config, in mig-parted's own key names."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, use_attribute_docstrings=True)

    devices: Literal["all"] | tuple[Annotated[WholeNumber, Field(ge=0, le=15)], ...] = "all"
    """`all` or GPU indices on the node."""
    mig_enabled: Flag = Field(alias="mig-enabled")
    mig_devices: dict[PlainStr, Annotated[WholeNumber, Field(ge=0, le=7)]] = Field(default_factory=dict, alias="mig-devices")
    """MIG profile -> instances per GPU, e.g. {"1g.10gb": 2, "2g.20gb": 1}; only when mig-enabled."""
    device_filter: PlainStr | tuple[PlainStr, ...] | None = Field(None, alias="device-filter")
    """PCI device id(s) this entry applies to, as mig-parted writes them (0x233510DE)."""

    @field_validator("devices")
    @classmethod
    def _devices(cls, v: Any) -> Any:
        if v != "all" and (len(v) == 0 or len(set(v)) != len(v)):
            raise ValueError("must be 'all' or a non-empty list of distinct GPU indices")
        return v

    @field_validator("mig_devices")
    @classmethod
    def _profiles(cls, v: dict[str, int]) -> dict[str, int]:
        for name in v:
            if not MIG_PROFILE_RE.fullmatch(name):
                raise ValueError(f"{name!r} is not a MIG profile name such as 1g.10gb, 3g.40gb or 1g.10gb+me")
        return v

    @field_validator("device_filter")
    @classmethod
    def _filter(cls, v: Any) -> Any:
        ids = (v,) if isinstance(v, str) else (v or ())
        if v is not None and not ids:
            raise ValueError("must be a PCI device id such as 0x233510DE or a non-empty list of them")
        for item in ids:
            if not PCI_DEVICE_ID_RE.fullmatch(item):
                raise ValueError(f"{item!r} is not a PCI device id such as 0x233510DE (device then vendor)")
        return v


class MigManagerSettings(_Model):
    enabled: Flag = True
    with_reboot: Flag = False
    """Set WITH_REBOOT=true for clouds that need a reboot to change MIG mode."""


MIG_ROLLOUT_DURATION_RE = re.compile(r"^(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?$")


def _rollout_seconds(value: Any, low: int, high: int) -> int:
    """A duration as whole seconds (300) or a string such as 90s, 10m or 1h30m, within [low, high]."""
    allowed = f"whole seconds or a duration such as 90s, 10m or 1h30m, from {low}s to {high // 3600}h"
    if isinstance(value, bool):
        raise ValueError(f"must be {allowed}")
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and value.isdigit():
        seconds = int(value)
    elif isinstance(value, str) and value and (m := MIG_ROLLOUT_DURATION_RE.fullmatch(value)):
        h, mi, se = (int(g) if g else 0 for g in m.groups())
        seconds = h * 3600 + mi * 60 + se
    else:
        raise ValueError(f"must be {allowed}")
    if not low <= seconds <= high:
        raise ValueError(f"must be {allowed}")
    return seconds


class MigRolloutSettings(_Model):
    """How a change of a node's MIG config is rolled out (`mig.rollout`): per node cordon, evict
    its GPU pods, relabel, wait for mig-manager's success and the new resources, uncordon; nodes
    change in waves of `maxUnavailable`, a wave only after the previous one succeeded."""

    max_unavailable: int | PlainStr = 1
    """Nodes reconfigured at once: a count (at least 1) or a percentage of the MIG nodes such as
    25% (rounded down, at least 1 node)."""
    eviction_timeout: int = 600
    """How long the GPU pods of a wave may take to leave (evictions a PodDisruptionBudget refuses
    are retried until then); seconds or a duration such as 10m."""
    timeout: int = 1800
    """How long a wave may take, once relabelled, to reach nvidia.com/mig.config.state=success and
    advertise its new MIG resources; seconds or a duration such as 30m."""
    evict: Flag = True
    """false: no cordon and no eviction (you drain by other means); the label is still set by the
    rollout Job, which waits for success."""
    image: PlainStr = "registry.k8s.io/kubectl:v1.31.4"
    """Runs the rollout script (bash and kubectl)."""

    @field_validator("max_unavailable", mode="before")
    @classmethod
    def _max_unavailable(cls, v: Any) -> Any:
        text = str(v) if isinstance(v, (int, str)) and not isinstance(v, bool) else None
        if text is not None and re.fullmatch(r"[1-9][0-9]{0,3}", text):
            return int(text)
        if text is not None and re.fullmatch(r"(100|[1-9][0-9]?)%", text):
            return text
        raise ValueError("must be a node count of at least 1 (e.g. 2) or a percentage from 1% to 100% (e.g. 25%)")

    @field_validator("eviction_timeout", mode="before")
    @classmethod
    def _eviction_timeout(cls, v: Any) -> int:
        return _rollout_seconds(v, 10, 86400)

    @field_validator("timeout", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> int:
        return _rollout_seconds(v, 60, 86400)

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if not IMAGE_RE.fullmatch(v):
            raise ValueError("must be a container image reference (registry/name:tag or @sha256:...)")
        return v


class MigSettings(_Model):
    """MIG strategy and custom mig-parted configs."""

    strategy: Literal["none", "single", "mixed"] = "single"
    manager: MigManagerSettings = MigManagerSettings()
    rollout: MigRolloutSettings = MigRolloutSettings()
    profiles: dict[PlainStr, tuple[MigDeviceGroup, ...]] = Field(default_factory=dict)
    """Custom mig-parted configs (replace the operator's built-in list; `all-disabled` is kept)."""

    @field_validator("profiles")
    @classmethod
    def _keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _profile_names(v)


# --------------------------------------------------------------------------- DCGM
class Relabeling(_Model):
    """One Prometheus relabeling of the exporter's ServiceMonitor endpoint. Written to the chart
    camelCased as the ServiceMonitor CRD spells it (`sourceLabels`, `targetLabel`), whichever
    spelling the stack config uses."""

    source_labels: tuple[PlainStr, ...] | None = None
    separator: PlainStr | None = None
    target_label: PlainStr | None = None
    regex: PlainStr | None = None
    modulus: WholeNumber | None = Field(None, ge=1)
    replacement: PlainStr | None = None
    action: Literal[
        "replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep",
        "lowercase", "uppercase", "keepequal", "dropequal",
    ] = "replace"

    @field_validator("source_labels")
    @classmethod
    def _source_labels(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for label in v or ():
            if not re.fullmatch(r"^[a-zA-Z_][a-zA-Z0-9_]*$", label):
                raise ValueError(f"{label!r} is not a Prometheus label name (letters, digits, '_')")
        return v


class ServiceMonitorSettings(_Model):
    """The DCGM exporter's ServiceMonitor (created only where the Prometheus Operator CRDs exist)."""

    enabled: Flag = False
    interval: PlainStr = "15s"
    honor_labels: Flag = False
    additional_labels: dict[PlainStr, PlainStr] = Field(default_factory=dict)
    """Labels your Prometheus selects ServiceMonitors by, e.g. `release: kube-prometheus-stack`."""
    relabelings: tuple[Relabeling, ...] = ()

    @field_validator("interval")
    @classmethod
    def _interval(cls, v: str) -> str:
        if not DURATION_RE.fullmatch(v) or v == "":
            raise ValueError("must be a Prometheus duration such as 15s, 1m or 1m30s")
        return v

    @field_validator("additional_labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not re.fullmatch(r"^([a-z0-9]([a-z0-9.-]*[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$", key):
                raise ValueError(f"label key {key!r} is not a valid Kubernetes label key")
            if value != "":
                try:
                    _label_value(value)
                except ValueError as exc:
                    raise ValueError(f"label {key!r} value {value!r} {exc}") from None
        return v


class DcgmExporterSettings(_Model):
    enabled: Flag = True
    service_monitor: ServiceMonitorSettings = ServiceMonitorSettings()
    metrics: TextStr | None = None
    """Custom metric list in dcgm-exporter's CSV format (`FIELD, type, help` per line); None: the exporter's defaults."""


# --------------------------------------------------------------------------- validation
class ValidationImages(_Model):
    cuda: PlainStr = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
    """Runs the CUDA vectorAdd sample (bash and /cuda-samples/vectorAdd): the smoke Job and the shared-GPU pods."""
    toolbox: PlainStr = "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04"
    """Runs the MIG-device and metrics payloads (bash, coreutils; nvidia-smi when a GPU is attached)."""
    kubectl: PlainStr = "registry.k8s.io/kubectl:v1.31.4"
    """Reads node status through the API for the capacity and MIG-state checks (bash and kubectl)."""

    @field_validator("cuda", "toolbox", "kubectl")
    @classmethod
    def _image(cls, v: str) -> str:
        if not IMAGE_RE.fullmatch(v):
            raise ValueError("must be a container image reference (registry/name:tag or @sha256:...)")
        return v


class ValidationSettings(_Model):
    enabled: Flag = True
    namespace: PlainStr = "gpu-validation"
    timeout_seconds: WholeNumber = Field(600, ge=60, le=7200)
    """How long each validation Job may run (activeDeadlineSeconds); `pulumi up` waits 60 s more."""
    ttl_seconds_after_finished: WholeNumber = Field(86400, ge=60, le=2592000)
    """How long a finished Job (and its pods' logs) stays in the cluster before Kubernetes deletes it."""
    max_sharing_pods: WholeNumber = Field(64, ge=2, le=256)
    """At most this many concurrent pods per shared node (R x G is capped here; mind the node's pod limit)."""
    coverage: Literal["sample", "full"] = "sample"
    """Which nodes run GPU pods. sample: one node of each class (GPU model x sharing profile x MIG
    config), within `podBudget`, so a busy production cluster needs only a few free GPUs; full:
    every node, R x G pods each (capped by maxSharingPods), for an acceptance run on an idle cluster.
    Every node's advertised capacity and MIG state are read through the API either way."""
    pod_budget: int = Field(32, ge=2, le=4096)
    """coverage sample: at most this many GPU pods in one `pulumi up`, whatever the node count."""
    images: ValidationImages = ValidationImages()

    _ns = field_validator("namespace")(classmethod(lambda cls, v: _not_system_namespace(_dns_label(v))))


# --------------------------------------------------------------------------- alerts and dashboard
PROM_LABEL_NAME_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
K8S_LABEL_KEY_RE = re.compile(r"^([a-z0-9]([a-z0-9.-]*[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
Severity = Literal["critical", "warning", "info"]


def _k8s_labels(v: dict[str, str]) -> dict[str, str]:
    for key, value in v.items():
        if not K8S_LABEL_KEY_RE.fullmatch(key):
            raise ValueError(f"label key {key!r} is not a valid Kubernetes label key")
        if value != "":
            try:
                _label_value(value)
            except ValueError as exc:
                raise ValueError(f"label {key!r} value {value!r} {exc}") from None
    return v


def _duration(v: str) -> str:
    if v == "" or not DURATION_RE.fullmatch(v):
        raise ValueError("must be a Prometheus duration such as 0s, 5m or 1h30m")
    return v


class AlertRule(_Model):
    """One alert: whether it is generated, how long its condition must hold, how loud it is."""

    enabled: Flag | None = True
    """true: generated (the plan warns when the exporter's metric list lacks a metric it needs);
    false: left out; null: generated only when every metric it needs is in the metric list."""
    for_: PlainStr = Field("5m", alias="for")
    """How long the condition must hold before the alert fires (Prometheus `for:`)."""
    severity: Severity = "warning"
    """The `severity` label Alertmanager routes on."""

    _for = field_validator("for_")(classmethod(lambda cls, v: _duration(v)))


class XidAlert(AlertRule):
    codes: tuple[Annotated[WholeNumber, Field(ge=1, le=1000)], ...]
    """The XID codes this alert fires on."""

    @field_validator("codes")
    @classmethod
    def _codes(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if not v or len(set(v)) != len(v):
            raise ValueError("must be a non-empty list of distinct XID codes")
        return v


class ThresholdAlert(AlertRule):
    threshold: float = Field(ge=0, le=200, allow_inf_nan=False)
    """The value at or above which the condition holds (a temperature in C)."""


class RatioAlert(AlertRule):
    threshold: float = Field(gt=0, le=1, allow_inf_nan=False)
    """The fraction (0-1] at or above which the condition holds."""


_UNSET = object()
ALERT_DEFAULTS: dict[str, dict[str, Any]] = {
    # XIDs after which the GPU needs a reset, a drain or a replacement: double-bit ECC (48),
    # micro-controller halt (62), row remap / page retirement pending or failed (63, 64), NVLink (74),
    # fallen off the bus (79), high single-bit ECC rate (92), contained / uncontained ECC (94, 95),
    # GSP timeout / error (119, 120), unrecovered ECC (140), recovery action changed (154).
    "xid_fatal": {"codes": [48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140, 154], "severity": "critical", "for": "0s"},
    # XIDs an application caused (graphics exception, page fault, stopped channel, preemptive
    # cleanup): the job failed, the GPU itself is fine.
    "xid_application": {"codes": [13, 31, 43, 45], "severity": "warning", "for": "0s"},
    # Volatile double-bit ECC errors (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL is not in NVIDIA's default list:
    # on only when the metric list has it, unless set to true).
    "ecc_double_bit": {"enabled": None, "severity": "critical", "for": "0s"},
    # A row was remapped after an uncorrectable memory error (Ampere and newer): reset the GPU to apply.
    "uncorrectable_remapped_rows": {"severity": "warning", "for": "0s"},
    # Row remapping failed: memory errors the GPU can no longer hide; replace it.
    "row_remap_failure": {"severity": "critical", "for": "0s"},
    # GPU / memory temperature in C at or above the threshold, close to thermal slowdown.
    "gpu_temperature": {"threshold": 85, "severity": "warning", "for": "5m"},
    "memory_temperature": {"threshold": 95, "severity": "warning", "for": "5m"},
    # Fraction of time (0-1) the clocks were held down for heat / by the power cap (the violation
    # counters are not in NVIDIA's default list: on only when the metric list has them).
    "thermal_throttling": {"enabled": None, "threshold": 0.1, "severity": "warning", "for": "10m"},
    "power_throttling": {"enabled": None, "threshold": 0.2, "severity": "warning", "for": "15m"},
    # The exporter's scrape target is down, or Prometheus has no target for it at all.
    "exporter_down": {"severity": "critical", "for": "10m"},
    # A node of `nodes` reports no GPU at all / fewer GPUs than nodes[i].gpu.count.
    "node_not_reporting": {"severity": "critical", "for": "10m"},
    "fewer_gpus": {"severity": "critical", "for": "10m"},
    # mig-manager set nvidia.com/mig.config.state=failed (exported by kube-state-metrics).
    "mig_config_failed": {"severity": "critical", "for": "5m"},
    # Requested share (0-1) of a node's advertised shared replicas; 1 = every replica allocated.
    "sharing_saturated": {"threshold": 1.0, "severity": "warning", "for": "30m"},
}
"""Each alert's defaults; a stack sets only what it changes (`alerts.rules.gpuTemperature.threshold`)."""


class AlertRules(_Model):
    """Every alert the stack generates, by key (`alerts.rules.<key>`); defaults in ALERT_DEFAULTS."""

    xid_fatal: XidAlert
    xid_application: XidAlert
    ecc_double_bit: AlertRule
    uncorrectable_remapped_rows: AlertRule
    row_remap_failure: AlertRule
    gpu_temperature: ThresholdAlert
    memory_temperature: ThresholdAlert
    thermal_throttling: RatioAlert
    power_throttling: RatioAlert
    exporter_down: AlertRule
    node_not_reporting: AlertRule
    fewer_gpus: AlertRule
    mig_config_failed: AlertRule
    sharing_saturated: RatioAlert

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any) -> Any:
        """Lay what the stack sets for an alert over that alert's own defaults."""
        if not isinstance(data, dict):
            return data
        out: dict[str, Any] = {}
        for name, defaults in ALERT_DEFAULTS.items():
            alias = to_camel(name)
            given = data.get(alias, data.get(name, _UNSET))
            if given is _UNSET:
                out[alias] = dict(defaults)
            elif isinstance(given, dict):
                merged = dict(defaults)
                for key, value in given.items():
                    merged["for" if key == "for_" else key] = value
                out[alias] = merged
            else:
                out[alias] = given
        for key, value in data.items():
            if key not in ALERT_DEFAULTS and key not in out:
                out[key] = value
        return out


class DashboardSettings(_Model):
    """The Grafana dashboard, a ConfigMap kube-prometheus-stack's dashboard sidecar loads."""

    enabled: Flag | None = None
    """null: on whenever the exporter and its ServiceMonitor are on (Prometheus scrapes the exporter)."""
    labels: dict[PlainStr, PlainStr] = Field(default_factory=lambda: {"grafana_dashboard": "1"})
    """Labels the sidecar selects dashboard ConfigMaps by (kube-prometheus-stack: grafana_dashboard=1)."""
    folder: PlainStr | None = None
    """Grafana folder, through the sidecar's folder annotation (`grafana_folder`); null: the default folder."""

    _labels = field_validator("labels")(classmethod(lambda cls, v: _k8s_labels(v)))

    @field_validator("folder")
    @classmethod
    def _folder(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,62}", v):
            raise ValueError("must be a folder name of letters, digits, spaces, '.', '_' and '-' (at most 63)")
        return v


class AlertSettings(_Model):
    """GPU health alerts (a PrometheusRule) and the Grafana dashboard, both in the operator namespace."""

    enabled: Flag | None = None
    """null: on whenever the exporter and its ServiceMonitor are on (the cluster runs the Prometheus Operator)."""
    rule_labels: dict[PlainStr, PlainStr] | None = None
    """Labels of the PrometheusRule object that your Prometheus selects rules by; null: the
    ServiceMonitor's additionalLabels, else `release: kube-prometheus-stack`."""
    labels: dict[PlainStr, PlainStr] = Field(default_factory=dict)
    """Extra labels on every alert, for Alertmanager routing (e.g. `team: gpu-platform`)."""
    exporter_job: PlainStr = "nvidia-dcgm-exporter"
    """The `job` label of the exporter's scrape target (the operator's ServiceMonitor sets it from the
    Service's `app` label)."""
    rules: AlertRules = Field(default_factory=AlertRules)
    dashboard: DashboardSettings = DashboardSettings()

    _rule_labels = field_validator("rule_labels")(classmethod(lambda cls, v: v if v is None else _k8s_labels(v)))

    @field_validator("labels")
    @classmethod
    def _alert_labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not PROM_LABEL_NAME_RE.fullmatch(key) or key.startswith("__"):
                raise ValueError(f"{key!r} is not a Prometheus label name (letters, digits, '_'; not starting with '__')")
            if key in ("alertname", "severity"):
                raise ValueError(f"{key!r} is set by the stack itself (use rules.<alert>.severity for severity)")
            if not re.fullmatch(r"[^\n\r{}$]{1,128}", value):
                raise ValueError(f"label {key!r} value {value!r} must be 1-128 characters without newlines, braces or '$'")
        return v

    @field_validator("exporter_job")
    @classmethod
    def _job(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,126}", v):
            raise ValueError("must be a Prometheus job name such as nvidia-dcgm-exporter")
        return v


# --------------------------------------------------------------------------- root
class Settings(_Model):
    """The whole stack config. Keys are the `gpu-stack:<key>` config keys."""

    kubernetes: KubernetesSettings = KubernetesSettings()
    operator: OperatorSettings = OperatorSettings()
    driver: DriverSettings = DriverSettings()
    toolkit: ToolkitSettings = ToolkitSettings()
    ssh: SshSettings = SshSettings()
    nodes: tuple[NodeSettings, ...] = ()
    sharing: SharingSettings = SharingSettings()
    mig: MigSettings = MigSettings()
    dcgm_exporter: DcgmExporterSettings = DcgmExporterSettings()
    validation: ValidationSettings = ValidationSettings()
    alerts: AlertSettings = AlertSettings()

    _secret_shapes: frozenset[str] = PrivateAttr(default_factory=frozenset)

    def is_secret(self, shape: str) -> bool:
        """True when the value at `shape` (e.g. `kubernetes.context`, `nodes[*].address`) is a secret."""
        return shape in self._secret_shapes

    @property
    def host_managed(self) -> bool:
        """True when the driver or the toolkit lives on the host and nodes need SSH preparation."""
        return self.driver.placement == "host" or self.toolkit.placement == "host"


TOP_LEVEL_KEYS = tuple(f.alias or name for name, f in Settings.model_fields.items())


# --------------------------------------------------------------------------- errors
class Problem(BaseModel):
    """One thing wrong with the config, said the way a user fixes it."""

    key: str
    value: Any = None
    message: str

    def render(self) -> str:
        """One line, at most MESSAGE_LIMIT characters, every non-printable character escaped."""
        shown = "" if self.value is _MISSING else f" = {_show(self.value)}"
        return shorten(escape(f"{self.key}{shown}: {self.message}"), MESSAGE_LIMIT)


_MISSING = object()


MESSAGE_LIMIT = 400
"""The longest line one problem prints."""
COLLAPSE_SHOWN = 3
"""How many keys a collapsed group of like problems names."""
PROBLEM_LIMIT = 40
"""How many distinct problems an error lists before it says how many more there are."""


def _show(value: Any) -> str:
    if isinstance(value, SecretStr):
        return "[secret]"
    text = repr(value)
    if looks_like_key_material(text):
        return f"[hidden: {len(text)} characters that look like key material]"
    return shorten(text, 120)


def _shape(text: str) -> str:
    """`gpu-stack:nodes[3].address` -> `gpu-stack:nodes[#].address`, `profile p12` -> `profile p#`:
    problems that differ only in numbers (list indexes, numbered names) share a shape."""
    return re.sub(r"[0-9]+", "#", text)


def render_problems(problems: list[Problem]) -> list[str]:
    """One line per problem; a problem repeated at several keys of one shape (the same message for
    nodes[0..999].address) is one line with a count and the first few keys."""
    groups: dict[tuple[str, str], list[Problem]] = {}
    for p in problems:
        groups.setdefault((_shape(p.key), _shape(p.message)), []).append(p)
    lines = []
    for group in groups.values():
        line = group[0].render()
        if len(group) > 1:
            keys = ", ".join(shorten(escape(p.key), 48) for p in group[1 : 1 + COLLAPSE_SHOWN])
            more = ", ..." if len(group) > 1 + COLLAPSE_SHOWN else ""
            suffix = f" (and {len(group) - 1} more like it: {keys}{more})"
            line = shorten(line, MESSAGE_LIMIT - len(suffix)) + suffix
        lines.append(line)
    if len(lines) > PROBLEM_LIMIT:
        lines = lines[:PROBLEM_LIMIT] + [f"... and {len(lines) - PROBLEM_LIMIT} more problems"]
    return lines


class SettingsError(Exception):
    """A bad stack config: every problem found, each naming its key."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = render_problems(problems)
        header = "invalid stack config" if len(lines) == 1 else f"invalid stack config ({len(lines)} problems)"
        super().__init__(header + ":\n  " + "\n  ".join(lines))


def config_key(loc: tuple[Any, ...]) -> str:
    """`('sharing', 'profiles', 'big', 'replicas')` -> `gpu-stack:sharing.profiles.big.replicas`."""
    out = NAMESPACE + ":"
    first = True
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"^[A-Za-z_][A-Za-z0-9_-]*$", str(part)):
            out += ("" if first else ".") + str(part)
        else:
            # Quoted as `pulumi config set --path` reads it; JSON escapes keep it on one visible line.
            out += f"[{json.dumps(str(part))}]"
        first = False
    return out


def _allowed_keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()]


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose fields live at `loc` (used for 'did you mean' on unknown keys)."""
    model: Any = Settings
    for part in loc:
        if isinstance(model, type) and issubclass(model, BaseModel):
            field = next(
                (f for n, f in model.model_fields.items() if (f.alias or n) == part or n == part),
                None,
            )
            if field is None:
                return None
            model = field.annotation
        else:
            model = _inner(model)
        model = _unwrap(model)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        return models[0] if models else (args[0] if args else tp)
    if origin is Annotated:
        return _unwrap(typing.get_args(tp)[0])
    return tp


def _inner(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is dict and len(args) == 2:
        return args[1]
    if origin in (tuple, list) and args:
        return args[0]
    return None


def _problem_from_error(err: dict[str, Any]) -> Problem:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "literal["))))
    # pydantic adds the union member / tagged choice to loc; drop non-path noise.
    loc = tuple(p for p in loc if p not in ("str", "tuple[int, ...]", "int", "tuple[str, ...]"))
    if loc and loc[-1] == "[key]":
        # A bad mapping key: pydantic reports it at `<key>.[key]`; the key itself is the value.
        loc = loc[:-1]
        if err["type"] != "extra_forbidden":
            return Problem(key=config_key(loc), value=_MISSING, message="key " + _problem_from_error({**err, "loc": loc}).message)
    loc = tuple(p for p in loc if not (isinstance(p, str) and (p.startswith("function-") or p.startswith("tuple["))))
    key = config_key(loc)
    kind = err["type"]
    value = err.get("input", _MISSING)
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = _allowed_keys(parent) if parent else []
        hint = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        msg = "unknown key"
        if hint:
            msg += f"; did you mean '{hint[0]}'?"
        if allowed:
            msg += f" (allowed here: {', '.join(allowed)})"
        return Problem(key=key, value=_MISSING, message=msg)
    if kind == "missing":
        return Problem(key=key, value=_MISSING, message="is required")
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    ctx = err.get("ctx") or {}
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        msg = {
            "greater_than_equal": f"must be at least {ctx.get('ge')}",
            "less_than_equal": f"must be at most {ctx.get('le')}",
            "greater_than": f"must be greater than {ctx.get('gt')}",
            "less_than": f"must be less than {ctx.get('lt')}",
        }[kind]
    elif kind == "literal_error":
        msg = f"must be one of {ctx.get('expected')}"
    elif kind in ("int_parsing", "int_type", "int_from_float"):
        msg = "must be a whole number"
    elif kind in ("bool_parsing", "bool_type"):
        msg = "must be true or false"
    elif kind in ("string_type",):
        msg = "must be a string"
    elif kind in ("dict_type", "model_type", "model_attributes_type"):
        msg = "must be a mapping of keys to values"
    elif kind in ("tuple_type", "list_type"):
        msg = "must be a list"
    elif kind == "string_too_long":
        msg = f"must be at most {ctx.get('max_length')} characters"
    elif kind == "string_too_short":
        msg = f"must be at least {ctx.get('min_length')} characters"
    return Problem(key=key, value=value, message=msg)


def _dedupe(problems: list[Problem], by_message: bool = False) -> list[Problem]:
    """Drop repeats: pydantic reports one bad value once per union member (same key), while
    cross-field rules may rightly report two different problems of one key (by_message)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for p in problems:
        mark = (p.key, p.message if by_message else "")
        if mark in seen:
            continue
        seen.add(mark)
        out.append(p)
    return out


SECRET_FIELDS = ("privateKey",)
"""Keys whose value is never shown in an error, whether or not the stack marked them secret."""


def _hide_secrets(problems: list[Problem], secret_keys: Iterable[str]) -> list[Problem]:
    """Show `[secret]` instead of any value under a key the stack holds as a secret."""
    roots = [f"{NAMESPACE}:{k}" for k in secret_keys]
    out = []
    for p in problems:
        secret = any(p.key == r or p.key.startswith((r + ".", r + "[")) for r in roots) or any(
            part.split("[")[0] in SECRET_FIELDS for part in p.key.split(":", 1)[-1].split(".")
        )
        if secret and p.value is not _MISSING:
            p = Problem(key=p.key, value=SecretStr("hidden"), message=p.message)
        out.append(p)
    return out


# --------------------------------------------------------------------------- secrets anywhere
SECRET_CAPABLE = (
    "kubernetes.context", "kubernetes.kubeconfig", "kubernetes.version",
    "ssh.user", "ssh.port", "ssh.privateKey",
    "nodes[*].address", "nodes[*].user", "nodes[*].port", "nodes[*].hostKey",
)
"""Keys whose value may be a secret: they reach only the Kubernetes provider and the SSH
connection, which Pulumi keeps secret. Every other value becomes part of a resource name, a node
label, a ConfigMap, the Helm values or the plan, where a secret cannot stay secret."""

_OFFLINE_STAND_INS: dict[str, Any] = {
    "ssh.port": 22,
    "nodes[*].port": 22,
    "nodes[*].hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
}
"""Offline a `secure:` value is not decrypted: where its placeholder cannot pass the field's check,
this valid stand-in does (the connection it reaches is a secret, shown as [secret])."""


def _path_shape(path: tuple[Any, ...]) -> str:
    return ".".join("[*]" if isinstance(p, int) else str(p) for p in path).replace(".[*]", "[*]")


def _is_placeholder(value: Any) -> bool:
    from .safe_input import SECRET_PLACEHOLDER_PREFIX

    return isinstance(value, str) and value.startswith(SECRET_PLACEHOLDER_PREFIX)


def _has_placeholder(value: Any) -> bool:
    if isinstance(value, dict):
        return any(_has_placeholder(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_placeholder(v) for v in value)
    return _is_placeholder(value)


def _secret_leaves(value: Any, path: tuple[Any, ...], exact: bool) -> Iterable[tuple[tuple[Any, ...], Any]]:
    """(path, value) of each secret part of a secret top-level value: offline (exact) only the
    placeholders of `secure:` values, else every leaf (the engine marks the whole key secret)."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _secret_leaves(v, (*path, k), exact)
        if not value and not exact:
            yield path, value
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _secret_leaves(v, (*path, i), exact)
        if not value and not exact:
            yield path, value
    elif not exact or _is_placeholder(value):
        yield path, value


def _replace_at(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace_at(value[head], rest, new)}
    out = list(value)
    out[head] = _replace_at(out[head], rest, new)
    return out


def _secret_policy(
    raw: dict[str, Any], secret_keys: Iterable[str], secret_paths: dict[str, list[tuple[Any, ...]]] | None
) -> tuple[dict[str, Any], list[Problem], frozenset[str]]:
    """Refuse secrets where they cannot stay secret; offline, put stand-ins where placeholders
    cannot pass a field's check. Returns (raw to validate, problems, secret key shapes)."""
    problems: list[Problem] = []
    shapes: set[str] = set()
    out = dict(raw)
    for top in sorted(set(secret_keys) & set(raw)):
        value = raw[top]
        if _has_placeholder(value):
            leaves = list(_secret_leaves(value, (top,), exact=True))
        elif secret_paths is not None and top in secret_paths:
            leaves = [(p, None) for p in secret_paths[top]]
        else:
            leaves = list(_secret_leaves(value, (top,), exact=False))
        for path, leaf in leaves:
            shape = _path_shape(path)
            if shape in SECRET_CAPABLE:
                shapes.add(shape)
                if shape in _OFFLINE_STAND_INS and _is_placeholder(leaf):
                    out[top] = _replace_at(out[top], path[1:], _OFFLINE_STAND_INS[shape])
                continue
            if any(shape.startswith(c + ".") or shape.startswith(c + "[") for c in SECRET_CAPABLE):
                continue  # inside a secret-capable value (a list given for privateKey): its own check says what is wrong
            inner = [c for c in SECRET_CAPABLE if c.startswith(shape + ".") or c.startswith(shape + "[")]
            if inner and _is_placeholder(leaf):
                problems.append(Problem(
                    key=config_key(path), value=SecretStr("hidden"),
                    message=(
                        "is one secret as a whole, which the offline plan cannot read; set only its secret "
                        f"parts with --secret --path (e.g. {NAMESPACE}:{inner[-1].replace('[*]', '[0]')})"
                    ),
                ))
                continue
            problems.append(Problem(
                key=config_key(path), value=SecretStr("hidden"),
                message=(
                    "is a secret, but this value becomes part of resource names, node labels, ConfigMaps "
                    "or the Helm values, where Pulumi cannot keep it secret; set it without --secret "
                    f"(secrets are accepted for: {', '.join(SECRET_CAPABLE)})"
                ),
            ))
    return out, problems, frozenset(shapes)


def load_settings(
    raw: dict[str, Any],
    secret_keys: Iterable[str] | None = None,
    *,
    secret_paths: dict[str, list[tuple[Any, ...]]] | None = None,
    other_keys: Iterable[str] = (),
) -> Settings:
    """Validate the raw `gpu-stack:*` config (top-level key -> value) into Settings.

    Raises SettingsError naming every bad key; nothing else is raised for bad input. Values of
    `secret_keys` (top-level keys set with `--secret`) and of SECRET_FIELDS show as `[secret]`.
    When the program passes `secret_keys`, a private key outside them (plain text in the stack
    file, so in git) is refused, and so is a secret outside SECRET_CAPABLE. `secret_paths`
    (top-level key -> the paths of its `secure:` values, read from the stack file) narrows a secret
    key to those paths. `other_keys` are the stack's config keys outside the namespace: one that
    looks like a misspelt `gpu-stack:` key is refused with a did-you-mean.
    """
    raw, secret_problems, secret_shapes = _secret_policy(raw, secret_keys or (), secret_paths)
    problems = namespace_problems(other_keys) + secret_problems
    try:
        settings = _load_settings(raw)
    except SettingsError as exc:
        raise SettingsError(_hide_secrets(problems + exc.problems, secret_keys or ())) from None
    if problems:
        raise SettingsError(_hide_secrets(problems, secret_keys or ()))
    settings._secret_shapes = secret_shapes
    if secret_keys is not None and settings.ssh.private_key is not None and "ssh" not in set(secret_keys):
        raise SettingsError([Problem(
            key=config_key(("ssh", "privateKey")),
            value=SecretStr("hidden"),
            message=(
                "is stored in plain text in the stack file; set it as a secret: "
                "pulumi config set --secret --path 'gpu-stack:ssh.privateKey' < key"
            ),
        )])
    return settings


def namespace_problems(keys: Iterable[str]) -> list[Problem]:
    """Config keys of another namespace that look like this project's (`gpu_stack:nodes`,
    `GPU-Stack:nodes`, `gpu-stak:nodes`): the stack would silently plan without them."""
    out = []
    for full in keys:
        ns, sep, short = str(full).partition(":")
        if not sep or ns == NAMESPACE:
            continue
        folded = ns.lower().replace("_", "-").replace(" ", "-")
        close = folded == NAMESPACE or difflib.SequenceMatcher(None, folded, NAMESPACE).ratio() >= 0.8
        if not close:
            continue
        hint = short if short in TOP_LEVEL_KEYS else next(iter(difflib.get_close_matches(short, TOP_LEVEL_KEYS, n=1, cutoff=0.6)), short)
        out.append(Problem(
            key=str(full), value=_MISSING,
            message=f"is in the config namespace {ns!r}, which this project does not read; did you mean '{NAMESPACE}:{hint}'?",
        ))
    return out


def _load_settings(raw: dict[str, Any]) -> Settings:
    problems: list[Problem] = []
    for key in raw:
        if key not in TOP_LEVEL_KEYS:
            hint = difflib.get_close_matches(key, TOP_LEVEL_KEYS, n=1, cutoff=0.6)
            msg = "unknown key" + (f"; did you mean '{NAMESPACE}:{hint[0]}'?" if hint else "")
            msg += f" (allowed: {', '.join(TOP_LEVEL_KEYS)})"
            problems.append(Problem(key=f"{NAMESPACE}:{key}", value=_MISSING, message=msg))
    known = {k: v for k, v in raw.items() if k in TOP_LEVEL_KEYS}
    try:
        settings = Settings.model_validate(known)
    except ValidationError as exc:
        problems.extend(_problem_from_error(e) for e in exc.errors())
        raise SettingsError(_dedupe(problems)) from None
    if problems:
        raise SettingsError(problems)
    from .checks import check_settings

    problems = check_settings(settings)
    if problems:
        raise SettingsError(_dedupe(problems, by_message=True))
    return settings
