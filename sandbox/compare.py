"""The offline plan against the real engine's preview, strictly: the same resources (type, name,
parent, dependencies, resource options, read ids, inputs), a secret secret on both sides, a value
of the same type on both sides, the providers at the pinned versions.

`pulumi preview --json` lists steps whose `newState` holds the inputs after the provider's Check
and the options the engine recorded (protect, replaceOnChanges, ignoreChanges,
additionalSecretOutputs, customTimeouts, retainOnDelete, provider); `--save-plan` adds each
resource's goal, the one place the engine shows `deleteBeforeReplace`. The offline plan lists what
the program sent. Both are reduced to one shape here and compared; every difference is a line
naming the resource and the path. The only differences allowed are listed in ALLOWED (by
resource type, property path and value, each with the provider or engine code that makes it).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

UNKNOWN_ENGINE = "04da6b54-80e4-46f7-96ec-b56ff0331ba9"
"""How the engine serializes a value not known during preview."""
UNKNOWN = "[unknown]"
SECRET = "[secret]"
STACK_TYPE = "pulumi:pulumi:Stack"
RELEASE = "kubernetes:helm.sh/v3:Release"
K8S_PROVIDER = "pulumi:providers:kubernetes"
_ANY = object()


@dataclass(frozen=True)
class Allowed:
    """One difference the real engine or provider makes on purpose."""

    type: str
    path: str
    """A top-level input key the provider or engine adds (a value the program never sent)."""
    value: Any
    """The value it adds (_ANY: whatever it is, e.g. the engine's own bookkeeping)."""
    why: str


ALLOWED: tuple[Allowed, ...] = (
    # pulumi-kubernetes 4.25 provider/pkg/provider/helm_release.go, Check: the inputs are decoded
    # into its Release struct and encoded back, so every option the program left unset comes back
    # at its zero value.
    *(
        Allowed(RELEASE, key, False, "helm_release.go Check re-encodes the Release struct (zero value)")
        for key in (
            "allowNullValues", "dependencyUpdate", "devel", "disableCRDHooks", "disableWebhooks", "forceUpdate", "lint",
            "recreatePods", "renderSubchartNotes", "replace", "resetValues", "reuseValues", "skipAwait", "skipCrds",
            "verify", "waitForJobs",
        )
    ),
    *(
        Allowed(RELEASE, key, "", "helm_release.go Check re-encodes the Release struct (zero value)")
        for key in ("description", "keyring", "postrender")
    ),
    # pkg/resource/deploy/source_eval.go (RegisterResource) and providers/registry.go: the engine
    # adds the plugin's version to every provider's inputs, and its own `__internal` bookkeeping.
    Allowed("pulumi:providers:*", "version", "<pinned>", "the engine records the plugin version it loaded"),
    Allowed("pulumi:providers:*", "__internal", _ANY, "the engine's provider bookkeeping (registry.go)"),
)
DROPPED: dict[str, set[str]] = {RELEASE: {"compat"}}
"""Keys the SDK sends that the provider's Check drops (`compat`: the SDK's marker for old state;
helm_release.go Check does not carry it over)."""
OPTION_KEYS = (
    "protect", "deleteBeforeReplace", "replaceOnChanges", "ignoreChanges", "additionalSecretOutputs",
    "customTimeouts", "provider", "retainOnDelete",
)


def urn_name(urn: str) -> str:
    return urn.rsplit("::", 1)[-1]


def urn_type(urn: str) -> str:
    return urn.rsplit("::", 2)[-2].rsplit("$", 1)[-1]


ASSET_SIG_KEY = "4dabf18193072939515e22adb298388d"
"""The engine's marker key of a serialized asset or archive (sdk/go/common/resource/sig)."""
ASSET_SIG = "c44067f5952c0a294b673a41bacd8c17"


def _norm(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(ASSET_SIG_KEY) == ASSET_SIG and "path" in value:
            # a file asset as the engine holds it: its path and the sha256 of its bytes
            return {"fileAsset": value["path"], "sha256": value.get("hash")}
        return {k: _norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_norm(v) for v in value]
    if value == UNKNOWN_ENGINE:
        return UNKNOWN
    return value


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s|ms)")


def _seconds(value: Any) -> float:
    """A custom timeout as seconds: the SDK sends Go duration strings ("360s", "1h"), the state
    holds float seconds."""
    if isinstance(value, (int, float)):
        return float(value)
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    return sum(float(n) * scale[u] for n, u in _DURATION.findall(str(value)))


def _provider_name(ref: str) -> str:
    """`<provider urn>::<provider id>` -> the provider resource's name."""
    return ref.split("::")[-2] if ref.count("::") >= 4 else ref


def default_provider_name(package: str, version: str) -> str:
    """What the engine names the default provider of a package (providers/registry.go)."""
    return f"default_{version.replace('.', '_')}"


def _engine_options(state: dict[str, Any], goal: dict[str, Any] | None) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if state.get("protect"):
        opts["protect"] = True
    if goal and goal.get("deleteBeforeReplace"):
        opts["deleteBeforeReplace"] = True
    for key in ("replaceOnChanges", "ignoreChanges", "additionalSecretOutputs"):
        if state.get(key):
            opts[key] = sorted(state[key])
    timeouts = {k: _seconds(v) for k, v in (state.get("customTimeouts") or {}).items() if v}
    if timeouts:
        opts["customTimeouts"] = timeouts
    if state.get("provider"):
        opts["provider"] = _provider_name(state["provider"])
    if state.get("retainOnDelete"):
        opts["retainOnDelete"] = True
    return opts


def _planned_options(options: dict[str, Any]) -> dict[str, Any]:
    opts = {k: v for k, v in options.items() if k in OPTION_KEYS}
    if "customTimeouts" in opts:
        opts["customTimeouts"] = {k: _seconds(v) for k, v in opts["customTimeouts"].items()}
    return opts


def preview_resources(preview: dict[str, Any], plan_file: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """name -> {type, parent, depends_on, inputs, op, options, id} from `pulumi preview --json`
    (the stack left out); `plan_file`: the `--save-plan` document of the same preview (goals)."""
    document = (plan_file or {}).get("plan", plan_file) or {}  # a versioned plan file wraps the plan
    goals = {urn: (entry or {}).get("goal") for urn, entry in (document.get("resourcePlans") or {}).items()}
    out: dict[str, dict[str, Any]] = {}
    for step in preview.get("steps") or []:
        state = step.get("newState") or step.get("oldState") or {}
        rtype = state.get("type") or urn_type(step["urn"])
        if rtype == STACK_TYPE:
            continue
        parent = state.get("parent") or ""
        read = step.get("op") == "read"
        out[urn_name(step["urn"]) if not read else f"read:{urn_name(step['urn'])}"] = {
            "type": rtype,
            "op": step.get("op"),
            "parent": None if not parent or urn_type(parent) == STACK_TYPE else urn_name(parent),
            "depends_on": sorted({urn_name(u) for u in state.get("dependencies") or []}),
            "inputs": _norm(state.get("inputs") or {}),
            "custom": bool(state.get("custom")),
            "options": _engine_options(state, goals.get(step["urn"])) if plan_file is not None else None,
            "id": state.get("id") if read else None,
        }
    return out


def _with_asset_hashes(value: Any, project_dir: Path | None) -> Any:
    """The plan's `{"fileAsset": path}` with the sha256 of the file the engine would read."""
    if isinstance(value, dict):
        if set(value) == {"fileAsset"} and project_dir is not None:
            path = project_dir / value["fileAsset"]
            return {**value, "sha256": hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None}
        return {k: _with_asset_hashes(v, project_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_asset_hashes(v, project_dir) for v in value]
    return value


def plan_resources(plan: dict[str, Any], project_dir: Path | None = None) -> dict[str, dict[str, Any]]:
    """name -> the same shape from `python -m gpu_stack plan --format json` (`project_dir`: where
    the plan's file assets are, to compare their bytes too)."""
    out: dict[str, dict[str, Any]] = {}
    for r in plan["resources"]:
        out[r["name"]] = {
            "type": r["type"],
            "parent": r["parent"],
            "depends_on": sorted(r["depends_on"]),
            "inputs": _with_asset_hashes(_norm(r["inputs"]), project_dir),
            "options": _planned_options(r.get("options") or {}),
        }
    for read in plan.get("reads") or []:
        out[f"read:{read['name']}"] = {
            "type": read["type"], "parent": read.get("parent"), "depends_on": sorted(read.get("depends_on") or []),
            "inputs": None, "options": {},
            "id": read.get("id"),
        }
    return out


def _kind(value: Any) -> str:
    """A Pulumi property value's kind: JSON numbers are one kind (the engine has no integers)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if value is None:
        return "null"
    return type(value).__name__


def value_differences(path: str, planned: Any, engine: Any) -> list[str]:
    """Paths where two input values differ. A secret matches only a secret and an unknown only an
    unknown; a value matches only a value of the same kind."""
    if isinstance(planned, dict) and isinstance(engine, dict):
        out: list[str] = []
        for key in sorted(set(planned) | set(engine)):
            sub = f"{path}.{key}" if path else key
            if key not in engine:
                out.append(f"{sub}: planned {_short(planned[key])}, not in the preview")
            elif key not in planned:
                out.append(f"{sub}: not planned, preview has {_short(engine[key])}")
            else:
                out.extend(value_differences(sub, planned[key], engine[key]))
        return out
    if isinstance(planned, list) and isinstance(engine, list) and len(planned) == len(engine):
        return [d for i, (a, b) in enumerate(zip(planned, engine, strict=True)) for d in value_differences(f"{path}[{i}]", a, b)]
    if _kind(planned) != _kind(engine) or planned != engine:
        return [f"{path}: planned {_short(planned)}, preview {_short(engine)}"]
    return []


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:157] + "..."


def _allowed(rtype: str, key: str, value: Any, versions: dict[str, str]) -> bool:
    for allowed in ALLOWED:
        type_ok = allowed.type == rtype or (allowed.type.endswith(":*") and rtype.startswith(allowed.type[:-1]))
        if not type_ok or allowed.path != key:
            continue
        if allowed.value is _ANY:
            return True
        if allowed.value == "<pinned>":
            package = rtype.rsplit(":", 1)[-1]
            return package in versions and value == versions[package]
        return _kind(value) == _kind(allowed.value) and value == allowed.value
    return False


def _inputs_for_comparison(rtype: str, planned: dict[str, Any], engine: dict[str, Any], versions: dict[str, str]) -> tuple[dict, dict]:
    engine = {k: v for k, v in engine.items() if not (k not in planned and _allowed(rtype, k, v, versions))}
    planned = {k: v for k, v in planned.items() if k not in DROPPED.get(rtype, set())}
    return planned, engine


def differences(
    plan: dict[str, Any], preview: dict[str, Any], plan_file: dict[str, Any] | None = None,
    versions: dict[str, str] | None = None, project_dir: Path | None = None,
) -> list[str]:
    """Every difference between the offline plan and the real preview, one line each.

    `plan_file`: the preview's `--save-plan` document; with it resource options are compared
    too. `versions`: package -> pinned plugin version (e.g. {"kubernetes": "4.25.0"}); a
    provider at another version is a difference, and a resource the program gave no provider
    must be served by the engine's default provider of its package at the pinned version.
    `project_dir`: the project the preview ran in; a file asset must then have the same bytes."""
    versions = versions or {}
    planned, engine = plan_resources(plan, project_dir), preview_resources(preview, plan_file)
    defaults = {
        name: r for name, r in engine.items()
        if r["type"].startswith("pulumi:providers:") and name.startswith("default") and name not in planned
    }
    out: list[str] = []
    for name, r in sorted(defaults.items()):
        package = r["type"].rsplit(":", 1)[-1]
        if package not in versions or r["inputs"].get("version") != versions[package] or name != default_provider_name(package, versions[package]):
            out.append(f"{name}: default provider of {package} at {r['inputs'].get('version')!r}, pinned {versions.get(package)!r}")
    for name in sorted(set(planned) | set(engine)):
        if name in defaults:
            continue
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
        if name.startswith("read:"):
            if p.get("id") != e.get("id"):
                out.append(f"{name}: read id planned {p.get('id')!r}, preview {e.get('id')!r}")
            continue
        if e["options"] is not None:
            want = dict(p["options"])
            if "provider" not in want and e["custom"] and not e["type"].startswith("pulumi:providers:"):
                package = e["type"].split(":", 1)[0]
                if package in versions:
                    want["provider"] = default_provider_name(package, versions[package])
            for key in sorted(set(want) | set(e["options"])):
                if want.get(key) != e["options"].get(key):
                    out.append(f"{name}: option {key} planned {want.get(key)!r}, preview {e['options'].get(key)!r}")
        if p["inputs"] is not None and e.get("custom", True):
            planned_inputs, engine_inputs = _inputs_for_comparison(p["type"], p["inputs"], e["inputs"], versions)
            out.extend(f"{name}: {d}" for d in value_differences("", planned_inputs, engine_inputs))
    return out
