"""The DRA kubelet plugin's stand-in (sandbox/dra_slices.py): the ResourceSlice it publishes is a
valid resource.k8s.io/v1 object of Kubernetes 1.34 with the driver's attribute names and the
catalog's product and memory, published a lag after the node's label and deleted a delay after the
label goes (the kubelet's wiping), never for a node without the label."""

from __future__ import annotations

import json

import kubernetes_validate

from sandbox.dra_slices import DRA_LABEL, DRIVER, SLICES, DraAgents, resource_slice
from sandbox.gpu_nodes import Hardware

H200 = Hardware("h200-1", "H200-141GB", 2)
L4 = Hardware("l4-1", "L4", 1)


def test_the_slice_is_a_valid_v1_resource_slice_with_the_drivers_attributes():
    s = resource_slice(H200)
    kubernetes_validate.validate(s, "1.34", strict=True)
    assert s["spec"]["driver"] == DRIVER and s["spec"]["nodeName"] == "h200-1"
    assert s["spec"]["pool"] == {"name": "h200-1", "generation": 1, "resourceSliceCount": 1}
    first, second = s["spec"]["devices"]
    assert sorted(first["attributes"]) == sorted(["type", "uuid", "productName", "brand", "architecture",
                                                  "cudaComputeCapability", "driverVersion", "cudaDriverVersion"])
    assert first["attributes"]["productName"] == {"string": "NVIDIA H200"}
    assert first["attributes"]["cudaComputeCapability"] == {"version": "9.0.0"}
    assert first["capacity"] == {"memory": {"value": "141Gi"}}
    assert first["attributes"]["uuid"] != second["attributes"]["uuid"]


class FakeCluster:
    """What DraAgents reads (nodes, slices) and the kubectl calls it makes."""

    def __init__(self, labels: dict[str, dict[str, str]]):
        self.labels = labels
        self.slices: dict[str, dict] = {}
        self.calls: list[tuple[str, ...]] = []

    def read(self, path: str):
        if path == "/api/v1/nodes":
            return {"items": [{"metadata": {"name": n, "labels": ls}} for n, ls in self.labels.items()]}
        assert path == SLICES
        return {"items": list(self.slices.values())}

    def kubectl(self, *args: str, input: str | None = None):
        self.calls.append(args)
        if args[:2] == ("create", "-f"):
            s = json.loads(input or "")
            self.slices[s["metadata"]["name"]] = s
        elif args[0] == "delete":
            del self.slices[args[2]]


def test_slices_follow_the_label_late_as_the_plugin_and_the_kubelet_do():
    now = [0.0]
    cluster = FakeCluster({"h200-1": {DRA_LABEL[0]: DRA_LABEL[1]}, "l4-1": {}})
    agents = DraAgents(cluster, [H200, L4], plugin_lag=1.0, wipe_delay=2.0, clock=lambda: now[0])  # type: ignore[arg-type]
    agents.sync()
    assert cluster.slices == {}  # the plugin pod is starting
    now[0] = 1.0
    agents.sync()
    assert list(cluster.slices) == [f"h200-1-{DRIVER}"]
    del cluster.labels["h200-1"][DRA_LABEL[0]]
    now[0] = 2.0
    agents.sync()
    now[0] = 3.5
    agents.sync()
    assert list(cluster.slices) == [f"h200-1-{DRIVER}"]  # within the wiping delay
    now[0] = 4.0
    agents.sync()
    assert cluster.slices == {}
    assert [c[0] for c in cluster.calls] == ["create", "delete"]
