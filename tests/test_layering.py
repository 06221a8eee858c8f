"""The package's structure: the tree is the architecture, one package per layer, and every import
runs down the layers (config <- design <- components <- offline <- fleet <- cli); no cycle, no module grows
too big, and Pulumi is imported only where resources are registered or mocked.

    gpu_stack/config/      settings models, rules, the GPU catalog, reading the stack files and Pulumi's config
    gpu_stack/design/      derive() and every pure builder (no Pulumi, no stack files)
    gpu_stack/components/  the Pulumi components and the program that registers them
    gpu_stack/offline/     plan, diff, chart rendering under Pulumi's mock runtime
    gpu_stack/fleet/       many stacks: plan together, roll out in waves (Automation API in fleet.automation)
    gpu_stack/cli/         the subcommands; only gpu_stack/__main__.py imports them
"""

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


ROOT_MODULES = frozenset({"gpu_stack", "gpu_stack.__main__"})
"""The only modules at the root of gpu_stack: the package and the command line's entry point."""
LAYERS = ("config", "design", "components", "offline", "fleet", "cli")
"""Lowest first: a module imports only its own layer and those before it."""
PULUMI_LAYERS = ("components", "offline")
PULUMI_READERS = frozenset({"gpu_stack.config.pulumi_config"})
"""Config's one Pulumi-facing module (the running program's config map); the design never imports it."""
PULUMI_DRIVERS = frozenset({"gpu_stack.fleet.automation"})
"""The fleet's one Pulumi-facing module: it drives the real engine through `pulumi.automation`."""


def layer_of(module: str) -> int | None:
    """Rank of a module's layer (root modules above every layer), or None for a misplaced module."""
    if module in ROOT_MODULES:
        return len(LAYERS)
    parts = module.split(".")
    if len(parts) >= 2 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return None


def misplaced(modules) -> list[str]:
    """Modules outside the layer packages and not one of ROOT_MODULES."""
    return sorted(m for m in modules if layer_of(m) is None)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """'a -> b' for every import of a module from a higher layer (the CLI counts as the highest)."""
    found = []
    for module, edges in sorted(graph.items()):
        rank = layer_of(module)
        for target in sorted(edges):
            target_rank = layer_of(target)
            if rank is None or target_rank is None:
                continue  # reported by misplaced()
            if target_rank > rank:
                found.append(f"{module} -> {target}")
            if module.startswith("gpu_stack.design") and target in PULUMI_READERS:
                found.append(f"{module} -> {target} (the design reads no Pulumi config)")
    return found


def pulumi_imports(source: str) -> list[str]:
    """The Pulumi modules `source` imports, anywhere in the file."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module or "")
    return [n for n in names if n.split(".")[0].startswith("pulumi")]


def test_the_layer_checks_catch_a_root_module_and_an_upward_import():
    assert misplaced({"gpu_stack", "gpu_stack.__main__", "gpu_stack.design.mig", "gpu_stack.sharing", "gpu_stack.tools.x"}) == [
        "gpu_stack.sharing", "gpu_stack.tools.x",
    ]
    graph = {
        "gpu_stack.config.facts": {"gpu_stack.design.mig"},
        "gpu_stack.design.mig": {"gpu_stack.config.facts", "gpu_stack.components.operator", "gpu_stack.config.pulumi_config"},
        "gpu_stack.components.operator": {"gpu_stack.design.mig", "gpu_stack.offline.plan"},
        "gpu_stack.offline.plan": {"gpu_stack.components.engine", "gpu_stack.cli.diff"},
        "gpu_stack.cli.diff": {"gpu_stack.offline.plan"},
        "gpu_stack.__main__": {"gpu_stack.cli.diff"},
    }
    assert upward_imports(graph) == [
        "gpu_stack.components.operator -> gpu_stack.offline.plan",
        "gpu_stack.config.facts -> gpu_stack.design.mig",
        "gpu_stack.design.mig -> gpu_stack.components.operator",
        "gpu_stack.design.mig -> gpu_stack.config.pulumi_config (the design reads no Pulumi config)",
        "gpu_stack.offline.plan -> gpu_stack.cli.diff",
    ]
    assert pulumi_imports("def f():\n    import pulumi_kubernetes as k8s\n") == ["pulumi_kubernetes"]


def test_gpu_stack_is_one_package_per_layer():
    modules = _modules()
    assert not misplaced(modules), (
        f"modules outside the layer packages {LAYERS}: {misplaced(modules)}; the root holds only {sorted(ROOT_MODULES)}"
    )
    assert {m.split(".")[1] for m in modules if layer_of(m) is not None and m not in ROOT_MODULES} == set(LAYERS)


def test_every_import_runs_down_the_layers():
    upward = upward_imports(import_graph())
    assert not upward, "imports against the layers (config <- design <- components <- offline <- fleet <- cli): " + "; ".join(upward)


def test_the_graph_sees_real_edges():
    graph = import_graph()
    assert "gpu_stack.config.root" in graph["gpu_stack.config.load"]
    assert "gpu_stack.config.rules" in graph["gpu_stack.config.load"]
    assert "gpu_stack.config.gpu_models" in graph["gpu_stack.config.rules.mig"]
    assert "gpu_stack.config" in graph["gpu_stack.components.program"]
    assert "gpu_stack.config.facts" in graph["gpu_stack.design.capacity"]


def test_find_cycle_reports_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_gpu_stack():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_pulumi_only_in_components_offline_the_config_reader_and_the_fleet_driver():
    """The config (but its Pulumi config reader), the design, the fleet (but its Automation API
    driver) and the CLI import no Pulumi SDK."""
    for name, path in _modules().items():
        if name in PULUMI_READERS | PULUMI_DRIVERS or (name.split(".")[1:2] and name.split(".")[1] in PULUMI_LAYERS):
            continue
        found = pulumi_imports(path.read_text())
        assert not found, f"{name} imports {found}"


def test_no_module_over_the_size_limit():
    too_big = {
        name: n
        for name, path in _modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not too_big, f"modules over {MAX_LINES} lines: {too_big}"
