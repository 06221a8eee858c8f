"""Update or replace: the providers' and the engine's rules, as one table.

`pulumi preview` replaces a resource (delete and create, or create and delete) rather than update
it in place when its provider says an input cannot change in place, when one of its
`replaceOnChanges` properties changes, or when its provider is replaced. Each row of `RULES` is one
such rule: which resources (`on`), a change under which input paths, and an optional condition
(`when`, see `_CONDITIONS`); the reason is what the diff prints. Rows apply in table order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .model import (
    COMMAND,
    CONFIGMAP,
    COPY,
    JOB,
    K8S_PROVIDER,
    RELEASE,
    REPLACE,
    SECRET_TYPE,
    UPDATE,
    ResourceChange,
    clean,
    under,
)

K8S_OBJECT = "kubernetes object"
"""`on` for every Kubernetes object (`kubernetes:*`), Helm releases excepted."""
ANY = "*"
REPLACE_ON_CHANGES = ("<replaceOnChanges>",)
"""`paths` of the engine's rule: the resource's own `replaceOnChanges` option, `{path}` in the reason."""
CONFIG_DATA = ("data", "binaryData", "stringData", "immutable")
CLUSTER_NOTE = "it points at another cluster"


@dataclass(frozen=True)
class ReplaceRule:
    on: str
    """A type token, `K8S_OBJECT` or `ANY`."""
    paths: tuple[str, ...]
    """Input path prefixes: a change under one of them replaces (empty: the resource need not change)."""
    reason: str
    when: str | None = None
    """A condition by name (`_CONDITIONS`)."""
    source: str = ""
    """Where the rule comes from."""


RULES: tuple[ReplaceRule, ...] = (
    ReplaceRule(K8S_OBJECT, ("metadata.name",), "metadata.name changed",
                source="a new name is another object; content-named ConfigMaps and Jobs get a new name per content"),
    ReplaceRule(K8S_OBJECT, ("metadata.namespace",), "metadata.namespace changed",
                source="a new namespace is another object"),
    ReplaceRule(CONFIGMAP, CONFIG_DATA, "data of an immutable ConfigMap changed", when="immutable",
                source="the API server refuses data changes of an immutable ConfigMap"),
    ReplaceRule(SECRET_TYPE, CONFIG_DATA, "data of an immutable ConfigMap changed", when="immutable",
                source="the API server refuses data changes of an immutable Secret"),
    ReplaceRule(CONFIGMAP, CONFIG_DATA,
                "ConfigMap data changed (the kubernetes provider replaces ConfigMaps on data changes)",
                when="config_maps_replaced",
                source="pulumi-kubernetes replaces ConfigMaps and Secrets on data changes unless enableConfigMapMutable"),
    ReplaceRule(SECRET_TYPE, CONFIG_DATA,
                "ConfigMap data changed (the kubernetes provider replaces ConfigMaps on data changes)",
                when="config_maps_replaced",
                source="pulumi-kubernetes replaces ConfigMaps and Secrets on data changes unless enableConfigMapMutable"),
    ReplaceRule(JOB, ("spec",), "a Job's spec cannot be changed in place",
                source="a Job's pod template is immutable"),
    ReplaceRule(RELEASE, ("name",), "release name changed", source="a new release name is a new release"),
    ReplaceRule(RELEASE, ("namespace",), "release namespace changed", source="a new namespace is a new release"),
    ReplaceRule(COMMAND, ("triggers",), "triggers changed",
                source="pulumi-command's SDK: replaceOnChanges triggers[*]; every other input is an update (its `update` command)"),
    ReplaceRule(COPY, ("triggers",), "triggers changed", source="pulumi-command's SDK: replaceOnChanges triggers[*]"),
    ReplaceRule(K8S_PROVIDER, ("clusterIdentifier",), f"provider clusterIdentifier changed: {CLUSTER_NOTE}",
                when="cluster_identifier_on_both_sides",
                source="the provider's DiffConfig: with a clusterIdentifier on both sides only a change of it replaces"),
    ReplaceRule(K8S_PROVIDER, ("kubeconfig",), f"provider kubeconfig changed: {CLUSTER_NOTE}", when="no_cluster_identifier",
                source="the provider's DiffConfig; adding or removing a clusterIdentifier never replaces"),
    ReplaceRule(K8S_PROVIDER, ("context",), f"provider context changed: {CLUSTER_NOTE}", when="no_cluster_identifier",
                source="the provider's DiffConfig"),
    ReplaceRule(K8S_PROVIDER, ("cluster",), f"provider cluster changed: {CLUSTER_NOTE}", when="no_cluster_identifier",
                source="the provider's DiffConfig"),
    ReplaceRule(ANY, REPLACE_ON_CHANGES, "replaceOnChanges: {path}",
                source="the engine: a change under a replaceOnChanges property (`*`: any input) replaces"),
    ReplaceRule(ANY, (), "its provider {provider} is replaced", when="provider_replaced",
                source="the engine replaces every resource of a replaced provider, changed or not"),
)
PROVIDER_CASCADE = RULES[-1]


@dataclass(frozen=True)
class _Context:
    old: Mapping[str, Any]
    new: Mapping[str, Any]
    paths: list[str]
    config_maps_mutable: bool


def _cluster_identifiers(ctx: _Context) -> tuple[Any, Any]:
    return ctx.old.get("clusterIdentifier"), ctx.new.get("clusterIdentifier")


_CONDITIONS = {
    "immutable": lambda ctx: bool(ctx.old.get("immutable")) or bool(ctx.new.get("immutable")),
    "config_maps_replaced": lambda ctx: not (bool(ctx.old.get("immutable")) or bool(ctx.new.get("immutable")))
    and not ctx.config_maps_mutable,
    "cluster_identifier_on_both_sides": lambda ctx: None not in _cluster_identifiers(ctx),
    # Adding or removing one (on- and off-boarding) decides alone: no replacement.
    "no_cluster_identifier": lambda ctx: _cluster_identifiers(ctx) == (None, None) and "clusterIdentifier" not in ctx.paths,
}


def _applies(rule: ReplaceRule, type_token: str) -> bool:
    if rule.on == ANY:
        return True
    if rule.on == K8S_OBJECT:
        return type_token.startswith("kubernetes:") and not type_token.startswith("kubernetes:helm.sh/")
    return rule.on == type_token


def replace_reasons(
    type_token: str,
    old: Mapping[str, Any],
    new: Mapping[str, Any],
    paths: list[str],
    options: Mapping[str, Any],
    config_maps_mutable: bool,
) -> list[str]:
    """Why the change of one resource is a replacement (empty: an update), rule by rule."""
    ctx = _Context(old, new, paths, config_maps_mutable)
    input_paths = [p for p in paths if not p.startswith("options.")]
    reasons: list[str] = []
    for rule in RULES:
        if rule is PROVIDER_CASCADE or not _applies(rule, type_token):
            continue
        if rule.when is not None and not _CONDITIONS[rule.when](ctx):
            continue
        if rule.paths == REPLACE_ON_CHANGES:
            for prop in options.get("replaceOnChanges") or []:
                if any(prop == "*" or under(p, prop) for p in input_paths):
                    reasons.append(rule.reason.format(path=prop))
        elif any(under(p, root) for p in paths for root in rule.paths):
            reasons.append(rule.reason)
    return reasons


def cascade_provider_replacements(
    changes: list[ResourceChange],
    old_res: dict[tuple[str, str], dict[str, Any]],
    new_res: dict[tuple[str, str], dict[str, Any]],
) -> list[ResourceChange]:
    """`PROVIDER_CASCADE`: a replaced provider replaces every resource it manages, changed or not."""
    replaced = {c.name for c in changes if c.type.startswith("pulumi:providers:") and c.action == REPLACE}
    if not replaced:
        return changes
    by_key = {(c.type, c.name): c for c in changes}
    out = list(changes)
    for key, res in new_res.items():
        provider = (res.get("options") or {}).get("provider")
        if provider not in replaced or key not in old_res:
            continue
        reason = PROVIDER_CASCADE.reason.format(provider=provider)
        change = by_key.get(key)
        if change is None:
            inputs = clean(res.get("inputs") or {})
            change = ResourceChange(REPLACE, key[0], key[1], [], [reason], old=inputs, new=inputs)
            out.append(change)
        elif change.action in (UPDATE, REPLACE):
            change.action = REPLACE
            change.reasons.append(reason)
    order = {key: i for i, key in enumerate(new_res)}
    return sorted(out, key=lambda c: order.get((c.type, c.name), len(order)))
