"""Reading a file the way every file the program reads is read: the stack files, a results log,
a chart's Chart.yaml. Opened without blocking and checked before a byte is read (a FIFO, a device,
a socket or a folder is refused, never waited on or read without end), at most a bound read."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

from .safe_input import escape


class FileRefused(Exception):
    """A file that is not a regular file of a sane size (one line why, the path escaped)."""


def file_kind(mode: int) -> str | None:
    """What a file is when it is neither a regular file nor a folder (None when it is one)."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    for test, kind in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return "not a regular file"


def _outside(path: Path, within: Path) -> bool:
    """Whether `path`, its links followed, ends outside the folder `within`."""
    try:
        return not path.resolve().is_relative_to(within.resolve())
    except (OSError, RuntimeError):  # a link loop: the open below says so
        return False


def _open_regular(path: Path, what: str, within: Path | None) -> int:
    """A descriptor of the regular file `path` (opened without blocking), else FileRefused."""
    shown = escape(str(path))
    if path.is_dir():
        raise FileRefused(f"{shown}: is a folder, not {what}")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise FileRefused(f"{shown}: is {file_kind(mode)}, not a regular file; {what} is a text file")
    if within is not None and _outside(path, within):
        os.close(fd)
        raise FileRefused(f"{shown}: is a link to a file outside {escape(str(within))}; {what} is read only from inside it")
    return fd


def read_regular_file(path: Path | str, limit: int, what: str, within: Path | str | None = None) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, else FileRefused. `what`: what the file
    should be ("a stack file", "a results log"), for the one-line refusal; `within`: the folder the
    file must be in once its links are followed (a link out of it is refused)."""
    path = Path(path)
    shown = escape(str(path))
    try:
        with os.fdopen(_open_regular(path, what, Path(within) if within is not None else None), "rb") as fh:
            data = fh.read(limit + 1)
    except FileNotFoundError:
        raise FileRefused(f"{shown}: no such file") from None
    except OSError as exc:
        raise FileRefused(f"{shown}: cannot be read: {escape(exc.strerror or type(exc).__name__)}") from None
    if len(data) > limit:
        size = f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"
        raise FileRefused(f"{shown}: larger than {size}; {what} is not that large")
    return data


def hash_regular_file(digest: Any, path: Path | str, what: str, limit: int | None = None) -> None:
    """Feed the bytes of the regular file `path` to `digest` (read in blocks, at most `limit` bytes
    when given), else FileRefused: a FIFO or a device is never waited on or read without end."""
    path = Path(path)
    try:
        with os.fdopen(_open_regular(path, what, None), "rb") as fh:
            read = 0
            for block in iter(lambda: fh.read(1024 * 1024), b""):
                read += len(block)
                if limit is not None and read > limit:
                    raise FileRefused(f"{escape(str(path))}: larger than {limit // 1024} KiB; {what} is not that large")
                digest.update(block)
    except FileNotFoundError:
        raise FileRefused(f"{escape(str(path))}: no such file") from None
    except OSError as exc:
        raise FileRefused(f"{escape(str(path))}: cannot be read: {escape(exc.strerror or type(exc).__name__)}") from None
