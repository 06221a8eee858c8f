"""Property-based tests of the pure builders: whatever valid settings a user writes, the device plugin
and mig-parted accept what the stack gives them, and every value reaching a node script survives
the shell intact.

The acceptance rules are written here from GPU-OPERATOR-FACTS.md (device plugin v0.18.1,
mig-parted v0.13.1), independently of the builders they check.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any, Literal

import yaml
from hypothesis import HealthCheck, assume, given, settings as hsettings, strategies as st

from gpu_stack.config import SettingsError, load_settings
from gpu_stack.design.derive import derive

PROPERTY = hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])

# --------------------------------------------------------------------------- acceptance rules
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
RESOURCE = re.compile(r"^nvidia\.com/(gpu|mig-[0-9]+g\.[0-9]+gb(\.[a-z]+)*)$")
MIG_PROFILE = re.compile(r"^[0-9]+g\.[0-9]+gb(\+[a-z]+(\.[a-z]+)*)?$")
MPS_MAX = 48


def plugin_refuses(text: str, cluster_strategy: str) -> list[str]:
    """Why device plugin v0.18.1 would refuse a config file, or silently misread it."""
    doc = yaml.safe_load(text)
    out: list[str] = []
    if set(doc) - {"version", "flags", "sharing"}:
        out.append(f"misplaced top-level keys {set(doc) - {'version', 'flags', 'sharing'}} (ignored)")
    if doc.get("version") != "v1":
        out.append("version is not v1")
    flags = doc.get("flags") or {}
    if set(flags) - {"migStrategy"}:
        out.append("unknown flags (ignored)")
    strategy = flags.get("migStrategy")
    if strategy not in ("none", "single", "mixed"):
        out.append(f"migStrategy {strategy!r}")
    if strategy != cluster_strategy:
        out.append("flags.migStrategy differs from mig.strategy (the env var wins: the file lies)")
    sharing = doc.get("sharing")
    if sharing is None:
        return out
    if set(sharing) - {"timeSlicing", "mps"} or len(sharing) != 1:
        out.append(f"sharing must hold exactly one of timeSlicing/mps: {sorted(sharing)}")
    for kind, body in sharing.items():
        if set(body) - {"renameByDefault", "failRequestsGreaterThanOne", "resources"}:
            out.append(f"misplaced {kind} keys (ignored)")
        resources = body.get("resources") or []
        if not resources:
            out.append("no resources")
        for r in resources:
            if set(r) != {"name", "replicas"}:
                out.append(f"resource keys {sorted(r)}")
            if not isinstance(r.get("name"), str) or len(r["name"]) > 63 or not RESOURCE.match(r["name"]):
                out.append(f"resource name {r.get('name')!r}")
            if not isinstance(r.get("replicas"), int) or r["replicas"] < 2:
                out.append(f"replicas {r.get('replicas')!r} < 2")
            if kind == "mps":
                if r.get("name", "").startswith("nvidia.com/mig-"):
                    out.append("MPS cannot share MIG devices")
                if isinstance(r.get("replicas"), int) and r["replicas"] > MPS_MAX:
                    out.append("more than 48 MPS clients per GPU")
        if kind == "mps":
            if strategy == "mixed":
                out.append("MPS refuses the mixed MIG strategy")
            if body.get("failRequestsGreaterThanOne") is not True:
                out.append("MPS forces failRequestsGreaterThanOne (the file should say so)")
    return out


def mig_parted_refuses(document: Any) -> list[str]:
    """Why mig-parted v0.13.1 would refuse a config file (or the operator could not use it)."""
    out: list[str] = []
    if set(document) != {"version", "mig-configs"} or document["version"] != "v1":
        return ["needs exactly version: v1 and mig-configs"]
    configs = document["mig-configs"]
    if "all-disabled" not in configs:
        out.append("no all-disabled entry (the operator's default label)")
    for name, entries in configs.items():
        if not LABEL_VALUE.match(name):
            out.append(f"config name {name!r} is not a label value")
        if not isinstance(entries, list) or not entries:
            out.append(f"{name}: no entries")
            continue
        for e in entries:
            if set(e) - {"devices", "mig-enabled", "mig-devices", "device-filter"}:
                out.append(f"{name}: unknown keys {set(e) - {'devices', 'mig-enabled', 'mig-devices', 'device-filter'}}")
            devices = e.get("devices")
            if devices != "all" and not (
                isinstance(devices, list) and devices and all(isinstance(d, int) and d >= 0 for d in devices)
            ):
                out.append(f"{name}: devices {devices!r}")
            if not isinstance(e.get("mig-enabled"), bool):
                out.append(f"{name}: mig-enabled missing")
            mig_devices = e.get("mig-devices") or {}
            if e.get("mig-enabled"):
                if not mig_devices or all(v == 0 for v in mig_devices.values()):
                    out.append(f"{name}: mig-devices required (not all zero) when enabled")
                for profile, count in mig_devices.items():
                    if not MIG_PROFILE.match(profile) or not isinstance(count, int) or count < 0:
                        out.append(f"{name}: {profile}: {count}")
            elif mig_devices:
                out.append(f"{name}: mig-devices set while mig-enabled is false")
    return out


# --------------------------------------------------------------------------- strategies
label_values = st.from_regex(r"\A[a-z0-9]([a-z0-9._-]{0,12}[a-z0-9])?\Z").filter(lambda k: k not in ("default", "none"))
node_names = st.from_regex(r"\A[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?\Z")


@st.composite
def sharing_configs(draw) -> dict[str, Any]:
    strategy = draw(st.sampled_from(["none", "single", "mixed"]))
    mode = draw(st.sampled_from(["none", "time-slicing", "mps"]))
    sharing: dict[str, Any] = {
        "mode": mode,
        "replicas": draw(st.integers(2, 64)),
        "renameByDefault": draw(st.booleans()),
        "failRequestsGreaterThanOne": draw(st.booleans()),
    }
    profiles = draw(st.dictionaries(
        label_values,
        st.fixed_dictionaries({
            "mode": st.sampled_from(["time-slicing", "mps", "none"]),
            "replicas": st.integers(2, 64),
            "renameByDefault": st.booleans(),
        }),
        max_size=3,
    ))
    for p in profiles.values():
        if p["mode"] == "none":
            del p["replicas"], p["renameByDefault"]
    sharing["profiles"] = profiles
    choices = [None, "none", *profiles, *(["default"] if mode != "none" else [])]
    nodes = draw(st.lists(node_names, min_size=1, max_size=4, unique=True))
    node_list = []
    for name in nodes:
        node: dict[str, Any] = {"name": name, "gpu": {"model": draw(st.sampled_from(["L4", "H100-80GB", "A100-40GB"])), "count": draw(st.integers(1, 8))}}
        choice = draw(st.sampled_from(choices))
        if choice is not None:
            node["sharing"] = choice
        node_list.append(node)
    return {"mig": {"strategy": strategy}, "sharing": sharing, "nodes": node_list}


def _valid(raw: dict[str, Any]):
    try:
        return load_settings(raw)
    except SettingsError:
        assume(False)


@PROPERTY
@given(sharing_configs())
def test_any_valid_sharing_settings_give_configs_the_device_plugin_accepts(raw):
    settings = _valid(raw)
    derived = derive(settings)
    sharing = derived.sharing
    if sharing.configmap_name is None:
        assert "config" not in derived.values["devicePlugin"]
        assert not derived.node_labels
        return
    assert DNS_LABEL.match(sharing.configmap_name)
    for key, text in sharing.data.items():
        assert LABEL_VALUE.match(key), key
        assert plugin_refuses(text, settings.mig.strategy) == [], (key, text)
        assert yaml.safe_load(text) == sharing.files[key]
    config = derived.values["devicePlugin"]["config"]
    assert config["name"] == sharing.configmap_name
    assert config["create"] is False
    # A default or a node label naming a missing key crash-loops the plugin's config manager.
    assert config["default"] == "" or config["default"] in sharing.data
    for node, labels in derived.node_labels.items():
        if "nvidia.com/device-plugin.config" in labels:
            assert labels["nvidia.com/device-plugin.config"] in sharing.data, (node, labels)


H100_PROFILES = {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1}


@st.composite
def mig_configs(draw) -> dict[str, Any]:
    profiles: dict[str, list[dict[str, Any]]] = {}
    for name in draw(st.lists(label_values.filter(lambda n: n != "all-disabled"), min_size=1, max_size=3, unique=True)):
        enabled = draw(st.booleans())
        entry: dict[str, Any] = {"devices": draw(st.one_of(st.just("all"), st.lists(st.integers(0, 7), min_size=1, max_size=8, unique=True))), "mig-enabled": enabled}
        if enabled:
            chosen = draw(st.lists(st.sampled_from(sorted(H100_PROFILES)), min_size=1, max_size=2, unique=True))
            entry["mig-devices"] = {p: draw(st.integers(1, H100_PROFILES[p])) for p in chosen}
        profiles[name] = [entry]
    nodes = [
        {"name": f"h100-{i}", "gpu": {"model": "H100-80GB", "count": 8}, "mig": draw(st.sampled_from(sorted(profiles) + ["all-disabled"]))}
        for i in range(draw(st.integers(1, 3)))
    ]
    return {"mig": {"strategy": draw(st.sampled_from(["single", "mixed"])), "profiles": profiles}, "nodes": nodes}


@PROPERTY
@given(mig_configs())
def test_any_valid_mig_settings_give_a_config_mig_parted_accepts(raw):
    settings = _valid(raw)
    derived = derive(settings)
    mig = derived.mig
    assert set(mig.data) == {"config.yaml"}
    document = yaml.safe_load(mig.data["config.yaml"])
    assert document == mig.document
    assert mig_parted_refuses(document) == []
    manager = derived.values["migManager"]["config"]
    assert manager == {"create": False, "name": mig.configmap_name, "default": "all-disabled"}
    for node in settings.nodes:
        assert derived.node_labels[node.name]["nvidia.com/mig.config"] in document["mig-configs"]


# --------------------------------------------------------------------------- node scripts
from gpu_stack.design import node_prep  # noqa: E402

BASH = shutil.which("bash")
DUMP = "#!/usr/bin/env bash\n" + node_prep.MARKER + "\n" + "".join(
    f"printf '%s\\0' \"${{{name}-<unset>}}\"\n" for name in node_prep.VARIABLES
)


def _dump(script: str) -> list[str]:
    assert BASH is not None
    proc = subprocess.run([BASH, "-c", script], capture_output=True, check=True, env={"PATH": os.environ["PATH"]})
    return proc.stdout.decode().split("\0")[:-1]


# Anything but NUL (which no shell string can hold) and lone surrogates.
SURROGATES: tuple[Literal["Cs"]] = ("Cs",)
any_text = st.text(st.characters(blacklist_categories=SURROGATES, blacklist_characters="\x00"), max_size=40)


@PROPERTY
@given(st.fixed_dictionaries(dict.fromkeys(node_prep.VARIABLES, any_text)))
def test_any_string_in_a_script_comes_out_exactly_as_it_went_in(values):
    rendered = node_prep.render_script(values, text=DUMP)
    assert _dump(rendered) == [values[name] for name in node_prep.VARIABLES]
    assert subprocess.run([BASH, "-n", "-c", node_prep.render_script(values)], capture_output=True).returncode == 0


HOSTS = st.one_of(
    st.from_regex(r"\A[a-z0-9]([a-z0-9.-]{0,30}[a-z0-9])?\Z"),
    st.ip_addresses().map(str),
)


@st.composite
def host_managed_configs(draw) -> dict[str, Any]:
    names = draw(st.lists(st.from_regex(r"\A[a-z0-9]([a-z0-9.-]{0,40}[a-z0-9])?\Z"), min_size=1, max_size=3, unique=True))
    model = st.from_regex(r"\A[A-Za-z0-9]([A-Za-z0-9 ._+-]{0,30}[A-Za-z0-9])?\Z")
    return {
        "driver": {"placement": "host"},
        "toolkit": {"placement": draw(st.sampled_from(["host", "operator"]))},
        "ssh": {"user": draw(st.from_regex(r"\A[a-z_][a-z0-9_-]{0,31}\Z")), "privateKey": "k"},
        "nodes": [
            {"name": n, "address": draw(HOSTS), "gpu": {"model": draw(model), "count": draw(st.integers(1, 16))},
             "runtime": draw(st.sampled_from(["containerd", "docker", "crio", "k3s", "rke2"]))}
            for n in names
        ],
    }


@PROPERTY
@given(host_managed_configs())
def test_every_value_the_validators_allow_reaches_the_node_exactly(raw):
    settings = _valid(raw)
    for command in list(derive(settings).commands):
        dump = node_prep.render_script(command.values, text=DUMP)
        assert _dump(dump) == [command.values.get(name, "<unset>") for name in node_prep.VARIABLES]
        # The command line sent over SSH is valid POSIX sh, and the words it hands the launcher are
        # exactly the node's values (sh itself splits them: printf in place of the launcher).
        assert subprocess.run(["sh", "-n", "-c", command.create], capture_output=True).returncode == 0
        launcher = f"exec sh ./{node_prep.REMOTE_PATH} "
        assert command.create.startswith(launcher)
        printed = subprocess.run(["sh", "-c", "printf '%s\\0' " + command.create[len(launcher):]], capture_output=True, check=True)
        words = printed.stdout.decode().split("\0")[:-1]
        assert words[:3] == [node_prep.LAUNCH_FLAG, node_prep.script_hash(), str(settings.ssh.timeout_seconds)]
        assert dict(w.split("=", 1) for w in words[3:]) == command.values
        assert node_prep.launch_values(command.create) == command.values


# --------------------------------------------------------------------------- anything at all
from gpu_stack.config import TOP_LEVEL_KEYS  # noqa: E402

# Key names the settings know (so generated configs reach deep), plus a few they do not.
KNOWN_KEYS = sorted({
    "name", "address", "user", "port", "hostKey", "gpu", "model", "count", "runtime", "sharing", "mig",
    "mode", "replicas", "renameByDefault", "failRequestsGreaterThanOne", "resources", "profiles",
    "strategy", "manager", "enabled", "withReboot", "devices", "mig-enabled", "mig-devices",
    "device-filter", "serviceMonitor", "interval", "additionalLabels", "metrics", "namespace",
    "images", "cuda", "toolbox", "kubectl", "timeoutSeconds", "placement", "version", "privateKey",
    "protect", "releaseName", "context", "1g.10gb", "all-disabled", "default", "none", "x",
})
json_leaf = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 70000), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["L4", "H100-80GB", "time-slicing", "mps", "mixed", "all", "host", "10.0.0.1", "gpu-1"]),
)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KNOWN_KEYS), inner, max_size=4)),
    max_leaves=20,
)


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from([*TOP_LEVEL_KEYS, "sharring"]), json_value, max_size=5))
def test_any_config_is_either_refused_with_named_keys_or_built(raw):
    """No input makes the pure core raise anything but SettingsError (which the CLI prints)."""
    try:
        settings = load_settings(raw)
    except SettingsError as exc:
        assert exc.problems and all(p.key.startswith("gpu-stack:") for p in exc.problems)
        return
    # Everything the program computes before registering (one derive: node facts, configs,
    # node commands, capacity, validation, rollout, alerts): none of it may fail half way.
    design = derive(settings)
    assert len(design.nodes) == len(settings.nodes)
    assert [c.node for c in design.commands] == ([n.name for n in settings.nodes] if settings.host_managed else [])


def _paths(value: Any, prefix: str = "") -> list[str]:
    """Every `pulumi config set --path` path of a config, containers included."""
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, f"{prefix}[{i}]")
    return out


def _stack_namespace(stack: str) -> dict[str, Any]:
    from gpu_stack.config.stack_files import read_stack
    from gpu_stack.offline.runner import PROJECT_DIR

    return read_stack(PROJECT_DIR, stack).namespace()


STACK_PATHS = [(stack, path) for stack in ("dev", "prod") for path in _paths(_stack_namespace(stack)) if "privateKey" not in path]


@hsettings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(STACK_PATHS), json_value)
def test_one_edit_of_a_real_stack_gives_a_whole_plan_or_a_clean_refusal(target, value):
    """Whatever one `pulumi config set --path` writes: a full plan, or a SettingsError naming a key
    with nothing registered; never a traceback, never half a plan."""
    import copy

    from gpu_stack.offline.runner import PlanError

    from ..helpers import plan_of, set_path

    stack, path = target
    cfg = copy.deepcopy(_stack_namespace(stack))
    set_path(cfg, path, value)
    try:
        plan = plan_of(cfg)
    except PlanError as exc:
        assert exc.registered == 0
        assert str(exc).startswith("invalid stack config") and "gpu-stack:" in str(exc)
        return
    assert any(r.type == "kubernetes:helm.sh/v3:Release" for r in plan.resources)
