"""Where a secret may be set, and how secret values stay hidden in errors and offline plans."""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable
from typing import Any, NamedTuple

import yaml
from pydantic import SecretStr

from .errors import MISSING, Problem, config_key
from .safe_input import SECRET_PLACEHOLDER_PREFIX
from .types import NAMESPACE

SECRET_FIELDS = ("privateKey", "password")
"""Keys whose value is never shown in an error, whether or not the stack marked them secret."""


def _under(key: str, root: str) -> bool:
    return key == root or key.startswith((root + ".", root + "["))


def hide_secrets(problems: list[Problem], hidden: Iterable[str]) -> list[Problem]:
    """Show `[secret]` instead of the value of a problem at, under or above a secret key (full
    config keys: each secret leaf where the stack file says which it is, else the whole top-level
    key), so one secret leaf does not hide the plain values beside it."""
    roots = list(hidden)
    out = []
    for p in problems:
        secret = any(_under(p.key, r) or _under(r, p.key) for r in roots) or any(
            part.split("[")[0] in SECRET_FIELDS for part in p.key.split(":", 1)[-1].split(".")
        ) or _has_placeholder(p.value)
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

def _digest(placeholder: str) -> bytes:
    return hashlib.sha256(placeholder.encode()).digest()


def _stand_in_port(placeholder: str) -> int:
    return 1024 + int.from_bytes(_digest(placeholder)[:4], "big") % 64000


def _stand_in_host_key(placeholder: str) -> str:
    blob = b"".join(len(f).to_bytes(4, "big") + f for f in (b"ssh-ed25519", _digest(placeholder)))
    return "ssh-ed25519 " + base64.b64encode(blob).decode()


_OFFLINE_STAND_INS: dict[str, Any] = {
    "kubernetes.version": lambda placeholder: "1.31",
    "ssh.port": _stand_in_port,
    "nodes[*].port": _stand_in_port,
    "nodes[*].hostKey": _stand_in_host_key,
}
"""Offline a `secure:` value is not decrypted: where its placeholder cannot pass the field's check,
a valid stand-in derived from it does (the connection it reaches is a secret, shown as [secret]);
derived from the placeholder, so a changed ciphertext still changes the plan's fingerprints."""

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


class SecretPolicy(NamedTuple):
    raw: dict[str, Any]
    """The raw config to validate (offline stand-ins in place)."""
    problems: list[Problem]
    shapes: frozenset[str]
    """Shapes of the secret values (`nodes[*].address`)."""
    hidden: list[str]
    """Full config keys whose values errors never show."""
    stand_ins: frozenset[str]
    """Shapes whose offline placeholder was replaced by a stand-in."""


def secret_policy(
    raw: dict[str, Any], secret_keys: Iterable[str], secret_paths: dict[str, list[tuple[Any, ...]]] | None
) -> SecretPolicy:
    """Refuse secrets where they cannot stay secret; offline, put stand-ins where placeholders
    cannot pass a field's check."""
    problems: list[Problem] = []
    shapes: set[str] = set()
    stand_ins: set[str] = set()
    hidden: list[str] = [f"{NAMESPACE}:{k}" for k in secret_keys if k not in raw]
    out = dict(raw)
    for top in sorted(set(secret_keys) & set(raw)):
        value = raw[top]
        if _has_placeholder(value):
            leaves = list(_secret_leaves(value, (top,), exact=True))
            hidden += [config_key(p) for p, _ in leaves]
        elif secret_paths is not None and top in secret_paths:
            leaves = [(p, None) for p in secret_paths[top]]
            hidden += [config_key(p) for p, _ in leaves]
        else:
            leaves = list(_secret_leaves(value, (top,), exact=False))
            hidden.append(config_key((top,)))
        for path, leaf in leaves:
            shape = _path_shape(path)
            if shape in SECRET_CAPABLE:
                shapes.add(shape)
                if shape in _OFFLINE_STAND_INS and _is_placeholder(leaf):
                    out[top] = _replace_at(out[top], path[1:], _OFFLINE_STAND_INS[shape](leaf))
                    stand_ins.add(shape)
                continue
            if any(shape.startswith((c + ".", c + "[")) for c in SECRET_CAPABLE):
                continue  # inside a secret-capable value (a list given for privateKey): its own check says what is wrong
            inner = [c for c in SECRET_CAPABLE if c.startswith((shape + ".", shape + "["))]
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
    return SecretPolicy(out, problems, frozenset(shapes), hidden, frozenset(stand_ins))


# --------------------------------------------------------------------------- credentials in plain text
_KUBECONFIG_SECRETS = ("token", "password", "client-key-data")
_AUTH_PROVIDER_SECRETS = ("id-token", "refresh-token", "access-token", "client-secret")
_CREDENTIAL_LINE = re.compile(
    rf"(?m)^[\s-]*[\"']?({'|'.join(map(re.escape, _KUBECONFIG_SECRETS + _AUTH_PROVIDER_SECRETS))})[\"']?\s*:\s*\S"
)


def kubeconfig_credentials(text: str) -> list[str]:
    """The credential fields a kubeconfig's content holds in clear (a user's token, password or
    client key; an auth provider's tokens); [] for a path or a kubeconfig without any."""
    if "\n" not in text and not text.lstrip().startswith("{"):
        return []  # a path to a kubeconfig file: its content never enters the stack file
    doc: Any = None
    if len(text) <= 256 * 1024 and not ("&" in text and "*" in text):  # no alias expansion: scan the text instead
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError:
            doc = None
    found: list[str] = []
    users = doc.get("users") if isinstance(doc, dict) else None
    for entry in users if isinstance(users, list) else []:
        user = entry.get("user") if isinstance(entry, dict) else None
        if not isinstance(user, dict):
            continue
        found += [k for k in _KUBECONFIG_SECRETS if user.get(k)]
        provider = user.get("auth-provider")
        config = provider.get("config") if isinstance(provider, dict) else None
        if isinstance(config, dict):
            found += [f"auth-provider {k}" for k in _AUTH_PROVIDER_SECRETS if config.get(k)]
    if not isinstance(doc, dict):
        found += [m.group(1) for m in _CREDENTIAL_LINE.finditer(text)]
    return sorted(set(found))


def plain_credentials(raw: dict[str, Any], secret_shapes: frozenset[str], engine_knows_secrets: bool) -> list[Problem]:
    """A kubeconfig with credentials written in plain text in the stack file (so in git) is
    refused, like a plain private key is."""
    kubernetes = raw.get("kubernetes")
    kubeconfig = kubernetes.get("kubeconfig") if isinstance(kubernetes, dict) else None
    if not engine_knows_secrets or not isinstance(kubeconfig, str) or "kubernetes.kubeconfig" in secret_shapes:
        return []
    found = kubeconfig_credentials(kubeconfig)
    if not found:
        return []
    return [Problem(
        key=config_key(("kubernetes", "kubeconfig")), value=SecretStr("hidden"),
        message=(
            f"holds credentials ({', '.join(found)}) in plain text in the stack file; set it as a secret: "
            "pulumi config set --secret --path 'gpu-stack:kubernetes.kubeconfig' < kubeconfig "
            "(or give a path to the kubeconfig file instead of its content)"
        ),
    )]
