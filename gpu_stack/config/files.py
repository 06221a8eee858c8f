"""Reading a file the way every file the program reads is read: the stack files, a results log,
a chart's Chart.yaml. Opened without blocking and checked before a byte is read (a FIFO, a device,
a socket or a folder is refused, never waited on or read without end), at most a bound read."""

from __future__ import annotations

import os
import stat
from pathlib import Path

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


def read_regular_file(path: Path | str, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, else FileRefused. `what`: what the file
    should be ("a stack file", "a results log"), for the one-line refusal."""
    path = Path(path)
    shown = escape(str(path))
    try:
        if path.is_dir():
            raise FileRefused(f"{shown}: is a folder, not {what}")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "rb") as fh:
            mode = os.fstat(fh.fileno()).st_mode
            if not stat.S_ISREG(mode):
                raise FileRefused(f"{shown}: is {file_kind(mode)}, not a regular file; {what} is a text file")
            data = fh.read(limit + 1)
    except FileNotFoundError:
        raise FileRefused(f"{shown}: no such file") from None
    except OSError as exc:
        raise FileRefused(f"{shown}: cannot be read: {escape(exc.strerror or type(exc).__name__)}") from None
    if len(data) > limit:
        size = f"{limit // (1024 * 1024)} MiB" if limit >= 1024 * 1024 else f"{limit} bytes"
        raise FileRefused(f"{shown}: larger than {size}; {what} is not that large")
    return data
