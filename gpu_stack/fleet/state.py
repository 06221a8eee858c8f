"""What `fleet up --resume` skips: the stacks already done for this change.

The change is the content of everything that decides what a stack becomes: `Pulumi.yaml`, the
fleet's stack files, the fleet file, `__main__.py`, `gpu_stack/` and `config/` (hashed, so an
uncommitted edit is another change; no git needed). The state file,
`.gpu-stack/fleet-state.json` in the project folder (git-ignored), holds the change's key and
each stack done for it with when and what its `up` changed; a file of another change is ignored.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

STATE_DIR = ".gpu-stack"
STATE_FILE = "fleet-state.json"
PROGRAM_PARTS = ("Pulumi.yaml", "__main__.py", "gpu_stack", "config", "fleet.yaml")
_LOCK = threading.Lock()
"""Stacks of one wave finish on several threads: one write at a time."""


def change_key(project_dir: Path | str, stacks: list[str]) -> str:
    """sha256 over the program and the fleet's stack files, path by path (caches skipped)."""
    root = Path(project_dir)
    digest = hashlib.sha256()
    files: list[Path] = [root / f"Pulumi.{s}.yaml" for s in sorted(stacks)]
    for part in PROGRAM_PARTS:
        path = root / part
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
        else:
            files.append(path)
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"(absent)")
        digest.update(b"\0")
    return digest.hexdigest()[:24]


def state_path(project_dir: Path | str) -> Path:
    return Path(project_dir) / STATE_DIR / STATE_FILE


def load_done(project_dir: Path | str, key: str) -> dict[str, Any]:
    """Stack -> its record, for the stacks done for change `key` ({} for another change or no file)."""
    path = state_path(project_dir)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("change") != key or not isinstance(doc.get("done"), dict):
        return {}
    return doc["done"]


def record_done(project_dir: Path | str, key: str, stack: str, record: dict[str, Any]) -> None:
    """Add `stack` to the stacks done for change `key` (a file of another change is replaced)."""
    with _LOCK:
        _record(project_dir, key, stack, record)


def _record(project_dir: Path | str, key: str, stack: str, record: dict[str, Any]) -> None:
    path = state_path(project_dir)
    done = load_done(project_dir, key)
    done[stack] = {**record, "at": datetime.now(UTC).isoformat(timespec="seconds")}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"change": key, "done": done}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)
