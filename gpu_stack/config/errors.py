"""Problems with a stack config, and how they are shown: one line each, naming the key."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, SecretStr

from .safe_input import escape, looks_like_key_material, redact_url_credentials, shorten
from .types import NAMESPACE

MISSING = object()
"""A problem's value when there is none to show (a missing or unknown key)."""

# --------------------------------------------------------------------------- errors
class Problem(BaseModel):
    """One thing wrong with the config, said the way a user fixes it."""

    key: str
    value: Any = None
    message: str

    def render(self) -> str:
        """One line, at most MESSAGE_LIMIT characters, every non-printable character escaped."""
        shown = "" if self.value is MISSING else f" = {_show(self.value)}"
        if self.value is not MISSING and _file_content(self.key):
            shown = f" = [{_count(self.value)}, not shown]"
        return shorten(escape(f"{self.key}{shown}: {self.message}"), MESSAGE_LIMIT)


FILE_CONTENT_KEYS = ("driver.repoConfig.files", "driver.certConfig.files")
"""Keys whose values are whole files (a package source, certificates): a problem names the file and
the line, never shows the content (a login or a key in it would be echoed)."""
MESSAGE_LIMIT = 400
"""The longest line one problem prints."""
COLLAPSE_SHOWN = 3
"""How many keys a collapsed group of like problems names."""
PROBLEM_LIMIT = 40
"""How many distinct problems an error lists before it says how many more there are."""


def _file_content(key: str) -> bool:
    short = key.split(":", 1)[-1]
    return any(short == k or short.startswith(k + "[") for k in FILE_CONTENT_KEYS)


def _count(value: Any) -> str:
    if isinstance(value, dict):
        return f"{len(value)} file{'' if len(value) == 1 else 's'}"
    lines = len(value.splitlines()) if isinstance(value, str) else 0
    return f"file content of {lines} line{'' if lines == 1 else 's'}"


def _show(value: Any) -> str:
    if isinstance(value, SecretStr):
        return "[secret]"
    text = redact_url_credentials(repr(value))
    if looks_like_key_material(text):
        return f"[hidden: {len(text)} characters that look like key material]"
    return shorten(text, 120)


def _shape(text: str) -> str:
    """`gpu-stack:nodes[3].address` -> `gpu-stack:nodes[#].address`, `profile p12` -> `profile p#`:
    problems that differ only in numbers (list indexes, numbered names) share a shape."""
    return re.sub(r"[0-9]+", "#", text)


def render_problems(problems: list[Problem]) -> list[str]:
    """One line per problem; a problem repeated at several keys of one shape (the same message for
    nodes[0..999].address) is one line with a count and the first few keys."""
    groups: dict[tuple[str, str], list[Problem]] = {}
    for p in problems:
        groups.setdefault((_shape(p.key), _shape(p.message)), []).append(p)
    lines = []
    for group in groups.values():
        line = group[0].render()
        if len(group) > 1:
            keys = ", ".join(shorten(escape(p.key), 48) for p in group[1 : 1 + COLLAPSE_SHOWN])
            more = ", ..." if len(group) > 1 + COLLAPSE_SHOWN else ""
            suffix = f" (and {len(group) - 1} more like it: {keys}{more})"
            line = shorten(line, MESSAGE_LIMIT - len(suffix)) + suffix
        lines.append(line)
    if len(lines) > PROBLEM_LIMIT:
        lines = lines[:PROBLEM_LIMIT] + [f"... and {len(lines) - PROBLEM_LIMIT} more problems"]
    return lines


class SettingsError(Exception):
    """A bad stack config: every problem found, each naming its key."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        lines = render_problems(problems)
        header = "invalid stack config" if len(lines) == 1 else f"invalid stack config ({len(lines)} problems)"
        super().__init__(header + ":\n  " + "\n  ".join(lines))


def config_key(loc: tuple[Any, ...]) -> str:
    """`('sharing', 'profiles', 'big', 'replicas')` -> `gpu-stack:sharing.profiles.big.replicas`."""
    out = NAMESPACE + ":"
    first = True
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"^[A-Za-z_][A-Za-z0-9_-]*$", str(part)):
            out += ("" if first else ".") + str(part)
        else:
            # Quoted as `pulumi config set --path` reads it; JSON escapes keep it on one visible line.
            out += f"[{json.dumps(str(part))}]"
        first = False
    return out
