"""Properties over hostile strings in every string-typed key of the stack config.

Whatever string a user (or an attacker with write access to a stack file) puts in any string-typed
key, the outcome is one of two: a plan whose every Kubernetes name, namespace and label is valid, or
a refusal with exit 2 and one clean line per problem. Never a traceback, never a leaked secret,
never more than a bounded amount of memory (the CLI runs under RLIMIT_AS).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import types
import typing
from typing import Any, Literal

import pytest
import yaml
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from pydantic import BaseModel

from gpu_stack.config import Settings
from gpu_stack.offline.runner import PROJECT_DIR, PlanError

from ..helpers import dev_config, plan_of, set_path

CANARY = "v1:CANARYciphertextNeverShown77"
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
LABEL_KEY = re.compile(r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f\u0085\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def _unwrap(tp: Any) -> list[Any]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return [a for arg in typing.get_args(tp) for a in _unwrap(arg)]
    if origin is typing.Annotated:
        return _unwrap(typing.get_args(tp)[0])
    return [tp]


def string_keys(model: type[BaseModel] = Settings, prefix: str = "", sample: dict[str, Any] | None = None) -> list[str]:
    """Every string-typed key of the config that the dev stack reaches, `pulumi config set --path` style
    (lists at [0], the dev stack's own list entries)."""
    out: list[str] = []
    for name, f in model.model_fields.items():
        key = f.alias or name
        path = f"{prefix}.{key}" if prefix else key
        for tp in _unwrap(f.annotation):
            origin = typing.get_origin(tp)
            if isinstance(tp, type) and issubclass(tp, BaseModel):
                out += string_keys(tp, path)
            elif origin is tuple and typing.get_args(tp) and isinstance(typing.get_args(tp)[0], type) and issubclass(typing.get_args(tp)[0], BaseModel):
                if path == "nodes":
                    out += string_keys(typing.get_args(tp)[0], f"{path}[0]")
            elif tp is str or origin is Literal:
                out.append(path)
    return sorted(set(out))


STRING_KEYS = [k for k in string_keys() if k != "ssh.privateKey"]
# Mapping keys a user names: sharing profile names and ServiceMonitor label keys.
KEY_SLOTS = ["sharing.profiles", "dcgmExporter.serviceMonitor.additionalLabels"]

HOSTILE_CHARS = "aZ09-._/:@ '\"$`;\\\n\r\t\x00\x1b\x7f\u0085\u00a0\u200b\u200d\u202e\u2028\u3000\ufeffé界"
hostile = st.one_of(
    st.text(alphabet=HOSTILE_CHARS, max_size=40),
    st.builds(lambda a, b: a + b, st.sampled_from(["gpu-dev-1", "10.20.0.11", "L4", "15s", "gpu-operator", "ubuntu", "nvcr.io/nvidia/cuda:12"]),
              st.text(alphabet=HOSTILE_CHARS, min_size=1, max_size=6)),
    st.text(max_size=30),
    st.sampled_from(["", " ", "-", ".", "..", "a" * 300, "kube-system", "default", "yes", "on", "true", "0x10", "~"]),
)


def check_plan(plan: dict[str, Any]) -> None:
    """Every Kubernetes object name, namespace and label in the plan is one the API server accepts."""
    for r in plan["resources"]:
        inputs = r["inputs"]
        meta = inputs.get("metadata") if isinstance(inputs.get("metadata"), dict) else None
        if meta is not None:
            name = meta.get("name")
            if name is not None and name != "[secret]":
                assert DNS_SUBDOMAIN.fullmatch(name) and len(name) <= 253, (r["type"], name)
                if r["type"] in ("kubernetes:core/v1:Namespace", "kubernetes:batch/v1:Job"):
                    assert DNS_LABEL.fullmatch(name), (r["type"], name)
            if meta.get("namespace") is not None:
                assert DNS_LABEL.fullmatch(meta["namespace"]), meta["namespace"]
            for k, v in (meta.get("labels") or {}).items():
                assert LABEL_KEY.fullmatch(k) and LABEL_VALUE.fullmatch(v), (k, v)
        if r["type"] == "kubernetes:helm.sh/v3:Release":
            assert DNS_LABEL.fullmatch(inputs["name"]) and DNS_LABEL.fullmatch(inputs["namespace"])
        assert not RAW_CONTROL.search(r["name"]), r["name"]


def check_refusal(text: str) -> None:
    assert "Traceback" not in text and CANARY not in text
    assert not RAW_CONTROL.search(text), repr(text)
    for line in text.splitlines():
        assert len(line) <= 420, line


def _config_with(key: str, value: str) -> dict[str, Any]:
    cfg = dev_config()
    if key in KEY_SLOTS:
        slot = cfg
        for part in key.split("."):
            slot = slot.setdefault(part, {})
        slot[value] = {"replicas": 2} if key == "sharing.profiles" else "x"
    else:
        set_path(cfg, key, value)
    return cfg


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(STRING_KEYS + KEY_SLOTS), value=hostile)
def test_any_string_in_any_key_is_planned_with_valid_names_or_refused_cleanly(key, value):
    try:
        plan = plan_of(_config_with(key, value))
    except PlanError as exc:
        assert exc.registered == 0
        check_refusal(str(exc))
        assert "gpu-stack:" in str(exc)
    else:
        check_plan(plan.to_json())


def test_the_string_keys_cover_the_config():
    """The property reaches every string-typed key, not a hand-picked few."""
    for key in ("nodes[0].name", "nodes[0].address", "nodes[0].hostKey", "nodes[0].gpu.model", "operator.namespace",
                "validation.images.kubectl", "dcgmExporter.metrics", "kubernetes.context", "driver.version", "ssh.user"):
        assert key in STRING_KEYS
    assert len(STRING_KEYS) >= 25


def _limit_memory() -> None:
    import resource

    limit = 2 * 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


@pytest.mark.slow
@hsettings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(edits=st.lists(st.tuples(st.sampled_from(STRING_KEYS + KEY_SLOTS), hostile), min_size=1, max_size=4))
def test_the_cli_plans_or_refuses_hostile_stack_files_within_bounded_memory(tmp_path_factory, edits):
    root = tmp_path_factory.mktemp("hostile")
    cfg = dev_config()
    for key, value in edits:
        cfg = {**cfg, **{k: v for k, v in _config_with(key, value).items() if k == key.split(".")[0].split("[")[0]}}
    cfg["ssh"] = {**cfg.get("ssh", {}), "privateKey": {"secure": CANARY}} if isinstance(cfg.get("ssh"), dict) else {"privateKey": {"secure": CANARY}}
    (root / "Pulumi.yaml").write_text((PROJECT_DIR / "Pulumi.yaml").read_text())
    (root / "__main__.py").write_text((PROJECT_DIR / "__main__.py").read_text())
    (root / "Pulumi.h.yaml").write_text(yaml.safe_dump({"config": {f"gpu-stack:{k}": v for k, v in cfg.items()}}, allow_unicode=False))
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_stack", "--project-dir", str(root), "plan", "--stack", "h", "--format", "json"],
        capture_output=True, text=True, errors="replace", cwd=PROJECT_DIR, preexec_fn=_limit_memory, timeout=300,
    )
    assert proc.returncode in (0, 2), proc.stderr[-3000:]
    assert CANARY not in proc.stdout + proc.stderr
    if proc.returncode == 0:
        check_plan(json.loads(proc.stdout))
    else:
        assert proc.stdout == "" and proc.stderr.startswith("error: ")
        check_refusal(proc.stderr)
