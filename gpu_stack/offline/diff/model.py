"""The diff's model: what changes, resource by resource, between two plans.

A `PlanDiff` holds one `ResourceChange` per created, updated, replaced or deleted resource, each
with its leaf-level `FieldChange`s; compute.py builds it, replace_rules.py decides update versus
replace, rollout.py and ../effects.py read it, text.py and markdown.py render it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..render import NOISE_KEYS

CREATE, UPDATE, REPLACE, DELETE = "create", "update", "replace", "delete"
ACTIONS = (CREATE, UPDATE, REPLACE, DELETE)
SYMBOLS = {CREATE: "+", UPDATE: "~", REPLACE: "+-", DELETE: "-"}

COMMAND = "command:remote:Command"
COPY = "command:remote:CopyToRemote"
CONFIGMAP = "kubernetes:core/v1:ConfigMap"
SECRET_TYPE = "kubernetes:core/v1:Secret"
JOB = "kubernetes:batch/v1:Job"
RELEASE = "kubernetes:helm.sh/v3:Release"
K8S_PROVIDER = "pulumi:providers:kubernetes"


class DiffError(Exception):
    """The plans cannot be compared (or one of them would leak a secret)."""


@dataclass(frozen=True)
class FieldChange:
    """One leaf that differs; `path` is dotted (`values.devicePlugin.config.name`, `data.default`)."""

    path: str
    old: Any
    new: Any

    @property
    def kind(self) -> str:
        if self.old is ABSENT:
            return "added"
        if self.new is ABSENT:
            return "removed"
        return "changed"


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class SecretValue:
    """A secret input's side of a change: never the value, only that there is one (and its fingerprint)."""

    fingerprint: str

    def __repr__(self) -> str:
        return "[secret]"


def secret_change(path: str, old: str | None, new: str | None) -> FieldChange:
    """The change of a secret input between two fingerprints (None: absent on that side)."""
    return FieldChange(path, ABSENT if old is None else SecretValue(old), ABSENT if new is None else SecretValue(new))


def is_secret_change(change: FieldChange) -> bool:
    return isinstance(change.old, SecretValue) or isinstance(change.new, SecretValue)


@dataclass
class ResourceChange:
    action: str
    type: str
    name: str
    fields: list[FieldChange] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    """Why a replacement (empty for updates, creates and deletes)."""
    old: dict[str, Any] | None = None
    new: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    """What a reviewer must know beyond the inputs (a protected resource that `pulumi up` won't delete)."""
    secret_paths: list[str] = field(default_factory=list)
    """Secret inputs that changed (their values never shown), e.g. `connection.host`."""

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.fields]

    node_name: str | None = None
    """For a node command: the node it runs on (`gpu-dev-1 (10.20.0.11)`), when known."""

    effects: list[str] = field(default_factory=list)
    """What it does to running work (offline/effects.py), e.g. `rolls the device plugin`."""

    @property
    def node(self) -> str | None:
        return self.node_name if self.type == COMMAND else None

    @property
    def reruns_on_node(self) -> bool:
        """A remote command whose `create` runs: created, replaced (triggers), or updated without an
        `update` command (pulumi-command then runs `create` again)."""
        if self.type != COMMAND:
            return False
        return self.action in (CREATE, REPLACE) or (self.action == UPDATE and not (self.new or {}).get("update"))

    @property
    def updates_without_rerun(self) -> bool:
        """A remote command updated in place that runs its `update` command, not its script."""
        return self.type == COMMAND and self.action == UPDATE and bool((self.new or {}).get("update"))


@dataclass
class PlanDiff:
    base_label: str
    head_label: str
    stack: str
    changes: list[ResourceChange]
    capacity: tuple[list[Any], list[Any]] = ([], [])
    warnings: tuple[list[str], list[str]] = ([], [])
    effects: list[str] = field(default_factory=list)
    """Effects on running work, worst first (offline/effects.py); the rendering leads with them."""
    objects: list[Any] = field(default_factory=list)
    """Object-level diff per Helm release (offline/objects.ReleaseObjects), when computed."""
    secrets_unknown: list[str] = field(default_factory=list)
    """Resources whose secret inputs could not be compared (one plan records no fingerprints)."""

    @property
    def secret_changes(self) -> list[ResourceChange]:
        """Resources with a changed secret input."""
        return [c for c in self.changes if c.secret_paths]

    def count(self, action: str) -> int:
        return sum(1 for c in self.changes if c.action == action)

    @property
    def has_changes(self) -> bool:
        return bool(self.changes)

    def summary(self) -> str:
        text = ", ".join(f"{self.count(a)} to {a}" for a in ACTIONS)
        secrets = sum(len(c.secret_paths) for c in self.changes)
        return text + (f"; {secrets} secret input{'s' if secrets != 1 else ''} changed (values not shown)" if secrets else "")

    def get(self, type_token: str, name: str) -> ResourceChange | None:
        return next((c for c in self.changes if c.type == type_token and c.name == name), None)

    def of_type(self, type_token: str) -> list[ResourceChange]:
        return [c for c in self.changes if c.type == type_token]

    @property
    def node_commands(self) -> list[ResourceChange]:
        return [c for c in self.changes if c.reruns_on_node]



NAMED = 8
"""How many names one line lists; the rest are counted (a line stays readable at 10,000 nodes)."""


def named(names: list[str], shown: int = NAMED) -> str:
    """`a, b, c` or `a, b, ..., h and 9992 more`."""
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def under(path: str, root: str) -> bool:
    return path == root or path.startswith((root + ".", root + "["))


def clean(value: Any) -> Any:
    """Inputs without the SDK's bookkeeping keys (the same noise the plan's text view drops)."""
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items() if k not in NOISE_KEYS}
    if isinstance(value, list):
        return [clean(v) for v in value]
    return value
