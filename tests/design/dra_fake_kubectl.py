"""A fake `kubectl` for config/dra-rollout/dra-rollout.sh: it answers exactly the calls the script
makes, as the real one answers them (JSON maps printed compact, NotFound and TooManyRequests on
stderr with exit 1), keeps a small cluster in the JSON file $FAKE_CLUSTER, and records every call.

Every call is one tick of a simulated clock, after which the node agents act as the real ones do,
late by a few ticks:
- the operator's device plugin runs where `nvidia.com/gpu.deploy.device-plugin` is not `false` and
  advertises the node's resources `plugin_lag` ticks later; switched off, the kubelet sets its
  allocatable to 0 after `plugin_lag` ticks and its capacity to 0 only `grace` ticks after that
  (kubernetes pkg/kubelet/cm/devicemanager: a stopped plugin's devices turn unhealthy at once, its
  resource is removed after endpointStopGracePeriod);
- the DRA kubelet plugin runs where $FAKE_DRA_LABEL is set (its pod ready `pod_lag` ticks later)
  and publishes the node's ResourceSlices `dra_lag` ticks later, one slice every `slice_every` ticks when a
  pool has several; removed, its slices are deleted `wipe` ticks later (the kubelet wipes a gone
  driver's slices after a delay).
After each call (and its tick) every node is sampled into $FAKE_CLUSTER.samples: whether it
advertises both ways, and the schedulable GPUs of all nodes.

Not a test module: the tests copy it into an executable with this interpreter's path.
"""

import json
import os
import sys
from typing import NoReturn

args = sys.argv[1:]
path = os.environ["FAKE_CLUSTER"]
PLUGIN = "nvidia.com/gpu.deploy.device-plugin"
DRA_KEY, DRA_VALUE = os.environ["FAKE_DRA_LABEL"].split("=", 1)
DRIVER = "gpu.nvidia.com"
NODE_TEMPLATE = ('jsonpath={.metadata.labels}{"|"}{.spec.unschedulable}{"|"}{.status.capacity}{"|"}'
                 '{.status.allocatable}{"|"}{.metadata.annotations}')
SLICE_TEMPLATE = ('jsonpath={range .items[*]}{.spec.nodeName}{"|"}{.spec.pool.name}{"|"}{.spec.pool.generation}'
                  '{"|"}{.spec.pool.resourceSliceCount}{"|"}{.spec.devices[*].name}{"\\n"}{end}')
PLUGIN_PODS_TEMPLATE = ('jsonpath={range .items[*]}{.metadata.name}{"|"}{.metadata.deletionTimestamp}{"|"}'
                        '{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}')
PODS_TEMPLATE = ('jsonpath={range .items[*]}{.metadata.namespace}{"|"}{.metadata.name}{"|"}{.metadata.deletionTimestamp}'
                 '{"|"}{.status.phase}{"|"}{.metadata.ownerReferences[*].kind}{"|"}{.spec.resourceClaims[*].name}'
                 '{"|"}{.spec.containers[*].resources.limits} {.spec.initContainers[*].resources.limits}{"\\n"}{end}')

with open(path + ".calls", "a") as f:
    f.write(json.dumps(args) + "\n")
with open(path) as f:
    state = json.load(f)


def compact(value):
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def node(name):
    if name not in state["nodes"]:
        finish(f'Error from server (NotFound): nodes "{name}" not found', 1)
    return state["nodes"][name]


def opt(flag):
    return args[args.index(flag) + 1] if flag in args else None


def advance(name, n):
    """One tick of the node's device plugin and DRA kubelet plugin."""
    hw, t = n["hw"], state["tick"]
    want_dp = n["labels"].get(PLUGIN) != "false"
    if n.get("dp_want") != want_dp:
        n["dp_want"], n["dp_since"] = want_dp, t
    age = t - n["dp_since"]
    lag = hw.get("plugin_lag", 1)
    if want_dp and age >= lag and not hw.get("plugin_never"):
        n["capacity"].update(hw["resources"])
        n["allocatable"].update(hw["resources"])
    elif not want_dp and not hw.get("plugin_stuck"):
        if age >= lag:
            n["allocatable"].update(dict.fromkeys(hw["resources"], "0"))
        if age >= lag + hw.get("grace", 2):
            n["capacity"].update(dict.fromkeys(hw["resources"], "0"))
    want_dra = n["labels"].get(DRA_KEY) == DRA_VALUE
    if n.get("dra_want") != want_dra:
        n["dra_want"], n["dra_since"] = want_dra, t
    age = t - n["dra_since"]
    mine = [s for s in state["slices"] if s["node"] == name]
    if want_dra and not hw.get("dra_never") and age >= hw.get("dra_lag", 1):
        parts = hw.get("slices", 1)
        if len(mine) < parts and age >= hw.get("dra_lag", 1) + len(mine) * hw.get("slice_every", 1):
            gen = n.setdefault("generation", 0) + 1 if not mine else mine[0]["generation"]
            n["generation"] = gen
            count = hw.get("published", hw["devices"])
            names = [f"gpu-{i}" for i in range(count)]
            part = names[len(mine)::parts]
            state["slices"].append({"node": name, "pool": name, "generation": gen, "count": parts, "devices": part})
    elif not want_dra and mine and age >= hw.get("wipe", 1):
        state["slices"] = [s for s in state["slices"] if s["node"] != name]


def probe_result(probe):
    """`ok` once the probe's pod ran on its node with the claimed device there, `failed` when the
    node's hardware says so, None while it runs: `probe_lag` ticks after the Job was created."""
    pod = probe["obj"]["spec"]["template"]["spec"]
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    (node_name,) = term["matchFields"][0]["values"]
    n = state["nodes"][node_name]
    claim = state["probes"].get(pod["resourceClaims"][0]["resourceClaimName"])
    assert claim is not None and claim["kind"] == "ResourceClaim", pod
    assert {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    if state["tick"] - probe["created"] < n["hw"].get("probe_lag", 1):
        return None
    return "failed" if n["hw"].get("probe_fails") else "ok"


def advertises(n, field):
    return any(v != "0" for k, v in n[field].items() if k.startswith("nvidia.com/"))


def sample():
    both, schedulable = [], 0
    for name, n in state["nodes"].items():
        plugin = advertises(n, "capacity") or advertises(n, "allocatable")
        slices = any(s["node"] == name and s["devices"] for s in state["slices"])
        if plugin and slices:
            both.append(name)
        if not n.get("unschedulable") and (advertises(n, "allocatable") or slices):
            schedulable += n["hw"]["gpus"]
    with open(path + ".samples", "a") as f:
        f.write(json.dumps({"call": args, "both": both, "schedulable": schedulable}) + "\n")


def finish(message: str = "", code: int = 0) -> NoReturn:
    state["tick"] += 1
    for name, n in state["nodes"].items():
        advance(name, n)
    with open(path, "w") as f:
        json.dump(state, f)
    sample()
    if message:
        print(message, file=sys.stderr if code else sys.stdout)
    sys.exit(code)


if args[:2] == ["get", "node"]:
    if args[3:] != ["-o", NODE_TEMPLATE]:
        finish(f"fake kubectl: unexpected node template {args[3:]!r}", 3)
    n = node(args[2])
    print("|".join([compact(n["labels"]), "true" if n.get("unschedulable") else "", compact(n["capacity"]),
                    compact(n["allocatable"]), compact(n.get("annotations", {}))]))
elif args[:2] == ["get", "resourceslices.v1.resource.k8s.io"]:
    if args[2:] != ["--field-selector", f"spec.driver={DRIVER}", "-o", SLICE_TEMPLATE]:
        finish(f"fake kubectl: unexpected slice listing {args[2:]!r}", 3)
    for s in state["slices"]:
        print("|".join([s["node"], s["pool"], str(s["generation"]), str(s["count"]), " ".join(s["devices"])]))
elif args[:2] == ["create", "-f"] and args[3:] == ["-o", "name"]:
    # the probe's ResourceClaim or Job (generateName: the server names it)
    with open(args[2]) as f:
        obj = json.load(f)
    kind, meta = obj["kind"], obj["metadata"]
    assert "__" not in json.dumps(obj), obj  # every placeholder filled in
    name = f"{meta['generateName']}{len(state.setdefault('probes', {})) + 1:05d}"
    state["probes"][name] = {"kind": kind, "obj": obj, "created": state["tick"], "deleted": False}
    print(f"{'resourceclaim.resource.k8s.io' if kind == 'ResourceClaim' else 'job.batch'}/{name}")
elif args[:2] == ["get", "job"]:
    probe = state.get("probes", {}).get(args[2])
    if probe is None or probe["deleted"]:
        finish(f'Error from server (NotFound): jobs.batch "{args[2]}" not found', 1)
    done = probe_result(probe)
    print({"ok": "1|", "failed": "|1"}.get(done or "", "|"), end="")
elif args[:2] == ["get", "pods"] and "-n" in args and (opt("-l") or "").startswith("batch.kubernetes.io/job-name="):
    probe = state.get("probes", {}).get(opt("-l").split("=", 1)[1])
    done = probe_result(probe) if probe else None
    if done == "failed":
        print("Failed  no /dev/nvidia<N> in the container: the kubelet did not have the DRA driver prepare the claimed device")
    elif probe:
        print("Pending 0/4 nodes are available: 1 cannot allocate all claims. ")
elif args[:2] == ["delete", "job"] or args[:2] == ["delete", "resourceclaims.v1.resource.k8s.io"]:
    probe = state.get("probes", {}).get(args[2])
    if probe is None:
        finish(f'Error from server (NotFound): "{args[2]}" not found', 1)
    probe["deleted"] = True
elif args[:2] == ["get", "pods"] and "-n" in args:
    # the DRA kubelet plugin's pods: one where the label places it, ready `pod_lag` ticks later
    if args[-2:] != ["-o", PLUGIN_PODS_TEMPLATE] or opt("-l") != "dra-driver-nvidia-gpu-component=kubelet-plugin":
        finish(f"fake kubectl: unexpected plugin pods listing {args!r}", 3)
    on = opt("--field-selector").split("=", 1)[1]
    n = node(on)
    if n.get("dra_want"):
        ready = state["tick"] - n["dra_since"] >= n["hw"].get("pod_lag", 1) and not n["hw"].get("pod_never")
        print(f"nvidia-dra-driver-gpu-kubelet-plugin-{on}||{'True' if ready else 'False'}")
elif args[:2] == ["get", "pods"]:
    if args[-2:] != ["-o", PODS_TEMPLATE] or "--all-namespaces" not in args:
        finish(f"fake kubectl: unexpected pods listing {args!r}", 3)
    on = opt("--field-selector").split("=", 1)[1]
    for pod in list(state["pods"]):
        if pod["node"] != on:
            continue
        if pod.get("deleting") is not None:
            if pod["deleting"] <= 0:
                state["pods"].remove(pod)
                continue
            pod["deleting"] -= 1
        limits = compact({"nvidia.com/gpu": "1"} if pod.get("gpu") else {"cpu": "1"})
        print("|".join([pod["namespace"], pod["name"], "2026-01-01T00:00:00Z" if pod.get("deleting") is not None else "",
                        pod.get("phase", "Running"), pod.get("owner", "ReplicaSet"), " ".join(pod.get("claims", [])),
                        limits + " "]))
elif args[:2] == ["create", "--raw"]:
    _, _, url, flag, body = args
    parts = url.strip("/").split("/")
    ns, name = parts[3], parts[5]
    with open(body) as f:
        sent = json.load(f)
    if flag != "-f" or parts[6] != "eviction" or sent != {"apiVersion": "policy/v1", "kind": "Eviction",
                                                           "metadata": {"name": name, "namespace": ns}}:
        finish(f"fake kubectl: bad eviction {url!r} {sent!r}", 4)
    pod = next((p for p in state["pods"] if p["namespace"] == ns and p["name"] == name), None)
    if pod is None:
        finish(f'Error from server (NotFound): pods "{name}" not found', 1)
    if pod.get("pdb"):
        finish("Error from server (TooManyRequests): Cannot evict pod as it would violate the pod's disruption budget.", 1)
    if pod.get("deleting") is None:
        pod["deleting"] = pod.get("grace_reads", 0)
    print('{"kind":"Status","apiVersion":"v1","status":"Success"}')
elif args[0] in ("cordon", "uncordon"):
    node(args[1])["unschedulable"] = args[0] == "cordon"
elif args[:2] in (["label", "node"], ["annotate", "node"]):
    n = node(args[2])
    if args[0] == "label" and args[-1] != "--overwrite":
        finish("fake kubectl: label without --overwrite", 5)
    where = n["labels"] if args[0] == "label" else n.setdefault("annotations", {})
    for item in args[3:]:
        if item == "--overwrite":
            continue
        if item.endswith("-"):
            where.pop(item[:-1], None)
        else:
            key, value = item.split("=", 1)
            where[key] = value
else:
    finish(f"fake kubectl: unexpected call {args!r}", 2)
finish()
