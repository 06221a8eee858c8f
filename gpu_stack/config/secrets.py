"""Where a secret may be set, and how secret values stay hidden in errors and offline plans."""

from __future__ import annotations

from typing import Any, Iterable

from pydantic import SecretStr

from .errors import MISSING, Problem, config_key
from .safe_input import SECRET_PLACEHOLDER_PREFIX
from .types import NAMESPACE

SECRET_FIELDS = ("privateKey", "password")
"""Keys whose value is never shown in an error, whether or not the stack marked them secret."""


def hide_secrets(problems: list[Problem], secret_keys: Iterable[str]) -> list[Problem]:
    """Show `[secret]` instead of any value under a key the stack holds as a secret."""
    roots = [f"{NAMESPACE}:{k}" for k in secret_keys]
    out = []
    for p in problems:
        secret = any(p.key == r or p.key.startswith((r + ".", r + "[")) for r in roots) or any(
            part.split("[")[0] in SECRET_FIELDS for part in p.key.split(":", 1)[-1].split(".")
        )
        if secret and p.value is not MISSING:
            p = Problem(key=p.key, value=SecretStr("hidden"), message=p.message)
        out.append(p)
    return out


# --------------------------------------------------------------------------- secrets anywhere
SECRET_CAPABLE = (
    "kubernetes.context", "kubernetes.kubeconfig", "kubernetes.version",
    "ssh.user", "ssh.port", "ssh.privateKey",
    "nodes[*].address", "nodes[*].user", "nodes[*].port", "nodes[*].hostKey",
    "operator.repositoryCredentials.username", "operator.repositoryCredentials.password",
    "images.registryCredentials.username", "images.registryCredentials.password",
)
"""Keys whose value may be a secret: they reach only the Kubernetes provider, the SSH
connection and the Helm release's repository options, which Pulumi keeps secret. Every other value becomes part of a resource name, a node
label, a ConfigMap, the Helm values or the plan, where a secret cannot stay secret."""

_OFFLINE_STAND_INS: dict[str, Any] = {
    "ssh.port": 22,
    "nodes[*].port": 22,
    "nodes[*].hostKey": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
}
"""Offline a `secure:` value is not decrypted: where its placeholder cannot pass the field's check,
this valid stand-in does (the connection it reaches is a secret, shown as [secret])."""

PASSWORDS = ("operator.repositoryCredentials.password", "images.registryCredentials.password")
"""Passwords that must be Pulumi secrets (a plain one would sit in the stack file, so in git)."""


def _path_shape(path: tuple[Any, ...]) -> str:
    return ".".join("[*]" if isinstance(p, int) else str(p) for p in path).replace(".[*]", "[*]")


def _is_placeholder(value: Any) -> bool:
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


def secret_policy(
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
