"""Check a custom resource the way the API server does: prune unknown fields, apply the CRD's
defaults, then validate against its openAPIV3Schema (structural-schema semantics)."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema


def version_schema(crd: dict[str, Any], version: str) -> dict[str, Any]:
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return v["schema"]["openAPIV3Schema"]
    raise KeyError(f"{crd['metadata']['name']} has no version {version}")


def prune(doc: Any, schema: dict[str, Any], path: str = "") -> tuple[Any, list[str]]:
    """Drop fields the schema does not declare (unless x-kubernetes-preserve-unknown-fields);
    returns the pruned object and the dotted paths that were dropped. Nulls of non-nullable
    fields are dropped too (so their default applies), without being reported. metadata is the
    API server's."""
    if schema.get("x-kubernetes-preserve-unknown-fields") and "properties" not in schema:
        return doc, []
    if isinstance(doc, dict) and schema.get("type") == "object":
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        out: dict[str, Any] = {}
        dropped: list[str] = []
        for key, value in doc.items():
            sub_path = f"{path}.{key}" if path else key
            sub = (props or {}).get(key, extra if isinstance(extra, dict) else {})
            if value is None and not sub.get("nullable"):
                # A null for a non-nullable field is dropped before defaulting (not an unknown field).
                continue
            if not path and key in ("apiVersion", "kind", "metadata"):
                out[key] = value
            elif props is not None and key in props:
                out[key], d = prune(value, props[key], sub_path)
                dropped += d
            elif isinstance(extra, dict):
                out[key], d = prune(value, extra, sub_path)
                dropped += d
            elif schema.get("x-kubernetes-preserve-unknown-fields") or extra is True:
                out[key] = value
            else:
                dropped.append(sub_path)
        return out, dropped
    if isinstance(doc, list) and isinstance(schema.get("items"), dict):
        out_list, dropped = [], []
        for i, item in enumerate(doc):
            value, d = prune(item, schema["items"], f"{path}[{i}]")
            out_list.append(value)
            dropped += d
        return out_list, dropped
    return doc, []


def apply_defaults(doc: Any, schema: dict[str, Any]) -> Any:
    """Fill in the schema's `default`s the way the API server does before it validates."""
    if isinstance(doc, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(item, schema["items"]) for item in doc]
    if not isinstance(doc, dict):
        return doc
    out = dict(doc)
    for key, sub in (schema.get("properties") or {}).items():
        if key not in out and "default" in sub:
            out[key] = copy.deepcopy(sub["default"])
        if key in out:
            out[key] = apply_defaults(out[key], sub)
    return out


def _as_json_schema(schema: Any) -> Any:
    """OpenAPI v3 schema as JSON Schema: int-or-string honoured, nullable honoured."""
    if isinstance(schema, list):
        return [_as_json_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _as_json_schema(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def check_custom_resource(doc: dict[str, Any], crd: dict[str, Any]) -> tuple[list[str], list[str], dict[str, Any]]:
    """(pruned field paths, schema violations after defaulting, the object as stored)."""
    version = doc["apiVersion"].split("/")[-1]
    schema = version_schema(crd, version)
    pruned_doc, dropped = prune(doc, schema)
    stored = apply_defaults(pruned_doc, schema)
    js = _as_json_schema(schema)
    js.setdefault("properties", {})["metadata"] = {"type": "object"}
    validator = jsonschema.Draft7Validator(js)
    errors = [
        f"{'.'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in sorted(validator.iter_errors(stored), key=lambda e: list(map(str, e.absolute_path)))
    ]
    return dropped, errors, stored
