"""`load_settings`: the raw `gpu-stack:*` config into `Settings`, or a SettingsError naming every bad key."""

from __future__ import annotations

import copy
import difflib
import shlex
from collections.abc import Iterable
from typing import Any

from pydantic import SecretStr, ValidationError

from .errors import MISSING, Problem, SettingsError, config_key
from .root import TOP_LEVEL_KEYS, Settings
from .rules import check_settings
from .secrets import PASSWORDS, hide_secrets, plain_credentials, secret_policy
from .translate import dedupe, problem_from_error
from .types import NAMESPACE


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
    raw, dotted = expand_dotted_keys(raw, secret_keys or ())
    policy = secret_policy(raw, secret_keys or (), secret_paths)
    raw = policy.raw
    problems = dotted + namespace_problems(other_keys) + policy.problems
    problems += plain_credentials(raw, policy.shapes, secret_keys is not None)
    try:
        settings = _load_settings(raw)
    except SettingsError as exc:
        raise SettingsError(hide_secrets(problems + exc.problems, policy.hidden)) from None
    if problems:
        raise SettingsError(hide_secrets(problems, policy.hidden))
    settings._secret_shapes = policy.shapes
    settings._offline_stand_ins = policy.stand_ins
    if secret_keys is not None and settings.ssh.private_key is not None and "ssh" not in set(secret_keys):
        raise SettingsError([Problem(
            key=config_key(("ssh", "privateKey")),
            value=SecretStr("hidden"),
            message=(
                "is stored in plain text in the stack file; set it as a secret: "
                "pulumi config set --secret --path 'gpu-stack:ssh.privateKey' < key"
            ),
        )])
    given = {
        "operator.repositoryCredentials.password": settings.operator.repository_credentials,
        "images.registryCredentials.password": settings.images.registry_credentials,
    }
    plain = [shape for shape in PASSWORDS if given[shape] is not None and shape not in policy.shapes]
    if secret_keys is not None and plain:
        raise SettingsError([Problem(
            key=f"{NAMESPACE}:{shape}",
            value=SecretStr("hidden"),
            message=(
                "is stored in plain text in the stack file; set it as a secret: "
                f"pulumi config set --secret --path '{NAMESPACE}:{shape}' TOKEN"
            ),
        ) for shape in plain])
    return settings


def expand_dotted_keys(raw: dict[str, Any], secret_keys: Iterable[str] = ()) -> tuple[dict[str, Any], list[Problem]]:
    """A key set without --path names the same setting as with it: `gpu-stack:kubernetes.context:
    my-cluster` (what `pulumi new` writes for a template's config: the CLI takes a template's keys
    as they are, never as paths) is `kubernetes.context`, merged into `gpu-stack:kubernetes`.

    Only `<top-level key>.<field>[.<field>...]` (no list index) is read this way; any other key
    with a dot is left for the unknown-key message. The same setting given twice, under a value
    that is no map, or a secret set without --path (its ciphertext would cover the whole setting's
    name, not the value's place in the map) is a problem naming the key."""
    out = {k: v for k, v in raw.items() if "." not in k}
    problems: list[Problem] = []
    secret = set(secret_keys)
    copied: set[str] = set()
    for key in sorted(k for k in raw if "." in k):
        top, *rest = key.split(".")
        if top not in TOP_LEVEL_KEYS or not all(rest) or any("[" in part or "]" in part for part in rest):
            out[key] = raw[key]
            continue
        name = f"{NAMESPACE}:{key}"
        if key in secret:
            problems.append(Problem(key=name, value=SecretStr("hidden"), message=(
                f"is a secret set without --path; set it in its place: pulumi config rm {shlex.quote(name)} && "
                f"pulumi config set --secret --path {shlex.quote(name)} VALUE"
            )))
            continue
        if top not in copied:
            out[top] = copy.deepcopy(out[top]) if top in out else {}
            copied.add(top)
        node: Any = out[top]
        bad: tuple[str, ...] | None = None
        for i, part in enumerate(rest[:-1]):
            if not isinstance(node, dict):
                bad = (top, *rest[:i])
                break
            node = node.setdefault(part, {})
        if bad is None and not isinstance(node, dict):
            bad = (top, *rest[:-1])
        if bad is not None:
            problems.append(Problem(key=name, value=raw[key], message=f"{config_key(bad)} is set to a value that is no map"))
        elif rest[-1] in node:
            problems.append(Problem(key=name, value=raw[key], message=(
                f"is set twice: as a key of its own (set without --path) and inside {config_key((top,))}; keep one"
            )))
        else:
            node[rest[-1]] = raw[key]
    return out, problems


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
            key=str(full), value=MISSING,
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
            problems.append(Problem(key=f"{NAMESPACE}:{key}", value=MISSING, message=msg))
    known = {k: v for k, v in raw.items() if k in TOP_LEVEL_KEYS}
    try:
        settings = Settings.model_validate(known)
    except ValidationError as exc:
        problems.extend(problem_from_error(e) for e in exc.errors())
        raise SettingsError(dedupe(problems)) from None
    if problems:
        raise SettingsError(problems)
    problems = check_settings(settings)
    if problems:
        raise SettingsError(dedupe(problems, by_message=True))
    return settings
