"""Simulated GPU nodes and what NVIDIA's node components would write on them.

`node_manifest` makes one Node per node of a stack file as it joins the cluster: NFD's PCI label
and no GPU label yet. `NodeAgents` stands in for what the operator and its node agents would do
there (simulated pods run no code), in the order a real install does it:

- the operator labels a node with NFD's NVIDIA PCI label at once: `nvidia.com/gpu.present` and its
  `nvidia.com/gpu.deploy.*` state labels (gpu-operator v25.10.1 controllers/state_manager.go,
  gpuStateLabels and labelGPUNodes);
- the driver and toolkit take time (`BringUp`: minutes with the operator's driver, less where the
  driver is on the host); only then does GPU feature discovery write its labels (product, count,
  memory, mig.capable, CUDA and compute versions) and the device plugin advertise;
- after GFD's `nvidia.com/mig.capable=true` the operator sets `nvidia.com/gpu.deploy.mig-manager`
  (the MIG manager DaemonSet's nodeSelector) and, where the ClusterPolicy's
  `migManager.config.default` is `all-disabled` and the node has no `nvidia.com/mig.config`,
  that label (state_manager.go addGPUStateLabels and labelGPUNodes);
- the device plugin advertises what the real plugin would for the sharing config its ClusterPolicy
  and labels select, and nothing while its deploy label is paused;
- the MIG manager pods (v0.13.1, cmd/nvidia-mig-manager/main.go and pkg/mig/reconfigure) act on a
  change of `nvidia.com/mig.config` and, when they start, on its current value: they check it
  against the mig-parted ConfigMap they mount, set `nvidia.com/mig.config.state=pending`, pause
  the device plugin, GFD and the exporters (`paused-for-mig-change`), apply the layout to the
  GPUs their entries' `device-filter` selects, and return the operands with `success`; a test can
  make one give up half-way (`give_up`), as the real one does when an operand pod is slow to go:
  the state stays `pending` (or `rebooting`), the operands stay paused, and its log ends with
  "Waiting for change to 'nvidia.com/mig.config' label". Each pod's log is served to
  `kubectl logs` through kwok's Logs resource.

They read only what the cluster holds (ClusterPolicy, ConfigMaps, node labels) and the node's
hardware (the stack file's GPU model and count), never the program's own capacity table, so the
capacity the validation Jobs expect is checked against an independent reading of the plugin's rules.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from .cluster import Cluster, ClusterError
from .polling import PollingAgent

GPU = "nvidia.com/gpu"
MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"
MIG_CAPABLE = "nvidia.com/mig.capable"
PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
GPU_PRESENT = "nvidia.com/gpu.present"
NFD_PCI = "feature.node.kubernetes.io/pci-10de.present"
SIMULATED = "gpu-stack.sandbox/simulated"
MIG_MANAGER_APP = "nvidia-mig-manager"
MIG_MANAGER_CONTAINER = "nvidia-mig-manager"
ALL_DISABLED = "all-disabled"
DEPLOY = "nvidia.com/gpu.deploy."
DEPLOY_MIG_MANAGER = DEPLOY + "mig-manager"
DEPLOY_PLUGIN = DEPLOY + "device-plugin"
DEPLOY_GFD = DEPLOY + "gpu-feature-discovery"
CONTAINER_STATE_LABELS = ("driver", "gpu-feature-discovery", "container-toolkit", "device-plugin", "dcgm",
                          "dcgm-exporter", "node-status-exporter", "operator-validator")
"""The operator's state labels of a `container` workload node (state_manager.go gpuStateLabels)."""
PAUSED_FOR_MIG = "paused-for-mig-change"
PAUSED_BY_MIG_MANAGER = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "nvsm")
"""What mig-parted v0.13.1 pauses while it reconfigures (reconfigure.go shutdownKubernetesGPUClients)."""
WAITING = "Waiting for change to 'nvidia.com/mig.config' label"
"""The MIG manager's idle line (main.go:305), also its last line after it gave up."""
DRIVER_VERSION = "580.105.08"
"""The chart's driver (values.yaml driver.version); GFD's cuda.driver labels on every node."""
BRING_UP_ENV = "GPU_STACK_SANDBOX_BRING_UP_SECONDS"


@dataclass(frozen=True)
class BringUp:
    """How long a node's driver and toolkit take to be ready after the operator is installed,
    before GFD labels the node and the device plugin advertises (the simulated clock).

    With the operator's driver the driver container builds and loads the kernel module on the node
    (unless a precompiled driver is used): the chart gives it 60 s before its startup probe's first
    try and up to 120 more tries 10 s apart (values.yaml driver.startupProbe), and a compile of
    the open kernel module plus the validator's checks takes a few minutes; 5 minutes is the
    default. With the driver on the host only the toolkit container (containerd's config and
    restart) and the validator run: a minute."""

    operator_driver_seconds: float = 300.0
    host_driver_seconds: float = 60.0

    @classmethod
    def from_env(cls) -> BringUp:
        """The realistic defaults, or both figures from $GPU_STACK_SANDBOX_BRING_UP_SECONDS (the
        end-to-end tier sets a short one)."""
        value = os.environ.get(BRING_UP_ENV)
        if not value:
            return cls()
        seconds = float(value)
        return cls(seconds, seconds)

    def seconds(self, policy: dict[str, Any]) -> float:
        """The bring-up time under a ClusterPolicy: its driver enabled (the CRD's default) or not."""
        driver = policy.get("driver") or {}
        return self.operator_driver_seconds if driver.get("enabled", True) is not False else self.host_driver_seconds


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


def pci_device_id(model: str) -> str | None:
    """The GPU's PCI device id as mig-parted's device-filter writes it (0x233510DE), from the catalog."""
    from gpu_stack.config.gpu_models import catalog

    known = catalog().lookup(model)
    return known.pci_device_ids[0] if known is not None and known.pci_device_ids else None


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
    """The Node as it joins: NFD has found the NVIDIA PCI device; no driver, so no GFD label yet."""
    labels = {
        "kubernetes.io/hostname": hw.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        SIMULATED: "true",
        NFD_PCI: "true",
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


def gfd_labels(hw: Hardware) -> dict[str, str]:
    """What GPU feature discovery writes once the driver runs: the GPU's product, count, memory,
    MIG capability, compute capability and the driver's CUDA versions."""
    from gpu_stack.config.gpu_models import catalog

    product, memory, mig_capable = gpu_product(hw.model)
    known = catalog().lookup(hw.model)
    major, minor = known.compute_capability if known is not None else (8, 9)
    d_major, d_minor, d_rev = DRIVER_VERSION.split(".")
    return {
        "nvidia.com/gpu.product": product,
        "nvidia.com/gpu.count": str(hw.gpus),
        "nvidia.com/gpu.memory": str(memory),
        MIG_CAPABLE: "true" if mig_capable else "false",
        "nvidia.com/gpu.compute.major": str(major),
        "nvidia.com/gpu.compute.minor": str(minor),
        "nvidia.com/cuda.driver.major": d_major,
        "nvidia.com/cuda.driver.minor": d_minor,
        "nvidia.com/cuda.driver.rev": d_rev,
        "nvidia.com/cuda.runtime.major": "13",
        "nvidia.com/cuda.runtime.minor": "0",
    }


def operator_labels(labels: dict[str, str], policy: dict[str, Any]) -> dict[str, str]:
    """The labels the operator (v25.10.1 state_manager.go labelGPUNodes) adds to a node with
    `labels` under `policy`: `gpu.present` and the container state labels where NFD found an NVIDIA
    PCI device (existing values kept); once GFD says `mig.capable=true`, the MIG manager's deploy
    label and, where `migManager.config.default` is `all-disabled` and the node has no MIG config,
    `nvidia.com/mig.config=all-disabled`."""
    out: dict[str, str] = {}
    if labels.get(NFD_PCI) != "true":
        return out
    if labels.get(GPU_PRESENT) != "true":
        out[GPU_PRESENT] = "true"
    for part in CONTAINER_STATE_LABELS:
        if DEPLOY + part not in labels:
            out[DEPLOY + part] = "true"
    if labels.get(MIG_CAPABLE) == "true":
        if DEPLOY_MIG_MANAGER not in labels:
            out[DEPLOY_MIG_MANAGER] = "true"
        manager = policy.get("migManager") or {}
        default = (manager.get("config") or {}).get("default")
        if manager.get("enabled", True) is not False and not labels.get(MIG_CONFIG) and default == ALL_DISABLED:
            out[MIG_CONFIG] = ALL_DISABLED
    return out


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


UNCHANGED = "unchanged"
"""`mig_layout`'s answer for a config none of whose entries selects the node's GPUs."""


def _matches(entry: dict[str, Any], device_id: str | None) -> bool:
    """mig-parted's MatchesDeviceFilter (api/spec/v1/helpers.go): no filter matches every GPU; a
    filter (one id or a list) matches a GPU whose PCI device id it names (compared as numbers)."""
    wanted = entry.get("device-filter")
    if wanted is None or wanted == "" or wanted == []:
        return True
    ids = [wanted] if isinstance(wanted, str) else list(wanted)
    return device_id is not None and any(int(str(i), 16) == int(device_id, 16) for i in ids)


def mig_layout(parted_text: str, profile: str, gpus: int, device_id: str | None = None) -> dict[str, int] | str | None:
    """The MIG devices a node's GPUs get under a mig-parted profile; None when MIG is off, and
    UNCHANGED when no entry's `device-filter` selects the node's GPU (`device_id`): mig-parted then
    walks no GPU, so `apply` changes nothing and `assert` passes (cmd/nvidia-mig-parted/assert
    WalkSelectedMigConfigForEachGPU). Raises KeyError when the profile is not in the config (the MIG
    manager's state=failed)."""
    doc = yaml.safe_load(parted_text) or {}
    entries = doc["mig-configs"][profile]
    total: dict[str, int] = {}
    selected = False
    for entry in entries:
        if not _matches(entry, device_id):
            continue
        selected = True
        if not entry.get("mig-enabled"):
            continue
        devices = entry.get("devices", "all")
        n = gpus if devices == "all" else len([d for d in devices if int(d) < gpus])
        for p, count in (entry.get("mig-devices") or {}).items():
            total[p] = total.get(p, 0) + int(count) * n
    if not selected:
        return UNCHANGED
    return total or None


def cri_line(stream: str, text: str) -> str:
    """One line of a container log file as the kubelet's CRI runtime writes it (what kwok reads)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{now} {stream} F {text}\n"


def logrus(level: str, message: str) -> str:
    """A line of the MIG manager's log (logrus' text format, no TTY)."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f'time="{now}" level={level} msg="{message}"'


@dataclass
class _ManagerPod:
    """One MIG manager pod: its log (lines, and the CRI file kwok serves) and the label value it
    acted on last (main.go's SyncableMigConfig: it acts on a change, and on the value it starts with)."""

    name: str
    log_file: Path
    lines: list[str] = field(default_factory=list)
    last_read: str | None = None

    def log(self, level: str, message: str) -> None:
        line = logrus(level, message)
        self.lines.append(line)
        with self.log_file.open("a") as f:
            f.write(cri_line("stderr", line))


@dataclass
class NodeAgents(PollingAgent):
    """The operator's node labelling, GFD, device plugin and MIG manager stand-ins for every
    simulated node, polling the API."""

    THREAD_NAME = "node-agents"

    cluster: Cluster
    hardware: list[Hardware]
    operator_namespace: str = "gpu-operator"
    interval: float = 1.0
    bring_up: BringUp = field(default_factory=BringUp.from_env)
    """How long each node's driver and toolkit take once the operator is installed."""
    missing_gpus: dict[str, int] = field(default_factory=dict)
    """node -> GPUs the node has lost (a failed GPU): it advertises that many fewer."""
    plugin_errors: dict[str, str] = field(default_factory=dict)
    """node -> why its device plugin does not run (its config-manager's error)."""
    fail_mig_profiles: set[str] = field(default_factory=set)
    """profiles the MIG manager reports as failed even when they exist (a GPU that refuses)."""
    give_up: dict[str, str] = field(default_factory=dict)
    """node -> `pending` or `rebooting`: its MIG manager's next reconfiguration returns early, as
    mig-parted v0.13.1 does (reconfigure.go Run: an operand pod not gone within 5 minutes, or a
    `reboot` that failed), with the state left so and the operands paused; used once."""
    log_dir: Path | None = None
    """Where the MIG manager pods' log files are written (a temp folder by default)."""
    clock: Callable[[], float] = time.monotonic
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)
    applied: dict[str, tuple[str, dict[str, int] | None]] = field(default_factory=dict, init=False)
    """node -> (the MIG config it has, its MIG devices)"""
    managers: dict[str, _ManagerPod] = field(default_factory=dict, init=False)
    """MIG manager pod uid -> its log and what it read last."""
    ready_since: dict[str, float] = field(default_factory=dict, init=False)
    """node -> when its driver and toolkit were ready (the simulated clock)."""
    operator_since: dict[str, float] = field(default_factory=dict, init=False)
    """node -> when the operator first labelled it (its ClusterPolicy seen; the simulated clock)."""
    _mig_manager_config: str | None = field(default=None, init=False)
    _runtime_class_owner: str | None = field(default=None, init=False)
    _policy_uid: str | None = field(default=None, init=False)
    _logs_api: bool | None = field(default=None, init=False)
    errors: list[str] = field(default_factory=list, init=False)


    def _policy(self) -> dict[str, Any] | None:
        try:
            found = self.cluster.read("/apis/nvidia.com/v1/clusterpolicies")
        except ClusterError:
            return None
        if found is None:  # the CRD is not installed yet
            return None
        items = found.get("items") or []
        self._policy_uid = (items[0].get("metadata") or {}).get("uid") if items else None
        return items[0]["spec"] if items else None

    def _config_maps(self) -> dict[str, dict[str, str]]:
        try:
            found = self.cluster.read(f"/api/v1/namespaces/{self.operator_namespace}/configmaps") or {}
        except ClusterError:
            return {}
        return {cm["metadata"]["name"]: cm.get("data") or {} for cm in found.get("items") or []}

    def sync(self) -> None:
        """One pass: label nodes as the operator and GFD would, keep the MIG manager DaemonSet as
        the operator would, let each MIG manager pod act on its node's label, then advertise what
        the plugin would on every node."""
        policy = self._policy()
        nodes = {n["metadata"]["name"]: n for n in (self.cluster.read("/api/v1/nodes") or {}).get("items", [])}
        cms = self._config_maps() if policy else {}
        pods = (self.cluster.read("/api/v1/pods") or {}).get("items", []) if policy else []
        if policy is not None:
            self._ensure_runtime_class()
            self._ensure_mig_manager(policy)
        now = self.clock()
        for hw in self.hardware:
            node = nodes.get(hw.name)
            if node is None:
                continue
            labels = dict(node["metadata"].get("labels") or {})
            gpus = max(hw.gpus - self.missing_gpus.get(hw.name, 0), 0)
            if policy is None:  # no operator yet: no driver, no plugin, no MIG manager
                self._advertise(node, {})
                continue
            labels = self._bring_up(hw, labels, policy, now)
            if hw.name not in self.ready_since:
                self._advertise(node, {})
                continue
            strategy = ((policy.get("mig") or {}).get("strategy")) or "single"
            on_node = [p for p in pods if p["spec"].get("nodeName") == hw.name]
            mig_devices, labels = self._mig_manager(hw, labels, on_node, cms, gpus)
            if labels.get(DEPLOY_PLUGIN) != "true":
                # the operator keeps the plugin's pod off the node (paused for a MIG change, or off)
                self.plugin_errors.pop(hw.name, None)
                self._advertise(node, {})
                continue
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

    def _bring_up(self, hw: Hardware, labels: dict[str, str], policy: dict[str, Any], now: float) -> dict[str, str]:
        """The operator's labels at once; GFD's once the node's driver and toolkit are ready
        (`bring_up` after the operator first saw the node); the operator's MIG labels after GFD's."""
        since = self.operator_since.setdefault(hw.name, now)
        if hw.name not in self.ready_since and now - since >= self.bring_up.seconds(policy):
            self.ready_since[hw.name] = now
        changes = operator_labels(labels, policy)
        if hw.name in self.ready_since and {**labels, **changes}.get(DEPLOY_GFD) == "true":
            changes.update({k: v for k, v in gfd_labels(hw).items() if labels.get(k) != v})
            changes.update(operator_labels({**labels, **changes}, policy))
        if changes:
            self._label(hw.name, changes)
            labels = {**labels, **changes}
        return labels

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
        """The operator's `nvidia-mig-manager` DaemonSet on the nodes it labelled
        `nvidia.com/gpu.deploy.mig-manager=true` (assets/state-mig-manager/0600_daemonset.yaml),
        mounting the ClusterPolicy's mig-parted ConfigMap as `mig-parted-config`: a new name rolls
        its pods (the DaemonSet controller, node by node), as the operator's change of the name does."""
        manager = policy.get("migManager") or {}
        if manager.get("enabled", True) is False:
            return
        cm = (manager.get("config") or {}).get("name") or "default-mig-parted-config"
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
                        "nodeSelector": {DEPLOY_MIG_MANAGER: "true"},
                        "tolerations": [{"operator": "Exists"}],
                        "containers": [{"name": MIG_MANAGER_CONTAINER, "image": "nvcr.io/nvidia/cloud-native/k8s-mig-manager:v0.13.1",
                                        "volumeMounts": [{"name": "mig-parted-config", "mountPath": "/mig-parted-config"}]}],
                        "volumes": [{"name": "mig-parted-config", "configMap": {"name": cm}}],
                    },
                },
            },
        })
        self._mig_manager_config = cm

    # ------------------------------------------------------------------------- the MIG manager
    def _manager_pod(self, pod: dict[str, Any]) -> _ManagerPod:
        """The stand-in of one MIG manager pod: created with its log file, served to `kubectl
        logs` by a kwok Logs object of the pod's name; it starts by waiting for the label."""
        uid = pod["metadata"]["uid"]
        known = self.managers.get(uid)
        if known is not None:
            return known
        if self.log_dir is None:
            self.log_dir = Path(tempfile.mkdtemp(prefix="gpu-stack-mig-manager-logs-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        name = pod["metadata"]["name"]
        known = _ManagerPod(name, self.log_dir / f"{name}-{uid}.log")
        known.log_file.touch()
        self.managers[uid] = known
        self._serve_log(name, known.log_file)
        known.log("info", WAITING)
        return known

    def _serve_log(self, pod: str, path: Path) -> None:
        """A kwok `Logs` object that serves `path` as the pod's container log (needs the Logs CRD,
        which sandbox/cluster.py enables); without it `kubectl logs` answers an error."""
        if self._logs_api is False:
            return
        proc = self.cluster.kubectl("apply", "-f", "-", check=False, input=yaml.safe_dump({
            "apiVersion": "kwok.x-k8s.io/v1alpha1", "kind": "Logs",
            "metadata": {"name": pod, "namespace": self.operator_namespace},
            "spec": {"logs": [{"containers": [MIG_MANAGER_CONTAINER], "logsFile": str(path)}]},
        }))
        if proc.returncode != 0:
            self._logs_api = False
            self.errors.append(f"MIG manager logs are not served (kwok Logs): {proc.stderr.strip()}")
        else:
            self._logs_api = True

    def _mig_manager(self, hw: Hardware, labels: dict[str, str], pods: list[dict[str, Any]], cms: dict[str, dict[str, str]],
                     gpus: int) -> tuple[dict[str, int] | None, dict[str, str]]:
        """What the node's MIG manager pods do with its `nvidia.com/mig.config` (v0.13.1): each
        running pod acts on the value it starts with and on every change of it, checking it against
        the ConfigMap it mounts (an old pod, the old one). Returns the node's MIG devices and its
        labels after."""
        name = hw.name
        managers = [p for p in pods if (p["metadata"].get("labels") or {}).get("app") == MIG_MANAGER_APP
                    and (p.get("status") or {}).get("phase") == "Running"]
        for p in managers:
            self._manager_pod(p)
        profile = labels.get(MIG_CONFIG)
        if not profile or labels.get(MIG_CAPABLE) != "true":
            return self.applied.get(name, ("", None))[1], labels
        busy = [p["metadata"]["name"] for p in pods if p not in managers and _holds_gpus(p)
                and (p["metadata"].get("labels") or {}).get("app") != MIG_MANAGER_APP]
        acting = [p for p in managers if self._manager_pod(p).last_read != profile]
        # every pod acts; one whose ConfigMap lacks the config fails it, whatever the others did
        acting.sort(key=lambda p: self._mounted_has(p, cms, profile))
        for p in reversed(acting):
            manager = self._manager_pod(p)
            manager.last_read = profile
            labels = self._reconfigure(manager, hw, labels, self._mounted_text(p, cms), profile, gpus, busy)
        return self.applied.get(name, ("", None))[1], labels

    @staticmethod
    def _mounted(pod: dict[str, Any]) -> str | None:
        return next((v["configMap"]["name"] for v in pod["spec"].get("volumes") or [] if v.get("name") == "mig-parted-config"), None)

    def _mounted_text(self, pod: dict[str, Any], cms: dict[str, dict[str, str]]) -> str | None:
        return (cms.get(self._mounted(pod) or "") or {}).get("config.yaml")

    def _mounted_has(self, pod: dict[str, Any], cms: dict[str, dict[str, str]], profile: str) -> bool:
        text = self._mounted_text(pod, cms)
        try:
            return text is not None and profile in (yaml.safe_load(text) or {}).get("mig-configs", {})
        except yaml.YAMLError:
            return False

    def _reconfigure(self, m: _ManagerPod, hw: Hardware, labels: dict[str, str], parted: str | None, profile: str,
                     gpus: int, busy: list[str]) -> dict[str, str]:
        """One `migReconfigure` of mig-parted v0.13.1 (pkg/mig/reconfigure/reconfigure.go Run), with
        its log lines; returns the node's labels after it."""
        node = hw.name
        m.log("info", f"Updating to MIG config: {profile}")
        deployed = {part: labels.get(DEPLOY + part, "") for part in PAUSED_BY_MIG_MANAGER}
        for part, value in deployed.items():
            m.log("info", f"Current value of '{DEPLOY + part}={value}'")
        m.log("info", f"Current value of '{MIG_STATE}={labels.get(MIG_STATE, '')}'")
        restored = False

        def set_labels(changes: dict[str, str]) -> None:
            self._label(node, changes)
            labels.update(changes)

        def set_state(state: str) -> None:
            # reconfigure.go setState: the operands come back (unless restartKubernetesGPUClients
            # ran already), then the state
            if not restored:
                set_labels({DEPLOY + part: "false" if v == "false" else "true" for part, v in deployed.items()})
            m.log("info", f"Changing the '{MIG_STATE}' node label to '{state}'")
            set_labels({MIG_STATE: state})

        def fail(error: str) -> dict[str, str]:
            set_state("failed")
            m.log("error", f"Error: {error}")
            m.log("info", WAITING)
            return labels

        m.log("info", "Asserting that the requested configuration is present in the configuration file")
        try:
            if parted is None:
                raise KeyError(profile)
            layout = mig_layout(parted, profile, gpus, pci_device_id(hw.model))
        except (KeyError, TypeError, yaml.YAMLError):
            m.log("error", f"Error validating config: selected mig-config not present: {profile}")
            return fail("failed to validate MIG configuration: exit status 1")
        m.log("info", "Checking if the selected MIG config is currently applied or not")
        current = self.applied.get(node, ("", None))[1]
        if layout in (UNCHANGED, current):
            m.log("info", "Selected MIG config is already applied")
            set_state("success")
            m.log("info", f"Successfully updated to MIG config: {profile}")
            m.log("info", WAITING)
            return labels
        m.log("info", "Checking if the MIG mode setting in the selected config is currently applied or not")
        set_labels({MIG_STATE: "pending"})
        m.log("info", "Shutting down all GPU clients in Kubernetes by disabling their component-specific nodeSelector labels")
        set_labels({DEPLOY + part: "false" if v == "false" else PAUSED_FOR_MIG for part, v in deployed.items()})
        m.log("info", "Waiting for the device-plugin to shutdown")
        mode = self.give_up.get(node)
        if mode == "pending":
            del self.give_up[node]
            # reconfigure.go:166-168: returns without setState; state pending, operands paused
            m.log("error", "Error: failed to wait for pods to be deleted: device-plugin pod did not shutdown: context deadline exceeded")
            m.log("info", WAITING)
            return labels
        for part in ("gpu-feature-discovery", "dcgm-exporter", "dcgm"):
            m.log("info", f"Waiting for {part} to shutdown")
        m.log("info", "Applying the MIG mode change from the selected config to the node (and double checking it took effect)")
        if mode == "rebooting":
            del self.give_up[node]
            # reconfigure.go:184-198: the mode needs a reboot, the reboot fails, Run returns nil
            m.log("info", f"Changing the '{MIG_STATE}' node label to 'rebooting'")
            set_labels({MIG_STATE: "rebooting"})
            m.log("info", "Rebooting the node...")
            m.log("warning", "Failed to reboot the node: exit status 1")
            m.log("info", f"Successfully updated to MIG config: {profile}")
            m.log("info", WAITING)
            return labels
        m.log("info", "Applying the selected MIG config to the node")
        if profile in self.fail_mig_profiles or busy:
            why = f"GPUs in use by {', '.join(busy)}" if busy else "the GPU refused the layout"
            m.log("error", f"Error applying MIG configuration with hooks: {why}")
            return fail("failed to apply MIG configuration: exit status 1")
        assert not isinstance(layout, str)
        self.applied[node] = (profile, layout)
        m.log("info", "Restarting validator pod to re-run all validations")
        m.log("info", "Restarting all GPU clients previously shutdown in Kubernetes by reenabling their component-specific nodeSelector labels")
        set_labels({DEPLOY + part: "false" if v == "false" else "true" for part, v in deployed.items()})
        restored = True
        set_state("success")
        m.log("info", f"Successfully updated to MIG config: {profile}")
        m.log("info", WAITING)
        return labels

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
