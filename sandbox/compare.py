"""The offline plan against the real engine's preview: the same resources (type, name, parent,
dependencies, inputs), secrets and preview-unknowns aside.

`pulumi preview --json` lists steps whose `newState.inputs` are the inputs after the provider's
Check; the offline plan lists what the program sent. Both are reduced to one shape here and
compared; every difference is a line naming the resource and the path.
"""

from __future__ import annotations

from typing import Any

UNKNOWN_ENGINE = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
"""How the engine serializes a value not known during preview."""
UNKNOWN = "[unknown]"
SECRET = "[secret]"
STACK_TYPE = "pulumi:pulumi:Stack"


RELEASE = "kubernetes:helm.sh/v3:Release"
K8S_PROVIDER = "pulumi:providers:kubernetes"
PROVIDER_DEFAULTS: dict[str, dict[str, Any]] = {
    # pulumi-kubernetes 4.25's Check of a helm.v3.Release fills every option the program left
    # unset with its zero value (helm_release.go, Check: the decoded Release struct re-encoded)
    RELEASE: {
        **dict.fromkeys(
            ("allowNullValues", "dependencyUpdate", "devel", "disableCRDHooks", "disableWebhooks", "forceUpdate",
             "lint", "recreatePods", "renderSubchartNotes", "replace", "resetValues", "reuseValues", "skipAwait",
             "skipCrds", "verify", "waitForJobs"),
            False,
        ),
        **dict.fromkeys(("description", "keyring", "postrender"), ""),
    },
    # the engine adds the plugin's version and its internal bookkeeping to a provider's inputs
    K8S_PROVIDER: {"version": None, "__internal": None},
}
"""Keys the provider or engine adds to the program's inputs, with the value it adds (None: any)."""
PROVIDER_DROPPED: dict[str, set[str]] = {RELEASE: {"compat"}}
"""Keys the SDK sends that the provider's Check drops (`compat`: the SDK's marker for old state)."""


def _without_provider_defaults(rtype: str, planned: dict[str, Any], engine: dict[str, Any]) -> tuple[dict, dict]:
    added = PROVIDER_DEFAULTS.get(rtype, {})
    engine = {k: v for k, v in engine.items() if not (k in added and k not in planned and (added[k] is None or v == added[k]))}
    planned = {k: v for k, v in planned.items() if k not in PROVIDER_DROPPED.get(rtype, set())}
    return planned, engine


def urn_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def urn_type(urn: str) -> str:
    return urn.rsplit("::", 2)[-2].rsplit("$", 1)[-1]


def _norm(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if value == UNKNOWN_ENGINE:
        return UNKNOWN
    return value


def preview_resources(preview: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> {type, parent, depends_on, inputs, op} from `pulumi preview --json` (the stack left out)."""
    out: dict[str, dict[str, Any]] = {}
    for step in preview.get("steps") or []:
        state = step.get("newState") or step.get("oldState") or {}
        rtype = state.get("type") or urn_type(step["urn"])
        if rtype == STACK_TYPE:
            continue
        parent = state.get("parent") or ""
        out[urn_name(step["urn"]) if step.get("op") != "read" else f"read:{urn_name(step['urn'])}"] = {
            "type": rtype,
            "op": step.get("op"),
            "parent": None if not parent or urn_type(parent) == STACK_TYPE else urn_name(parent),
            "depends_on": sorted({urn_name(u) for u in state.get("dependencies") or []}),
            "inputs": _norm(state.get("inputs") or {}),
            "custom": bool(state.get("custom")),
        }
    return out


def plan_resources(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """name -> the same shape from `python -m gpu_stack plan --format json`."""
    out: dict[str, dict[str, Any]] = {}
    for r in plan["resources"]:
        out[r["name"]] = {
            "type": r["type"],
            "parent": r["parent"],
            "depends_on": sorted(r["depends_on"]),
            "inputs": _norm(r["inputs"]),
        }
    for read in plan.get("reads") or []:
        out[f"read:{read['name']}"] = {"type": read["type"], "parent": read.get("parent"), "depends_on": [], "inputs": None}
    return out


def value_differences(path: str, planned: Any, engine: Any) -> list[str]:
    """Paths where two input values differ; a secret or unknown on either side matches anything."""
    if planned in (SECRET, UNKNOWN) or engine in (SECRET, UNKNOWN):
        return []
    if isinstance(planned, dict) and isinstance(engine, dict):
        out: list[str] = []
        for key in sorted(set(planned) | set(engine)):
            sub = f"{path}.{key}" if path else key
            if key not in engine:
                out.append(f"{sub}: planned {planned[key]!r}, not in the preview")
            elif key not in planned:
                out.append(f"{sub}: not planned, preview has {engine[key]!r}")
            else:
                out.extend(value_differences(sub, planned[key], engine[key]))
        return out
    if isinstance(planned, list) and isinstance(engine, list) and len(planned) == len(engine):
        return [d for i, (a, b) in enumerate(zip(planned, engine, strict=True)) for d in value_differences(f"{path}[{i}]", a, b)]
    if planned != engine:
        return [f"{path}: planned {_short(planned)}, preview {_short(engine)}"]
    return []


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:157] + "..."


def differences(plan: dict[str, Any], preview: dict[str, Any]) -> list[str]:
    """Every difference between the offline plan and the real preview, one line each."""
    planned, engine = plan_resources(plan), preview_resources(preview)
    out: list[str] = []
    for name in sorted(set(planned) | set(engine)):
        if name not in engine:
            out.append(f"{name}: planned ({planned[name]['type']}), not in the preview")
            continue
        if name not in planned:
            out.append(f"{name}: in the preview ({engine[name]['type']}), not planned")
            continue
        p, e = planned[name], engine[name]
        for key in ("type", "parent", "depends_on"):
            if p[key] != e[key]:
                out.append(f"{name}: {key} planned {p[key]!r}, preview {e[key]!r}")
        if p["inputs"] is not None and e.get("custom", True):
            planned_inputs, engine_inputs = _without_provider_defaults(p["type"], p["inputs"], e["inputs"])
            out.extend(f"{name}: {d}" for d in value_differences("", planned_inputs, engine_inputs))
    return out
