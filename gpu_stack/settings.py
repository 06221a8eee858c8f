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
import re
import types
import typing
from typing import Annotated, Any, Iterable, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
)
from pydantic.alias_generators import to_camel

NAMESPACE = "gpu-stack"

# Kubernetes label values (and device-plugin config keys, which double as label values).
LABEL_VALUE_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)$")
# RFC 1123 subdomain: node names, namespaces are stricter (label) but we check them separately.
DNS_SUBDOMAIN_RE = re.compile(
    r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$"
)
DNS_LABEL_RE = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")
# A host for SSH: a DNS name, an IPv4 address or a bracket-less IPv6 address.
HOST_RE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?|[0-9A-Fa-f:.]{2,45})$")
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
    if not LABEL_VALUE_RE.match(value):
        raise ValueError(
            "must be a Kubernetes label value: at most 63 characters of letters, digits, "
            "'.', '_' and '-', beginning and ending with a letter or digit"
        )
    return value


def _dns_label(value: str) -> str:
    if not DNS_LABEL_RE.match(value):
        raise ValueError(
            "must be a DNS-1123 label: at most 63 lowercase letters, digits and '-', "
            "beginning and ending with a letter or digit"
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

    context: str | None = None
    """kubeconfig context; None uses the current context (or the provider's own config)."""
    kubeconfig: str | None = None
    """Path to a kubeconfig file, or its content (set it with --secret); None uses KUBECONFIG /
    ~/.kube/config. The provider always receives it as a Pulumi secret."""
    version: Literal["1.29", "1.30", "1.31", "1.32", "1.33", "1.34"] = "1.31"
    """Kubernetes minor version the manifests are validated against."""


# --------------------------------------------------------------------------- operator
class OperatorSettings(_Model):
    """The GPU Operator Helm release."""

    namespace: str = "gpu-operator"
    release_name: str = "gpu-operator"
    chart_version: Literal["v25.10.1"] = CHART_VERSION
    repository: str = CHART_REPOSITORY
    timeout_seconds: int = Field(900, ge=600, le=3600)
    """Helm wait timeout; the chart's hooks and DaemonSets need several minutes."""
    protect: bool = False
    """Pulumi `protect` on the operator namespace and release (set it in production)."""
    node_feature_discovery: bool = True
    """Deploy NFD with the operator (false when the cluster already runs NFD)."""

    @field_validator("namespace", "release_name")
    @classmethod
    def _names(cls, v: str) -> str:
        return _dns_label(v)

    @field_validator("repository")
    @classmethod
    def _https(cls, v: str) -> str:
        if not re.match(r"^(https://|oci://)[^\s'\"`$;]+$", v):
            raise ValueError("must be an https:// or oci:// chart repository URL")
        return v


class DriverSettings(_Model):
    """Where the NVIDIA driver lives."""

    placement: Literal["host", "operator"] = "operator"
    """host: preinstalled on the node (checked over SSH); operator: the chart's driver DaemonSet."""
    version: str = "580.105.08"
    """Driver version the operator installs (placement=operator only)."""

    @field_validator("version")
    @classmethod
    def _version(cls, v: str) -> str:
        if not re.match(r"^[0-9]+(\.[0-9]+){1,2}$", v):
            raise ValueError("must be a driver version such as 580.105.08")
        return v


class ToolkitSettings(_Model):
    """Where the NVIDIA Container Toolkit lives."""

    placement: Literal["host", "operator"] = "operator"
    """host: installed over SSH with the node's package manager; operator: the chart's toolkit DaemonSet."""
    version: Literal["1.18.1"] = TOOLKIT_VERSION


# --------------------------------------------------------------------------- nodes
class SshSettings(_Model):
    """Stack-wide SSH defaults for node preparation (each node may override user/port)."""

    user: str = "root"
    port: int = Field(22, ge=1, le=65535)
    private_key: SecretStr | None = None
    """The private key, only ever as a Pulumi secret (`pulumi config set --secret --path gpu-stack:ssh.privateKey`)."""

    @field_validator("user")
    @classmethod
    def _user(cls, v: str) -> str:
        if not POSIX_USER_RE.match(v):
            raise ValueError("must be a POSIX user name: lowercase letters, digits, '_' and '-', at most 32")
        return v


class GpuSpec(_Model):
    model: str = Field(min_length=1, max_length=64)
    """GPU model as the catalog in config/gpu-models.yaml names it (e.g. H100-80GB, L4, A100-40GB)."""
    count: int = Field(ge=1, le=16)

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        # It reaches the node script and the plan: no quotes, `$`, `;`, newlines or other shell syntax.
        if not GPU_MODEL_RE.match(v):
            raise ValueError(
                "must be a GPU model name such as L4, H100-80GB or 'NVIDIA H100 NVL': letters, digits, "
                "spaces, '.', '_', '+' and '-'"
            )
        return v


Runtime = Literal["containerd", "docker", "k3s", "rke2"]


class NodeSettings(_Model):
    """One GPU node of the cluster."""

    name: str
    """The Kubernetes node name (metadata.name)."""
    address: str | None = None
    """SSH address; required when the driver or toolkit lives on the host."""
    user: str | None = None
    port: int | None = Field(None, ge=1, le=65535)
    host_key: str | None = None
    """Pin the node's SSH host key (`ssh-ed25519 AAAA...`, from /etc/ssh/ssh_host_ed25519_key.pub);
    None: the SSH connection does not check the host key at all (pulumi-command's behaviour)."""
    gpu: GpuSpec
    runtime: Runtime = "containerd"
    sharing: str | None = None
    """Sharing profile key for this node (label nvidia.com/device-plugin.config); None: the cluster default."""
    mig: str | None = None
    """MIG config name for this node (label nvidia.com/mig.config); None: leave MIG as it is."""

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not DNS_SUBDOMAIN_RE.match(v) or len(v) > 253:
            raise ValueError(
                "must be a Kubernetes node name: lowercase letters, digits, '-' and '.', at most 253"
            )
        return v

    @field_validator("address")
    @classmethod
    def _address(cls, v: str | None) -> str | None:
        if v is not None and not HOST_RE.match(v):
            raise ValueError("must be a host name or an IP address")
        return v

    @field_validator("user")
    @classmethod
    def _user(cls, v: str | None) -> str | None:
        if v is not None and not POSIX_USER_RE.match(v):
            raise ValueError("must be a POSIX user name: lowercase letters, digits, '_' and '-', at most 32")
        return v

    @field_validator("host_key")
    @classmethod
    def _host_key(cls, v: str | None) -> str | None:
        if v is not None and not re.match(
            r"^(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp256|ecdsa-sha2-nistp384|ecdsa-sha2-nistp521) [A-Za-z0-9+/]+={0,3}$",
            v,
        ):
            raise ValueError("must be an OpenSSH public host key: '<type> <base64>' (e.g. ssh-ed25519 AAAA...)")
        return v

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

    name: str = Field(max_length=63)
    replicas: int = Field(ge=2, le=1024)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not RESOURCE_NAME_RE.match(v):
            raise ValueError(
                "must be nvidia.com/gpu or a MIG resource nvidia.com/mig-<N>g.<M>gb (e.g. nvidia.com/mig-1g.10gb)"
            )
        return v


class SharingProfile(_Model):
    """A device-plugin sharing config: one key of the sharing ConfigMap (`sharing.profiles.<key>`)."""

    mode: SharingMode = "time-slicing"
    """time-slicing, mps, or none (a profile that turns sharing off on the nodes that select it)."""
    replicas: int | None = Field(None, ge=2, le=1024)
    """Replicas of every physical GPU (nvidia.com/gpu); omit when `resources` lists them."""
    rename_by_default: bool = False
    """Advertise `<resource>.shared` instead of `<resource>`."""
    fail_requests_greater_than_one: bool = False
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
    replicas: int = Field(4, ge=2, le=1024)
    """Replicas of every GPU (nvidia.com/gpu) under the default profile. When `resources` is set
    and this is not, only `resources` are shared."""
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    resources: tuple[SharedResource, ...] = ()
    profiles: dict[str, SharingProfile] = Field(default_factory=dict)
    """Extra named profiles a node selects with `nodes[i].sharing` (keys are label values)."""

    @field_validator("profiles")
    @classmethod
    def _keys(cls, v: dict[str, Any]) -> dict[str, Any]:
        return _profile_names(v)


# --------------------------------------------------------------------------- MIG
class MigDeviceGroup(BaseModel):
    """One entry of a mig-parted config, in mig-parted's own key names."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, use_attribute_docstrings=True)

    devices: Literal["all"] | tuple[Annotated[int, Field(ge=0, le=15)], ...] = "all"
    """`all` or GPU indices on the node."""
    mig_enabled: bool = Field(alias="mig-enabled")
    mig_devices: dict[str, Annotated[int, Field(ge=0, le=7)]] = Field(default_factory=dict, alias="mig-devices")
    """MIG profile -> instances per GPU, e.g. {"1g.10gb": 2, "2g.20gb": 1}; only when mig-enabled."""
    device_filter: str | tuple[str, ...] | None = Field(None, alias="device-filter")
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
            if not MIG_PROFILE_RE.match(name):
                raise ValueError(f"{name!r} is not a MIG profile name such as 1g.10gb, 3g.40gb or 1g.10gb+me")
        return v

    @field_validator("device_filter")
    @classmethod
    def _filter(cls, v: Any) -> Any:
        ids = (v,) if isinstance(v, str) else (v or ())
        if v is not None and not ids:
            raise ValueError("must be a PCI device id such as 0x233510DE or a non-empty list of them")
        for item in ids:
            if not PCI_DEVICE_ID_RE.match(item):
                raise ValueError(f"{item!r} is not a PCI device id such as 0x233510DE (device then vendor)")
        return v


class MigManagerSettings(_Model):
    enabled: bool = True
    with_reboot: bool = False
    """Set WITH_REBOOT=true for clouds that need a reboot to change MIG mode."""


class MigSettings(_Model):
    """MIG strategy and custom mig-parted configs."""

    strategy: Literal["none", "single", "mixed"] = "single"
    manager: MigManagerSettings = MigManagerSettings()
    profiles: dict[str, tuple[MigDeviceGroup, ...]] = Field(default_factory=dict)
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

    source_labels: tuple[str, ...] | None = None
    separator: str | None = None
    target_label: str | None = None
    regex: str | None = None
    modulus: int | None = Field(None, ge=1)
    replacement: str | None = None
    action: Literal[
        "replace", "keep", "drop", "hashmod", "labelmap", "labeldrop", "labelkeep",
        "lowercase", "uppercase", "keepequal", "dropequal",
    ] = "replace"

    @field_validator("source_labels")
    @classmethod
    def _source_labels(cls, v: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for label in v or ():
            if not re.match(r"^[a-zA-Z_][a-zA-Z0-9_]*$", label):
                raise ValueError(f"{label!r} is not a Prometheus label name (letters, digits, '_')")
        return v


class ServiceMonitorSettings(_Model):
    """The DCGM exporter's ServiceMonitor (created only where the Prometheus Operator CRDs exist)."""

    enabled: bool = False
    interval: str = "15s"
    honor_labels: bool = False
    additional_labels: dict[str, str] = Field(default_factory=dict)
    """Labels your Prometheus selects ServiceMonitors by, e.g. `release: kube-prometheus-stack`."""
    relabelings: tuple[Relabeling, ...] = ()

    @field_validator("interval")
    @classmethod
    def _interval(cls, v: str) -> str:
        if not DURATION_RE.match(v) or v == "":
            raise ValueError("must be a Prometheus duration such as 15s, 1m or 1m30s")
        return v

    @field_validator("additional_labels")
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not re.match(r"^([a-z0-9]([a-z0-9.-]*[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$", key):
                raise ValueError(f"label key {key!r} is not a valid Kubernetes label key")
            if value != "":
                try:
                    _label_value(value)
                except ValueError as exc:
                    raise ValueError(f"label {key!r} value {value!r} {exc}") from None
        return v


class DcgmExporterSettings(_Model):
    enabled: bool = True
    service_monitor: ServiceMonitorSettings = ServiceMonitorSettings()
    metrics: str | None = None
    """Custom metric list in dcgm-exporter's CSV format (`FIELD, type, help` per line); None: the exporter's defaults."""


# --------------------------------------------------------------------------- validation
class ValidationImages(_Model):
    cuda: str = "nvcr.io/nvidia/k8s/cuda-sample:vectoradd-cuda12.5.0"
    """Runs the CUDA vectorAdd sample (bash and /cuda-samples/vectorAdd): the smoke Job and the shared-GPU pods."""
    toolbox: str = "nvcr.io/nvidia/cuda:12.5.0-base-ubuntu22.04"
    """Runs the MIG-device and metrics payloads (bash, coreutils; nvidia-smi when a GPU is attached)."""
    kubectl: str = "registry.k8s.io/kubectl:v1.31.4"
    """Reads node status through the API for the capacity and MIG-state checks (bash and kubectl)."""

    @field_validator("cuda", "toolbox", "kubectl")
    @classmethod
    def _image(cls, v: str) -> str:
        if not IMAGE_RE.match(v):
            raise ValueError("must be a container image reference (registry/name:tag or @sha256:...)")
        return v


class ValidationSettings(_Model):
    enabled: bool = True
    namespace: str = "gpu-validation"
    timeout_seconds: int = Field(600, ge=60, le=7200)
    """How long each validation Job may run (activeDeadlineSeconds); `pulumi up` waits 60 s more."""
    ttl_seconds_after_finished: int = Field(86400, ge=60, le=2592000)
    """How long a finished Job (and its pods' logs) stays in the cluster before Kubernetes deletes it."""
    max_sharing_pods: int = Field(64, ge=2, le=256)
    """At most this many concurrent pods per shared node (R x G is capped here; mind the node's pod limit)."""
    images: ValidationImages = ValidationImages()

    _ns = field_validator("namespace")(classmethod(lambda cls, v: _dns_label(v)))


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
        shown = "" if self.value is _MISSING else f" = {_show(self.value)}"
        return f"{self.key}{shown}: {self.message}"


_MISSING = object()


def _show(value: Any) -> str:
    if isinstance(value, SecretStr):
        return "[secret]"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


class SettingsError(Exception):
    """A bad stack config: every problem found, each naming its key."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = [p.render() for p in problems]
        header = "invalid stack config" if len(lines) == 1 else f"invalid stack config ({len(lines)} problems)"
        super().__init__(header + ":\n  " + "\n  ".join(lines))


def config_key(loc: tuple[Any, ...]) -> str:
    """`('sharing', 'profiles', 'big', 'replicas')` -> `gpu-stack:sharing.profiles.big.replicas`."""
    out = NAMESPACE + ":"
    first = True
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.match(r"^[A-Za-z_][A-Za-z0-9_-]*$", str(part)):
            out += ("" if first else ".") + str(part)
        else:
            out += f'["{part}"]'
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


def load_settings(raw: dict[str, Any], secret_keys: Iterable[str] | None = None) -> Settings:
    """Validate the raw `gpu-stack:*` config (top-level key -> value) into Settings.

    Raises SettingsError naming every bad key; nothing else is raised for bad input. Values of
    `secret_keys` (top-level keys set with `--secret`) and of SECRET_FIELDS show as `[secret]`.
    When the program passes `secret_keys`, a private key outside them (plain text in the stack
    file, so in git) is refused.
    """
    try:
        settings = _load_settings(raw)
    except SettingsError as exc:
        raise SettingsError(_hide_secrets(exc.problems, secret_keys or ())) from None
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
