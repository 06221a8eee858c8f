"""The DRA kubelet plugin's stand-in: the ResourceSlices NVIDIA's DRA driver publishes for the
simulated GPU nodes that run it (simulated pods run no code, so no plugin publishes anything).

For each node of `hardware` labelled `gpu-stack/allocation=dra` (the kubelet plugin DaemonSet's
node selector, gpu_stack/design/dra.py) `DraAgents` publishes one ResourceSlice of the driver
`gpu.nvidia.com` (resource.k8s.io/v1), `plugin_lag` seconds after it sees the label: pool = the
node's name, one device `gpu-<i>` per GPU (the GPU's minor number:
kubernetes-sigs/dra-driver-nvidia-gpu@v0.4.1 cmd/gpu-kubelet-plugin/deviceinfo.go:106-108) with
the attributes the driver publishes for a whole GPU (deviceinfo.go:152-178: type, uuid,
productName, brand, architecture, cudaComputeCapability, driverVersion, cudaDriverVersion) and its
`memory` capacity (partitions.go:34-39), from the GPU catalog (config/gpu-models.yaml). When the
label goes, the slice is deleted `wipe_delay` seconds later, as the kubelet wipes a gone driver's
slices after a delay (kubernetes@v1.34.4 pkg/kubelet/cm/dra/manager.go:71 defaultWipingDelay,
30 s, passed to the plugin manager at :160). MIG devices are not published.

What is real around it: the API server stores and validates the slices, kube-scheduler's
DynamicResources plugin allocates claims from them and binds the pods, kube-controller-manager
makes claims from templates. What is not: the kubelet's NodePrepareResources (CDI injection).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .cluster import Cluster, ClusterError
from .gpu_nodes import DRIVER_VERSION, Hardware
from .polling import PollingAgent

DRIVER = "gpu.nvidia.com"
DRA_LABEL = ("gpu-stack/allocation", "dra")
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
ARCHITECTURES = {7: "Volta", 8: "Ampere", 9: "Hopper", 10: "Blackwell", 12: "Blackwell"}
"""Compute capability major -> the architecture name NVML reports."""
CUDA_DRIVER_VERSION = "13.0.0"
"""What the 580 branch driver reports as its CUDA version (GFD's cuda.runtime labels, gpu_nodes.py)."""


def slice_name(node: str) -> str:
    return f"{node}-{DRIVER}"


def devices(hw: Hardware) -> list[dict[str, Any]]:
    """The node's whole GPUs as the driver's devices (resource.k8s.io/v1 Device)."""
    from gpu_stack.config.gpu_models import catalog

    known = catalog().lookup(hw.model)
    product = next((a for a in known.aliases if a.startswith(("NVIDIA ", "Tesla "))), f"NVIDIA {known.name}") if known else f"NVIDIA {hw.model}"
    major, minor = known.compute_capability if known is not None else (8, 9)
    memory_gib = known.memory_gb if known is not None else 16
    d_major, d_minor, d_rev = DRIVER_VERSION.split(".")
    out = []
    for i in range(hw.gpus):
        out.append({
            "name": f"gpu-{i}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{hw.name}.{i}')}"},
                "productName": {"string": product},
                "brand": {"string": "Nvidia"},
                "architecture": {"string": ARCHITECTURES.get(major, "Unknown")},
                "cudaComputeCapability": {"version": f"{major}.{minor}.0"},
                "driverVersion": {"version": f"{int(d_major)}.{int(d_minor)}.{int(d_rev)}"},
                "cudaDriverVersion": {"version": CUDA_DRIVER_VERSION},
            },
            "capacity": {"memory": {"value": f"{memory_gib}Gi"}},
        })
    return out


def resource_slice(hw: Hardware, generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": slice_name(hw.name)},
        "spec": {
            "driver": DRIVER,
            "nodeName": hw.name,
            "pool": {"name": hw.name, "generation": generation, "resourceSliceCount": 1},
            "devices": devices(hw),
        },
    }


@dataclass
class DraAgents(PollingAgent):
    """The DRA kubelet plugin stand-in for every node of `hardware`, polling the API."""

    THREAD_NAME = "dra-agents"

    cluster: Cluster
    hardware: list[Hardware]
    interval: float = 0.5
    plugin_lag: float = 1.0
    """Seconds from the label to the slice (the plugin pod starting)."""
    wipe_delay: float = 2.0
    """Seconds from the label's removal to the slice's deletion (the kubelet's wiping delay)."""
    clock: Callable[[], float] = time.monotonic
    errors: list[str] = field(default_factory=list, init=False)
    _seen: dict[str, tuple[bool, float]] = field(default_factory=dict, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)


    def sync(self) -> None:
        """One pass: publish the slice of every labelled node, delete that of every node unlabelled."""
        nodes = {n["metadata"]["name"]: n for n in (self.cluster.read("/api/v1/nodes") or {}).get("items", [])}
        published = {s["spec"].get("nodeName") for s in (self.cluster.read(SLICES) or {}).get("items", [])
                     if s["spec"].get("driver") == DRIVER}
        now = self.clock()
        for hw in self.hardware:
            node = nodes.get(hw.name)
            if node is None:
                continue
            labels = node["metadata"].get("labels") or {}
            on = labels.get(DRA_LABEL[0]) == DRA_LABEL[1]
            if self._seen.get(hw.name, (None, 0.0))[0] != on:
                self._seen[hw.name] = (on, now)
            since = now - self._seen[hw.name][1]
            if on and hw.name not in published and since >= self.plugin_lag:
                self.cluster.kubectl("create", "-f", "-", input=json.dumps(resource_slice(hw)))
            elif not on and hw.name in published and since >= self.wipe_delay:
                try:
                    self.cluster.kubectl("delete", "resourceslices.v1.resource.k8s.io", slice_name(hw.name), "--wait=false")
                except ClusterError as exc:
                    if "NotFound" not in str(exc):
                        raise
