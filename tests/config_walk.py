"""Walk the settings models: every leaf field of the stack config, found by introspection.

`leaves()` follows `Settings` through nested models, lists and mappings and yields each scalar
leaf with the kinds of value it takes (int, float, bool, str; text when newlines are allowed,
secret for a SecretStr) and the validators its type carries, at a concrete path into `RICH`: a
valid config that reaches every model (one entry in each list and mapping). A model that `RICH`
does not reach is reported by `unreached()`, so a new model cannot escape the walk.
"""

from __future__ import annotations

import copy
import itertools
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, SecretStr

from gpu_stack.config import Settings
from gpu_stack.config.errors import config_key
from gpu_stack.config.safe_input import _text

from .helpers import dev_config

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG8hbLGXU6kkQ6eXmm3g4ZiDWVxk+74hSCSUtDmiA2Ns"
PRIVATE_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"


def rich_config() -> dict[str, Any]:
    """The dev stack plus one of everything: every model and every optional string is reached."""
    cfg = dev_config()
    cfg["kubernetes"] = {
        "context": "dev-cluster", "kubeconfig": "/home/ci/.kube/config", "version": "1.31",
        "clusterIdentifier": "dev-cluster-1",
    }
    cfg["ssh"] = {"user": "ubuntu", "port": 22, "privateKey": PRIVATE_KEY, "timeoutSeconds": 1200}
    cfg["nodes"][0].update({"user": "ubuntu", "port": 22, "hostKey": ED25519, "sharing": "wide"})
    cfg["sharing"] = {
        "mode": "time-slicing", "replicas": 4, "renameByDefault": False, "failRequestsGreaterThanOne": False,
        "resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 4}],
        "profiles": {"wide": {"mode": "time-slicing", "replicas": 8, "resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 2}]}},
    }
    cfg["mig"] = {
        "strategy": "mixed",
        "profiles": {"custom": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}, "device-filter": "0x233010DE"}]},
        "rollout": {"maxUnavailable": 1, "evictionTimeout": 600, "timeout": 1800, "image": "nvcr.io/nvidia/gpu-operator:v25.10.1",
                    "managerTimeout": 900, "ignoreUnevictable": False},
    }
    # an image of the stack's own for the Jobs, declared with what it carries (config/job-images.yaml)
    cfg.setdefault("images", {})["jobImages"] = {"registry.internal/tools:1.0": {
        "shell": "busybox", "programs": {"kubectl": "/usr/bin/kubectl"}, "user": "65532:65532", "kubectl": "1.34",
    }}
    cfg["validation"] = {"sharingBenchmark": {
        "enabled": False, "secondsPerWindow": 30, "sizes": [{"name": "small", "bodies": 4096, "iterations": 5000}],
    }}
    cfg["driver"] = {"placement": "host", "version": "580.105.08", "upgradePolicy": {
        "waitForCompletion": {"timeoutSeconds": 0, "podSelector": "app=training"},
        "drain": {"podSelector": "app=batch"},
    }}
    cfg["dcgmExporter"] = {"enabled": True, "metrics": "DCGM_FI_DEV_GPU_TEMP, gauge, temperature\n", "serviceMonitor": {
        "enabled": True, "interval": "15s", "additionalLabels": {"release": "kube-prometheus-stack"},
        "relabelings": [{
            "sourceLabels": ["__meta_kubernetes_pod_node_name"], "separator": ";", "targetLabel": "node",
            "regex": "(.*)", "modulus": 4, "replacement": "$1", "action": "replace",
        }],
    }}
    cfg["alerts"] = {
        "enabled": True, "ruleLabels": {"release": "kube-prometheus-stack"}, "labels": {"team": "gpu-platform"},
        "exporterJob": "nvidia-dcgm-exporter", "dashboard": {"enabled": True, "folder": "GPU"},
        "rules": {"xidFatal": {"codes": [48, 79]}, "gpuTemperature": {"threshold": 85}, "thermalThrottling": {"threshold": 0.1}},
    }
    return cfg


RICH = rich_config()


@dataclass
class Leaf:
    path: tuple[Any, ...]
    kinds: set[str]
    """int, float, bool, str, text (a string that may hold newlines), secret, literal."""
    validators: list[Any] = field(default_factory=list)
    model: type[BaseModel] | None = None
    name: str = ""

    @property
    def key(self) -> str:
        return config_key(self.path)

    def base(self) -> Any:
        """The value `RICH` has here, or None."""
        node: Any = RICH
        for part in self.path:
            try:
                node = node[part]
            except (KeyError, IndexError, TypeError):
                return None
        return node

    @property
    def default(self) -> Any:
        if self.model is None or not self.name:
            return None
        return self.model.model_fields[self.name].get_default(call_default_factory=True)


def _flatten(tp: Any, metadata: list[Any]) -> list[tuple[Any, list[Any]]]:
    """The union members of a type, each with the metadata (validators) its Annotated layers add."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(tp) if arg is not type(None) for m in _flatten(arg, metadata)]
    if origin is typing.Annotated:
        inner, *extra = typing.get_args(tp)
        return _flatten(inner, metadata + list(extra))
    return [(tp, metadata)]


def _validator_funcs(metadata: list[Any]) -> list[Any]:
    return [getattr(m, "func", None) for m in metadata if getattr(m, "func", None) is not None]


def _scalar_kinds(tp: Any, metadata: list[Any]) -> set[str]:
    if tp is bool:
        return {"bool"}
    if tp is int:
        return {"int"}
    if tp is float:
        return {"float"}
    if tp is SecretStr:
        return {"secret"}
    if tp is str:
        return {"text"} if _text in _validator_funcs(metadata) else {"str"}
    if typing.get_origin(tp) is Literal:
        return {"literal"}
    return set()


REACHED: set[type[BaseModel]] = set()


def _walk(tp: Any, metadata: list[Any], path: tuple[Any, ...], base: Any, model: Any, name: str, out: dict) -> None:
    for member, meta in _flatten(tp, metadata):
        origin = typing.get_origin(member)
        if isinstance(member, type) and issubclass(member, BaseModel):
            REACHED.add(member)
            for fname, f in member.model_fields.items():
                key = f.alias or fname
                sub = base.get(key) if isinstance(base, dict) else None
                _walk(f.annotation, list(f.metadata), (*path, key), sub, member, fname, out)
        elif origin is tuple or origin is list:
            item = typing.get_args(member)[0]
            sub = base[0] if isinstance(base, list) and base else None
            if sub is not None or not _contains_model(item):
                _walk(item, [], (*path, 0), sub, model, name, out)
        elif origin is dict:
            _key_tp, value_tp = typing.get_args(member)
            first = next(iter(base)) if isinstance(base, dict) and base else None
            out.setdefault(("key-slot", *path), Leaf(path, {"key"}, _validator_funcs(meta), model, name))
            if first is not None:
                _walk(value_tp, [], (*path, first), base[first], model, name, out)
        else:
            kinds = _scalar_kinds(member, meta)
            if kinds:
                leaf = out.setdefault(path, Leaf(path, set(), [], model, name))
                leaf.kinds |= kinds
                leaf.validators += _validator_funcs(meta)


def _contains_model(tp: Any) -> bool:
    return any(isinstance(m, type) and issubclass(m, BaseModel) for m, _ in _flatten(tp, []))


def leaves() -> list[Leaf]:
    """Every scalar leaf (and every mapping's key slot, kind `key`) of the config at a path into RICH."""
    out: dict[Any, Leaf] = {}
    REACHED.clear()
    _walk(Settings, [], (), RICH, None, "", out)
    return list(out.values())


def all_models(model: type[BaseModel] = Settings, seen: set[type[BaseModel]] | None = None) -> set[type[BaseModel]]:
    """Every model class the settings contain, found through the field types."""
    seen = set() if seen is None else seen
    if model in seen:
        return seen
    seen.add(model)
    for f in model.model_fields.values():
        stack = [f.annotation]
        while stack:
            tp = stack.pop()
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                all_models(tp, seen)
            stack.extend(a for a in typing.get_args(tp) if not isinstance(a, (str, int)))
    return seen


def unreached() -> set[type[BaseModel]]:
    leaves()
    return all_models() - REACHED


def config_with(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """RICH with `value` at `path` (mappings created on the way)."""
    cfg = copy.deepcopy(RICH)
    node: Any = cfg
    for part, after in itertools.pairwise(path):
        want = list if isinstance(after, int) else dict
        current = node[part] if isinstance(node, list) else node.get(part)
        if not isinstance(current, want):
            current = [None] * (after + 1) if want is list else {}
            node[part] = current
        node = current
    node[path[-1]] = value
    return cfg


def config_with_key(path: tuple[Any, ...], new_key: str) -> dict[str, Any]:
    """RICH with the first key of the mapping at `path` renamed to `new_key` (or added, when empty)."""
    cfg = copy.deepcopy(RICH)
    node: Any = cfg
    for part in path:
        if isinstance(node, list):
            node = node[part]
        else:
            if not isinstance(node.get(part), (dict, list)):
                node[part] = {}
            node = node[part]
    first = next(iter(node), None)
    value = node.pop(first) if first is not None else "x"
    node[new_key] = value
    return cfg


def LEAVES_BY_VALIDATOR(func: Any) -> list[Leaf]:  # reads as a constant at the call site
    """The leaves whose type carries `func` among its validators (an annotated type's check)."""
    return [leaf for leaf in leaves() if func in leaf.validators]
