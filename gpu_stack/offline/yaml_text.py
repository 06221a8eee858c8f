"""The one YAML dumper of the offline views (the plan's text, the diff): block style, keys in the
order given, a multi-line string as a literal block (`|`) so scripts read as they are."""

from __future__ import annotations

from typing import Any

import yaml

NO_FOLD = 1 << 20
"""`width` that never folds a long line (in a diff, folded YAML reads as a false change)."""


class _Dumper(yaml.SafeDumper):
    pass


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.Node:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_Dumper.add_representer(str, _str_presenter)


def to_yaml(value: Any, width: int = 100) -> str:
    """`value` as block YAML; lines longer than `width` fold (`NO_FOLD`: never)."""
    return yaml.dump(value, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=width)
