"""The configuration reference and the stack file JSON Schema, rendered from the settings models.

`docs/configuration.md` (every key, type, default, allowed values, description) and
`docs/stack-config.schema.json` (a JSON Schema of a whole `Pulumi.<stack>.yaml`, for editors through
the YAML language server) are both derived from `Settings`, so the docs cannot drift from the
code. gpu_stack/design/docs.py writes them (`make docs`), adding the stack outputs' table, which
lives in the design beside the code that returns them; `--check` fails when they are stale.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from . import NAMESPACE, Settings
from .package_data import docs_path

DOCS_DIR = docs_path()
MARKDOWN_PATH = DOCS_DIR / "configuration.md"
FLEET_MARKDOWN_PATH = DOCS_DIR / "fleet-file.md"
SCHEMA_PATH = DOCS_DIR / "stack-config.schema.json"

SECURE_VALUE = {
    "type": "object",
    "description": "A value encrypted by `pulumi config set --secret`.",
    "properties": {"secure": {"type": "string", "minLength": 1}},
    "required": ["secure"],
    "additionalProperties": False,
}


def settings_schema() -> dict[str, Any]:
    """The JSON Schema of `Settings` as stack files spell its keys (camelCase aliases)."""
    return Settings.model_json_schema(by_alias=True, mode="validation")


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    target = defs[ref.rsplit("/", 1)[-1]]
    merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return merged


def _non_null(node: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The schema without its `null` alternative, and whether null was allowed."""
    options = node.get("anyOf")
    if not options:
        return node, False
    rest = [o for o in options if o.get("type") != "null"]
    if len(rest) == len(options):
        return node, False
    base = {k: v for k, v in node.items() if k != "anyOf"}
    if len(rest) == 1:
        return {**rest[0], **base}, True
    return {**base, "anyOf": rest}, True


def _type_name(node: dict[str, Any], defs: dict[str, Any]) -> str:
    node = _resolve(node, defs)
    if "anyOf" in node:
        return " or ".join(_type_name(o, defs) for o in node["anyOf"])
    if "const" in node:
        return f"`{node['const']}`"
    kind = node.get("type")
    if kind == "array":
        return f"list of {_type_name(node.get('items', {}), defs)}"
    if kind == "object" and "properties" not in node:
        values = node.get("additionalProperties")
        inner = _type_name(values, defs) if isinstance(values, dict) else "value"
        return f"map of name to {inner}"
    if kind == "object":
        return "object"
    if not isinstance(kind, str):
        return "any"  # no type, or a list of them
    return {"string": "string", "integer": "integer", "boolean": "boolean", "number": "number"}.get(kind, "any")


def _allowed(node: dict[str, Any]) -> str:
    parts: list[str] = []
    if "enum" in node:
        parts.append(", ".join(f"`{v}`" for v in node["enum"]))
    bounds = [
        ("minimum", ">= {}"), ("exclusiveMinimum", "> {}"), ("maximum", "<= {}"), ("exclusiveMaximum", "< {}"),
        ("minLength", "at least {} characters"), ("maxLength", "at most {} characters"),
        ("minItems", "at least {} items"), ("maxItems", "at most {} items"),
    ]
    for key, text in bounds:
        if key in node:
            parts.append(text.format(node[key]))
    return "; ".join(parts)


def _default(node: dict[str, Any], required: bool) -> str:
    if required:
        return "required"
    if "default" not in node:
        return ""
    value = node["default"]
    if value is None:
        return "unset"
    if isinstance(value, (dict, list)) and len(json.dumps(value)) > 40:
        return "see below" if isinstance(value, dict) else "`[]`" if not value else "see description"
    return f"`{json.dumps(value)}`"


def _one_line(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def iter_keys(schema: dict[str, Any], prefix: str = f"{NAMESPACE}:") -> Iterator[tuple[str, dict[str, Any], bool, str]]:
    """(config path, field schema, required, description) for every key, depth first.

    Paths read as `pulumi config set --path` takes them: `gpu-stack:sharing.replicas`,
    `gpu-stack:nodes[i].gpu.model`, `gpu-stack:sharing.profiles.<name>.replicas`.
    """
    defs = schema.get("$defs", {})

    def walk(path: str, node: dict[str, Any], required: bool) -> Iterator[tuple[str, dict[str, Any], bool, str]]:
        described = node.get("description")
        node, _ = _non_null(_resolve(node, defs))
        node = _resolve(node, defs)
        yield path, node, required, described or ""
        if node.get("type") == "object" and "properties" in node:
            for name, child in node["properties"].items():
                yield from walk(f"{path}.{name}", child, name in node.get("required", ()))
        elif node.get("type") == "array" and isinstance(node.get("items"), dict):
            item = _resolve(node["items"], defs)
            if item.get("type") == "object" and "properties" in item:
                for name, child in item["properties"].items():
                    yield from walk(f"{path}[i].{name}", child, name in item.get("required", ()))
        elif node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
            value = _resolve(node["additionalProperties"], defs)
            if value.get("type") == "array" and isinstance(value.get("items"), dict):
                value_item = _resolve(value["items"], defs)
                for name, child in value_item.get("properties", {}).items():
                    yield from walk(f"{path}.<name>[i].{name}", child, name in value_item.get("required", ()))
            elif value.get("type") == "object":
                for name, child in value.get("properties", {}).items():
                    yield from walk(f"{path}.<name>.{name}", child, name in value.get("required", ()))

    for name, field in schema["properties"].items():
        yield from walk(f"{prefix}{name}", field, False)


def render_markdown(schema: dict[str, Any]) -> str:
    defs = schema.get("$defs", {})
    lines = [
        "# Stack configuration reference",
        "",
        "<!-- Generated from the models in gpu_stack/config/ and the outputs table in gpu_stack/design/outputs.py by `make docs`; do not edit. -->",
        "",
        "Every key lives under the `gpu-stack:` namespace of `Pulumi.<stack>.yaml` (or `Pulumi.yaml`'s",
        "project defaults). Paths are written as `pulumi config set --path` takes them; `[i]` is a list",
        "index and `<name>` a key you choose. Editors can check a stack file against",
        "[`stack-config.schema.json`](stack-config.schema.json) (YAML language server: add",
        "`# yaml-language-server: $schema=docs/stack-config.schema.json` at the top of the file).",
        "",
    ]
    for name, field in schema["properties"].items():
        top = _resolve(_non_null(_resolve(field, defs))[0], defs)
        lines += [f"## `{NAMESPACE}:{name}`", ""]
        if top.get("description"):
            lines += [_one_line(top["description"]), ""]
        lines += ["| key | type | default | allowed | description |", "| --- | --- | --- | --- | --- |"]
        for path, node, required, described in iter_keys({"properties": {name: field}, "$defs": defs}):
            if path == f"{NAMESPACE}:{name}":
                continue
            is_object = node.get("type") == "object" and "properties" in node
            text = described or (node.get("description", "") if is_object else "")
            lines.append(
                f"| `{path}` | {_type_name(node, defs)} | {_default(node, required)} | "
                f"{_allowed(node)} | {_one_line(text)} |"
            )
        lines.append("")
    return "\n".join(lines)


def _accept_secure(node: Any) -> Any:
    """Every string-typed value may also be given as a `secure:` value (the CLI decrypts it)."""
    if isinstance(node, list):
        return [_accept_secure(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _accept_secure(value) for key, value in node.items()}
    if node.get("type") == "string":
        keep = {k: v for k, v in node.items() if k in ("description", "default", "title")}
        check = {k: v for k, v in node.items() if k not in keep}
        return {**keep, "anyOf": [check, {"$ref": "#/$defs/SecureValue"}]}
    return node


def stack_file_schema() -> dict[str, Any]:
    """A JSON Schema of a whole `Pulumi.<stack>.yaml` for this project."""
    schema = settings_schema()
    defs = _accept_secure(schema.pop("$defs", {}))
    defs["SecureValue"] = SECURE_VALUE
    properties = _accept_secure(schema["properties"])
    config_keys = {f"{NAMESPACE}:{name}": field for name, field in properties.items()}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/gpu-stack/gpu-stack/docs/stack-config.schema.json",
        "title": "gpu-stack: Pulumi.<stack>.yaml",
        "description": "A stack file of the gpu-stack project. Generated from the models in gpu_stack/config/.",
        "type": "object",
        "properties": {
            "config": {
                "type": "object",
                "properties": config_keys,
                # Other namespaces (providers, other projects) are allowed; this project's own keys
                # must be one of the above, so a misspelt key is flagged in the editor.
                "patternProperties": {f"^(?!{NAMESPACE}:)[^:]+:.+$": {}},
                "additionalProperties": False,
            },
            "environment": {
                "description": "Pulumi ESC environments imported into this stack's config.",
                "anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "object"}],
            },
            "secretsprovider": {"type": "string"},
            "encryptedkey": {"type": "string"},
            "encryptionsalt": {"type": "string"},
        },
        "additionalProperties": False,
        "$defs": defs,
    }


def render_fleet_markdown() -> str:
    """The fleet file's reference (`fleet.yaml`, gpu_stack/config/fleet.py), one row per key."""
    from .fleet import DEFAULT_ORDER, FLEET_FILE, Fleet

    schema = Fleet.model_json_schema(by_alias=True, mode="validation")
    defs = schema.get("$defs", {})
    lines = [
        "# Fleet file reference",
        "",
        "<!-- Generated from gpu_stack/config/fleet.py by `make docs`; do not edit. -->",
        "",
        f"`{FLEET_FILE}` beside `Pulumi.yaml` lists the stacks of the fleet and how a change rolls out",
        "(see [fleet.md](fleet.md)). Without it, the committed stacks roll out one wave each in the order",
        f"{', '.join(DEFAULT_ORDER)} (every other stack in one wave before prod).",
        "",
        "| key | type | default | allowed | description |",
        "| --- | --- | --- | --- | --- |",
    ]
    for path, node, required, described in iter_keys(schema, prefix=""):
        is_object = node.get("type") == "object" and "properties" in node
        text = described or (node.get("description", "") if is_object else "")
        lines.append(
            f"| `{path}` | {_type_name(node, defs)} | {_default(node, required)} | {_allowed(node)} | {_one_line(text)} |"
        )
    return "\n".join(lines + _fleet_reading()) + "\n"


def _fleet_reading() -> list[str]:
    """How the fleet file is read and what a problem in it shows (config/fleet.py load_fleet)."""
    from .fleet import FLEET_FILE, MAX_FLEET_BYTES, SHOWN_VALUE
    from .stack_files import MAX_DEPTH, MAX_NODES

    return [
        "",
        "## How the file is read",
        "",
        "As a stack file is: a regular file (a FIFO, a device, a folder or a link that leaves the project's folder",
        f"is refused; `{FLEET_FILE}` as a dangling link is an error, not a missing file) of at most",
        f"{MAX_FLEET_BYTES // 1024} KiB, UTF-8, YAML 1.2 (`yes`, `no`, `on`, `off` and `5:00` are text, not flags or",
        f"numbers), each key once in a mapping, nesting at most {MAX_DEPTH} deep and aliases that expand to at most",
        f"{MAX_NODES:,} values (counted before anything is expanded). A flag is `true` or `false`, a count a whole",
        "number (`2`, never `true` or `2.5`). A wave's name follows a stack name's rule (letters, digits, '-', '_'",
        "and '.'): it is typed after `--wave` and in the resume command. `exclude` names committed stacks that are",
        "in no wave. A file beside `Pulumi.yaml` named like a stack file whose `<stack>` is no stack name",
        "(`Pulumi.my stack.yaml`) is no stack of the fleet: the fleet commands name it once in a note.",
        "",
        "A problem names its key, in one line of at most 400 characters. It shows the value only where it is a",
        f"number, a flag or a short name (at most {SHOWN_VALUE} characters, no URL): never a Prometheus URL, never what",
        "an unknown key holds, never the start of a file that is not a fleet file, as the pull-request workflow",
        "posts the text.",
    ]
