"""The monitor's registrations (protobuf requests) read into the plan's records.

Names come from the URNs, dependencies and parents by name (the stack itself left out), the
options a reviewer must see from the request's fields, inputs read once and scrubbed. Resources
are listed in one stable order (providers first, then depth-first by name), whatever order the
SDK's concurrent registrations took.
"""

from __future__ import annotations

from typing import Any

from .fast_monitor import read_inputs
from .plan import ResourceRecord
from .scrub import Scrubber

STACK_TYPE = "pulumi:pulumi:Stack"


def _urn_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def _urn_type(urn: str) -> str:
    return urn.rsplit("::", 2)[-2].rsplit("$", 1)[-1]


def _parent_name(parent: str) -> str | None:
    return None if not parent or _urn_type(parent) == STACK_TYPE else _urn_name(parent)


def options(request: Any) -> dict[str, Any]:
    """The resource options set on a RegisterResourceRequest (only those that are set), in the
    order of `plan.ResourceOptions` (the plan document keeps that order)."""
    opts: dict[str, Any] = {}
    if request.protect:
        opts["protect"] = True
    if request.deleteBeforeReplace:
        opts["deleteBeforeReplace"] = True
    if list(request.replaceOnChanges):
        opts["replaceOnChanges"] = sorted(request.replaceOnChanges)
    if list(request.ignoreChanges):
        opts["ignoreChanges"] = sorted(request.ignoreChanges)
    if list(request.additionalSecretOutputs):
        opts["additionalSecretOutputs"] = sorted(request.additionalSecretOutputs)
    timeouts = request.customTimeouts
    if timeouts and (timeouts.create or timeouts.update or timeouts.delete):
        opts["customTimeouts"] = {
            k: v for k, v in (("create", timeouts.create), ("update", timeouts.update), ("delete", timeouts.delete)) if v
        }
    if request.provider:
        # "<provider urn>::<provider id>": the provider's name is the urn's last segment.
        opts["provider"] = request.provider.split("::")[-2]
    if request.retainOnDelete:
        opts["retainOnDelete"] = True
    # The program's own aliases (a new parent, a new name); the SDK's type aliases of older API
    # versions (rbac v1alpha1/v1beta1) say nothing about this stack.
    aliases = [a for a in map(_alias, request.aliases) if set(a) - {"type"}]
    if aliases:
        opts["aliases"] = aliases
    return opts


def _alias(alias: Any) -> dict[str, Any]:
    """An alias the program gave (`pulumi.Alias(parent=...)`), as the engine reads its spec: the
    old place by parent (`noParent`: the stack itself; `parent`: a resource's name) or a whole URN."""
    if alias.WhichOneof("alias") == "urn":
        return {"urn": alias.urn}
    spec = alias.spec
    out: dict[str, Any] = {}
    if spec.name:
        out["name"] = spec.name
    if spec.type:
        out["type"] = spec.type
    if spec.WhichOneof("parent") == "noParent" and spec.noParent:
        out["noParent"] = True
    elif spec.WhichOneof("parent") == "parentUrn" and spec.parentUrn:
        out["parent"] = _parent_name(spec.parentUrn)
    return out


def resource_records(registrations: list[tuple[Any, str]], scrub: Scrubber) -> list[ResourceRecord]:
    """(RegisterResourceRequest, urn) pairs as plan records, in the plan's stable order."""
    urn_names = {urn: _urn_name(urn) for _, urn in registrations}
    records: list[ResourceRecord] = []
    for request, _urn in registrations:
        deps = sorted({urn_names.get(d, _urn_name(d)) for d in request.dependencies if _urn_type(d) != STACK_TYPE})
        inputs, secrets = scrub.inputs(read_inputs(request.object)) if request.custom else ({}, {})
        records.append(
            ResourceRecord(
                type=request.type,
                name=request.name,
                parent=_parent_name(request.parent),
                inputs=inputs,
                secrets=secrets,
                depends_on=deps,
                options=options(request),
                custom=request.custom,
            )
        )
    return stable_order(records)


def read_records(reads: list[Any]) -> list[dict[str, Any]]:
    """ReadResourceRequests (`<Type>.get`) as the plan's `reads`: type, name, id, parent and what
    the read waits for (by name, the stack left out), as the engine records a read's dependencies."""
    out = [
        {"type": r.type, "name": r.name, "id": r.id, "parent": _parent_name(r.parent),
         "depends_on": sorted({_urn_name(d) for d in r.dependencies if _urn_type(d) != STACK_TYPE})}
        for r in reads
    ]
    return sorted(out, key=lambda r: (r["type"], r["name"]))


def stable_order(records: list[ResourceRecord]) -> list[ResourceRecord]:
    """Providers first, then every resource after its parent, siblings by name: the same list
    whatever order the registrations arrived in (they race on their dependencies)."""
    by_name = {r.name: r for r in records}

    def key(r: ResourceRecord) -> tuple[Any, ...]:
        chain, seen = [r], {r.name}
        while chain[-1].parent in by_name and chain[-1].parent not in seen:
            seen.add(chain[-1].parent)
            chain.append(by_name[chain[-1].parent])
        return tuple((0 if c.type.startswith("pulumi:providers:") else 1, c.name, c.type) for c in reversed(chain))

    return sorted(records, key=key)
