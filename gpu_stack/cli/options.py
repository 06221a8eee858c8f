"""The values of the `gpu-stack` options, checked as argparse reads them (each option's `type=`):
an option that names a thing (a stack, a wave, a revision, a file, a folder, a CLI) given empty or
blank is refused, never taken as not given (`fleet up --wave ''` would roll out every wave); a
named file or folder must be there; a count is bounded. A refusal (`OneLineParser`) is one line,
`error: --wave ...`, with exit code 2, before anything runs."""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable
from pathlib import Path

from ..config.safe_input import escape, shorten
from ..config.stack_files import STACK_NAME_RE

SHOWN = 80
"""The most of a refused value an error shows."""


def _shown(value: str) -> str:
    return shorten(escape(repr(value)), SHOWN)


def _shown_path(value: str) -> str:
    """A long path shown by its end, which names the file (its start is often a temporary folder)."""
    text = escape(repr(value))
    return text if len(text) <= SHOWN else "..." + text[-(SHOWN - 3):]


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a wrong command line is one line (`error: --wave names no wave ...`) and exit
    code 2, as every other refusal of the command is; its subcommands' parsers are of this class."""

    def error(self, message: str) -> None:  # type: ignore[override]
        found = re.fullmatch(r"argument ([^:]+): (.*)", message, re.S)
        if found and found.group(2).startswith(tuple(found.group(1).split("/"))):
            message = found.group(2)  # the check's own line already names the option
        line = " ".join(escape(message).split())
        self.exit(2, f"error: {shorten(line, 400)} (`{self.prog} --help` lists the options)\n")


def _named(flag: str, value: str, what: str) -> str:
    """`value` unless it is empty or blank (what else is wrong with it the check after says: a
    revision git does not know, a path that is not there)."""
    if not value.strip():
        raise argparse.ArgumentTypeError(f"{flag} names no {what} (it is empty): name one, or leave {flag} out")
    return value


def nonempty(flag: str, what: str) -> Callable[[str], str]:
    """A non-empty text naming a `what` (a git revision)."""
    return lambda value: _named(flag, value, what)


def stack_like(flag: str, what: str) -> Callable[[str], str]:
    """A stack or wave name: letters, digits, '-', '_' and '.' (Pulumi.<stack>.yaml's rule)."""

    def check(value: str) -> str:
        if not value.strip():
            raise argparse.ArgumentTypeError(
                f"{flag} {_shown(value)} is not a plain {what} name (it is empty): name one, or leave {flag} out")
        if not STACK_NAME_RE.fullmatch(value) or value in (".", ".."):
            raise argparse.ArgumentTypeError(
                f"{flag} {_shown(value)} is not a plain {what} name: letters, digits, '-', '_' and '.', at most 100 characters"
            )
        return value

    return check


def existing(flag: str, what: str, kind: str = "any") -> Callable[[str], Path]:
    """A path to a `what` that is there: `kind` "file", "dir" or "any" (a file or a folder)."""

    def check(value: str) -> Path:
        _named(flag, value, what)
        path = Path(value)
        if not os.path.lexists(path):
            raise argparse.ArgumentTypeError(f"{flag} {_shown_path(value)}: no such file or folder; name the {what}")
        if kind == "dir" and not path.is_dir():
            raise argparse.ArgumentTypeError(f"{flag} {_shown_path(value)} is not a folder; name the {what}")
        if kind == "file" and path.is_dir():
            raise argparse.ArgumentTypeError(f"{flag} {_shown_path(value)} is a folder; name the {what}")
        return path

    return check


def count(flag: str, low: int, high: int) -> Callable[[str], int]:
    """A whole number from `low` to `high`."""

    def check(value: str) -> int:
        text = value.strip()
        if not (text.isascii() and text.isdigit()) or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"{flag} {_shown(value)} is not a whole number from {low} to {high}")
        return int(text)

    return check
