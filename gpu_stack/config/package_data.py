"""Where the files the program reads live, in a clone and in an installed package: the one place.

The program reads data files, not only code: config/ (the node and Job scripts, the CUDA sources,
the GPU catalog, the DCGM field and metric lists, the Job image table) and the generated reference
docs/ (configuration.md, fleet-file.md and the two JSON Schemas).

- In a clone (this package sits beside the repository's Pulumi.yaml and config/): the repository's
  own config/ and docs/, so an edit there is what the next plan reads.
- Installed (`pip install <a clone or a git URL>`): the copies the wheel carries inside the
  package, `gpu_stack/_data/config/` and `gpu_stack/_data/docs/` (pyproject.toml maps the
  repository's folders there), found with importlib.resources.

Every module that reads one of those files asks `config_path(...)` / `docs_path(...)`; none
works out `parents[N]` of its own `__file__`.

The Pulumi project the offline commands plan is another thing: `default_project_dir()`, the folder
of the nearest Pulumi.yaml at or above the working directory (as the Pulumi CLI finds its
project), else the clone this code is in.
"""

from __future__ import annotations

from importlib import resources as _resources
from pathlib import Path

PACKAGE = __name__.split(".")[0]  # gpu_stack
DATA_PACKAGE_DIR = "_data"
"""Where an installed package keeps its copy of config/ and docs/ (gpu_stack/_data/...)."""


def _package_dir() -> Path:
    root = _resources.files(PACKAGE)
    # A wheel installs as plain files, so this is a real folder (pathlib.Path); anything else
    # (a zip import) cannot hand the node scripts to Pulumi's remote.Command as files anyway.
    if not isinstance(root, Path):  # pragma: no cover - zipimport only
        raise RuntimeError(f"{PACKAGE} must be installed as files, not imported from {root}")
    return root.resolve()


PACKAGE_DIR = _package_dir()


def _clone_root(package_dir: Path) -> Path | None:
    """The repository holding this code when it runs from a clone (Pulumi.yaml and config/ beside
    gpu_stack/), else None (an installed package)."""
    root = package_dir.parent
    if (root / "Pulumi.yaml").is_file() and (root / "config" / "gpu-models.yaml").is_file():
        return root
    return None


CLONE_ROOT = _clone_root(PACKAGE_DIR)
"""The repository root in a clone; None where the package is installed."""

DATA_ROOT = CLONE_ROOT if CLONE_ROOT is not None else PACKAGE_DIR / DATA_PACKAGE_DIR
"""The folder that holds `config/` and `docs/`: the clone's root, or the installed `gpu_stack/_data`."""

CONFIG_DIR = DATA_ROOT / "config"
DOCS_DIR = DATA_ROOT / "docs"


def config_path(*parts: str) -> Path:
    """A file or folder of config/: `config_path("node-scripts", "node-prep.sh")`."""
    return CONFIG_DIR.joinpath(*parts)


def docs_path(*parts: str) -> Path:
    """A file of the generated reference in docs/: `docs_path("plan.schema.json")`."""
    return DOCS_DIR.joinpath(*parts)


def data_name(path: Path) -> str:
    """How a data file is named to a user (and in a plan): its path in the repository,
    `config/node-scripts/node-prep.sh`, the same in a clone and installed."""
    try:
        return path.resolve().relative_to(DATA_ROOT.resolve()).as_posix()
    except ValueError:
        return str(path)


PROJECT_FILE = "Pulumi.yaml"


def find_project_dir(start: Path | str | None = None) -> Path | None:
    """The nearest folder at or above `start` (default: the working directory) holding a
    Pulumi.yaml, as the Pulumi CLI looks for its project; None when there is none."""
    here = Path(start if start is not None else Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / PROJECT_FILE).is_file():
            return folder
    return None


def default_project_dir(start: Path | str | None = None) -> Path:
    """The project the offline commands plan when `--project-dir` is not given: the Pulumi
    project around the working directory; else, in a clone, the clone's own project; else the
    working directory itself (the plan then says that its Pulumi.yaml is missing)."""
    found = find_project_dir(start)
    if found is not None:
        return found
    if CLONE_ROOT is not None:
        return CLONE_ROOT
    return Path(start if start is not None else Path.cwd()).resolve()
