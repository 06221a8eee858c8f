"""What `fleet up --resume` skips: the stacks already done for this change.

A stack's change is the content of everything that decides what it becomes: `Pulumi.yaml`, its
own `Pulumi.<stack>.yaml`, `__main__.py`, `gpu_stack/` and `config/` (hashed, so an uncommitted
edit is another change; no git needed). The state file, `.gpu-stack/fleet-state.json` in the
project folder (git-ignored), holds each stack done, with the key of the change it was done for:
a fix to one stack's file (the canary's) makes only that stack's key new, so the stacks already
done for the rest of the change stay done.
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
PROGRAM_PARTS = ("Pulumi.yaml", "__main__.py", "gpu_stack", "config")
_LOCK = threading.Lock()
"""Stacks of one wave finish on several threads: one write at a time."""


def program_digest(project_dir: Path | str) -> str:
    """sha256 over the program every stack shares, path by path (caches skipped)."""
    root = Path(project_dir)
    digest = hashlib.sha256()
    files: list[Path] = []
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
    return digest.hexdigest()


def change_keys(project_dir: Path | str, stacks: list[str]) -> dict[str, str]:
    """Stack -> the key of its change: the program's digest and its own stack file."""
    program = program_digest(project_dir)
    keys = {}
    for stack in stacks:
        path = Path(project_dir) / f"Pulumi.{stack}.yaml"
        body = path.read_bytes() if path.is_file() else b"(absent)"
        keys[stack] = hashlib.sha256(program.encode() + b"\0" + body).hexdigest()[:24]
    return keys


def state_path(project_dir: Path | str) -> Path:
    return Path(project_dir) / STATE_DIR / STATE_FILE


def _read(project_dir: Path | str) -> dict[str, Any]:
    try:
        doc = json.loads(state_path(project_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    stacks = doc.get("stacks") if isinstance(doc, dict) else None
    return stacks if isinstance(stacks, dict) else {}


def load_done(project_dir: Path | str, keys: dict[str, str]) -> set[str]:
    """The stacks whose last recorded `up` was for the change they have now (`keys`)."""
    recorded = _read(project_dir)
    return {s for s, key in keys.items() if isinstance(recorded.get(s), dict) and recorded[s].get("change") == key}


def record_done(project_dir: Path | str, key: str, stack: str, record: dict[str, Any]) -> None:
    """Record `stack` as done for its change `key`."""
    with _LOCK:
        stacks = _read(project_dir)
        stacks[stack] = {**record, "change": key, "at": datetime.now(UTC).isoformat(timespec="seconds")}
        path = state_path(project_dir)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"stacks": stacks}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)


def forget(project_dir: Path | str, stack: str) -> None:
    """`stack` is no longer done for any change: its `up` started, and until it passes its gate
    again its state is not what the record says (a failed `up` of a change, then a revert of the
    stack file to the last change done, must not count as done)."""
    with _LOCK:
        stacks = _read(project_dir)
        if stacks.pop(stack, None) is None:
            return
        path = state_path(project_dir)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"stacks": stacks}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)
