"""What one GPU node costs in the Pulumi state, estimated offline (`make state-size`).

The real figure is `pulumi stack export` after an `up`; without the engine this script builds,
from the offline plan of a stack, the state entries the engine and the providers would write for
each node's resources, in the export's format:

- every resource: `urn`, `custom`, `id`, `type`, `inputs`, `outputs`, `parent`, `provider`,
  `dependencies`, `propertyDependencies`, `created`, `modified`; secrets as the export writes
  them (`{"4dabf...": "1b47...", "ciphertext": "v1:<nonce>:<AES-GCM>"}`, sized from the plaintext);
- `remote.Command` / `remote.CopyToRemote`: outputs = inputs (pulumi-command's outputs embed its
  inputs) plus, for the command, `stdout` and `stderr`; the connection a secret holding a real
  ed25519 key (an RSA-4096 key adds about 3.2 KB per copy of the connection);
- a file asset: its sha256 and path, never its text;
- a read (`.get`): inputs and outputs from the object read (pulumi-kubernetes keeps the live
  object and a copy of its inputs, `__inputs`), the Node or the Lease below;
- a NodePatch (before the label Job): outputs = the live Node after the patch; with the label Job,
  the node's share of it: its line of the table ConfigMap and its name in the Job's ClusterRole,
  each three times (inputs, outputs, `__inputs`);
- every entry: the `sourcePosition` and `stackTrace` the engine keeps, at `--frames` frames of
  the program (8 at most since the program trims them; an untrimmed Python program sends ~25,
  3 KB as exported).

`--agent` plans the connection with an SSH agent (ssh.agentSocketPath = $SSH_AUTH_SOCK): no key.

The Node objects are synthetic but shaped like a GPU Operator node (NFD and GPU feature
discovery labels, managed fields, cached images); real ones vary a lot, the Lease does not.
`--before REV` builds the same figures from the plan of a git revision (the stdin design).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ED25519_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    + "\n".join(["b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"] * 5)
    + "\nQyNTUxOQAAACDpEXAMPLEKEYMATERIALNOTAREALKEY0000000000=\n-----END OPENSSH PRIVATE KEY-----\n"
)
HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f"
SECRET_SIG = "1b47061264138c4ac30d75fd1eb44270"
STAMP = "2026-12-01T09:00:00.000000000Z"


def secret(value: Any) -> dict[str, str]:
    plain = json.dumps(value).encode()
    ct = base64.b64encode(b"\0" * (len(plain) + 16)).decode()
    return {"4dabf18193072939515e22adb298388d": SECRET_SIG, "ciphertext": f"v1:{base64.b64encode(b'0' * 12).decode()}:{ct}"}


FRAMES = 4
"""Frames per resource's stack trace (--frames): the Lease read's, once trimmed, in a real export."""
AGENT = False
"""--agent: the connection holds no private key."""


def trace(frames: int) -> dict:
    positions = [f"project:///gpu_stack/components/node_preparation.py#{50 + i}" for i in range(frames)]
    return {"sourcePosition": positions[0], "stackTrace": [{"sourcePosition": p} for p in positions]} if frames else {}


def entry(urn: str, type_: str, inputs: dict, outputs: dict, parent: str, deps: list[str], external: bool = False) -> dict:
    e = {
        "urn": urn, "custom": True, "id": "x" * 16, "type": type_, "inputs": inputs, "outputs": outputs,
        "parent": parent, "provider": f"urn:pulumi:dev::gpu-stack::pulumi:providers:{type_.split(':')[0]}::default::" + "0" * 36,
        "propertyDependencies": {k: [] for k in inputs}, "created": STAMP, "modified": STAMP,
    }
    if deps:
        e["dependencies"] = deps
    if external:
        e["external"] = True
    return {**e, **trace(FRAMES)}


def connection(host: str, user: str = "ubuntu", port: int = 22) -> dict:
    key = {} if AGENT else {"privateKey": ED25519_KEY}
    return secret({"host": host, "port": port, "user": user, **key, "hostKey": HOST_KEY, "dialErrorLimit": 10, "perDialTimeout": 15})


def gpu_node(name: str, images: int = 30) -> dict:
    """A Node as a GPU Operator cluster keeps it: NFD/GFD labels, managed fields, cached images."""
    labels = {f"feature.node.kubernetes.io/cpu-cpuid.{f}": "true" for f in ("AVX", "AVX2", "AVX512F", "AESNI", "FMA3", "SHA", "VMX", "X87")}
    labels |= {f"feature.node.kubernetes.io/{k}": "true" for k in ("kernel-config.NO_HZ", "pci-10de.present", "system-os_release.ID", "storage-nonrotationaldisk", "memory-numa", "cpu-hardware_multithreading")}
    labels |= {f"nvidia.com/{k}": v for k, v in {
        "cuda.driver.major": "580", "cuda.driver.minor": "105", "cuda.driver.rev": "08", "cuda.runtime.major": "13",
        "cuda.runtime.minor": "0", "gfd.timestamp": "1764580000", "gpu.compute.major": "9", "gpu.compute.minor": "0",
        "gpu.count": "8", "gpu.family": "hopper", "gpu.machine": "PowerEdge-XE9680", "gpu.memory": "143771",
        "gpu.product": "NVIDIA-H200", "gpu.replicas": "1", "gpu.sharing-strategy": "none", "mig.capable": "true",
        "mig.strategy": "mixed", "gpu.present": "true", "gpu.deploy.driver": "true", "gpu.deploy.container-toolkit": "true",
        "gpu.deploy.device-plugin": "true", "gpu.deploy.dcgm": "true", "gpu.deploy.dcgm-exporter": "true",
        "gpu.deploy.gpu-feature-discovery": "true", "gpu.deploy.mig-manager": "true", "gpu.deploy.node-status-exporter": "true",
        "gpu.deploy.operator-validator": "true", "device-plugin.config": "default", "mig.config": "all-disabled",
        "mig.config.state": "success"}.items()}
    labels |= {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
               "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "node-role.kubernetes.io/gpu": ""}
    managed = [{"manager": m, "operation": "Update", "apiVersion": "v1", "time": STAMP, "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {f"f:{k}": {} for k in list(labels)[i::4]}}}}
               for i, m in enumerate(("kubelet", "nfd-master", "gpu-feature-discovery", "gpu-operator"))]
    managed.append({"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": STAMP, "fieldsType": "FieldsV1",
                    "subresource": "status", "fieldsV1": {"f:status": {f"f:{k}": {} for k in ("allocatable", "capacity", "conditions", "images", "nodeInfo", "daemonEndpoints", "addresses")}}})
    conditions = [{"type": t, "status": "False", "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP,
                   "reason": f"Kubelet{t}", "message": f"kubelet reports {t} ok"} for t in ("MemoryPressure", "DiskPressure", "PIDPressure")]
    conditions.append({"type": "Ready", "status": "True", "lastHeartbeatTime": STAMP, "lastTransitionTime": STAMP,
                       "reason": "KubeletReady", "message": "kubelet is posting ready status"})
    image_list = [{"names": [f"nvcr.io/nvidia/cloud-native/image-{i}@sha256:{'a' * 64}", f"nvcr.io/nvidia/cloud-native/image-{i}:v25.10.1"],
                   "sizeBytes": 1_234_567_890} for i in range(images)]
    resources = {"cpu": "112", "memory": "2113455804Ki", "nvidia.com/gpu": "8", "pods": "110", "ephemeral-storage": "3750000000Ki"}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": "0" * 36, "resourceVersion": "123456789", "creationTimestamp": STAMP,
                     "labels": labels, "managedFields": managed,
                     "annotations": {"nfd.node.kubernetes.io/feature-labels": ",".join(labels)[:600],
                                     "node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": {"podCIDR": "10.244.3.0/24", "podCIDRs": ["10.244.3.0/24"]},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.20.0.11"}, {"type": "Hostname", "address": name}],
                   "allocatable": resources, "capacity": resources, "conditions": conditions,
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}, "images": image_list,
                   "nodeInfo": {"architecture": "amd64", "bootID": "0" * 36, "containerRuntimeVersion": "containerd://2.1.4",
                                "kernelVersion": "6.8.0-88-generic", "kubeProxyVersion": "v1.31.4", "kubeletVersion": "v1.31.4",
                                "machineID": "0" * 32, "operatingSystem": "linux", "osImage": "Ubuntu 24.04.3 LTS", "systemUUID": "0" * 36}},
    }


def lease(name: str) -> dict:
    return {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": "kube-node-lease", "uid": "0" * 36, "resourceVersion": "123456789",
                     "creationTimestamp": STAMP,
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": "0" * 36}],
                     "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "coordination.k8s.io/v1",
                                        "time": STAMP, "fieldsType": "FieldsV1",
                                        "fieldsV1": {"f:metadata": {"f:ownerReferences": {}}, "f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}, "f:renewTime": {}}}}]},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": "2026-12-01T09:00:00.000000Z"},
    }


def read_entry(urn: str, type_: str, obj: dict, parent: str) -> dict:
    """A pulumi-kubernetes read: inputs from the live object (metadata and spec, bookkeeping cut),
    outputs the live object with `__inputs`."""
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("managedFields", "uid", "resourceVersion", "creationTimestamp")}
    inputs = {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": meta, **({"spec": obj["spec"]} if "spec" in obj else {})}
    outputs = {**obj, "__inputs": inputs, "__initialApiVersion": obj["apiVersion"], "__fieldManager": "pulumi-kubernetes-0000"}
    return entry(urn, type_, inputs, outputs, parent, [], external=True)


def plan_json(tree: Path, stack: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "gpu_stack", "plan", "--stack", stack, "--format", "json"],
                          cwd=tree, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(tree)})
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return json.loads(proc.stdout)


def node_entries(doc: dict, node: str, log_text: str) -> dict[str, dict]:
    """The state entries of one node's resources, by resource name."""
    base = f"urn:pulumi:{doc['stack']}::{doc['project']}::"
    by_name = {r["name"]: r for r in doc["resources"]}
    out: dict[str, dict] = {}
    for r in doc["resources"]:
        if r["type"] == "command:remote:Command" and r["name"].endswith(f"-{node}"):
            inputs = {**r["inputs"], "connection": connection("10.20.0.11")}
            preflight = "GPU_STACK_PREFLIGHT " + json.dumps({"node": node, "ok": True, "driver": "580.105.08", "gpus": ["NVIDIA H200"] * 8, "count": 8,
                                                             "mig": ["Disabled"] * 8, "migCapable": True, "runtime": "containerd", "runtimeFound": True,
                                                             "runtimeVersion": "2.1.4", "runtimes": ["containerd"], "cdi": True, "toolkit": "1.18.1",
                                                             "os": "ubuntu 24.04", "problems": []}) + "\n"
            stderr = log_text if "stdin" in r["inputs"] else log_text.splitlines()[-1] + "\n"
            out[r["name"]] = entry(base + f"gpu-stack:index:NodePreparation$command:remote:Command::{r['name']}", r["type"],
                                   inputs, {**inputs, "stdout": preflight, "stderr": stderr}, base + "gpu-stack:index:NodePreparation::node-prep",
                                   [base + f"command:remote:CopyToRemote::{d}" for d in r["depends_on"]])
        elif r["type"] == "command:remote:CopyToRemote" and r["name"].endswith(f"-{node}-script"):
            source = {"4dabf18193072939515e22adb298388d": "c44067f5952c0a294b673a41bacd8c17", "hash": "f" * 64,
                      "path": r["inputs"]["source"]["fileAsset"]}
            inputs = {**r["inputs"], "connection": connection("10.20.0.11"), "source": source}
            out[r["name"]] = entry(base + f"gpu-stack:index:NodePreparation$command:remote:CopyToRemote::{r['name']}", r["type"],
                                   inputs, dict(inputs), base + "gpu-stack:index:NodePreparation::node-prep", [])
        elif r["type"] == "kubernetes:core/v1:NodePatch" and r["name"].endswith(f"-{node}"):
            live = gpu_node(node)
            out[r["name"]] = entry(base + f"gpu-stack:index:NodeLabels$kubernetes:core/v1:NodePatch::{r['name']}", r["type"], r["inputs"],
                                   {**live, "__inputs": r["inputs"]}, base + "gpu-stack:index:NodeLabels::node-labels", [])
    for read in doc.get("reads") or []:
        if read["name"] == f"node-{node}":
            obj = lease(node) if read["type"].endswith(":Lease") else gpu_node(node)
            out[read["name"]] = read_entry(base + f"gpu-stack:index:NodeLabels${read['type']}::{read['name']}", read["type"], obj,
                                           base + "gpu-stack:index:NodeLabels::node-labels")
    table = by_name.get("gpu-operator-node-labels-table")
    if table is not None:
        # One table for every node: this node's line and its name in the ClusterRole, three times each.
        line = next(row for row in table["inputs"]["data"]["nodes"].splitlines() if row.split()[0] == node)
        out["its line of the label table and its name in the label Job's RBAC"] = {"data": [line] * 3, "resourceNames": [node] * 3}
    elif not any(r["type"] == "kubernetes:core/v1:NodePatch" and r["name"].endswith(f"-{node}") for r in by_name.values()):
        # The stack gives this node no label: what a label patch would store where it does.
        inputs = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"nvidia.com/device-plugin.config": "default"},
                                                                   "annotations": {"pulumi.com/patchForce": "true"}}}
        out[f"node-labels-{node} (where the node gets labels)"] = entry(
            base + f"gpu-stack:index:NodeLabels$kubernetes:core/v1:NodePatch::node-labels-{node}", "kubernetes:core/v1:NodePatch",
            inputs, {**gpu_node(node), "__inputs": inputs}, base + "gpu-stack:index:NodeLabels::node-labels", [])
    return out


def first_run_log() -> str:
    """The node script's log of a first run on a fake node (what the old design kept in stderr)."""
    from gpu_stack.design.node_prep import render_script
    from tests.node_fakes import CONTAINERD_V2, FakeNode

    with tempfile.TemporaryDirectory() as tmp:
        node = FakeNode(Path(tmp) / "node")
        node.write("etc/containerd/config.toml", CONTAINERD_V2)
        values = {"GPU_STACK_NODE": "gpu-dev-1", "GPU_STACK_PHASES": "preflight toolkit runtime", "GPU_STACK_EXPECT_MODEL": "L4",
                  "GPU_STACK_EXPECT_NAMES": "L4", "GPU_STACK_EXPECT_COUNT": "2", "GPU_STACK_RUNTIME": "containerd"}
        result = node.run(render_script(values))
        summary = "gpu-stack: node preparation of gpu-dev-1 done (steps: preflight toolkit runtime; runtime restarted); whole log on the node: ./.gpu-stack-node-prep.log\n"
        return result.stderr + summary


def measure(doc: dict, node: str, log_text: str) -> dict[str, tuple[int, int]]:
    """Resource name -> (bytes as `pulumi stack export` prints it, bytes as compact JSON)."""
    return {name: (len(json.dumps(e, indent=4)), len(json.dumps(e, separators=(",", ":"))))
            for name, e in node_entries(doc, node, log_text).items()}


def main(argv: list[str] | None = None) -> int:
    global AGENT, FRAMES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stack", default="dev")
    parser.add_argument("--node", default="gpu-dev-1")
    parser.add_argument("--before", help="a git revision to compare with (its plan, same synthetic objects)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--agent", action="store_true", help="the connection with an SSH agent (no private key)")
    parser.add_argument("--frames", type=int, default=FRAMES, help="frames per resource's stack trace in the state (25 untrimmed)")
    args = parser.parse_args(argv)
    AGENT, FRAMES = args.agent, args.frames
    log_text = first_run_log()
    rows = {"after": measure(plan_json(ROOT, args.stack), args.node, log_text)}
    if args.before:
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "archive", args.before], cwd=ROOT, capture_output=True, check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            os.symlink(ROOT / ".venv", Path(tmp) / ".venv")
            rows["before"] = measure(plan_json(Path(tmp), args.stack), args.node, log_text)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for label, sizes in rows.items():
        export, compact = (sum(v[i] for v in sizes.values()) for i in (0, 1))
        print(f"{label}: {export / 1024:.1f} KB per node as exported ({compact / 1024:.1f} KB compact), stack {args.stack}, node {args.node}")
        for name, (size, small) in sorted(sizes.items(), key=lambda kv: -kv[1][0]):
            print(f"  {size / 1024:6.1f} KB ({small / 1024:5.1f})  {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
