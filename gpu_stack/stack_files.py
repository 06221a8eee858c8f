"""Read a Pulumi project's stack files without the Pulumi CLI (for the offline plan and diff).

`Pulumi.yaml` may declare project-level defaults under `config:` (`gpu-stack:key: {default: ...}`
or `gpu-stack:key: value`); `Pulumi.<stack>.yaml` sets values under `config:`. A value written
`{secure: ...}` is encrypted by the Pulumi CLI: offline it is never decrypted, it becomes a
placeholder that every plan output shows as `[secret]`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .settings import NAMESPACE

SECRET_PLACEHOLDER_PREFIX = "gpu-stack-offline-secret-"


class StackFileError(Exception):
    """A stack file that cannot be read (missing, not YAML, wrong shape)."""


@dataclass
class StackConfig:
    project: str
    stack: str
    # Full Pulumi config keys ("gpu-stack:nodes") -> JSON-serialisable values.
    values: dict[str, Any] = field(default_factory=dict)
    # Full keys whose value is (or contains) a secret.
    secret_keys: set[str] = field(default_factory=set)
    # The stand-in strings put where secure values were; scrubbed from every output.
    secret_values: set[str] = field(default_factory=set)
    # Pulumi ESC environments the stack file imports (`environment:`); not opened offline.
    environments: list[str] = field(default_factory=list)

    def namespace(self, ns: str = NAMESPACE) -> dict[str, Any]:
        """`{"nodes": [...], "sharing": {...}}` for one config namespace."""
        prefix = ns + ":"
        return {k[len(prefix) :]: v for k, v in self.values.items() if k.startswith(prefix)}

    def as_runtime_config(self) -> dict[str, str]:
        """The config map the Pulumi runtime expects: structured values as JSON strings."""
        return {k: v if isinstance(v, str) else json.dumps(v) for k, v in self.values.items()}


class _StackLoader(yaml.SafeLoader):
    """YAML as the Pulumi CLI reads a stack file: a date or time stays the string it was written as."""


_StackLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def _load_yaml(path: Path) -> Any:
    try:
        with path.open() as fh:
            return yaml.load(fh, Loader=_StackLoader)  # noqa: S506 - a SafeLoader subclass
    except FileNotFoundError:
        raise StackFileError(f"{path}: no such file") from None
    except yaml.YAMLError as exc:
        raise StackFileError(f"{path}: not valid YAML: {exc}") from None


def _full_key(key: str, project: str) -> str:
    return key if ":" in key else f"{project}:{key}"


def _config_section(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """The `config:` mapping of a project or stack file, keys as strings ("ns:key")."""
    section = doc.get("config") or {}
    if not isinstance(section, dict):
        raise StackFileError(f"{path}: 'config:' must be a mapping of keys (like gpu-stack:sharing) to values")
    bad = [k for k in section if not isinstance(k, str)]
    if bad:
        raise StackFileError(f"{path}: config key {bad[0]!r} must be a string such as gpu-stack:sharing")
    return section


def read_stack(project_dir: Path | str, stack: str) -> StackConfig:
    """Merge `Pulumi.yaml` defaults and `Pulumi.<stack>.yaml` values the way the CLI does."""
    root = Path(project_dir)
    project_doc = _load_yaml(root / "Pulumi.yaml")
    if not isinstance(project_doc, dict) or "name" not in project_doc:
        raise StackFileError(f"{root / 'Pulumi.yaml'}: needs a top-level 'name'")
    project = str(project_doc["name"])
    cfg = StackConfig(project=project, stack=stack)
    counter = [0]

    def resolve(value: Any, key: str) -> Any:
        if isinstance(value, dict) and set(value) == {"secure"}:
            counter[0] += 1
            placeholder = f"{SECRET_PLACEHOLDER_PREFIX}{counter[0]}"
            cfg.secret_keys.add(key)
            cfg.secret_values.add(placeholder)
            return placeholder
        if isinstance(value, dict):
            return {k: resolve(v, key) for k, v in value.items()}
        if isinstance(value, list):
            return [resolve(v, key) for v in value]
        return value

    for key, spec in _config_section(project_doc, root / "Pulumi.yaml").items():
        full = _full_key(key, project)
        if isinstance(spec, dict) and ("default" in spec or "value" in spec or "type" in spec):
            if "value" in spec:
                cfg.values[full] = resolve(spec["value"], full)
            elif "default" in spec:
                cfg.values[full] = resolve(spec["default"], full)
        else:
            cfg.values[full] = resolve(spec, full)

    stack_path = root / f"Pulumi.{stack}.yaml"
    stack_doc = _load_yaml(stack_path) or {}
    if not isinstance(stack_doc, dict):
        raise StackFileError(f"{stack_path}: must be a mapping with a 'config:' section")
    for key, value in _config_section(stack_doc, stack_path).items():
        cfg.values[_full_key(key, project)] = resolve(value, _full_key(key, project))
    imports = stack_doc.get("environment") or []
    cfg.environments = [str(e) for e in (imports if isinstance(imports, list) else [imports])]
    for key, value in cfg.values.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise StackFileError(
                f"{key} (in {stack_path.name} or Pulumi.yaml): holds a value config cannot carry "
                "(binary, a set or another non-JSON YAML type); write it as a string"
            ) from None
    return cfg


def list_stacks(project_dir: Path | str) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in Path(project_dir).glob("Pulumi.*.yaml"))
