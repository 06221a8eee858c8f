"""The prose beside the code names only what exists: every repository path (`gpu_stack/foo.py`,
`config/x.yaml`, `docs/y.md`, `sandbox/z.py`) and every `gpu_stack.*` module that a comment or a
docstring names, and every path and config key that a stack file's comments name (Pulumi.*.yaml,
tests/stacks/*.yaml), so a moved module or a renamed key cannot leave its old name behind.

A path counts when it exists from the repository root, from gpu_stack/ (the layers name each other
`offline/plan.py`) or from the file's own folder. Globs and placeholders (`*`, `<stack>`, `{x}`) are
patterns, not names, and are skipped. A config key is checked against the settings' JSON Schema
(the one docs/stack-config.schema.json holds): `gpu-stack:a.b` anywhere in the prose, and in a
stack file's comments also a bare `a.b` that starts with a top-level key.
"""

from __future__ import annotations

import ast
import importlib
import io
import itertools
import re
import subprocess
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from gpu_stack.config.docs import settings_schema
from gpu_stack.config.root import TOP_LEVEL_KEYS

ROOT = Path(__file__).resolve().parents[1]
PYTHON_DIRS = ("gpu_stack", "tests", "sandbox", "bench", "toolchain")
STACK_FILES = sorted([*ROOT.glob("Pulumi.*.yaml"), *(ROOT / "tests" / "stacks").glob("*.yaml")])
TOP = ("gpu_stack", "config", "docs", "sandbox", "tests", "bench", "toolchain", ".ci", ".github")
LAYERS = ("design", "components", "offline", "fleet", "cli")
"""gpu_stack's layers, which its modules name package-relative (`offline/plan.py`)."""

PATH = re.compile(
    r"(?<![\w./~-])(?:\.\./)?(?P<path>(?:" + "|".join(re.escape(t) for t in TOP + LAYERS) + r")/[\w.@*<>{}$/-]*)"
)
MODULE = re.compile(r"(?<![\w.])gpu_stack(?:\.[A-Za-z_]\w*)+")
KEY = re.compile(r"(?<![\w./-])gpu-stack:(?P<key>[A-Za-z][\w.\[\]<>\"'-]*)")
BARE_KEY = re.compile(r"(?<![\w./:-])(?P<key>(?:" + "|".join(TOP_LEVEL_KEYS) + r")\.[A-Za-z][\w.\[\]<>-]*)")
PLACEHOLDER_KEYS = frozenset({"key", "KEY", "name", "path"})
"""What prose writes for any key (`gpu-stack:key: value`)."""
PATTERN = re.compile(r"[*<>{}$]|\.\.\.")


def _python_files() -> list[Path]:
    files = [ROOT / "__main__.py"]
    for folder in PYTHON_DIRS:
        files += [p for p in sorted((ROOT / folder).rglob("*.py")) if "__pycache__" not in p.parts]
    return [p for p in files if p != Path(__file__).resolve()]  # this file's examples name what is missing


def python_prose(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python file."""
    source = path.read_text(encoding="utf-8")
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            yield tok.start[0], tok.string
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc and node.body and isinstance(node.body[0], ast.Expr):
                yield node.body[0].lineno, doc
        # attribute docstrings: a string statement right after an assignment
        body = getattr(node, "body", None)
        if isinstance(body, list):
            for before, stmt in itertools.pairwise(body):
                if (isinstance(before, (ast.Assign, ast.AnnAssign)) and isinstance(stmt, ast.Expr)
                        and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)):
                    yield stmt.lineno, stmt.value.value


def yaml_comments(path: Path) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if "#" in line and line.lstrip().startswith("#"):
            yield number, line
        elif " #" in line:
            yield number, line.split(" #", 1)[1]


def _clean(name: str) -> str:
    name = name.split("#", 1)[0]
    return name.rstrip(".,:;)'`\"]")


INSTALLED_ONLY = {"gpu_stack/_data/config": "config", "gpu_stack/_data/docs": "docs", "gpu_stack/_data": "."}
"""Folders that exist only in an installed package: pyproject.toml maps the repository's there."""


def _is_file(name: str, here: Path) -> Path | None:
    for base in (ROOT, ROOT / "gpu_stack", here.parent, here.parent.parent):
        if (base / name).exists():
            return base / name
    return None


def path_exists(name: str, here: Path) -> bool:
    name = name.removeprefix("../").rstrip("/")
    for prefix, target in INSTALLED_ONLY.items():
        if name == prefix or name.startswith(prefix + "/"):
            name = (target + name[len(prefix):]).removeprefix("./") or "."
            break
    if _is_file(name, here):
        return True
    # a module written as a path, maybe with an attribute: `fleet/automation`, `offline/objects.Renderer`
    stem, _, attr = name.partition(".")
    module = _is_file(stem + ".py", here) if "/" in stem else None
    if module is None:
        return False
    first = attr.split(".", 1)[0]
    source = module.read_text(encoding="utf-8")
    return not first or re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(first)}\b|^{re.escape(first)}\s*[:=]",
                                  source, re.M) is not None


def missing_paths(text: str, here: Path) -> list[str]:
    out = []
    for match in PATH.finditer(text):
        name = _clean(match.group("path"))
        if PATTERN.search(name) or ("/" not in name.rstrip("/") and name.rstrip("/") in TOP + LAYERS):
            continue
        if not path_exists(name, here):
            out.append(name)
    return out


BARE_FILE = re.compile(r"(?<![\w./-])(?P<name>[A-Za-z_][\w-]*\.py)\b")
GENERATED = re.compile(r"_pb2(?:_grpc)?\.py$")
"""Files a test generates (the device-plugin API's stubs), never committed."""


@cache
def _basenames() -> frozenset[str]:
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    return frozenset(n.rsplit("/", 1)[-1] for n in names if n)


def missing_files(text: str) -> list[str]:
    """A module named by its file name alone (`derive.py`): some file of the repository has that name."""
    return [m for m in (x.group("name") for x in BARE_FILE.finditer(text)) if m not in _basenames() and not GENERATED.search(m)]


def _module_exists(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return cut > 1 or len(parts) == 1
    return False


def missing_modules(text: str) -> list[str]:
    out = []
    for match in MODULE.finditer(text):
        name = match.group(0).rstrip(".")
        # a trailing file extension is a path written with dots (`gpu_stack.config.docs` is fine, `x.py` too)
        if name.endswith((".py", ".md", ".yaml", ".json")):
            continue
        if not _module_exists(name):
            out.append(name)
    return out


# --------------------------------------------------------------------------- config keys
@cache
def _schema() -> dict[str, Any]:
    return settings_schema()


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = {**_schema()["$defs"][node["$ref"].rsplit("/", 1)[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _children(node: dict[str, Any], part: str | int) -> list[dict[str, Any]]:
    node = _resolve(node)
    options = [_resolve(o) for o in node.get("anyOf", node.get("oneOf", []))] or [node]
    out = []
    for option in options:
        if isinstance(part, int):
            if option.get("type") == "array" and isinstance(option.get("items"), dict):
                out.append(option["items"])
            continue
        props = option.get("properties") or {}
        if part in props:
            out.append(props[part])
        elif isinstance(option.get("additionalProperties"), dict):
            out.append(option["additionalProperties"])
    return out


SEGMENT = re.compile(r"\[(?:\d+|i|j|n|\"[^\"]*\"|'[^']*')\]|[^.\[\]]+")


def key_exists(key: str) -> bool:
    """`sharing.profiles.big.replicas`, `nodes[0].gpu.model`, `nodes[i].name`, `mig.profiles["x"]`."""
    parts: list[str | int] = []
    for seg in SEGMENT.findall(key.strip(".")):
        if seg.startswith("["):
            inner = seg[1:-1]
            parts.append(0 if inner.isdigit() or inner in ("i", "j", "n") else inner.strip("\"'"))
        else:
            parts.append(seg)
    nodes = [{"properties": _resolve(_schema()).get("properties", {})}]
    for part in parts:
        nodes = [child for node in nodes for child in _children(node, part)]
        if not nodes:
            return False
    return True


def missing_keys(text: str, bare: bool) -> list[str]:
    out = []
    matches = [m.group("key") for m in KEY.finditer(text)]
    if bare:
        matches += [m.group("key") for m in BARE_KEY.finditer(text)]
    for key in matches:
        key = _clean(key).rstrip(".")
        if key in PLACEHOLDER_KEYS:
            continue
        if PATTERN.search(key.replace("[<", "[").replace(">]", "]")) and not re.search(r"\.<\w+>", key):
            continue
        key = re.sub(r"\.<[\w-]+>", ".anyname", key)  # `sharing.profiles.<name>.replicas`
        if not key_exists(key):
            out.append(key)
    return out


# --------------------------------------------------------------------------- the tests
def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def test_the_checks_catch_what_they_are_for():
    here = ROOT / "gpu_stack" / "offline" / "runner.py"
    assert missing_paths("see gpu_stack/offline/plan.py and offline/fast_monitor.py", here) == []
    assert missing_paths("moved: gpu_stack/sharing.py, docs/nope.md; /etc/config/x.toml is the node's", here) == [
        "gpu_stack/sharing.py", "docs/nope.md",
    ]
    assert missing_paths("config/validation/*.sh and tests/stacks/Pulumi.<stack>.yaml", here) == []
    assert missing_modules("gpu_stack.config.load.load_settings, gpu_stack.sharing") == ["gpu_stack.sharing"]
    assert missing_files("derive() lives in derive.py; api_pb2.py is generated; sharing_old.py is gone") == ["sharing_old.py"]
    assert missing_paths("offline/objects.Renderer, fleet/automation, offline/objects.Nothing", here) == [
        "offline/objects.Nothing",
    ]
    assert missing_keys("gpu-stack:sharing.replicas, gpu-stack:nodes[0].gpu.model, gpu-stack:mig.profiles", bare=False) == []
    assert missing_keys("gpu-stack:sharing.profiles.<name>.replicas and gpu-stack:sharing.replica", bare=False) == [
        "sharing.replica",
    ]
    assert missing_keys("metrics come from dcgmExporter.metric", bare=True) == ["dcgmExporter.metric"]


@pytest.mark.parametrize("path", _python_files(), ids=_rel)
def test_comments_and_docstrings_name_paths_and_modules_that_exist(path: Path):
    stale = []
    for line, text in python_prose(path):
        names = missing_paths(text, path) + missing_modules(text) + missing_files(text)
        stale += [f"line {line}: {name}" for name in names]
        stale += [f"line {line}: gpu-stack:{key}" for key in missing_keys(text, bare=False)]
    assert stale == [], f"{_rel(path)} names what does not exist: " + "; ".join(stale)


@pytest.mark.parametrize("path", STACK_FILES, ids=_rel)
def test_stack_file_comments_name_paths_and_keys_that_exist(path: Path):
    stale = []
    for line, text in yaml_comments(path):
        stale += [f"line {line}: {name}" for name in missing_paths(text, path) + missing_files(text)]
        stale += [f"line {line}: {key}" for key in missing_keys(text, bare=True)]
    assert stale == [], f"{_rel(path)} names what does not exist: " + "; ".join(stale)
    # the project holds no defaults (Pulumi.yaml: every default lives in the settings models)
    text = path.read_text(encoding="utf-8").lower()
    assert "default in pulumi.yaml" not in text and "pulumi.yaml's default" not in text
