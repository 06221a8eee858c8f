"""Pydantic validation errors translated into Problems that name the key as a user types it."""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from pydantic import BaseModel

from .errors import MISSING, Problem, config_key
from .root import Settings


def _allowed_keys(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()]


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose fields live at `loc` (used for 'did you mean' on unknown keys)."""
    model: Any = Settings
    for part in loc:
        if isinstance(model, type) and issubclass(model, BaseModel):
            field = next(
                (f for n, f in model.model_fields.items() if (f.alias or n) == part or n == part),
                None,
            )
            if field is None:
                return None
            model = field.annotation
        else:
            model = _inner(model)
        model = _unwrap(model)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        models = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        return models[0] if models else (args[0] if args else tp)
    if origin is Annotated:
        return _unwrap(typing.get_args(tp)[0])
    return tp


def _inner(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is dict and len(args) == 2:
        return args[1]
    if origin in (tuple, list) and args:
        return args[0]
    return None


STRING_HINT = (
    "must be a string (`pulumi config set --path` stores 1, 2.5 or true as a number or a boolean: "
    "set it again with `--type string`)"
)

MESSAGES: dict[str, Callable[[dict[str, Any]], str]] = {
    "greater_than_equal": lambda ctx: f"must be at least {ctx.get('ge')}",
    "less_than_equal": lambda ctx: f"must be at most {ctx.get('le')}",
    "greater_than": lambda ctx: f"must be greater than {ctx.get('gt')}",
    "less_than": lambda ctx: f"must be less than {ctx.get('lt')}",
    "literal_error": lambda ctx: f"must be one of {ctx.get('expected')}",
    "int_parsing": lambda ctx: "must be a whole number",
    "int_type": lambda ctx: "must be a whole number",
    "int_from_float": lambda ctx: "must be a whole number",
    "bool_parsing": lambda ctx: "must be true or false",
    "bool_type": lambda ctx: "must be true or false",
    "string_type": lambda ctx: STRING_HINT,
    "dict_type": lambda ctx: "must be a mapping of keys to values",
    "model_type": lambda ctx: "must be a mapping of keys to values",
    "model_attributes_type": lambda ctx: "must be a mapping of keys to values",
    "tuple_type": lambda ctx: "must be a list",
    "list_type": lambda ctx: "must be a list",
    "string_too_long": lambda ctx: f"must be at most {ctx.get('max_length')} characters",
    "string_too_short": lambda ctx: f"must be at least {ctx.get('min_length')} characters",
    "too_short": lambda ctx: f"must hold at least {ctx.get('min_length')} entr{'y' if ctx.get('min_length') == 1 else 'ies'}",
    "too_long": lambda ctx: f"must hold at most {ctx.get('max_length')} entries",
    "float_parsing": lambda ctx: "must be a number",
    "float_type": lambda ctx: "must be a number",
    "finite_number": lambda ctx: "must be a finite number (not nan or inf)",
    "int_parsing_size": lambda ctx: "must be a whole number of a sensible size",
    "string_pattern_mismatch": lambda ctx: f"must match {ctx.get('pattern')}",
    "multiple_of": lambda ctx: f"must be a multiple of {ctx.get('multiple_of')}",
    "set_type": lambda ctx: "must be a list",
    "none_required": lambda ctx: "must be left out",
    "enum": lambda ctx: f"must be one of {ctx.get('expected')}",
    "union_tag_invalid": lambda ctx: f"must be one of {ctx.get('expected_tags')}",
}
"""Pydantic error type -> how the problem is worded (from the error's ctx); any other type keeps
pydantic's message (a validator's own ValueError text, without its 'Value error, ' prefix)."""


def problem_from_error(err: Mapping[str, Any]) -> Problem:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "literal["))))
    # pydantic adds the union member / tagged choice to loc; drop non-path noise.
    loc = tuple(p for p in loc if p not in ("str", "tuple[int, ...]", "int", "tuple[str, ...]"))
    if loc and loc[-1] == "[key]":
        # A bad mapping key: pydantic reports it at `<key>.[key]`; the key itself is the value.
        loc = loc[:-1]
        if err["type"] != "extra_forbidden":
            return Problem(key=config_key(loc), value=MISSING, message="key " + problem_from_error({**err, "loc": loc}).message)
    loc = tuple(p for p in loc if not (isinstance(p, str) and (p.startswith(("function-", "tuple[")))))
    key = config_key(loc)
    kind = err["type"]
    value = err.get("input", MISSING)
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        allowed = _allowed_keys(parent) if parent else []
        hint = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        msg = "unknown key"
        if hint:
            msg += f"; did you mean '{hint[0]}'?"
        if allowed:
            msg += f" (allowed here: {', '.join(allowed)})"
        return Problem(key=key, value=MISSING, message=msg)
    if kind == "missing":
        return Problem(key=key, value=MISSING, message="is required")
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    wording = MESSAGES.get(kind)
    if wording is not None:
        msg = wording(err.get("ctx") or {})
    elif kind not in ("value_error", "assertion_error"):
        # A pydantic check this table does not word yet: said in the project's words, never pydantic's.
        msg = f"is not a value this key takes ({kind.replace('_', ' ')})"
    if kind in ("string_type", "literal_error") and isinstance(value, (bool, int, float)):
        msg += "; " + _as_string_hint(value, (err.get("ctx") or {}).get("expected", ""))
    return Problem(key=key, value=value, message=msg)


def _as_string_hint(value: bool | int | float, expected: str) -> str:
    """YAML read an unquoted `1.30` as the number 1.3 (or `on` as a flag): say to quote it, with
    the allowed value it most likely was ('1.30' for 1.3)."""
    if isinstance(value, bool):
        return f"YAML read it as the flag {str(value).lower()}: write it as a string, in quotes"
    guess = next(
        (c for c in re.findall(r"'([^']*)'", str(expected)) if re.fullmatch(r"-?[0-9]+(\.[0-9]+)?", c) and float(c) == value),
        None,
    )
    shown = guess if guess is not None else (str(int(value)) if isinstance(value, float) and value.is_integer() else str(value))
    return f"YAML read it as the number {value!r}: write it as a string, in quotes (\"{shown}\")"


def dedupe(problems: list[Problem], by_message: bool = False) -> list[Problem]:
    """Drop repeats: pydantic reports one bad value once per union member (same key), while
    cross-field rules may rightly report two different problems of one key (by_message)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for p in problems:
        mark = (p.key, p.message if by_message else "")
        if mark in seen:
            continue
        seen.add(mark)
        out.append(p)
    return out
