"""Render the ClusterPolicy the GPU Operator chart v25.10.1 makes from a set of Helm values.

The chart itself (its templates) cannot be fetched here, so this encodes what its
`clusterpolicy.yaml` template does with the values: the chart's defaults (`values.yaml`) are
merged with the release's values, and for each component section of `spec` the template writes
the fields the ClusterPolicy CRD knows, each only when it is set (`{{- if .Values.x.y }}`),
`enabled` always, and nested objects such as `devicePlugin.config` only when their `name` is
set. The result is then checked against the real CRD schema in strict mode (every field the
render writes must be one the CRD declares, every enum and pattern holds).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

# Sections whose nested `config` object the template emits only when `config.name` is set.
CONFIG_BY_NAME = ("devicePlugin", "migManager", "dcgmExporter", "vgpuDeviceManager")


def load_reference(ref: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    values = yaml.safe_load((ref / "values.yaml").read_text())
    crd = yaml.safe_load((ref / "crd-clusterpolicies.yaml").read_text())
    return values, crd


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's merge of user values over chart defaults: maps merge, everything else replaces."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _truthy(value: Any) -> bool:
    return value not in (None, "", [], {}) and value is not False


def _project(values: Any, schema: dict[str, Any], top: bool) -> Any:
    props = schema.get("properties")
    if not isinstance(values, dict) or not props:
        return values
    out: dict[str, Any] = {}
    for key, sub in props.items():
        if key not in values:
            continue
        value = values[key]
        if key == "enabled" and isinstance(value, bool):
            out[key] = value
            continue
        if not _truthy(value):
            continue
        projected = _project(value, sub, top=False)
        if _truthy(projected):
            out[key] = projected
    return out


def render_clusterpolicy(chart_values: dict[str, Any], release_values: dict[str, Any], crd: dict[str, Any]) -> dict[str, Any]:
    merged = deep_merge(chart_values, release_values)
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec: dict[str, Any] = {}
    for section, schema in spec_schema["properties"].items():
        if section not in merged:
            continue
        block = dict(merged[section]) if isinstance(merged[section], dict) else merged[section]
        if section in CONFIG_BY_NAME and isinstance(block, dict):
            config = block.get("config") or {}
            if not config.get("name"):
                block.pop("config", None)
            else:
                block["config"] = {k: v for k, v in config.items() if k in ("name", "default")}
        spec[section] = _project(block, schema, top=True)
        if spec[section] == {} and section not in spec_schema.get("required", []):
            del spec[section]
    return {
        "apiVersion": "nvidia.com/v1",
        "kind": "ClusterPolicy",
        "metadata": {"name": "cluster-policy"},
        "spec": spec,
    }


def _strict(schema: Any) -> Any:
    """The CRD schema as JSON Schema: int-or-string honoured, unknown fields rejected."""
    if isinstance(schema, list):
        return [_strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return out
    if out.get("type") == "object" and "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def apply_defaults(doc: Any, schema: dict[str, Any]) -> Any:
    """Fill in the CRD's `default`s the way the API server does before it validates."""
    if not isinstance(doc, dict):
        return doc
    out = dict(doc)
    for key, sub in (schema.get("properties") or {}).items():
        if key not in out and "default" in sub:
            out[key] = copy.deepcopy(sub["default"])
        if key in out:
            out[key] = apply_defaults(out[key], sub)
    return out


def validate_clusterpolicy(doc: dict[str, Any], crd: dict[str, Any]) -> list[str]:
    """Every schema violation of the ClusterPolicy (after the API server's defaulting), as 'path: message'."""
    raw_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    doc = apply_defaults(doc, raw_schema)
    schema = _strict(raw_schema)
    # metadata is the API server's to check (ObjectMeta), not the CRD's.
    schema["properties"]["metadata"] = {"type": "object"}
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'.'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    ]
