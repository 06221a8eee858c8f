"""Node preparation over SSH, as data: what each node's `remote.CopyToRemote` and `remote.Command` get.

The script is a real file (config/node-scripts/node-prep.sh), copied unchanged to every node
(`REMOTE_PATH`, in the SSH user's home; the copy's state holds the file's hash, not its text).
Each node's command is one short line (`launch_string`): the script's own POSIX launcher with the
script's sha256, the time limit and the node's values as shell-quoted `NAME=value` words. The
launcher checks the copy, runs it with bash as root (or through `sudo -n`) under GNU `timeout`,
keeps the whole log on the node, and prints the report line and one summary line (on failure the
failed step and the log's last lines). What re-runs a node's preparation (docs/node-preparation.md):
a change of the script, of that node's values, of the host it runs on (`user@host:port`) or of its
pinned host key: the `triggers`; the SSH key, the agent and ssh.timeoutSeconds change only the
command's inputs, and an update runs `UPDATE_COMMAND`, which prepares nothing and prints the report
line the last run kept on the node. There is no delete command:
leaving the stack runs nothing on the host. A node's values hold nothing of another node (no list
index), so adding, removing or reordering nodes re-runs no other node. What every node shares
(phases, toolkit and driver choices, package source: `host_values`) is computed once per stack;
each node adds its own from its derived facts (`NodeFacts`, its catalog entry included).
No Pulumi imports here; components/node_preparation.py turns these into resources.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import NodeSettings
from ..config.cluster import DriverSettings, ToolkitSettings
from ..config.nodes import AGENT_FROM_ENV, SshSettings
from ..config.package_data import config_path, data_name
from ..config.safe_input import escape
from .capacity import NodeFacts

if TYPE_CHECKING:
    from ..config.gpu_models import GpuModel

SCRIPT_PATH = config_path("node-scripts", "node-prep.sh")
REMOTE_PATH = ".gpu-stack-node-prep.sh"
"""Where the script is copied: relative, so in the SSH user's home (the SFTP session's and the
command's starting directory); the launcher keeps its log beside it (.gpu-stack-node-prep.log)."""
PREFLIGHT_PATH = ".gpu-stack-node-prep.preflight"
"""Where the launcher keeps the last run's `GPU_STACK_PREFLIGHT` line, beside its log (the script's
path with `.preflight` for `.sh`): what `UPDATE_COMMAND` prints again."""
LAUNCH_FLAG = "--gpu-stack-launch"
UPDATE_COMMAND = (
    f"cat ./{PREFLIGHT_PATH} 2>/dev/null; "
    "echo 'gpu-stack: only the SSH key, the SSH agent or gpu-stack:ssh.timeoutSeconds changed; "
    "node preparation does not run again' >&2"
)
"""What an update of a node's command runs (pulumi-command runs `update`, or `create` when there is
none): a key rotation or a time-limit change must not prepare every node again. pulumi-command
1.2.1 replaces the command's stdout with the update's (remote/commandController.go Update starts
from the old outputs, remote/commandOutputs.go then sets the new run's stdout and stderr), so the
update prints the report line the last run kept on the node (PREFLIGHT_PATH): `nodePreflight` and
the one-OS check keep seeing each node. The message goes to stderr, which is what is logged."""
MARKER = "# @gpu-stack-values@"
PREFLIGHT_PREFIX = "GPU_STACK_PREFLIGHT "
PHASES = ("preflight", "toolkit", "runtime")
VARIABLES = (
    "GPU_STACK_NODE",
    "GPU_STACK_PHASES",
    "GPU_STACK_CONFIG_KEY",
    "GPU_STACK_EXPECT_MODEL",
    "GPU_STACK_EXPECT_NAMES",
    "GPU_STACK_NAME_MATCH",
    "GPU_STACK_EXPECT_COUNT",
    "GPU_STACK_RUNTIME",
    "GPU_STACK_TOOLKIT_VERSION",
    "GPU_STACK_DRIVER",
    "GPU_STACK_CDI",
    "GPU_STACK_TOOLKIT_SOURCE",
    "GPU_STACK_TOOLKIT_APT_URL",
    "GPU_STACK_TOOLKIT_RPM_URL",
    "GPU_STACK_TOOLKIT_KEY",
    "GPU_STACK_ACCEPT_ENVVAR",
)
NVIDIA_TOOLKIT_REPO = "https://nvidia.github.io/libnvidia-container"
"""NVIDIA's package repository of the toolkit (its install guide): apt, rpm and the signing key."""
NVIDIA_TOOLKIT_PACKAGES = {
    "GPU_STACK_TOOLKIT_APT_URL": f"{NVIDIA_TOOLKIT_REPO}/stable/deb/$(ARCH)",
    "GPU_STACK_TOOLKIT_RPM_URL": f"{NVIDIA_TOOLKIT_REPO}/stable/rpm/$basearch",
    "GPU_STACK_TOOLKIT_KEY": f"{NVIDIA_TOOLKIT_REPO}/gpgkey",
}
_MEMORY_WORD = re.compile(r"^[0-9]+gb$", re.IGNORECASE)


@dataclass(frozen=True)
class NodeCommand:
    """Everything one node's copy and command need, except the private key."""

    node: str
    host: str
    user: str
    port: int
    host_key: str | None
    values: dict[str, str]
    create: str
    """The command string sent over SSH (POSIX sh): the copied script's launcher with this node's values."""
    update: str
    triggers: list[str]
    """[script sha256, sha256 of this node's values, `user@host:port`, the pinned host key's
    fingerprint (`host_key_trigger`)]: a change of any replaces the command (it runs on the node
    again, on the new host for a new address; a new host key is taken as a rebuilt host)."""
    source: str
    """The script, relative to the project directory (the copy's FileAsset)."""
    remote_path: str
    copy_triggers: list[str]
    """The copy is made again whenever the command re-runs (the same triggers)."""


HOST_KEY_UNPINNED = "hostKey unpinned"


def host_key_trigger(host_key: str | None) -> str:
    """The node's trigger for its pinned host key: `hostKey SHA256:<base64>`, the fingerprint
    `ssh-keygen -lf` and `ssh` print for it (sha256 of the key blob, unpadded base64), or
    `HOST_KEY_UNPINNED`. A re-imaged host at the same address has a new host key: with it in the
    triggers, a new pin prepares the node again, as a new address does (preparation is idempotent,
    so a key rotated on an intact host costs one run that changes nothing)."""
    if host_key is None:
        return HOST_KEY_UNPINNED
    parts = host_key.split()
    try:
        blob = base64.b64decode(parts[1], validate=True)
    except (IndexError, ValueError, binascii.Error):
        blob = host_key.encode()  # not a key (an offline secret's placeholder): its text's digest
    return "hostKey SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def script_text() -> str:
    return SCRIPT_PATH.read_text()


def script_hash(text: str | None = None) -> str:
    """sha256 of the static script's bytes, as copied to the node (the launcher checks the copy
    against it): a change to the file re-runs every node's preparation."""
    return hashlib.sha256(SCRIPT_PATH.read_bytes() if text is None else text.encode()).hexdigest()


@dataclass(frozen=True)
class GpuNames:
    """What the preflight accepts as `nvidia-smi --query-gpu=name` for a declared model."""

    names: tuple[str, ...]
    match: str
    """exact: a GPU's name equals one of `names` (case-insensitive); words: every word of one of
    `names` appears among the GPU name's words (used for models the catalog does not know)."""


def accepted_gpu_names(model: str, known: Any = None) -> GpuNames:
    """The catalog's names for a model (config/gpu-models.yaml), matched exactly; for a model it
    does not know, the model's words minus the memory size ("H100-80GB" -> "H100"), matched by words.
    `known`: the model's catalog entry when the caller has it (looked up otherwise)."""
    known = known if known is not None else _catalog_model(model)
    if known is not None:
        return GpuNames(names=tuple(dict.fromkeys((known.name, *known.aliases))), match="exact")
    words = [w for w in re.split(r"[^A-Za-z0-9]+", model) if w and not _MEMORY_WORD.fullmatch(w)]
    return GpuNames(names=(" ".join(words) if words else model,), match="words")


def _catalog_model(model: str) -> GpuModel | None:
    try:
        from ..config.gpu_models import catalog
    except ImportError:  # the catalog module is optional for node preparation
        return None
    return catalog().lookup(model)


def phases_for(toolkit: ToolkitSettings) -> tuple[str, ...]:
    """preflight always; toolkit and runtime when the toolkit lives on the host (whether the
    driver is there too or comes from the GPU Operator)."""
    if toolkit.placement == "host":
        return PHASES
    return ("preflight",)


def host_values(toolkit: ToolkitSettings, driver: DriverSettings) -> dict[str, str]:
    """The values every node's script gets alike (phases, toolkit, driver, package source):
    computed once per stack, merged into each node's own by `node_values`."""
    phases = phases_for(toolkit)
    return {
        "GPU_STACK_PHASES": " ".join(phases),
        "GPU_STACK_TOOLKIT_VERSION": toolkit.version,
        "GPU_STACK_DRIVER": driver.placement,
        "GPU_STACK_CDI": "true" if toolkit.cdi else "false",
        **toolkit_package_values(toolkit, phases),
        "GPU_STACK_ACCEPT_ENVVAR": "true" if toolkit.accept_envvar_when_unprivileged else "false",
    }


def node_values(node: NodeSettings, shared: Mapping[str, str], known: Any = None) -> dict[str, str]:
    """What the script needs about one node, and nothing of any other (no list index: removing or
    reordering nodes leaves every other node's values, and so its triggers, as they are), in
    `VARIABLES` order; `shared`: `host_values` of the stack."""
    names = accepted_gpu_names(node.gpu.model, known)
    own = {
        "GPU_STACK_NODE": node.name,
        "GPU_STACK_EXPECT_MODEL": node.gpu.model,
        "GPU_STACK_EXPECT_NAMES": "\n".join(names.names),
        "GPU_STACK_NAME_MATCH": names.match,
        "GPU_STACK_EXPECT_COUNT": str(node.gpu.count),
        "GPU_STACK_RUNTIME": node.runtime,
    }
    merged = {**shared, **own}
    return {name: merged[name] for name in VARIABLES if name in merged}


def toolkit_package_values(toolkit: ToolkitSettings, phases: tuple[str, ...]) -> dict[str, str]:
    """Where the toolkit phase takes the packages from; nothing when there is no toolkit phase."""
    if "toolkit" not in phases:
        return {}
    pk = toolkit.packages
    if pk.source == "preinstalled":
        return {"GPU_STACK_TOOLKIT_SOURCE": "preinstalled"}
    if pk.source == "nvidia":
        return {"GPU_STACK_TOOLKIT_SOURCE": "nvidia", **NVIDIA_TOOLKIT_PACKAGES}
    given = {
        "GPU_STACK_TOOLKIT_APT_URL": pk.apt_url,
        "GPU_STACK_TOOLKIT_RPM_URL": pk.rpm_url,
        "GPU_STACK_TOOLKIT_KEY": pk.gpg_key,
    }
    return {"GPU_STACK_TOOLKIT_SOURCE": "mirror", **{k: v for k, v in given.items() if v is not None}}


@dataclass(frozen=True)
class ScriptTemplate:
    """The static script split once at its marker line, so each node costs only its own values."""

    head: str
    """Every line up to and including the marker line."""
    tail: str | None
    """Every line after it (None when the marker is the last line)."""

    @classmethod
    def of(cls, text: str) -> ScriptTemplate:
        lines = text.split("\n")
        at = [i for i, line in enumerate(lines) if line.startswith(MARKER)]
        if len(at) != 1:
            raise ValueError(f"{SCRIPT_PATH.name} must hold the marker line {MARKER!r} exactly once")
        rest = lines[at[0] + 1 :]
        return cls("\n".join(lines[: at[0] + 1]), "\n".join(rest) if rest else None)

    def assignments(self, values: Mapping[str, str]) -> list[str]:
        unknown = sorted(set(values) - set(VARIABLES))
        if unknown:
            raise ValueError(f"unknown script variables: {unknown}")
        return [f"{name}={shlex.quote(str(values[name]))}" for name in VARIABLES if name in values]

    def render(self, values: Mapping[str, str]) -> str:
        """The script with `NAME=<shell-quoted value>` lines inserted below its marker."""
        parts = [self.head, *self.assignments(values)]
        return "\n".join(parts if self.tail is None else [*parts, self.tail])


def render_script(values: Mapping[str, str], text: str | None = None) -> str:
    """The static script with `NAME=<shell-quoted value>` lines inserted below its marker."""
    return ScriptTemplate.of(script_text() if text is None else text).render(values)


def values_hash(values: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(dict(values), sort_keys=True).encode()).hexdigest()


def launch_string(values: Mapping[str, str], digest: str, timeout_seconds: int) -> str:
    """The command for one node: the copied script's launcher, its expected sha256, the time limit
    and the node's values (shell-quoted `NAME=value` words, in `VARIABLES` order)."""
    unknown = sorted(set(values) - set(VARIABLES))
    if unknown:
        raise ValueError(f"unknown script variables: {unknown}")
    words = [f"{name}={shlex.quote(str(values[name]))}" for name in VARIABLES if name in values]
    return " ".join(["exec sh", f"./{REMOTE_PATH}", LAUNCH_FLAG, digest, str(int(timeout_seconds)), *words])


def launch_values(create: str) -> dict[str, str]:
    """The node values a `launch_string` carries (for the diff); {} for another command."""
    try:
        words = shlex.split(create)
    except ValueError:
        return {}
    if LAUNCH_FLAG not in words:
        return {}
    return dict(w.split("=", 1) for w in words[words.index(LAUNCH_FLAG) + 3 :] if "=" in w)


def node_commands(
    nodes: Sequence[NodeFacts], toolkit: ToolkitSettings, driver: DriverSettings, ssh: SshSettings
) -> list[NodeCommand]:
    """One NodeCommand per node when the driver or toolkit lives on the host, else none.

    `nodes`: the stack's derived node facts (their catalog entries name the GPUs)."""
    if driver.placement != "host" and toolkit.placement != "host":  # Settings.host_managed
        return []
    shared = host_values(toolkit, driver)
    digest = script_hash()
    source = data_name(SCRIPT_PATH)  # config/node-scripts/node-prep.sh, in a clone and installed
    out = []
    for fact in nodes:
        node = fact.node
        values = node_values(node, shared, fact.model)
        host = node.address or node.name
        user = node.user or ssh.user
        port = node.port or ssh.port
        # the host it runs on is a trigger too: a node moved to another host is prepared there;
        # so is its pinned host key: a new one usually means the host was rebuilt
        triggers = [digest, values_hash(values), f"{user}@{host}:{port}", host_key_trigger(node.host_key)]
        out.append(
            NodeCommand(
                node=node.name,
                host=host,
                user=user,
                port=port,
                host_key=node.host_key,
                values=values,
                create=launch_string(values, digest, ssh.timeout_seconds),
                update=UPDATE_COMMAND,
                triggers=triggers,
                source=source,
                remote_path=REMOTE_PATH,
                copy_triggers=triggers,
            )
        )
    return out


def preflight_line(stdout: str | None) -> str | None:
    """The `GPU_STACK_PREFLIGHT {json}` line of a node's output (None when there is none)."""
    for line in (stdout or "").splitlines():
        if line.startswith(PREFLIGHT_PREFIX):
            return line
    return None


def preflight_report(stdout: str | None) -> dict[str, Any] | None:
    """The preflight line's JSON, parsed."""
    line = preflight_line(stdout)
    return None if line is None else json.loads(line[len(PREFLIGHT_PREFIX) :])


def os_tag(os_field: str) -> str:
    """The preflight's `os` ("ubuntu 22.04": os-release ID and VERSION_ID) as the operator tags the
    driver image with it (`ubuntu22.04`: nfd's system-os_release.ID and VERSION_ID, joined)."""
    return "".join(os_field.split())


def one_driver_os(driver: DriverSettings) -> bool:
    """Whether the GPU nodes must all run one OS: the operator's ClusterPolicy driver (one DaemonSet,
    its image tagged with the OS of the first GPU node the operator lists: gpu-operator v25.10.1
    controllers/object_controls.go kernelFullVersion and resolveDriverTag)."""
    return driver.placement == "operator"


SHOWN_NODES = 3
"""Nodes named per OS in the refusal (then how many more)."""


def mixed_os_problem(lines: Mapping[str, str | None]) -> str | None:
    """One line refusing operator-driver nodes whose preflight reports differ in OS (node -> its
    preflight line, `preflight_line`); None when they agree or report none."""
    by_os: dict[str, list[str]] = {}
    for node, line in lines.items():
        try:
            report = preflight_report(line)
        except ValueError:
            report = None
        found = report.get("os") if isinstance(report, dict) else None
        if isinstance(found, str) and os_tag(found):
            by_os.setdefault(os_tag(found), []).append(node)
    if len(by_os) <= 1:
        return None

    def some(nodes: list[str]) -> str:
        shown = ", ".join(sorted(nodes)[:SHOWN_NODES])
        return shown if len(nodes) <= SHOWN_NODES else f"{shown} and {len(nodes) - SHOWN_NODES} more"

    # What a node reports is shown escaped and short: it is text from the host, not from the config.
    seen = "; ".join(f"{escape(tag[:40])}: {some(nodes)}" for tag, nodes in sorted(by_os.items()))
    return (
        f"gpu-stack:driver.placement = 'operator', but the node preflight finds {len(by_os)} OSes on the GPU nodes "
        f"({seen}): the GPU Operator's ClusterPolicy driver supports one OS per cluster (one driver DaemonSet, its "
        "image tagged with the OS of the first GPU node, on every GPU node), so the nodes of the other OS would fail "
        "their driver install; the operator release was not installed. Use one OS per stack, a host driver "
        "(driver.placement: host), or NVIDIA's NVIDIADriver CRD (a driver per node pool, not managed by this stack)"
    )


def agent_auth(agent_socket_path: str | None) -> dict[str, str] | None:
    """The connection's authentication with an SSH agent: None without one (the private key
    authenticates); {} for `$SSH_AUTH_SOCK` (pulumi-command reads SSH_AUTH_SOCK where it runs, so the
    state names no path); else `{"agent_socket_path": path}`."""
    if agent_socket_path is None:
        return None
    return {} if agent_socket_path == AGENT_FROM_ENV else {"agent_socket_path": agent_socket_path}
