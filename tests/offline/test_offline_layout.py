"""The offline package is split by job: each module imports only modules below it, none is over 400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import gpu_stack.offline

PACKAGE = Path(gpu_stack.offline.__file__).parent
# Lowest first: a module may import (at module level or inside a function) only modules before it.
LAYERS = (
    "plan", "yaml_text", "scrub", "render", "fast_sdk", "fast_monitor", "runtime", "records", "runner", "git_plan", "chart_files", "chart",
    "diff.model", "diff.replace_rules", "diff.urns", "diff.compute", "diff.rollout", "diff.dra_rollout", "diff.labels", "diff.blocks", "diff.commands", "diff.objects_view",
    "diff.text", "diff.markdown", "diff", "objects", "effects", "images",
)


def _module(path: Path) -> str:
    rel = path.relative_to(PACKAGE).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Modules of gpu_stack.offline that `path` imports, outside `if TYPE_CHECKING:` blocks."""
    module = _module(path)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    package = [p for p in package if p]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, ast.ImportFrom) or node.level == 0:
            continue
        up = node.level - 1
        if up > len(package):
            continue  # above gpu_stack.offline
        target = package[: len(package) - up] + (node.module.split(".") if node.module else [])
        candidates = [".".join(target)] + [".".join(target + [a.name]) for a in node.names]
        found |= {c for c in candidates if c in LAYERS}
    return found - {module}


def test_offline_modules_import_only_downward():
    modules = {_module(p): p for p in PACKAGE.rglob("*.py") if _module(p)}
    assert set(modules) == set(LAYERS), "list a new offline module in LAYERS"
    upward = {
        name: sorted(i for i in _imports(path) if LAYERS.index(i) > LAYERS.index(name))
        for name, path in modules.items()
    }
    assert {k: v for k, v in upward.items() if v} == {}


def test_no_offline_module_is_over_400_lines():
    sizes = {_module(p) or "__init__": len(p.read_text(encoding="utf-8").splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {m: n for m, n in sizes.items() if n > 400} == {}
