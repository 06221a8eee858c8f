"""Node preparation over SSH, as data: the command string each node gets, and its triggers.

The script is a real file (config/node-scripts/node-prep.sh). Per node, shell-quoted variable
assignments are inserted below its marker line. `remote.Command` sends the script as the
command's stdin and a short POSIX `sh` wrapper as its command (`wrapper_string`): the wrapper
saves the script to a temporary file, runs it with bash as root (or through `sudo -n`) under GNU
`timeout`, keeps its output in a log on the node, and on failure prints only the failed step and
the log's last lines. pulumi-command puts the command string and everything printed into its
error, so the 16 KB script stays out of the error and so does a long package-manager log.
No Pulumi imports here; components/node_preparation.py turns these into resources.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from .capacity import NodeFacts, node_facts
from .config import NodeSettings, Settings, config_key

SCRIPT_PATH = Path(__file__).resolve().parents[1] / "config" / "node-scripts" / "node-prep.sh"
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
DELETE_NOTE = (
    "gpu-stack: node preparation left the stack; the NVIDIA Container Toolkit and the runtime's "
    "nvidia entry stay on this host (running GPU pods use them, removing them restarts the runtime). "
    "To remove them: drain the node, remove the nvidia runtime from the runtime config, restart the "
    "runtime, then remove the toolkit packages."
)
_MEMORY_WORD = re.compile(r"^[0-9]+gb$", re.IGNORECASE)


@dataclass(frozen=True)
class NodeCommand:
    """Everything one node's `remote.Command` needs, except the private key."""

    node: str
    host: str
    user: str
    port: int
    host_key: str | None
    values: dict[str, str]
    script: str
    """The rendered bash script (values inserted)."""
    create: str
    """The command string sent over SSH (POSIX sh; runs the script from stdin with bash as root)."""
    delete: str
    triggers: list[str]
    stdin: str = ""
    """What the command reads on stdin: the rendered script."""


def script_text() -> str:
    return SCRIPT_PATH.read_text()


def script_hash(text: str | None = None) -> str:
    """sha256 of the static script: a change to the file re-runs every node's preparation."""
    return hashlib.sha256((script_text() if text is None else text).encode()).hexdigest()


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


def _catalog_model(model: str):  # -> gpu_models.GpuModel | None
    try:
        from .gpu_models import catalog
    except ImportError:  # the catalog module is optional for node preparation
        return None
    return catalog().lookup(model)


def phases_for(settings: Settings) -> tuple[str, ...]:
    """preflight always; toolkit and runtime when the toolkit lives on the host (whether the
    driver is there too or comes from the GPU Operator)."""
    if settings.toolkit.placement == "host":
        return PHASES
    return ("preflight",)


def node_values(settings: Settings, index: int, node: NodeSettings, known: Any = None) -> dict[str, str]:
    names = accepted_gpu_names(node.gpu.model, known)
    return {
        "GPU_STACK_NODE": node.name,
        "GPU_STACK_PHASES": " ".join(phases_for(settings)),
        "GPU_STACK_CONFIG_KEY": config_key(("nodes", index, "gpu")),
        "GPU_STACK_EXPECT_MODEL": node.gpu.model,
        "GPU_STACK_EXPECT_NAMES": "\n".join(names.names),
        "GPU_STACK_NAME_MATCH": names.match,
        "GPU_STACK_EXPECT_COUNT": str(node.gpu.count),
        "GPU_STACK_RUNTIME": node.runtime,
        "GPU_STACK_TOOLKIT_VERSION": settings.toolkit.version,
        "GPU_STACK_DRIVER": settings.driver.placement,
        "GPU_STACK_CDI": "true" if settings.toolkit.cdi else "false",
        **toolkit_package_values(settings),
        "GPU_STACK_ACCEPT_ENVVAR": "true" if settings.toolkit.accept_envvar_when_unprivileged else "false",
    }


def toolkit_package_values(settings: Settings) -> dict[str, str]:
    """Where the toolkit phase takes the packages from; nothing when there is no toolkit phase."""
    if "toolkit" not in phases_for(settings):
        return {}
    pk = settings.toolkit.packages
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
    def of(cls, text: str) -> "ScriptTemplate":
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

    def command(self, values: Mapping[str, str]) -> tuple[str, str]:
        """(script, command_string(script)), quoting the static parts once for every node."""
        script = self.render(values)
        return script, _COMMAND_HEAD + shlex.quote(script) + _COMMAND_TAIL


def render_script(values: Mapping[str, str], text: str | None = None) -> str:
    """The static script with `NAME=<shell-quoted value>` lines inserted below its marker."""
    return ScriptTemplate.of(script_text() if text is None else text).render(values)


_COMMAND_HEAD = (
    'if [ "$(id -u)" -eq 0 ]; then set --; '
    "elif command -v sudo >/dev/null 2>&1; then set -- sudo -n --; "
    "else echo 'gpu-stack: the SSH user is not root and sudo is not installed' >&2; exit 1; fi; "
    'exec "$@" bash -c '
)
_COMMAND_TAIL = " gpu-stack-node-prep"


def command_string(script: str) -> str:
    """The one `sh` command line sent over SSH: run `script` with bash, as root or via `sudo -n`."""
    return _COMMAND_HEAD + shlex.quote(script) + _COMMAND_TAIL


TAIL_LINES = 20


def wrapper_string(node: str, timeout_seconds: int) -> str:
    """The command for one node: run the script arriving on stdin; on failure report the step and
    the last TAIL_LINES lines of its output (the whole log stays on the node)."""
    where = shlex.quote(node)
    return (
        'dir="${TMPDIR:-/tmp}/gpu-stack-node-prep.$$"; (umask 077 && mkdir "$dir") || exit 1; '
        'cat >"$dir/node-prep.sh" || exit 1; '
        'if [ "$(id -u)" -eq 0 ]; then set --; '
        "elif command -v sudo >/dev/null 2>&1; then set -- sudo -n --; "
        "else echo 'gpu-stack: the SSH user is not root and sudo is not installed' >&2; exit 1; fi; "
        f'if command -v timeout >/dev/null 2>&1; then set -- "$@" timeout -k 30 {int(timeout_seconds)}; fi; '
        '"$@" bash "$dir/node-prep.sh" >"$dir/out" 2>"$dir/log"; rc=$?; '
        'cat "$dir/out"; '
        'if [ "$rc" -eq 0 ]; then cat "$dir/log" >&2; rm -rf "$dir"; exit 0; fi; '
        "step=$(sed -n 's/^gpu-stack\\[.*\\]: step: //p' \"$dir/log\" | tail -n 1); "
        f'if [ "$rc" -eq 124 ]; then why="stopped after {int(timeout_seconds)}s (gpu-stack:ssh.timeoutSeconds)"; '
        'else why="exit $rc"; fi; '
        f'echo "gpu-stack: node preparation of {where} failed in step ${{step:-start}} ($why); '
        f'last {TAIL_LINES} lines (whole log on the node: $dir/log):" >&2; '
        f'tail -n {TAIL_LINES} "$dir/log" >&2; exit "$rc"'
    )


def delete_string() -> str:
    """What `pulumi destroy` runs on a node: it changes nothing and says what stays."""
    return f"echo {shlex.quote(DELETE_NOTE)}"


def node_commands(settings: Settings, nodes: Sequence[NodeFacts] | None = None) -> list[NodeCommand]:
    """One NodeCommand per node when the driver or toolkit lives on the host, else none.

    `nodes`: the stack's derived node facts (design.derive passes them; computed when omitted)."""
    if not settings.host_managed:
        return []
    facts = node_facts(settings) if nodes is None else nodes
    text = script_text()
    digest = script_hash(text)
    template = ScriptTemplate.of(text)
    delete = delete_string()
    out = []
    for fact in facts:
        node = fact.node
        values = node_values(settings, fact.index, node, fact.model)
        script = template.render(values)
        create = wrapper_string(node.name, settings.ssh.timeout_seconds)
        out.append(
            NodeCommand(
                node=node.name,
                host=node.address or node.name,
                user=node.user or settings.ssh.user,
                port=node.port or settings.ssh.port,
                host_key=node.host_key,
                values=values,
                script=script,
                create=create,
                delete=delete,
                triggers=[digest, json.dumps(values, sort_keys=True)],
                stdin=script,
            )
        )
    return out


def preflight_line(stdout: str | None) -> str | None:
    """The `GPU_STACK_PREFLIGHT {json}` line of a node's output (None when there is none)."""
    for line in (stdout or "").splitlines():
        if line.startswith(PREFLIGHT_PREFIX):
            return line
    return None


def preflight_report(stdout: str | None) -> dict | None:
    """The preflight line's JSON, parsed."""
    line = preflight_line(stdout)
    return None if line is None else json.loads(line[len(PREFLIGHT_PREFIX) :])

