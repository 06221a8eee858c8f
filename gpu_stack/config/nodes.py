"""Settings of the GPU nodes and of the SSH connection that prepares them."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, SecretStr, ValidationInfo, field_validator

from .dra import Allocation
from .host_keys import check_ssh_public_key
from .safe_input import PlainStr, TextStr, WholeNumber, check_address
from .types import DNS_SUBDOMAIN_RE, GPU_MODEL_RE, ConfigModel, LabelValue, SshUser

AGENT_FROM_ENV = "$SSH_AUTH_SOCK"
_GENERIC_GPU_WORDS = frozenset({"nvidia", "gpu", "gpus", "tesla", "geforce", "quadro", "pcie", "sxm", "nvl", "rtx", "datacenter"})
_SIZE_WORD = re.compile(r"[0-9]+(?:gb|gib|g)", re.IGNORECASE)
AGENT_SOCKET_RE = re.compile(r"(?:/[A-Za-z0-9._+@-]+)+")
AGENT_SOCKET_LIMIT = 107
"""The longest Unix socket path (sun_path is 108 bytes with its NUL)."""
"""ssh.agentSocketPath's value for the agent that SSH_AUTH_SOCK names where Pulumi runs."""

# --------------------------------------------------------------------------- nodes
def _key_text(value: SecretStr) -> SecretStr:
    """A private key is text: lines of PEM or OpenSSH armour, no control or invisible character."""
    from pydantic import TypeAdapter

    TypeAdapter(TextStr).validate_python(value.get_secret_value())
    return value


class SshSettings(ConfigModel):
    """Stack-wide SSH defaults for node preparation (each node may override user/port)."""

    user: SshUser = "root"
    """SSH user of every node without `nodes[i].user` (root, or a user with passwordless sudo)."""
    port: WholeNumber = Field(22, ge=1, le=65535)
    """SSH port of every node without `nodes[i].port`."""
    private_key: Annotated[SecretStr, AfterValidator(_key_text)] | None = None
    """The private key, only ever as a Pulumi secret (`pulumi config set --secret --path gpu-stack:ssh.privateKey`).
    Not needed with `agentSocketPath`."""
    agent_socket_path: PlainStr | None = None
    """Authenticate with the keys of an SSH agent instead of `privateKey`: the agent's socket (an
    absolute path), or `$SSH_AUTH_SOCK` for the agent of whoever runs Pulumi (the connection then
    names no path: the command provider reads `SSH_AUTH_SOCK` itself, so a laptop and CI give the
    same state). The connection then holds no private key (in the state, four copies per node
    fewer). Refused together with `privateKey`."""
    @field_validator("agent_socket_path")
    @classmethod
    def _agent(cls, v: str | None) -> str | None:
        if v is None or v == AGENT_FROM_ENV:
            return v
        if not v.startswith("/") or not AGENT_SOCKET_RE.fullmatch(v) or re.search(r"/\.\.?(?:/|$)", v):
            raise ValueError(
                f"must be the agent socket's absolute path (no spaces, no '..') or '{AGENT_FROM_ENV}': letters, digits "
                "and '._+@-' between the slashes, no shell characters such as $ ; ` or quotes, no '.' part"
            )
        if len(v.encode()) > AGENT_SOCKET_LIMIT:
            raise ValueError(
                f"is {len(v.encode())} bytes: a Unix socket path is at most {AGENT_SOCKET_LIMIT} bytes "
                "(sun_path), so no agent can listen there; use a shorter path"
            )
        return v

    timeout_seconds: WholeNumber = Field(1200, ge=60, le=7200)
    """How long a node's preparation script may run (GNU `timeout` on the node) before it is
    stopped and reported as failed; a hung package install cannot block `pulumi up` for ever."""


class GpuSpec(ConfigModel):
    model: PlainStr = Field(min_length=1, max_length=64)
    """GPU model as the catalog in config/gpu-models.yaml names it (e.g. H100-80GB, L4, A100-40GB)."""
    count: WholeNumber = Field(ge=1, le=16)
    """Number of GPUs of the node (checked on the node by the preflight, expected by validation and alerts)."""

    @field_validator("model")
    @classmethod
    def _model(cls, v: str) -> str:
        # It reaches the node script and the plan: no quotes, `$`, `;`, newlines or other shell syntax.
        if not GPU_MODEL_RE.fullmatch(v):
            raise ValueError(
                "must be a GPU model name such as L4, H100-80GB or 'NVIDIA H100 NVL': letters, digits, "
                "spaces, '.', '_', '+' and '-'"
            )
        # The preflight matches a model the catalog does not know by its words: a model of only
        # vendor words and sizes ('NVIDIA', 'NVIDIA GPU 80GB') would accept every GPU.
        words = [w for w in re.split(r"[^A-Za-z0-9]+", v) if w]
        if not any(any(ch.isdigit() for ch in w) for w in words if w.lower() not in _GENERIC_GPU_WORDS and not _SIZE_WORD.fullmatch(w)):
            raise ValueError(
                "names no GPU model: without vendor words (NVIDIA, GPU, Tesla) and memory sizes nothing with a model "
                "number is left, so the node check would accept any GPU; give the model, such as H100-80GB, L4 or 'NVIDIA H100 NVL'"
            )
        return v


Runtime = Literal["containerd", "docker", "crio", "k3s", "rke2"]


class NodeSettings(ConfigModel):
    """One GPU node of the cluster."""

    name: PlainStr
    """The Kubernetes node name (metadata.name)."""
    address: PlainStr | None = None
    """SSH address; required when the driver or toolkit lives on the host."""
    user: SshUser | None = None
    """SSH user for this node; None: `ssh.user`."""
    port: WholeNumber | None = Field(None, ge=1, le=65535)
    """SSH port for this node; None: `ssh.port`."""
    host_key: PlainStr | None = None
    """Pin the node's SSH host key: the line of /etc/ssh/ssh_host_ed25519_key.pub (its comment is
    dropped) or the line `ssh-keyscan -t ed25519 <address>` prints (its host field, which must name
    this node's address or name, is dropped), kept as `<type> <base64>`; one key per line; ed25519
    or ECDSA (an ssh-rsa key, of any size, is refused: pinned, pulumi-command 1.2.1
    offers only SHA-1 ssh-rsa, which OpenSSH 8.8+ refuses); a changed key prepares the node again (a
    rebuilt host). None: the SSH connection does not check the host key at all (pulumi-command's
    behaviour)."""
    gpu: GpuSpec
    """The node's GPUs: catalog model and count."""
    runtime: Runtime = "containerd"
    """The node's container runtime (k3s, rke2: their embedded containerd), set up for the NVIDIA runtime."""
    sharing: LabelValue | None = None
    """Sharing profile key for this node (label nvidia.com/device-plugin.config); None: the cluster default."""
    allocation: Allocation | None = None
    """How this node's GPUs are allocated: devicePlugin (the operator's device plugin) or dra
    (ResourceClaims through NVIDIA's DRA driver; the device plugin is then off on the node).
    None: `dra.allocation`. A change moves the node in the drained waves of `dra.rollout`."""
    mig: LabelValue | None = None
    """MIG config name for this node (label nvidia.com/mig.config), set by the MIG rollout Job after
    a drain. None: whole GPUs; a MIG config the rollout set earlier is rolled back to all-disabled
    the same way, one set by anyone else is left as it is."""

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

    @field_validator("host_key")
    @classmethod
    def _host_key(cls, v: str | None, info: ValidationInfo) -> str | None:
        # A keyscan line's host field must name this node: its address (or its name), validated above.
        address, name, port = info.data.get("address"), info.data.get("name"), info.data.get("port")
        hosts = (address, name) if isinstance(address, str) and isinstance(name, str) else ()
        return None if v is None else check_ssh_public_key(v, hosts, (22,) if port is None else (port,))
