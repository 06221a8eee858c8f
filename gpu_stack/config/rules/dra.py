"""Rules on DRA: what NVIDIA's DRA driver 0.4.1 or Kubernetes cannot do, refused before anything
is registered (kubernetes-sigs/dra-driver-nvidia-gpu at v0.4.1: its prerequisites page and its
feature gates, pkg/featuregates/featuregates.go in that repository)."""

from __future__ import annotations

from typing import Any

from ..dra import ALPHA_GATES, BETA_GATES, DRA_CHART_VERSION, DRA_MIN_KUBERNETES, KNOWN_GATES, REFUSED_GATES
from ..errors import Problem, config_key
from ..facts import DEFAULT_KEY, all_profiles, dra_nodes, node_allocation, node_profile_key
from ..root import Settings
from ..sharing import SharingProfile

# The driver's defaults (featuregates.go:86-149) and its own start-up check (ValidateFeatureGates):
# pairs it refuses to start with, as (gate, value, other gate, other value, why).
GATE_DEFAULTS = {"IMEXDaemonsWithDNSNames": True, "ComputeDomainCliques": True, "CrashOnNVLinkFabricErrors": True}
GATE_CONFLICTS = (
    ("ComputeDomainCliques", True, "IMEXDaemonsWithDNSNames", False, "ComputeDomainCliques requires IMEXDaemonsWithDNSNames"),
    ("PassthroughSupport", True, "NVMLDeviceHealthCheck", True, "PassthroughSupport and NVMLDeviceHealthCheck are mutually exclusive"),
    ("DeviceMetadata", True, "PassthroughSupport", False, "DeviceMetadata requires PassthroughSupport"),
)
MIN_DRIVER_BRANCH = 565
"""The driver branch from which the DRA driver allocates GPUs (the driver's prerequisites page)."""


def gate_on(settings: Settings, gate: str) -> bool:
    """Whether the driver runs with `gate` on: the stack's setting, else the driver's default."""
    return settings.dra.feature_gates.get(gate, GATE_DEFAULTS.get(gate, False))


def _gates(s: Settings) -> list[Problem]:
    d = s.dra
    out: list[Problem] = []
    for gate, value in d.feature_gates.items():
        if gate not in KNOWN_GATES:
            out.append(Problem(key=config_key(("dra", "featureGates", gate)), value=value, message=(
                f"is not a feature gate of the DRA driver {DRA_CHART_VERSION}; known: {', '.join(ALPHA_GATES)} "
                f"(alpha) and {', '.join(BETA_GATES)} (beta)")))
    for gate, why in REFUSED_GATES.items():
        if gate in d.feature_gates:
            out.append(Problem(key=config_key(("dra", "featureGates", gate)), value=d.feature_gates[gate], message=(
                f"is refused: {why}; remove it")))
    for gate in ALPHA_GATES:
        if d.feature_gates.get(gate) and not d.allow_alpha:
            out.append(Problem(key=config_key(("dra", "featureGates", gate)), value=True, message=(
                f"{gate} is an alpha gate of the DRA driver (off by default); turning it on needs the "
                "explicit opt-in dra.allowAlpha: true")))
    for gate, value, other, other_value, why in GATE_CONFLICTS:
        if gate_on(s, gate) == value and gate_on(s, other) == other_value:
            key = gate if gate in d.feature_gates else other
            out.append(Problem(key=config_key(("dra", "featureGates", key)), value=gate_on(s, key), message=(
                f"the DRA driver refuses to start: {why} (with defaults: "
                f"{', '.join(f'{g}={v}' for g, v in GATE_DEFAULTS.items())})")))
    if d.extended_resource and not d.allow_alpha:
        out.append(Problem(key=config_key(("dra", "allowAlpha")), value=False, message=(
            "dra.extendedResource declares Kubernetes' DRAExtendedResource gate, alpha in 1.34 (KEP-5004): "
            "it needs this explicit opt-in set to true")))
    return out


def _cluster(s: Settings) -> list[Problem]:
    users = [i for i, n in enumerate(s.nodes) if node_allocation(s, n) == "dra"]
    if not users:
        return []
    shown = ", ".join(f"nodes[{i}] ({s.nodes[i].name})" for i in users[:3]) + (" ..." if len(users) > 3 else "")
    out: list[Problem] = []
    if tuple(int(p) for p in s.kubernetes.version.split(".")) < tuple(int(p) for p in DRA_MIN_KUBERNETES.split(".")):
        out.append(Problem(key=config_key(("kubernetes", "version")), value=s.kubernetes.version, message=(
            f"{shown} use DRA, which needs resource.k8s.io/v1: GA and served with no flag from Kubernetes "
            f"{DRA_MIN_KUBERNETES} (the DRA driver needs 1.34.2 or later); set kubernetes.version: \"1.34\" "
            "or keep those nodes on devicePlugin")))
    if not s.toolkit.cdi:
        out.append(Problem(key=config_key(("toolkit", "cdi")), value=False, message=(
            f"{shown} use DRA, whose driver hands GPUs to containers by CDI only; set toolkit.cdi: true")))
    branch = s.driver.version.split(".", 1)[0]
    if s.driver.placement == "operator" and branch.isdigit() and int(branch) < MIN_DRIVER_BRANCH:
        out.append(Problem(key=config_key(("driver", "version")), value=s.driver.version, message=(
            f"{shown} use DRA, whose driver allocates GPUs from driver branch {MIN_DRIVER_BRANCH} on; "
            "use a newer driver or keep those nodes on devicePlugin")))
    return out


def _profile_source(s: Settings, key: str) -> tuple[tuple[Any, ...], SharingProfile | Any]:
    if key == DEFAULT_KEY:
        return ("sharing",), s.sharing
    return ("sharing", "profiles", key), s.sharing.profiles[key]


def _sharing(s: Settings) -> list[Problem]:
    """A DRA node's sharing profile in DRA terms: what a claim cannot express is refused."""
    out: list[Problem] = []
    profiles = all_profiles(s)
    seen: set[tuple[str, str]] = set()
    for node in dra_nodes(s):
        i = s.nodes.index(node)
        key = node_profile_key(s, node, profiles)
        profile = profiles.get(key) if key else None
        if key is None or profile is None or profile.mode == "none" or key not in (DEFAULT_KEY, *s.sharing.profiles):
            continue
        prefix, raw = _profile_source(s, key)
        if profile.mode == "mps" and not (s.dra.feature_gates.get("MPSSupport") and s.dra.allow_alpha):
            where = ("nodes", i, "sharing") if node.sharing is not None else ("sharing", "mode")
            value = node.sharing if node.sharing is not None else "mps"
            out.append(Problem(key=config_key(where), value=value, message=(
                f"node {node.name} uses DRA, where MPS is a GpuConfig in the workload's claim behind the "
                "driver's alpha MPSSupport gate; set dra.allowAlpha: true and dra.featureGates.MPSSupport: "
                "true, or give the node a time-slicing profile")))
        for field, camel, why in (
            ("rename_by_default", "renameByDefault", "DRA has no renamed `<resource>.shared` resources: a claim selects devices of a DeviceClass"),
            ("fail_requests_greater_than_one", "failRequestsGreaterThanOne",
             "DRA has no replicas to limit: pods share a device by naming one ResourceClaim"),
        ):
            if getattr(raw, field) and (key, field) not in seen and field in raw.model_fields_set:
                seen.add((key, field))
                out.append(Problem(key=config_key((*prefix, camel)), value=True, message=(
                    f"applies to node {node.name}, which uses DRA: {why}; give DRA nodes a profile without it")))
    return out


def dra_advisories(s: Settings) -> list[str]:
    """DRA driver settings that do nothing: no node uses DRA, so the driver is not installed."""
    d = s.dra
    if dra_nodes(s):
        return []
    set_here = [f"dra.{k}" for k in ("featureGates", "extendedResource", "computeDomains") if k in d.model_dump(by_alias=True, exclude_defaults=True)]
    if not set_here:
        return []
    return [
        (f"{', '.join(set_here)} {'has' if len(set_here) == 1 else 'have'} no effect: no node uses DRA "
        "(nodes[i].allocation, dra.allocation), so NVIDIA's DRA driver is not installed")
    ]


def dra_rules(s: Settings) -> list[Problem]:
    return [*_gates(s), *_cluster(s), *_sharing(s)]


__all__ = ["dra_advisories", "dra_rules", "gate_on"]
