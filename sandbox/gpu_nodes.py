"""Simulated GPU nodes and what NVIDIA's node components would write on them.

`node_manifest` makes one Node per node of a stack file, with the labels GPU feature discovery
sets on such a node. `NodeAgents` stands in for the three node agents the operator would run there
(simulated pods run no code): the device plugin advertises on each node what the real plugin
would for the sharing config its ClusterPolicy and labels select; the MIG manager answers the
`nvidia.com/mig.config` label protocol from its mounted (ClusterPolicy-named) mig-parted
ConfigMap; and both re-advertise when a label, the ClusterPolicy or a ConfigMap changes. They read
only what the cluster holds (ClusterPolicy, ConfigMaps, node labels) and the node's hardware (the
stack file's GPU model and count), never the program's own capacity table, so the capacity the
validation Jobs expect is checked against an independent reading of the plugin's rules.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import yaml

from .cluster import Cluster

GPU = "nvidia.com/gpu"
MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"
PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
SIMULATED = "gpu-stack.sandbox/simulated"
MIG_MANAGER_APP = "nvidia-mig-manager"


def _holds_gpus(pod: dict[str, Any]) -> bool:
    """A pod that has not finished and whose containers have an nvidia.com/* limit."""
    if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
        return False
    return any(k.startswith("nvidia.com/") for c in pod["spec"].get("containers") or [] for k in (c.get("resources") or {}).get("limits") or {})

def gpu_product(model: str) -> tuple[str, int, bool]:
    """What GFD writes for a catalog model (gpu_stack's own catalog, config/gpu-models.yaml):
    `nvidia.com/gpu.product` (the nvidia-smi name, spaces as dashes), `gpu.memory` (MiB) and
    `mig.capable`; so every model the program treats as MIG-capable is MIG-capable here too."""
    from gpu_stack.config.gpu_models import catalog

    known = catalog().lookup(model)
    if known is None:
        return f"NVIDIA-{model}", 16384, False
    name = next((a for a in known.aliases if a.startswith(("NVIDIA ", "Tesla "))), f"NVIDIA {known.name}")
    return name.replace(" ", "-"), known.memory_gb * 1024, known.mig_capable


@dataclass(frozen=True)
class Hardware:
    """What a node physically has (from the stack file's `nodes[i]`)."""

    name: str
    model: str
    gpus: int
    labels: dict[str, str] = field(default_factory=dict)


def hardware_of(stack_nodes: list[dict[str, Any]]) -> list[Hardware]:
    out = []
    for node in stack_nodes:
        gpu = node.get("gpu") or {}
        out.append(Hardware(node["name"], str(gpu.get("model", "L4")), int(gpu.get("count", 1)), dict(node.get("labels") or {})))
    return out


def node_manifest(hw: Hardware) -> dict[str, Any]:
    product, memory, mig_capable = gpu_product(hw.model)
    labels = {
        "kubernetes.io/hostname": hw.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        SIMULATED: "true",
        # what NFD and GFD write on a GPU node
        "feature.node.kubernetes.io/pci-10de.present": "true",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(hw.gpus),
        "nvidia.com/gpu.memory": str(memory),
        "nvidia.com/mig.capable": "true" if mig_capable else "false",
        **hw.labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": hw.name, "labels": labels, "annotations": {"kwok.x-k8s.io/node": "fake"}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
        },
    }


# ----------------------------------------------------------------------------- the plugin's rules
def plugin_config(data: dict[str, str] | None, default: str | None, label: str | None) -> tuple[str | None, str | None]:
    """(config text, error) the device plugin's config-manager picks for a node: the key its
    `nvidia.com/device-plugin.config` label names, else the ClusterPolicy's default. A key the
    ConfigMap does not hold is an error, as in the real one ("specified config %v does not exist",
    k8s-device-plugin v0.18.1 cmd/config-manager/main.go), never a silent fall-back to whole
    GPUs; with no ConfigMap the plugin runs on its built-in config."""
    if data is None:
        return None, None
    key = label or default or ""
    if not key:
        # no label and no default: with a single config the manager takes it (fallback `single`)
        return (next(iter(data.values())), None) if len(data) == 1 else (None, "no config named and no default set")
    if key not in data:
        return None, f"specified config {key} does not exist"
    return data[key], None


def plugin_resources(config_text: str | None, gpus: int, mig_devices: dict[str, int] | None, strategy: str) -> dict[str, int]:
    """What nvidia-device-plugin advertises on a node: whole GPUs or MIG devices (by the MIG
    strategy), each multiplied by its sharing replicas (time-slicing or MPS; renameByDefault adds
    `.shared`)."""
    if strategy != "none" and mig_devices:
        if strategy == "single":
            base = {GPU: sum(mig_devices.values())}
        else:
            base = {f"nvidia.com/mig-{p}": n for p, n in mig_devices.items() if n}
    else:
        base = {GPU: gpus}
    if not config_text:
        return base
    doc = yaml.safe_load(config_text) or {}
    sharing = doc.get("sharing") or {}
    spec = sharing.get("mps") or sharing.get("timeSlicing")
    if not spec:
        return base
    out = dict(base)
    for res in spec.get("resources") or []:
        name, replicas = res.get("name"), int(res.get("replicas", 1))
        if name in base and replicas >= 2:
            del out[name]
            shared = f"{name}.shared" if spec.get("renameByDefault") else name
            out[shared] = base[name] * replicas
    return out


def mig_layout(parted_text: str, profile: str, gpus: int) -> dict[str, int] | None:
    """The MIG devices a node's GPUs get under a mig-parted profile; None when MIG stays off.
    Raises KeyError when the profile is not in the config (the MIG manager's state=failed)."""
    doc = yaml.safe_load(parted_text) or {}
    entries = doc["mig-configs"][profile]
    total: dict[str, int] = {}
    for entry in entries:
        if not entry.get("mig-enabled"):
            continue
        devices = entry.get("devices", "all")
        n = gpus if devices == "all" else len(devices)
        for p, count in (entry.get("mig-devices") or {}).items():
            total[p] = total.get(p, 0) + int(count) * n
    return total or None


@dataclass
class NodeAgents:
    """Device plugin and MIG manager stand-ins for every simulated node, polling the API."""

    cluster: Cluster
    hardware: list[Hardware]
    operator_namespace: str = "gpu-operator"
    interval: float = 1.0
    missing_gpus: dict[str, int] = field(default_factory=dict)
    """node -> GPUs the node has lost (a failed GPU): it advertises that many fewer."""
    plugin_errors: dict[str, str] = field(default_factory=dict)
    """node -> why its device plugin does not run (its config-manager's error)."""
    fail_mig_profiles: set[str] = field(default_factory=set)
    """profiles the MIG manager reports as failed even when they exist (a GPU that refuses)."""
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    applied: dict[str, tuple[str, dict[str, int] | None]] = field(default_factory=dict, init=False)
    """node -> (the MIG config it has, its MIG devices)"""
    _answered: dict[str, tuple] = field(default_factory=dict, init=False)
    _mig_manager_config: str | None = field(default=None, init=False)
    _runtime_class_owner: str | None = field(default=None, init=False)
    _policy_uid: str | None = field(default=None, init=False)
    errors: list[str] = field(default_factory=list, init=False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="node-agents", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as exc:  # keep going: a transient API error must not stop the agents
                self.errors.append(str(exc))
            self._stop.wait(self.interval)

    def _policy(self) -> dict[str, Any] | None:
        proc = self.cluster.kubectl("get", "clusterpolicies.nvidia.com", "-o", "json", check=False)
        if proc.returncode != 0:
            return None
        items = json.loads(proc.stdout).get("items") or []
        self._policy_uid = items[0]["metadata"]["uid"] if items else None
        return items[0]["spec"] if items else None

    def _config_maps(self) -> dict[str, dict[str, str]]:
        proc = self.cluster.kubectl("get", "configmaps", "-n", self.operator_namespace, "-o", "json", check=False)
        if proc.returncode != 0:
            return {}
        return {cm["metadata"]["name"]: cm.get("data") or {} for cm in json.loads(proc.stdout).get("items") or []}

    def sync(self) -> None:
        """One pass: keep the MIG manager DaemonSet as the operator would, answer MIG labels, then
        advertise what the plugin would on every node."""
        policy = self._policy()
        nodes = {n["metadata"]["name"]: n for n in self.cluster.get_json("nodes").get("items", [])}
        cms = self._config_maps() if policy else {}
        pods = self.cluster.get_json("pods", "-A").get("items", []) if policy else []
        if policy is not None:
            self._ensure_runtime_class()
            self._ensure_mig_manager(policy)
        for hw in self.hardware:
            node = nodes.get(hw.name)
            if node is None:
                continue
            labels = node["metadata"].get("labels") or {}
            gpus = max(hw.gpus - self.missing_gpus.get(hw.name, 0), 0)
            if policy is None:  # no operator yet: no plugin, no MIG manager
                self._advertise(node, {})
                continue
            strategy = ((policy.get("mig") or {}).get("strategy")) or "single"
            on_node = [p for p in pods if p["spec"].get("nodeName") == hw.name]
            mig_devices = self._mig_manager(hw.name, labels, on_node, cms, gpus)
            dp = (policy.get("devicePlugin") or {}).get("config") or {}
            text, error = plugin_config(cms.get(dp.get("name") or "") if dp.get("name") else None, dp.get("default"),
                                        labels.get(PLUGIN_CONFIG))
            if error:
                # the real config-manager exits and the plugin never starts: nothing advertised
                self.plugin_errors[hw.name] = error
                self._advertise(node, {})
                continue
            self.plugin_errors.pop(hw.name, None)
            self._advertise(node, plugin_resources(text, gpus, mig_devices, strategy))

    def _ensure_runtime_class(self) -> None:
        """The RuntimeClass `nvidia` the operator creates with its ClusterPolicy (handler nvidia),
        owned by the ClusterPolicy as the operator's controller reference makes it: the garbage
        collector removes it with the policy (helm uninstall, `pulumi destroy`)."""
        if self._policy_uid is None or self._runtime_class_owner == self._policy_uid:
            return
        owner = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "name": "cluster-policy",
                 "uid": self._policy_uid, "controller": True, "blockOwnerDeletion": True}
        self.cluster.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "handler": "nvidia",
                            "metadata": {"name": "nvidia", "ownerReferences": [owner]}})
        self._runtime_class_owner = self._policy_uid

    def _ensure_mig_manager(self, policy: dict[str, Any]) -> None:
        """The operator's `nvidia-mig-manager` DaemonSet on MIG-capable nodes, mounting the
        ClusterPolicy's mig-parted ConfigMap as `mig-parted-config`: a new name rolls its pods
        (the DaemonSet controller, node by node), as the operator's change of the name does."""
        cm = ((policy.get("migManager") or {}).get("config") or {}).get("name") or "default-mig-parted-config"
        if self._mig_manager_config == cm:
            return
        labels = {"app": MIG_MANAGER_APP}
        self.cluster.apply({
            "apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": MIG_MANAGER_APP, "namespace": self.operator_namespace, "labels": labels},
            "spec": {
                "selector": {"matchLabels": labels},
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"nvidia.com/mig.capable": "true"},
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": MIG_MANAGER_APP, "image": "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.13.1",
                                        "volumeMounts": [{"name": "mig-parted-config", "mountPath": "/mig-parted-config"}]}],
                        "volumes": [{"name": "mig-parted-config", "configMap": {"name": cm}}],
                    },
                },
            },
        })
        self._mig_manager_config = cm

    def _mig_manager(self, name: str, labels: dict[str, str], pods: list[dict[str, Any]], cms, gpus) -> dict[str, int] | None:
        """What the node's MIG manager pods do with its `nvidia.com/mig.config` (v0.13.1): each
        reacts to a change of the label and, when it starts, to its current value; it checks the
        value against the ConfigMap it mounts (an old pod, the old one) and fails on a missing
        config or on GPUs in use; else it applies the layout and reports success."""
        current = self.applied.get(name, ("", None))[1]
        profile = labels.get(MIG_CONFIG)
        managers = [p for p in pods if (p["metadata"].get("labels") or {}).get("app") == MIG_MANAGER_APP]
        if not profile or labels.get("nvidia.com/mig.capable") != "true" or not managers:
            return current
        key = (profile, frozenset(p["metadata"]["uid"] for p in managers))
        if self._answered.get(name) == key:
            return current
        self._answered[name] = key
        mounted = [
            next((v["configMap"]["name"] for v in p["spec"].get("volumes") or [] if v.get("name") == "mig-parted-config"), None)
            for p in managers
        ]
        busy = [p["metadata"]["name"] for p in pods if p not in managers and _holds_gpus(p)]
        try:
            if profile in self.fail_mig_profiles or busy:
                raise KeyError(profile)
            layouts = [mig_layout((cms.get(cm or "") or {})["config.yaml"], profile, gpus) for cm in mounted]
        except (KeyError, TypeError):
            self._label(name, {MIG_STATE: "failed"})
            return current
        self.applied[name] = (profile, layouts[-1])
        self._label(name, {MIG_STATE: "success"})
        return layouts[-1]

    def _label(self, node: str, labels: dict[str, str]) -> None:
        self.cluster.kubectl("label", "node", node, "--overwrite", *[f"{k}={v}" for k, v in labels.items()])

    def _advertise(self, node: dict[str, Any], resources: dict[str, int]) -> None:
        capacity = node.get("status", {}).get("capacity") or {}
        current = {k: int(v) for k, v in capacity.items() if k.startswith("nvidia.com/")}
        if current == resources:
            return
        patch: dict[str, Any] = {k: None for k in current if k not in resources}
        patch.update({k: str(v) for k, v in resources.items()})
        body = json.dumps({"status": {"capacity": patch, "allocatable": patch}})
        self.cluster.kubectl("patch", "node", node["metadata"]["name"], "--subresource=status", "--type=merge", "-p", body)
