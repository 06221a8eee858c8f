"""The components hold no decision: they take the design's plans (derive()'s StackDesign) and
register them, named from their own name. Checked on the source (what a component may import) and
on the plans of the committed stacks (how every child is named)."""

from __future__ import annotations

import ast

import pytest

from gpu_stack.config.stack_files import read_stack
from gpu_stack.offline.runner import run_program

from ..cli.test_golden import STACKS, project_dirs  # noqa: F401 (a fixture)
from ..helpers import CHART_REF, dev_config, plan_of, require_reference, set_path
from ..test_layering import PACKAGE, _module_name, _resolve

COMPONENTS = PACKAGE / "components"
PROGRAM = {
    "gpu_stack.components.stack", "gpu_stack.components.program", "gpu_stack.components.engine",
    "gpu_stack.components.platform",
}
"""The program that derives the design and composes the components (and GpuPlatform, the component
that is the program: it validates the settings), and the engine notes."""
CONFIG_ALLOWED = {"gpu_stack.config.chart_source", "gpu_stack.config.files"}
"""Where the chart comes from: read from the project folder beside the design, passed on ready;
and the one bounded file reader (no settings in it), which the cluster checks before a preview
read the kubeconfig's files through (components/kube_api.py)."""


def config_imports(source: str, module: str) -> set[str]:
    """The gpu_stack.config modules (or the package) that `source`, the module `module`, imports."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = _resolve(module, False, node)
            if base == "gpu_stack.config" or base.startswith("gpu_stack.config."):
                found.add(base)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("gpu_stack.config")}
    return found


def test_the_check_sees_a_settings_import():
    source = (
        "from ..config import OperatorSettings\nfrom ..config.chart_source import ChartSource\n"
        "def f():\n    from ..config.root import Settings\n"
    )
    found = config_imports(source, "gpu_stack.components.operator")
    assert found - CONFIG_ALLOWED == {"gpu_stack.config", "gpu_stack.config.root"}


def test_no_component_reads_the_settings():
    """A component that cannot import the settings cannot decide from them: it gets plans."""
    offending = {
        _module_name(path): sorted(found - CONFIG_ALLOWED)
        for path in sorted(COMPONENTS.glob("*.py"))
        if _module_name(path) not in PROGRAM | {"gpu_stack.components"}
        and (found := config_imports(path.read_text(), _module_name(path))) - CONFIG_ALLOWED
    }
    assert not offending, f"components that import the settings (take a design plan instead): {offending}"


@pytest.mark.parametrize("stack", STACKS)
def test_every_child_is_named_from_its_component(stack, project_dirs):  # noqa: F811
    if stack == "airgap":
        require_reference(CHART_REF)  # the air-gapped sample's local chart copy (charts/gpu-operator)
    plan = run_program(read_stack(project_dirs[stack], stack), project_dirs[stack])
    components = {r.name for r in plan.resources if r.type.startswith("gpu-stack:index:")}
    children = [(r.name, r.parent, r.type) for r in plan.resources if r.parent is not None]
    children += [(r["name"], r["parent"], r["type"]) for r in plan.reads]
    assert children and {parent for _, parent, _ in children} <= components
    for name, parent, type_ in children:
        if parent == "gpu-stack":
            # GpuPlatform's own children keep the names they had as children of the stack (the
            # aliases of stacks made before it move them, never rename them): one platform per program.
            assert type_ == "pulumi:providers:kubernetes" or type_.startswith("gpu-stack:index:"), (name, type_)
        elif type_ == "kubernetes:coordination.k8s.io/v1:Lease":
            # The one exception: the node reads keep their `node-<node>` names (node_labels.py),
            # so that no state renames them (the patches are `node-labels-<node>`).
            assert parent == "node-labels" and name.startswith("node-"), name
        else:
            assert name.startswith(f"{parent}-"), f"{name} (a {type_}) is not named from its component {parent}"


@pytest.mark.parametrize("stack", [*STACKS, "dev+benchmark"])
def test_no_two_resources_share_a_name(stack, project_dirs):  # noqa: F811
    # The plan, the diff and `pulumi preview` name resources by their Pulumi name: two resources of
    # one name (a ServiceAccount and a Job, say) would be told apart by type alone.
    if stack == "dev+benchmark":
        cfg = dev_config()
        set_path(cfg, "validation.sharingBenchmark.enabled", True)
        plan = plan_of(cfg)
    else:
        if stack == "airgap":
            require_reference(CHART_REF)
        plan = run_program(read_stack(project_dirs[stack], stack), project_dirs[stack])
    names = [r.name for r in plan.resources] + [r["name"] for r in plan.reads]
    assert sorted({n for n in names if names.count(n) > 1}) == []
