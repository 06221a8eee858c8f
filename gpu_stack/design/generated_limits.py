"""Limits on what the stack generates from a config, checked before any resource is registered.

A config can pass every per-key rule and still ask for objects Kubernetes or Pulumi refuse: a
ConfigMap over Kubernetes' 1 MiB limit (thousands of sharing profiles, a huge metrics list), or two
objects that end up with one name. These are found here, on the derived design, and reported like
any other config problem (naming the config key that fed the object).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from ..config import MISSING, Problem, config_key

CONFIGMAP_LIMIT = 1024 * 1024
"""Kubernetes refuses a ConfigMap whose data exceeds 1 MiB (the API server's MaxSecretSize)."""


OBJECT_LIMIT = 1536 * 1024
"""The largest object the API server stores: etcd's default request limit (--max-request-bytes,
1.5 MiB) bounds every object written, custom resources such as a PrometheusRule included."""


def object_problems(loc: tuple[Any, ...], manifest: dict[str, Any] | None) -> list[Problem]:
    """A generated object over what the API server stores (`loc`: the config key that feeds it)."""
    if manifest is None:
        return []
    size = len(json.dumps(manifest, separators=(",", ":")).encode())
    if size <= OBJECT_LIMIT:
        return []
    meta = manifest.get("metadata") or {}
    return [Problem(
        key=config_key(loc), value=MISSING,
        message=(
            f"makes the {manifest.get('kind')} {meta.get('name')} {size / (1024 * 1024):.2f} MiB, over the 1.5 MiB "
            "an object may have in etcd (the API server refuses it at `pulumi up`); use fewer labels, codes or nodes"
        ),
    )]


def configmap_bytes(data: dict[str, str]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in data.items())


def generated_problems(
    configmaps: Iterable[tuple[tuple[Any, ...], str | None, str, dict[str, str]]],
    pulumi_names: Iterable[tuple[tuple[Any, ...], str, str]] = (),
) -> list[Problem]:
    """configmaps: (config key that feeds it, namespace, name, data); pulumi_names: (config key,
    resource type, Pulumi resource name). Problems for oversized ConfigMaps and name collisions."""
    out: list[Problem] = []
    seen: dict[tuple[str | None, str], tuple[Any, ...]] = {}
    for loc, namespace, name, data in configmaps:
        size = configmap_bytes(data)
        if size > CONFIGMAP_LIMIT:
            out.append(Problem(
                key=config_key(loc), value=MISSING,
                message=(
                    f"makes the ConfigMap {name} {size / (1024 * 1024):.2f} MiB, over Kubernetes' 1 MiB limit "
                    "for a ConfigMap; use fewer or smaller entries"
                ),
            ))
        if (namespace, name) in seen:
            out.append(Problem(
                key=config_key(loc), value=name,
                message=f"gives ConfigMap {namespace}/{name} a name {config_key(seen[(namespace, name)])} already gives another",
            ))
        seen.setdefault((namespace, name), loc)
    names: dict[tuple[str, str], tuple[Any, ...]] = {}
    for loc, type_, name in pulumi_names:
        if (type_, name) in names:
            out.append(Problem(
                key=config_key(loc), value=name,
                message=f"derives the resource name {name!r}, which {config_key(names[(type_, name)])} already derives",
            ))
        names.setdefault((type_, name), loc)
    return out


def stack_problems(op_ns: str, derived: Any) -> list[Problem]:
    """Every generated ConfigMap and validation Job of the stack (`derived`: its StackDesign, the
    operator's ConfigMaps in `op_ns`), checked."""
    validation_plan = derived.validation
    configmaps: list[tuple[tuple[Any, ...], str | None, str, dict[str, str]]] = []
    for loc, part in ((("sharing",), derived.sharing), (("mig", "profiles"), derived.mig), (("dcgmExporter", "metrics"), derived.dcgm)):
        if part.configmap_name is not None:
            configmaps.append((loc, op_ns, part.configmap_name, dict(part.data)))
    files = derived.driver_files
    for field, name, data in (("repoConfig", files.repo_configmap, files.repo_data),
                              ("certConfig", files.cert_configmap, files.cert_data)):
        if name is not None:
            configmaps.append((("driver", field, "files"), op_ns, name, dict(data)))
    pulumi_names: list[tuple[tuple[Any, ...], str, str]] = []
    if validation_plan is not None:
        cm = validation_plan.configmap
        configmaps.append((("validation",), cm["metadata"].get("namespace"), cm["metadata"]["name"], dict(cm.get("data") or {})))
        for job in validation_plan.jobs:
            loc = ("nodes",) if job.node is not None else ("validation",)
            if job.table is not None:
                meta = job.table["metadata"]
                configmaps.append((("nodes",), meta.get("namespace"), meta["name"], dict(job.table.get("data") or {})))
            pulumi_names.append((loc, "Job", job.key))
            meta = job.manifest["metadata"]
            pulumi_names.append((loc, "Job object", f"{meta.get('namespace')}/{meta['name']}"))
    out = generated_problems(configmaps, pulumi_names)
    monitoring = derived.monitoring
    if monitoring is not None:
        out += object_problems(("alerts",), monitoring.rule)
        out += object_problems(("alerts", "dashboard"), monitoring.dashboard)
    return out
