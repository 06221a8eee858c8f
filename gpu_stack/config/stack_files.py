"""Read a Pulumi project's stack files without the Pulumi CLI (for the offline plan and diff).

`Pulumi.yaml` may declare project-level defaults under `config:` (`gpu-stack:key: {default: ...}`
or `gpu-stack:key: value`); `Pulumi.<stack>.yaml` sets values under `config:`. A value written
`{secure: ...}` is encrypted by the Pulumi CLI: offline it is never decrypted, it becomes a
placeholder that every plan output shows as `[secret]`.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from . import NAMESPACE
from .files import FileRefused, read_regular_file
from .safe_input import SECRET_PLACEHOLDER_PREFIX as SECRET_PLACEHOLDER_PREFIX, escape  # re-exported


class StackFileError(Exception):
    """A stack file that cannot be read (missing, not YAML, wrong shape)."""


@dataclass
class StackConfig:
    project: str
    stack: str
    # Full Pulumi config keys ("gpu-stack:nodes") -> JSON-serialisable values.
    values: dict[str, Any] = field(default_factory=dict)
    # Full keys whose value is (or contains) a secret.
    secret_keys: set[str] = field(default_factory=set)
    # The stand-in strings put where secure values were; scrubbed from every output.
    secret_values: set[str] = field(default_factory=set)
    # Pulumi ESC environments the stack file imports (`environment:`); not opened offline.
    environments: list[str] = field(default_factory=list)

    def namespace(self, ns: str = NAMESPACE) -> dict[str, Any]:
        """`{"nodes": [...], "sharing": {...}}` for one config namespace."""
        prefix = ns + ":"
        return {k[len(prefix) :]: v for k, v in self.values.items() if k.startswith(prefix)}

    def as_runtime_config(self) -> dict[str, str]:
        """The config map the Pulumi runtime expects: structured values as JSON strings."""
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in self.values.items()}


MAX_FILE_BYTES = 4 * 1024 * 1024
"""A stack file larger than this is refused before it is parsed (a 1000-node stack is ~200 KiB)."""
MAX_NODES = 500_000
"""YAML nodes a stack file may expand to, counting every alias expansion: refused before building."""
MAX_DEPTH = 64
"""Nesting depth of mappings and sequences."""
STACK_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,100}")
"""A plain stack name as `Pulumi.<stack>.yaml` names its file (an `org/project/stack` name's last part)."""
PROJECT_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,100}")

# YAML 1.2 core schema scalars as the Pulumi CLI's YAML library (Go yaml.v3) resolves them:
# true/false only (yes, no, on, off stay strings), null, ~ or nothing, ints in decimal, 0x, 0o,
# 0b and a leading-0 octal with optional '_' separators, floats. Dates stay the strings they were.
_BOOL = re.compile(r"true|True|TRUE|false|False|FALSE")
_NULL = re.compile(r"~|null|Null|NULL|")
_INT = re.compile(r"[-+]?(?:0b[01_]*[01]|0o[0-7_]*[0-7]|0x[0-9a-fA-F_]*[0-9a-fA-F]|0[0-7_]*|[1-9][0-9_]*)")
_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9][0-9_]*(?:\.[0-9_]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")


class _StackLoader(yaml.SafeLoader):
    """YAML as the Pulumi CLI reads a stack file: YAML 1.2 scalars, duplicate keys refused,
    bounded nesting and alias expansion (checked on the node graph, before anything is built)."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # PyYAML's hook
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                # types-PyYAML leaves Parser.peek_event unannotated (the C parser's is typed)
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise StackFileError(f"nesting deeper than {MAX_DEPTH} levels (line {mark.line + 1})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_document(self, node: Any) -> Any:
        _check_expansion(node)
        _check_duplicates(node)
        return super().construct_document(node)

    def construct_yaml_int(self, node: Any) -> Any:
        text = self.construct_scalar(node).replace("_", "")
        sign = -1 if text.startswith("-") else 1
        digits = text.lstrip("+-")
        if digits.startswith(("0b", "0o", "0x")):
            return sign * int(digits, 0)
        if len(digits) > 1 and digits.startswith("0"):
            # The Pulumi CLI's YAML (go-yaml v3) still reads a leading 0 as octal: `010` is 8, which
            # nobody who typed it meant; refused, saying how to write each reading.
            shown = self.construct_scalar(node)
            where = f"line {node.start_mark.line + 1}: " if node.start_mark is not None else ""
            try:
                octal = f" (octal {sign * int(digits, 8)})"
            except ValueError:
                octal = ""
            raise StackFileError(
                f"{where}{shown[:20]} has a leading zero, which the Pulumi CLI reads as an octal number{octal}: "
                f"write {sign * int(digits, 10)} for the decimal number, 0o{digits.lstrip('0') or '0'} for octal, "
                f"or '{shown[:20]}' in quotes for text"
            )
        return sign * int(digits)

    def construct_yaml_float(self, node: Any) -> Any:
        text = self.construct_scalar(node).replace("_", "").lower()
        if text.endswith(".nan"):
            return float("nan")
        if text.endswith(".inf"):
            return float("-inf") if text.startswith("-") else float("inf")
        return float(text)


_StackLoader.yaml_implicit_resolvers = {}
for _tag, _regexp, _first in (
    ("tag:yaml.org,2002:bool", _BOOL, "tTfF"),
    ("tag:yaml.org,2002:null", _NULL, ["~", "n", "N", ""]),
    ("tag:yaml.org,2002:int", _INT, "-+0123456789"),
    ("tag:yaml.org,2002:float", _FLOAT, "-+0123456789."),
    ("tag:yaml.org,2002:merge", re.compile(r"<<"), "<"),
):
    _StackLoader.add_implicit_resolver(_tag, re.compile(rf"^(?:{_regexp.pattern})$"), list(_first))
_StackLoader.add_constructor("tag:yaml.org,2002:int", _StackLoader.construct_yaml_int)
_StackLoader.add_constructor("tag:yaml.org,2002:float", _StackLoader.construct_yaml_float)


def _check_expansion(root: Any) -> None:
    """Count the nodes the document expands to (an alias counts its whole target again), with a
    memo per node so a billion-laughs file costs one pass over its few hundred nodes."""
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise StackFileError(f"an alias refers to itself (line {node.start_mark.line + 1})")
        active.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        active.discard(key)
        if total > MAX_NODES:
            raise StackFileError(
                f"expands to more than {MAX_NODES} values (aliases repeat what they point at); refused before expanding"
            )
        sizes[key] = total
        return total

    size(root)


def _check_duplicates(root: Any) -> None:
    """A key twice in one mapping is an error for the CLI ("mapping key already defined")."""
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[Any, int] = {}
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    mark = (key.tag, key.value)
                    if mark in first:
                        raise StackFileError(
                            f"line {key.start_mark.line + 1}: key {escape(repr(key.value))} is already defined "
                            f"at line {first[mark]}; each key may appear once in a mapping"
                        )
                    first[mark] = key.start_mark.line + 1
                stack.extend((key, value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def _one_line(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or str(exc)
    mark = getattr(exc, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return escape(where + str(problem)).replace("\n", " ")


def load_yaml_file(path: Path, what: str = "a stack file", limit: int = MAX_FILE_BYTES, within: Path | None = None) -> Any:
    """The YAML document of a file the program reads (a stack file, the fleet file), read as a
    stack file is: a regular file of at most `limit` bytes (inside `within` when given), UTF-8,
    YAML 1.2, keys once, aliases bounded before expansion; else StackFileError in one line."""
    shown = escape(str(path))
    try:
        data = read_regular_file(path, limit, what, within)
    except FileRefused as exc:
        raise StackFileError(str(exc)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise StackFileError(f"{shown}: not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line})") from None
    if "\0" in text:
        line = text[: text.index("\0")].count("\n") + 1
        raise StackFileError(f"{shown}: holds a NUL byte (line {line}); {what} is text")
    try:
        return copy.deepcopy(_load_allowing_tabs_before_comments(text))  # each reader its own copy
    except StackFileError as exc:
        raise StackFileError(f"{shown}: {exc}") from None
    except yaml.YAMLError as exc:
        raise StackFileError(f"{shown}: not valid YAML: {_one_line(exc)}") from None
    except (RecursionError, MemoryError, ValueError, OverflowError) as exc:
        raise StackFileError(f"{shown}: cannot be loaded: {escape(type(exc).__name__)}") from None


MAX_TAB_FIXES = 64


@functools.lru_cache(maxsize=8)  # by text: a fleet plan reads the same Pulumi.yaml for every stack
def _load_allowing_tabs_before_comments(text: str) -> Any:
    """The document, read as the Pulumi CLI (go-yaml) reads it: YAML 1.2 separates a trailing
    comment by spaces or tabs, where PyYAML refuses a tab (`mode: mps\t# why`). Where PyYAML stops
    at such a tab, the whitespace before the `#` becomes spaces and the file is read again: the
    scanner stopped there, so it is neither in a quoted string nor in a block scalar."""
    for _ in range(MAX_TAB_FIXES if len(text) <= 256 * 1024 else 1):
        try:
            return yaml.load(text, Loader=_StackLoader)  # a SafeLoader subclass
        except yaml.scanner.ScannerError as exc:
            mark = exc.problem_mark
            index = mark.index if mark is not None else -1
            end = text.find("#", index)
            if not (0 <= index < len(text) and text[index] == "\t" and end > 0 and not text[index:end].strip(" \t")):
                raise
            text = text[:index] + " " * (end - index) + text[end:]
    return yaml.load(text, Loader=_StackLoader)


STACK_FILE_KEYS = ("config", "environment", "secretsprovider", "encryptedkey", "encryptionsalt")
"""The top-level keys of a `Pulumi.<stack>.yaml` the CLI reads."""


def _outside_config(doc: dict[str, Any], path: Path, allowed: tuple[str, ...] | None) -> None:
    """A `gpu-stack:` key (or a config-like `ns:key`) at the top of a file, beside `config:`,
    is ignored by Pulumi: say so instead of planning without it."""
    for key in doc:
        if not isinstance(key, str):
            continue
        stray = key.startswith(NAMESPACE + ":") or (allowed is not None and ":" in key and key not in allowed)
        if stray:
            raise StackFileError(
                f"{escape(str(path))}: {escape(key)[:80]} is at the top of the file, outside 'config:', where "
                "Pulumi ignores it; indent it under config:"
            )


def _full_key(key: str, project: str) -> str:
    return key if ":" in key else f"{project}:{key}"


def _config_section(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """The `config:` mapping of a project or stack file, keys as strings ("ns:key")."""
    section = doc.get("config") or {}
    shown = escape(str(path))
    if not isinstance(section, dict):
        raise StackFileError(f"{shown}: 'config:' must be a mapping of keys (like gpu-stack:sharing) to values")
    bad = [k for k in section if not isinstance(k, str)]
    if bad:
        raise StackFileError(f"{shown}: config key {escape(repr(bad[0]))} must be a string such as gpu-stack:sharing")
    return section


def check_stack_name(stack: str) -> str:
    """A plain stack name (`dev`, `prod-eu.1`): never a path such as `../..` or `/`."""
    if not STACK_NAME_RE.fullmatch(stack) or stack in (".", ".."):
        raise StackFileError(
            f"stack name {escape(repr(stack))[:120]} is not a plain stack name: letters, digits, '-', '_' and '.', "
            "at most 100 characters (the file is Pulumi.<stack>.yaml next to Pulumi.yaml)"
        )
    return stack


def _secure_value(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"secure"}


def _secure_paths(value: Any, path: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    if _secure_value(value):
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _secure_paths(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _secure_paths(v, (*path, i))]
    return []


def secure_value_paths(stack_path: Path, namespace: str = NAMESPACE) -> dict[str, list[tuple[Any, ...]]]:
    """Top-level key of `namespace` -> the paths (starting with that key) of its `secure:` values."""
    doc = load_yaml_file(stack_path) or {}
    if not isinstance(doc, dict):
        raise StackFileError(f"{escape(str(stack_path))}: must be a mapping with a 'config:' section")
    out: dict[str, list[tuple[Any, ...]]] = {}
    for key, value in _config_section(doc, stack_path).items():
        ns, _, short = key.rpartition(":")
        if ns == namespace:
            paths = _secure_paths(value, (short,))
            if paths:
                out[short] = paths
    return out


def read_stack(project_dir: Path | str, stack: str, inside: bool = False) -> StackConfig:
    """Merge `Pulumi.yaml` defaults and `Pulumi.<stack>.yaml` values the way the CLI does; `inside`:
    each file must be in the project folder once its links are followed (`fleet plan`, whose text
    the pull-request workflow posts, reads no file a link takes out of the project)."""
    root = Path(project_dir)
    within = root if inside else None
    check_stack_name(stack)
    project_doc = load_yaml_file(root / "Pulumi.yaml", within=within)
    if not isinstance(project_doc, dict) or "name" not in project_doc:
        raise StackFileError(f"{escape(str(root / 'Pulumi.yaml'))}: needs a top-level 'name'")
    _outside_config(project_doc, root / "Pulumi.yaml", None)
    project = project_doc["name"]
    if not isinstance(project, str) or not PROJECT_NAME_RE.fullmatch(project):
        raise StackFileError(
            f"{escape(str(root / 'Pulumi.yaml'))}: name {escape(repr(project))[:120]} is not a project name "
            "(letters, digits, '-', '_' and '.')"
        )
    cfg = StackConfig(project=project, stack=stack)

    def resolve(value: Any, key: str) -> Any:
        if _secure_value(value):
            if not isinstance(value["secure"], str):
                raise StackFileError(f"{escape(key)}: a 'secure:' value must be the encrypted string the CLI wrote")
            # Derived from the ciphertext: the same secure value gives the same placeholder in every
            # plan (so the diff can tell a changed secret from an unchanged one), and never the value.
            digest = hashlib.sha256(value["secure"].encode()).hexdigest()[:20]
            placeholder = f"{SECRET_PLACEHOLDER_PREFIX}{digest}"
            cfg.secret_keys.add(key)
            cfg.secret_values.add(placeholder)
            return placeholder
        if isinstance(value, dict):
            return {k: resolve(v, key) for k, v in value.items()}
        if isinstance(value, list):
            return [resolve(v, key) for v in value]
        return value

    declared_secret: set[str] = set()
    for key, spec in _config_section(project_doc, root / "Pulumi.yaml").items():
        full = _full_key(key, project)
        if isinstance(spec, dict) and ("default" in spec or "value" in spec or "type" in spec or "secret" in spec):
            if spec.get("secret") is True:
                # `secret: true`: the CLI insists the stack sets it with --secret; its value is a secret.
                declared_secret.add(full)
                cfg.secret_keys.add(full)
            if "value" in spec:
                cfg.values[full] = resolve(spec["value"], full)
            elif "default" in spec:
                cfg.values[full] = resolve(spec["default"], full)
        else:
            cfg.values[full] = resolve(spec, full)

    stack_path = root / f"Pulumi.{stack}.yaml"
    stack_doc = load_yaml_file(stack_path, within=within) or {}
    if not isinstance(stack_doc, dict):
        raise StackFileError(f"{escape(str(stack_path))}: must be a mapping with a 'config:' section")
    _outside_config(stack_doc, stack_path, STACK_FILE_KEYS)
    for key, value in _config_section(stack_doc, stack_path).items():
        full = _full_key(key, project)
        if full in declared_secret and not _secure_value(value):
            raise StackFileError(
                f"{escape(full)} (in {escape(stack_path.name)}): Pulumi.yaml declares it 'secret: true'; "
                f"set it with: pulumi config set --secret {shlex.quote(escape(full))}"
            )
        cfg.values[full] = resolve(value, full)
    imports = stack_doc.get("environment") or []
    cfg.environments = [str(e) for e in (imports if isinstance(imports, list) else [imports])]
    for key, value in cfg.values.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError, RecursionError):
            raise StackFileError(
                f"{escape(key)} (in {escape(stack_path.name)} or Pulumi.yaml): holds a value config cannot carry "
                "(binary, a set or another non-JSON YAML type); write it as a string"
            ) from None
    return cfg


def list_stacks(project_dir: Path | str) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in Path(project_dir).glob("Pulumi.*.yaml"))
