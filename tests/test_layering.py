"""The package's structure: every module imports only downward (no cycle), none grows too big,
the config package reaches no builder, and nothing below the components imports Pulumi."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gpu_stack"
MAX_LINES = 400


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def import_graph() -> dict[str, set[str]]:
    """Module -> the gpu_stack modules it imports (anywhere in the file, functions included)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node)
                # `from . import x` imports the module x when there is one, else a name of the package.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.add(target)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as [a, b, ..., a], or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_sees_real_edges():
    graph = import_graph()
    assert "gpu_stack.config.root" in graph["gpu_stack.config.load"]
    assert "gpu_stack.config.rules" in graph["gpu_stack.config.load"]
    assert "gpu_stack.gpu_models" in graph["gpu_stack.config.rules.mig"]
    assert "gpu_stack.config" in graph["gpu_stack.program"]
    assert "gpu_stack.config.facts" in graph["gpu_stack.capacity"]


def test_find_cycle_reports_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_gpu_stack():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_config_reaches_no_builder_component_or_pulumi():
    """The config package imports only itself and the data modules below it."""
    allowed_outside = {"gpu_stack.gpu_models", "gpu_stack.dcgm_csv"}
    graph = import_graph()
    for module, edges in graph.items():
        if not module.startswith("gpu_stack.config"):
            continue
        outside = {e for e in edges if e.startswith("gpu_stack") and not e.startswith("gpu_stack.config")}
        assert outside <= allowed_outside, f"{module} imports {sorted(outside - allowed_outside)}"
    for data in allowed_outside:
        assert not {e for e in graph[data] if e.startswith("gpu_stack")}, f"{data} must stay a leaf"


def test_pulumi_only_in_components_and_the_program():
    """The pure core imports no Pulumi SDK: only the components, the stack that composes them,
    the program's config reading and the offline runner do."""
    allowed = ("gpu_stack.components", "gpu_stack.stack", "gpu_stack.program", "gpu_stack.pulumi_config", "gpu_stack.offline")
    for name, path in _modules().items():
        if name.startswith(allowed):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            )
            assert not any(n.split(".")[0].startswith("pulumi") for n in names), f"{name} imports {names}"


def test_no_module_over_the_size_limit():
    too_big = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not too_big, f"modules over {MAX_LINES} lines: {too_big}"
