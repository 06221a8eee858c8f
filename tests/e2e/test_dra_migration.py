"""GPUs through DRA on the real control plane: kube-apiserver, kube-scheduler and
kube-controller-manager 1.34 (kwokctl's binary runtime), simulated nodes whose DRA kubelet plugin
is the stand-in of sandbox/dra_slices.py (the ResourceSlices the driver publishes) and whose device
plugin is that of sandbox/gpu_nodes.py.

- The real scheduler allocates claims from the slices and binds the pods: by model, by memory, and
  a pod beyond the capacity stays Pending with the scheduler's reason (the controller-manager makes
  each pod's claim from its template).
- The rollout script (config/dra-rollout/dra-rollout.sh, under the real busybox with the real
  kubectl) moves nodes from the device plugin to DRA in waves and back, while a sampler reads every
  node and slice from the API server: no sample shows a node advertising both ways, and the
  schedulable GPUs never drop below the floor. The same script with its wait for the device plugin
  to go cut out is caught by the sampler.
Simulated: the kubelet's preparation of a claim (CDI injection), so the pods run no code; the
device plugin as the kubelet reports it (`KubeletDevicePlugin` below: switched off, allocatable 0
at once and the capacity kept for a grace, here seconds, as the kubelet's device manager does:
kubernetes@v1.34.4 pkg/kubelet/cm/devicemanager/manager.go:243-252 marks a disconnected plugin's
devices unhealthy and stamps its stop time, :436-476 counts unhealthy devices in the capacity only
and drops the resource once the grace has passed, types.go:120 endpointStopGracePeriod, 5 min).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml

from gpu_stack.design.dra_rollout import PROBE_CLAIM_KEY, PROBE_JOB_KEY, probe_templates, script_data
from sandbox.cluster import Cluster
from sandbox.dra_slices import DRA_LABEL, SLICES, DraAgents
from sandbox.gpu_nodes import DEPLOY_PLUGIN, Hardware, node_manifest
from sandbox.polling import PollingAgent

from ..busybox_image import image_bin, run_sh

NS = "gpu-operator"
DRA_NODES = [Hardware("h200-1", "H200-141GB", 2), Hardware("h200-2", "H200-141GB", 2), Hardware("l40s-1", "L40S", 2)]
PLUGIN_NODES = [Hardware(f"l4-{i}", "L4", 2) for i in range(1, 5)]
MUTANT_NODE = Hardware("l4-mutant", "L4", 2)
"""Moved by the script with its wait for the device plugin cut out (the sampler must catch it)."""
ALL_NODES = DRA_NODES + PLUGIN_NODES + [MUTANT_NODE]
GRACE_SECONDS = 3.0
ON_DRA = {DEPLOY_PLUGIN: "false", DRA_LABEL[0]: DRA_LABEL[1]}
DEVICE_CLASS = {
    # as the driver's chart v0.4.1 renders it (templates/deviceclass-gpu.yaml), less the alpha
    # extendedResourceName, which the API server drops without the DRAExtendedResource gate
    "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com"},
    "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"}}]},
}


class KubeletDevicePlugin(PollingAgent):
    """The device plugin as the kubelet reports it in the node's status: where
    `nvidia.com/gpu.deploy.device-plugin` is not `false`, `nvidia.com/gpu` = the node's GPUs;
    switched off, allocatable 0 at once and capacity 0 only GRACE_SECONDS later."""

    THREAD_NAME = "kubelet-device-plugin"

    def __init__(self, c: Cluster, nodes: list[Hardware]):
        self.c, self.nodes = c, nodes
        self.off_since: dict[str, float] = {}
        self.interval, self.errors = 0.3, []
        self._stop, self._thread = threading.Event(), None

    def sync(self) -> None:
        nodes = {n["metadata"]["name"]: n for n in self.c.read("/api/v1/nodes")["items"]}
        now = time.monotonic()
        for hw in self.nodes:
            node = nodes[hw.name]
            on = (node["metadata"].get("labels") or {}).get(DEPLOY_PLUGIN) != "false"
            if on:
                self.off_since.pop(hw.name, None)
                want = {"capacity": str(hw.gpus), "allocatable": str(hw.gpus)}
            else:
                since = self.off_since.setdefault(hw.name, now)
                want = {"capacity": str(hw.gpus) if now - since < GRACE_SECONDS else "0", "allocatable": "0"}
            status = node.get("status") or {}
            have = {f: (status.get(f) or {}).get("nvidia.com/gpu") for f in want}
            if have != want:
                patch = {"status": {f: {"nvidia.com/gpu": v} for f, v in want.items()}}
                self.c.kubectl("patch", "node", hw.name, "--subresource=status", "--type=merge", "-p", json.dumps(patch))


def wait_for(predicate, what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.3)


@pytest.fixture(scope="module")
def cluster(tools, e2e_tmp):
    c = Cluster(name="gs-dra", workdir=e2e_tmp / "dra", tools=tools, context="dra")
    agents: list = []
    try:
        c.start()
        c.kubectl("create", "namespace", NS)
        for hw in ALL_NODES:
            node = node_manifest(hw)
            if hw in DRA_NODES:
                node["metadata"]["labels"].update(ON_DRA)
            c.kubectl("create", "-f", "-", input=yaml.safe_dump(node))
        c.apply(DEVICE_CLASS)
        agents = [KubeletDevicePlugin(c, ALL_NODES), DraAgents(c, ALL_NODES)]
        for a in agents:
            a.start()
        wait_for(lambda: all(allocatable(c, hw.name).get("nvidia.com/gpu") == "2" for hw in PLUGIN_NODES + [MUTANT_NODE]),
                 "the device plugin")
        wait_for(lambda: len(slices(c)) == len(DRA_NODES), "the DRA nodes' slices")
        yield c
    finally:
        for a in agents:
            a.stop()
        c.stop()


def allocatable(c: Cluster, node: str) -> dict[str, str]:
    return c.get_json("node", node)["status"].get("allocatable") or {}


def slices(c: Cluster) -> dict[str, int]:
    """node -> devices in its slices of the driver."""
    out: dict[str, int] = {}
    for s in (c.read(SLICES) or {}).get("items", []):
        out[s["spec"]["nodeName"]] = out.get(s["spec"]["nodeName"], 0) + len(s["spec"].get("devices") or [])
    return out


def claim_pod(c: Cluster, name: str, selector: str) -> None:
    c.apply({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name, "namespace": "default"},
             "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                 "deviceClassName": "gpu.nvidia.com", "selectors": [{"cel": {"expression": selector}}]}}]}}}})
    c.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
             "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}],
                      "containers": [{"name": "c", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}]}})


def placed(c: Cluster, name: str) -> tuple[str, str] | None:
    """(node, pool/device) once the pod is bound and its claim allocated."""
    pod = c.get_json("pod", name, "-n", "default")
    node = pod["spec"].get("nodeName")
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    if not node or not statuses:
        return None
    claim = c.get_json("resourceclaim", statuses[0]["resourceClaimName"], "-n", "default")
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return node, f"{result['pool']}/{result['device']}"


BY_MODEL = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H200'"
BY_MEMORY = "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('100Gi')) >= 0"


def test_the_real_scheduler_binds_claims_by_model_and_memory_and_leaves_one_beyond_capacity_pending(cluster):
    names = ["by-model-1", "by-model-2", "by-memory-1", "by-memory-2"]
    for name in names:
        claim_pod(cluster, name, BY_MODEL if "model" in name else BY_MEMORY)
    wait_for(lambda: all(placed(cluster, n) for n in names), "the claim pods bound")
    where = {n: placed(cluster, n) for n in names}
    # Only the H200 nodes have the model, and 141Gi >= 100Gi (an L40S has 48Gi): 4 GPUs, 4 pods.
    assert {w[0] for w in where.values() if w} == {"h200-1", "h200-2"}
    assert len({w[1] for w in where.values() if w}) == 4
    claim_pod(cluster, "beyond", BY_MEMORY)

    def pending_reason() -> str:
        conditions = (cluster.get_json("pod", "beyond", "-n", "default").get("status") or {}).get("conditions") or []
        return next((c.get("message") or "" for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"), "")

    wait_for(lambda: "cannot allocate all claims" in pending_reason(), "the scheduler's reason for the fifth pod")
    assert not cluster.get_json("pod", "beyond", "-n", "default")["spec"].get("nodeName")
    for name in [*names, "beyond"]:
        cluster.kubectl("delete", "pod", name, "-n", "default", "--wait=false")


class Sampler:
    """Reads every node and slice from the API server in a loop: nodes advertising both ways, and
    the schedulable GPUs of `nodes` (uncordoned, advertising either way)."""

    def __init__(self, c: Cluster, nodes: list[Hardware]):
        self.c, self.gpus = c, {hw.name: hw.gpus for hw in nodes}
        self.both: list[tuple[str, dict]] = []
        self.schedulable: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            nodes = {n["metadata"]["name"]: n for n in self.c.read("/api/v1/nodes")["items"]}
            published = slices(self.c)
            total = 0
            for name, gpus in self.gpus.items():
                status = nodes[name].get("status") or {}
                plugin = any(v != "0" for field in ("capacity", "allocatable") for k, v in (status.get(field) or {}).items()
                             if k.startswith("nvidia.com/"))
                if plugin and published.get(name):
                    self.both.append((name, status))
                if not nodes[name]["spec"].get("unschedulable") and (plugin or published.get(name)):
                    total += gpus
            self.schedulable.append(total)
            self._stop.wait(0.1)


def migrate(c: Cluster, tmp_path: Path, lines: list[str], cut: str | None = None, **env: str):
    """Runs the rollout script as its ConfigMap mounts it (with `cut` removed from it)."""
    mounted = tmp_path / "rollout"
    mounted.mkdir(exist_ok=True)
    for name, text in script_data().items():
        if cut is not None and cut in text:
            text = text.replace(cut, "")
        (mounted / name).write_text(text)
    (tmp_path / "nodes").write_text("".join(f"{line}\n" for line in lines))
    # the probe as the stack makes it: the real scheduler must place its pod on the cordoned node
    # and allocate its claim there (kwok then completes the Job's pod: no device is injected here)
    for key, text in probe_templates("nvcr.io/nvidia/gpu-operator:v25.10.1", NS, 120, ()).items():
        (tmp_path / key).write_text(text)
    full = {**c.env(), "KUBECTL": str(c.tools["kubectl"]), "TERMINATION_LOG": str(tmp_path / "termination-log"),
            "NODES_FILE": str(tmp_path / "nodes"), "POLL_SECONDS": "1", "DRA_LABEL": "=".join(DRA_LABEL),
            "PROBE_JOB_FILE": str(tmp_path / PROBE_JOB_KEY), "PROBE_CLAIM_FILE": str(tmp_path / PROBE_CLAIM_KEY),
            "PROBE_NAMESPACE": NS, "TMPDIR": str(tmp_path), **env}
    image = image_bin(tmp_path / "image-bin", {"kubectl": Path(c.tools["kubectl"])})
    return run_sh(mounted / "dra-rollout.sh", full, image, timeout=300)


def test_a_migration_in_waves_and_back_never_shows_a_node_advertising_both_ways(cluster, tmp_path):
    names = [hw.name for hw in PLUGIN_NODES]
    to_dra = [f"{n} dra 2 2 gpu.nvidia.com=2" for n in names]
    with Sampler(cluster, PLUGIN_NODES) as sampler:
        run = migrate(cluster, tmp_path, to_dra, WAVE_SIZE="3", MIN_GPUS="4")
    assert run.returncode == 0, run.stdout + run.stderr
    # 8 GPUs, 4 kept: two nodes at a time although WAVE_SIZE allows 3.
    assert "PASS dra-rollout: 4 node(s) moved in 2 wave(s)" in run.stdout
    assert sampler.both == [] and len(sampler.schedulable) > 20
    assert min(sampler.schedulable) >= 4
    assert {n: slices(cluster).get(n) for n in names} == dict.fromkeys(names, 2)
    assert all(allocatable(cluster, n).get("nvidia.com/gpu") in (None, "0") for n in names)
    # each node's probe ran there (its claim allocated from that node's slice) and was cleaned up
    assert all(f"node {n} handed out a device through a ResourceClaim" in run.stdout for n in names)

    again = migrate(cluster, tmp_path, to_dra, WAVE_SIZE="3", MIN_GPUS="4")
    assert again.returncode == 0 and "PASS dra-rollout: every node already allocates its GPUs" in again.stdout

    back = [f"{n} device-plugin 2 2 nvidia.com/gpu=2" for n in names[:2]] + to_dra[2:]
    with Sampler(cluster, PLUGIN_NODES) as sampler:
        run = migrate(cluster, tmp_path, back, WAVE_SIZE="1", MIN_GPUS="4")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "PASS dra-rollout: 2 node(s) moved in 2 wave(s)" in run.stdout
    assert sampler.both == [] and min(sampler.schedulable) >= 4
    assert [allocatable(cluster, n).get("nvidia.com/gpu") for n in names[:2]] == ["2", "2"]
    assert set(slices(cluster)) & set(names[:2]) == set()


def test_the_sampler_catches_a_rollout_that_places_dra_before_the_device_plugin_is_gone(cluster, tmp_path):
    wait = '  wait_until "the old advertiser is gone" old "$timeout" "the rollout\'s timeout" "$@"\n'
    assert wait in script_data()["dra-rollout.sh"]
    with Sampler(cluster, [MUTANT_NODE]) as sampler:
        run = migrate(cluster, tmp_path, [f"{MUTANT_NODE.name} dra 2 2 gpu.nvidia.com=2"], cut=wait)
        # the kubelet's grace runs out and the stand-ins settle while the sampler reads on
        time.sleep(GRACE_SECONDS + 2)
    assert {name for name, _ in sampler.both} == {MUTANT_NODE.name}, run.stdout + run.stderr
    # the script's own look at the node stops it there, the node left cordoned
    assert run.returncode == 1 and f"FAIL dra-rollout: node {MUTANT_NODE.name}" in run.stderr
