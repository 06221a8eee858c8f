"""What `fleet up --resume` skips: the stacks already done for this change.

A stack's change is everything that decides what its `pulumi up` does (`change_keys`), hashed, so
an uncommitted edit is another change and no git is needed:

- the program `pulumi up` runs (`program_files`): `Pulumi.yaml` (the runtime and its options),
  `requirements.txt` (the pinned SDKs, and so the provider plugins the engine loads),
  `__main__.py` and every module of the project it imports, followed import by import (so not
  the fleet's own code, the CLI front end or the offline plan and diff, which `pulumi up` never
  runs: a change to the fleet's progress lines is no program change), and `config/` (the data
  the program reads);
- the Pulumi CLI's version (the engine that runs it);
- the stack's own `Pulumi.<stack>.yaml`, and the local chart copy it names with
  `operator.chartPath` (every file of the folder, or the `.tgz`), where it names one.

The state file, `.gpu-stack/fleet-state.json` in the project folder (git-ignored), holds each
stack done, with the key of the change it was done for: a fix to one stack's file (the canary's)
makes only that stack's key new, so the stacks already done for the rest of the change stay done.
It names the project it belongs to (the `name` of `Pulumi.yaml` and the project folder) and is
read as every file the program reads is: a regular file inside the project folder, at most
MAX_STATE_BYTES, JSON of exactly its shape (`StateDoc`). `--resume` trusts nothing else: a state
file that is corrupt, of another shape or of another project is refused with the way out
(`StateRefused`); a run without `--resume` starts it anew. Every hashed file is read as a regular
file too (config/files.hash_regular_file): a FIFO or a device is never waited on.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from ..config.chart_source import resolve_local
from ..config.files import FileRefused, hash_regular_file, read_regular_file
from ..config.safe_input import escape, shorten
from ..config.stack_files import MAX_FILE_BYTES, STACK_NAME_RE, StackFileError, load_yaml_file, read_stack

STATE_DIR = ".gpu-stack"
STATE_FILE = "fleet-state.json"
PROGRAM_PARTS = ("Pulumi.yaml", "__main__.py", "gpu_stack", "config")
"""Everything the offline plan of a revision reads of it (fleet/plan.py): the whole package."""
RUN_FILES = ("Pulumi.yaml", "requirements.txt")
"""Files beside `__main__.py` that decide what `pulumi up` runs: the runtime and the pinned SDKs."""
RUN_DATA = ("config",)
"""Data folders the program reads."""
_LOCK = threading.Lock()
"""Stacks of one wave finish on several threads: one write at a time."""


def _tree(path: Path) -> list[Path]:
    """A folder's files, caches skipped, in a stable order; a file is itself."""
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    return [path]


def _hash_files(digest: Any, root: Path, files: list[Path], limit: int | None = None) -> None:
    """Each file's name and sha256, read as a regular file (of at most `limit` bytes when given)."""
    for path in files:
        try:
            name = path.relative_to(root).as_posix()
        except ValueError:
            name = str(path)
        digest.update(name.encode() + b"\0")
        part = hashlib.sha256()
        try:
            hash_regular_file(part, path, "a file of the program", limit)
        except FileRefused as exc:  # absent, or no regular file: hashed as what it is, never read
            part = hashlib.sha256(b"(absent)" if not os.path.lexists(path) else str(exc).encode())
        digest.update(part.digest() + b"\0")


def program_digest(project_dir: Path | str) -> str:
    """sha256 over PROGRAM_PARTS, path by path (caches skipped): what an offline plan of a
    revision reads (fleet/plan.py tells a revision of another program by it)."""
    root = Path(project_dir)
    digest = hashlib.sha256()
    files: list[Path] = []
    for part in PROGRAM_PARTS:
        files += _tree(root / part)
    _hash_files(digest, root, files)
    return digest.hexdigest()


def _module_file(root: Path, name: str) -> Path | None:
    base = root.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported(tree: ast.AST, package: str) -> list[str]:
    """Every module name an import of this module may load (`a.b` loads `a` and `a.b`; `from a
    import b` loads `a` and, when it is one, the module `a.b`)."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: max(0, len(parts) - (node.level - 1))]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            names += [base, *(f"{base}.{alias.name}" for alias in node.names)]
    out = []
    for name in names:
        parts = name.split(".")
        out += [".".join(parts[: i + 1]) for i in range(len(parts)) if parts[0]]
    return out


def program_files(project_dir: Path | str) -> list[Path]:
    """The project's files `pulumi up` runs: `__main__.py` and each module of the project it
    imports, import by import (an import inside a function or a `try` counts too), then
    RUN_FILES and RUN_DATA. A module outside the project (the SDKs) is covered by
    requirements.txt."""
    root = Path(project_dir)
    found: dict[str, Path] = {}
    todo = [("__main__", root / "__main__.py")]
    while todo:
        name, path = todo.pop()
        if name in found:
            continue
        found[name] = path
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (OSError, SyntaxError, ValueError):
            continue  # hashed as it is (absent or broken): `pulumi up` fails on it the same way
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for module in _imported(tree, package):
            file = _module_file(root, module)
            if file is not None and module not in found:
                todo.append((module, file))
    files = sorted(set(found.values()))
    files += [root / name for name in RUN_FILES]
    for part in RUN_DATA:
        files += _tree(root / part)
    return files


def run_digest(project_dir: Path | str, cli_version: str = "") -> str:
    """sha256 over what every stack's `pulumi up` shares: program_files and the CLI's version."""
    root = Path(project_dir)
    digest = hashlib.sha256(f"pulumi {cli_version}".encode() + b"\0")
    _hash_files(digest, root, program_files(root))
    return digest.hexdigest()


def _local_chart(project_dir: Path, stack: str) -> Path | None:
    """The local chart copy the stack names (`gpu-stack:operator.chartPath`), resolved as the
    program resolves it; None without one."""
    try:
        operator = read_stack(project_dir, stack).namespace().get("operator")
    except StackFileError:
        return None  # its preview fails on the same file
    path = operator.get("chartPath") if isinstance(operator, dict) else None
    return resolve_local(path, project_dir) if isinstance(path, str) and path.strip() else None


def change_keys(project_dir: Path | str, stacks: list[str], cli_version: str = "") -> dict[str, str]:
    """Stack -> the key of its change: run_digest, its own stack file, its local chart copy."""
    root = Path(project_dir)
    program = run_digest(root, cli_version)
    keys = {}
    for stack in stacks:
        digest = hashlib.sha256(program.encode() + b"\0")
        _hash_files(digest, root, [root / f"Pulumi.{stack}.yaml"], MAX_FILE_BYTES)
        chart = _local_chart(root, stack)
        if chart is not None:
            digest.update(b"chart\0")
            _hash_files(digest, chart, _tree(chart))
        keys[stack] = digest.hexdigest()[:24]
    return keys


def state_path(project_dir: Path | str) -> Path:
    return Path(project_dir) / STATE_DIR / STATE_FILE


MAX_STATE_BYTES = 1024 * 1024
"""A state file larger than this is refused unread (200 stacks take about 30 KiB)."""
_Name = Annotated[str, StringConstraints(pattern=STACK_NAME_RE.pattern, max_length=100)]


class Done(BaseModel):
    """One stack done: the key of the change it was done for (change_keys), when, in which wave."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    change: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{24}$")]
    at: Annotated[str, StringConstraints(max_length=40)]
    wave: _Name | None = None


class StateDoc(BaseModel):
    """The whole state file: its format, the project it belongs to, the stacks done."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    version: Literal[1]
    project: Annotated[str, StringConstraints(max_length=100)]
    folder: str
    stacks: dict[_Name, Done] = Field(max_length=10_000)


class StateRefused(Exception):
    """A state file `--resume` cannot trust: one line why, and the way out."""


def _identity(project_dir: Path | str) -> tuple[str, str]:
    """(the project's name in Pulumi.yaml, or "" where it has none; the project folder, resolved)."""
    root = Path(project_dir).resolve()
    try:
        doc = load_yaml_file(root / "Pulumi.yaml")
    except StackFileError:
        doc = None
    name = doc.get("name") if isinstance(doc, dict) else None
    return (name[:100] if isinstance(name, str) else ""), str(root)


def read_state(project_dir: Path | str) -> dict[str, Done]:
    """The stacks the state file records done ({} without one), else StateRefused."""
    path = state_path(project_dir)
    if not os.path.lexists(path):
        return {}
    shown = shorten(escape(str(path)), 120)
    way_out = (f"delete {STATE_DIR}/{STATE_FILE} and run `fleet up` without --resume (each stack's up runs "
               "again; a stack already up to date shows no changes)")
    try:
        doc = StateDoc.model_validate_json(read_regular_file(path, MAX_STATE_BYTES, "a state file", within=project_dir))
    except FileRefused as exc:
        raise StateRefused(f"{shorten(str(exc), 240)}; {way_out}") from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "(top)"
        raise StateRefused(f"{shown} is not a state file this gpu-stack wrote ({shorten(escape(where), 60)}: "
                           f"{shorten(escape(str(first.get('msg'))), 80)}); {way_out}") from None
    project, folder = _identity(project_dir)
    if (doc.project, doc.folder) != (project, folder):
        raise StateRefused(f"{shown} is the state file of another project ({shorten(escape(doc.project), 40) or 'unnamed'} "
                           f"in {shorten(escape(doc.folder), 80)}), not of this one; {way_out}")
    return dict(doc.stacks)


def writable_problem(project_dir: Path | str) -> str | None:
    """Why the state file cannot be written safely (its folder a link out of the project, or a
    folder where the file goes), or None."""
    root, folder, path = Path(project_dir).resolve(), Path(project_dir) / STATE_DIR, state_path(project_dir)
    if os.path.lexists(folder) and (not folder.resolve().is_relative_to(root) or not folder.is_dir()):
        return f"{escape(str(folder))} is not a folder inside the project; remove it"
    if path.is_dir() and not path.is_symlink():
        return f"{escape(str(path))} is a folder, not the state file; remove it"
    return None


def load_done(project_dir: Path | str, keys: dict[str, str]) -> set[str]:
    """The stacks whose last recorded `up` was for the change they have now (`keys`); StateRefused
    where the state file cannot be trusted."""
    recorded = read_state(project_dir)
    return {s for s, key in keys.items() if s in recorded and recorded[s].change == key}


def _recorded(project_dir: Path | str) -> dict[str, Done]:
    """What to write over: the records, or none where the file cannot be trusted (a run without
    --resume starts it anew; a run with it checked it first)."""
    try:
        return read_state(project_dir)
    except StateRefused:
        return {}


def _write(project_dir: Path | str, stacks: dict[str, Done]) -> None:
    """The state file, replaced whole: written to a new file of its own (never through a link),
    then renamed over it."""
    path = state_path(project_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    project, folder = _identity(project_dir)
    doc = StateDoc(version=1, project=project, folder=folder, stacks=stacks)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".fleet-state-", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(doc.model_dump(exclude_none=True), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def record_done(project_dir: Path | str, key: str, stack: str, record: dict[str, Any]) -> None:
    """Record `stack` as done for its change `key`."""
    with _LOCK:
        stacks = _recorded(project_dir)
        stacks[stack] = Done(change=key, at=datetime.now(UTC).isoformat(timespec="seconds"), wave=record.get("wave"))
        _write(project_dir, stacks)


def forget(project_dir: Path | str, stack: str) -> None:
    """`stack` is no longer done for any change: its `up` started, and until it passes its gate
    again its state is not what the record says (a failed `up` of a change, then a revert of the
    stack file to the last change done, must not count as done)."""
    with _LOCK:
        stacks = _recorded(project_dir)
        if stacks.pop(stack, None) is None:
            return
        _write(project_dir, stacks)
