"""The MIG rollout script runs for real, as the GPU Operator image runs it (from its ConfigMap's
files, under the real busybox `sh` with only busybox's applets on PATH: tests/busybox_image.py),
against a fake `kubectl` that keeps a
small cluster in a JSON file (nodes with labels, annotations, cordon and allocatable; pods with
GPU limits, owners and PodDisruptionBudgets; MIG manager pods with the ConfigMap they mount and
their logs), records every call, and plays back what mig-manager reports after a node is
relabelled: success, failed, a state that never settles, a PDB that refuses eviction, a node that
does not exist, and waves. The MIG manager pods behave as v0.13.1's do: a pod whose ConfigMap
lacks the new config (an old pod during the operator's roll of the DaemonSet, terminating or
not) sets state=failed at once; the pods on a node can change from read to read (the roll)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from gpu_stack.design.mig_rollout import CORDON_MARK, SCRIPT, SCRIPT_DIR, script_data

from ..busybox_image import image_bin, require_busybox, run_sh

SHELLCHECK = Path(sys.executable).parent / "shellcheck"
CONFIG = "nvidia.com/mig.config"
STATE = "nvidia.com/mig.config.state"
NEW_RESOURCES = {"nvidia.com/mig-1g.18gb": "16", "nvidia.com/mig-2g.35gb": "8", "nvidia.com/mig-3g.71gb": "8"}
TABLE_RESOURCES = "nvidia.com/mig-1g.18gb=16 nvidia.com/mig-2g.35gb=8 nvidia.com/mig-3g.71gb=8"

NODE_TEMPLATE = 'jsonpath={.metadata.labels}{"|"}{.spec.unschedulable}{"|"}{.status.allocatable}{"|"}{.metadata.annotations}'
MANAGER_TEMPLATE = (
    'jsonpath={range .items[*]}{.metadata.name}{"|"}{.metadata.deletionTimestamp}{"|"}'
    '{.status.conditions[?(@.type=="Ready")].status}{"|"}{.spec.volumes[?(@.name=="mig-parted-config")].configMap.name}{"\\n"}{end}'
)
MIG_CM = "mig-parted-config-0123456789"
SET = "gpu-stack/mig-config"
POD_LIST_TEMPLATE = 'jsonpath={range .items[*]}{.metadata.name}{"|"}{.metadata.deletionTimestamp}{"\\n"}{end}'
PODS_TEMPLATE = (
    'jsonpath={range .items[*]}{.metadata.namespace}{"|"}{.metadata.name}{"|"}{.metadata.deletionTimestamp}'
    '{"|"}{.status.phase}{"|"}{.metadata.ownerReferences[*].kind}{"|"}{.spec.resourceClaims[*].name}'
    '{"|"}{.spec.containers[*].resources.limits} {.spec.initContainers[*].resources.limits}{"\\n"}{end}'
)

# A fake kubectl answering exactly the calls the script makes, as the real one answers them:
# JSON maps printed compact, NotFound / TooManyRequests errors on stderr with exit 1. After a
# change of a node's nvidia.com/mig.config (or a restart of its MIG manager pod) each read of the
# node takes the next step of the node's `after_label` list (the last one repeats).
KUBECTL = r'''#!{python}
import json, os, sys
args = sys.argv[1:]
path = os.environ["FAKE_CLUSTER"]
with open(path + ".calls", "a") as f:
    f.write(json.dumps(args) + "\n")
state = json.load(open(path))
NODE_TEMPLATE = {node_template!r}
PODS_TEMPLATE = {pods_template!r}
MANAGER_TEMPLATE = {manager_template!r}
POD_LIST_TEMPLATE = {pod_list_template!r}

def save():
    json.dump(state, open(path, "w"))

def die(msg, code=1):
    print(msg, file=sys.stderr)
    sys.exit(code)

def node(name):
    if name not in state["nodes"]:
        die('Error from server (NotFound): nodes "%s" not found' % name)
    return state["nodes"][name]

def opt(flag):
    return args[args.index(flag) + 1] if flag in args else None

def compact(value):
    return json.dumps(value, separators=(",", ":"), sort_keys=True)

def pods_now(on):
    phases = state["managers"].get(on) or [[]]
    return phases[min(state.setdefault("manager_reads", {}).get(on, 0), len(phases) - 1)]

def relabel(n, on):
    config = n["labels"].get({config_label!r})
    # v0.13.1: every MIG manager pod on the node watches the label; one whose mounted ConfigMap
    # lacks the config fails it at once (`assert --valid-config`), before touching the GPUs.
    if any("configs" in p and config not in p["configs"] for p in pods_now(on)):
        n["queue"] = [{{"state": "failed"}}]
    else:
        n["queue"] = list(n.get("after_label", []))

cmd = args[:2]
if cmd == ["get", "node"]:
    if args[3:] != ["-o", NODE_TEMPLATE]:
        die("fake kubectl: unexpected node template %r" % args[3:], 3)
    n = node(args[2])
    n["reads"] = n.get("reads", 0) + 1
    if n.get("later") and n["reads"] >= n["later"]["at"]:
        n["labels"].update(n.pop("later")["labels"])
    save()
    if n.get("queue"):
        step = n["queue"].pop(0) if len(n["queue"]) > 1 else n["queue"][0]
        n["labels"][{state_label!r}] = step["state"]
        if "allocatable" in step:
            n["allocatable"] = step["allocatable"]
        save()
    print("|".join([compact(n["labels"]), "true" if n.get("unschedulable") else "",
                    compact(n.get("allocatable", {{}})), compact(n.get("annotations", {{}}))]))
elif cmd == ["get", "pods"] and "--all-namespaces" in args:
    if args[-2:] != ["-o", PODS_TEMPLATE]:
        die("fake kubectl: unexpected pods template", 3)
    on = opt("--field-selector").split("=", 1)[1]
    for pod in list(state["pods"]):
        if pod["node"] != on:
            continue
        if pod.get("deleting") is not None:
            if pod["deleting"] <= 0:
                state["pods"].remove(pod)
                continue
            pod["deleting"] -= 1
        limits = compact({{"nvidia.com/gpu": "1"}} if pod.get("gpu") else {{"cpu": "1"}})
        print("|".join([pod["namespace"], pod["name"], "2026-01-01T00:00:00Z" if pod.get("deleting") is not None else "",
                         pod.get("phase", "Running"), pod.get("owner", "ReplicaSet"), " ".join(pod.get("claims", [])),
                         limits + " "]))
    save()
elif cmd == ["get", "pods"] and args[-1] == MANAGER_TEMPLATE:
    on = opt("--field-selector").split("=", 1)[1]
    assert opt("-n") == "gpu-operator" and opt("-l") == "app=nvidia-mig-manager", args
    for p in pods_now(on):
        print("|".join([p["name"], "2026-01-01T00:00:00Z" if p.get("deleting") else "",
                        "True" if p.get("ready", True) else "False", p.get("configmap", "")]))
    reads = state.setdefault("manager_reads", {{}})
    reads[on] = reads.get(on, 0) + 1
    save()
elif cmd == ["get", "pods"] and args[-1] == POD_LIST_TEMPLATE:
    on = opt("--field-selector").split("=", 1)[1]
    for p in pods_now(on):
        print("|".join([p["name"], "2026-01-01T00:00:00Z" if p.get("deleting") else ""]))
elif cmd == ["get", "pods"]:
    on = opt("--field-selector").split("=", 1)[1]
    assert opt("-n") and opt("-l") == "app=nvidia-mig-manager" and args[-1] == "jsonpath={{.items[0].metadata.name}}", args
    pods = pods_now(on)
    if not pods:
        die("error: error executing jsonpath \"{{.items[0].metadata.name}}\": array index out of bounds: index 0, length 0")
    print(pods[0]["name"], end="")
elif cmd == ["create", "--raw"]:
    _, _, url, flag, body = args
    parts = url.strip("/").split("/")
    ns, name = parts[3], parts[5]
    sent = json.load(open(body))
    if flag != "-f" or parts[6] != "eviction" or sent != {{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {{"name": name, "namespace": ns}}}}:
        die("fake kubectl: bad eviction %r %r" % (url, sent), 4)
    pod = next((p for p in state["pods"] if p["namespace"] == ns and p["name"] == name), None)
    if pod is None:
        die('Error from server (NotFound): pods "%s" not found' % name)
    if pod.get("pdb"):
        die("Error from server (TooManyRequests): Cannot evict pod as it would violate the pod's disruption budget.")
    if pod.get("deleting") is None:
        pod["deleting"] = pod.get("grace_reads", 0)
    save()
    print('{{"kind":"Status","apiVersion":"v1","status":"Success"}}')
elif cmd in (["cordon"], ["uncordon"]) or args[0] in ("cordon", "uncordon"):
    n = node(args[1])
    n["unschedulable"] = args[0] == "cordon"
    save()
elif cmd == ["patch", "node"]:
    n = node(args[2])
    if args[3:5] != ["--type=merge", "-p"]:
        die("fake kubectl: unexpected patch %r" % args, 6)
    meta = json.loads(args[5])["metadata"]
    before = n["labels"].get({config_label!r})
    n["labels"].update(meta.get("labels", {{}}))
    n.setdefault("annotations", {{}}).update(meta.get("annotations", {{}}))
    if n["labels"].get({config_label!r}) != before:
        relabel(n, args[2])
    save()
    print("node/%s patched" % args[2])
elif cmd in (["label", "node"], ["annotate", "node"]):
    n = node(args[2])
    if args[-1] != "--overwrite" and not args[-1].endswith("-"):
        die("fake kubectl: %s without --overwrite" % args[0], 5)
    where = n["labels"] if args[0] == "label" else n.setdefault("annotations", {{}})
    before = n["labels"].get({config_label!r})
    for item in args[3:]:
        if item == "--overwrite":
            continue
        if item.endswith("-"):
            where.pop(item[:-1], None)
        else:
            key, value = item.split("=", 1)
            where[key] = value
    if args[0] == "label" and n["labels"].get({config_label!r}) != before:
        relabel(n, args[2])
    save()
elif cmd == ["delete", "pods"]:
    on = opt("--field-selector").split("=", 1)[1]
    # The DaemonSet's new pod reads the label when it starts.
    relabel(node(on), on)
    save()
    for p in pods_now(on):
        print('pod "%s" deleted' % p["name"])
elif args[0] == "logs":
    pod = args[3]
    lines = state.get("logs", {{}}).get(pod, "").splitlines()
    tail = int(opt("--tail") if opt("--tail") else args[-1].split("=", 1)[1])
    print("\n".join(lines[-tail:]))
else:
    die("fake kubectl: unexpected call %r" % args, 2)
'''.replace("{python}", sys.executable)


@pytest.fixture
def cluster(tmp_path):
    script = KUBECTL.replace("{node_template!r}", repr(NODE_TEMPLATE)).replace("{pods_template!r}", repr(PODS_TEMPLATE))
    script = script.replace("{manager_template!r}", repr(MANAGER_TEMPLATE)).replace("{pod_list_template!r}", repr(POD_LIST_TEMPLATE))
    script = script.replace("{state_label!r}", repr(STATE)).replace("{config_label!r}", repr(CONFIG))
    script = script.replace("{{", "{").replace("}}", "}")
    kubectl = tmp_path / "fake-kubectl"
    kubectl.write_text(script)
    kubectl.chmod(0o755)
    # The image's PATH: busybox's applets and its kubectl (here the fake), nothing else.
    image_bin(tmp_path / "bin", stubs={"kubectl": kubectl})
    return tmp_path


def configmap_files(folder: Path, script: str = SCRIPT) -> Path:
    """The script's ConfigMap as its Job mounts it (the script and common.sh side by side, what
    script_data gives); returns the script's path there."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in script_data(script).items():
        (folder / name).write_text(text)
    return folder / script


def gpu_node(config: str = "all-disabled", *after: dict, unschedulable: bool = False, state: str = "success",
             annotations: dict | None = None) -> dict:
    labels = {"kubernetes.io/hostname": "x", CONFIG: config}
    if state:
        labels[STATE] = state
    return {"labels": labels, "unschedulable": unschedulable, "annotations": annotations or {},
            "allocatable": {"cpu": "64", "nvidia.com/gpu": "8"}, "after_label": list(after)}


PENDING = {"state": "pending"}
SUCCESS = {"state": "success", "allocatable": {"cpu": "64", "nvidia.com/gpu": "0", **NEW_RESOURCES}}
FAILED = {"state": "failed"}
LOG = "\n".join(f"line {i}" for i in range(1, 31)) + "\nlevel=error msg=\"Error applying MIG configuration with hooks: 3g.71gb: insufficient resources\""


class Run:
    def __init__(self, status: int, output: str, termination: str, cluster: dict, calls: list[list[str]]):
        self.status, self.output, self.termination, self.cluster, self.calls = status, output, termination, cluster, calls

    def verdict(self) -> str:
        lines = [line for line in self.output.splitlines() if line.startswith(("PASS ", "FAIL "))]
        assert len(lines) == 1, self.output
        return lines[0]

    def index(self, *prefix: str) -> int:
        """Position of the first call starting with prefix (-1 when never made)."""
        return next((i for i, c in enumerate(self.calls) if c[: len(prefix)] == list(prefix)), -1)

    def made(self, *prefix: str) -> bool:
        return self.index(*prefix) >= 0


def manager(name: str, configmap: str = MIG_CM, configs: tuple[str, ...] | None = None, **kw) -> dict:
    """A MIG manager pod: the ConfigMap it mounts and, when given, the configs that ConfigMap holds."""
    return {"name": name, "configmap": configmap, **({"configs": list(configs)} if configs is not None else {}), **kw}


def rollout(cluster_dir: Path, nodes: dict, table: list[str], pods: Sequence[dict] = (), env: dict | None = None,
            managers: dict | None = None, logs: dict | None = None, script: Path | None = None) -> Run:
    """Runs the script (by default from its ConfigMap's files) under busybox `sh`; `managers` maps a
    node to its MIG manager pods, read after read (a list of lists: the roll), or to one pod name;
    by default each node has one ready, up-to-date pod."""
    script = script or configmap_files(cluster_dir / "rollout")
    phases = {n: [[manager(f"nvidia-mig-manager-{n}")]] for n in nodes}
    for n, value in (managers or {}).items():
        phases[n] = [[manager(value)]] if isinstance(value, str) else value
    state_file = cluster_dir / "cluster.json"
    state_file.write_text(json.dumps({"nodes": nodes, "pods": list(pods), "managers": phases, "logs": logs or {}}))
    calls_file = Path(str(state_file) + ".calls")
    if calls_file.exists():
        calls_file.unlink()
    (cluster_dir / "nodes").write_text("".join(f"{line}\n" for line in table))
    term = cluster_dir / "termination-log"
    if term.exists():
        term.unlink()
    tmp = cluster_dir / "tmp"
    tmp.mkdir(exist_ok=True)
    full = {
        "FAKE_CLUSTER": str(state_file),
        "TERMINATION_LOG": str(term),
        "TMPDIR": str(tmp),
        "NODES_FILE": str(cluster_dir / "nodes"),
        "POLL_SECONDS": "0",
        "OPERATOR_NAMESPACE": "gpu-operator",
        "MIG_CONFIGMAP": MIG_CM,
        **{k: str(v) for k, v in (env or {}).items()},
    }
    proc = run_sh(script, full, cluster_dir / "bin")
    calls = [json.loads(line) for line in calls_file.read_text().splitlines()] if calls_file.exists() else []
    return Run(proc.returncode, proc.stdout + proc.stderr, term.read_text() if term.exists() else "",
               json.loads(state_file.read_text()), calls)


def pod(name: str, node: str = "n1", **kw) -> dict:
    return {"namespace": kw.pop("namespace", "team-a"), "name": name, "node": node, "gpu": True, **kw}


# --------------------------------------------------------------------------- shellcheck, busybox
# The scripts that run on the GPU Operator image: it has busybox `sh`, no bash (config/job-images.yaml).
API_SCRIPTS = ("mig-rollout.sh", "mig-layout-guard.sh", "node-labels.sh")


@pytest.mark.parametrize("name", API_SCRIPTS)
def test_the_api_scripts_pass_shellcheck_for_busybox_and_posix_sh(name):
    # Run from the repository root, as `make lint` does: the source directive finds common.sh.
    root = SCRIPT_DIR.parents[1]
    proc = subprocess.run([str(SHELLCHECK), "-x", "-s", "busybox", "-S", "style", f"config/mig-rollout/{name}"],
                          capture_output=True, text=True, cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # busybox ash also accepts some bash (`[[`, `$'..'`, `${v:o:l}`, `${v//a/b}`) that shellcheck's
    # busybox dialect lets through: POSIX sh, `local` (which busybox and dash have) aside.
    proc = subprocess.run([str(SHELLCHECK), "-x", "-s", "sh", "-e", "SC3043", "-S", "warning", f"config/mig-rollout/{name}"],
                          capture_output=True, text=True, cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", API_SCRIPTS)
def test_the_api_scripts_parse_in_the_real_busybox(name, tmp_path):
    proc = subprocess.run([require_busybox(), "sh", "-n", str(configmap_files(tmp_path, name))], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (SCRIPT_DIR / name).read_text().startswith("#!/bin/sh\n")


BASH_ONLY = {
    "an array": 'nodes=(n1 n2)\n',
    "an associative array": 'declare -A want\n',
    "BASH_SOURCE": 'here=$(dirname "${BASH_SOURCE[0]}")\n',
}


@pytest.mark.parametrize("construct", list(BASH_ONLY))
def test_a_bash_construct_in_the_rollout_fails_under_the_images_shell(cluster, construct):
    # The harness really is the image's shell: the same run passes with the script as it is and
    # fails once a bash-only line is added after the helpers are sourced.
    nodes = {"n1": gpu_node("all-disabled", SUCCESS)}
    table = [f"n1 set inference {TABLE_RESOURCES}"]
    assert rollout(cluster, nodes, table).status == 0
    broken = configmap_files(cluster / "broken")
    text = broken.read_text()
    anchor = 'KUBECTL=${KUBECTL:-kubectl}\n'
    assert anchor in text
    broken.write_text(text.replace(anchor, anchor + BASH_ONLY[construct], 1))
    run = rollout(cluster, nodes, table, script=broken)
    assert run.status != 0, run.output
    assert "PASS" not in run.output and not run.made("cordon")


BUSYBOX_TOLERATES = {
    "[[": '[[ -n $file ]] || fail "NODES_FILE is not set"\n',
    "$'..'": "tab=$'\\t'\n",
    "a substring": 'head=${file:0:1}\n',
}


@pytest.mark.parametrize("construct", list(BUSYBOX_TOLERATES))
def test_bash_that_busybox_tolerates_is_refused_by_the_posix_shellcheck(cluster, construct):
    # Debian's busybox ash runs these (bash compatibility built in), another busybox build need
    # not: the POSIX check of test_the_api_scripts_pass_shellcheck_for_busybox_and_posix_sh is
    # what keeps them out.
    broken = configmap_files(cluster / "broken")
    text = broken.read_text()
    anchor = 'KUBECTL=${KUBECTL:-kubectl}\n'
    broken.write_text(text.replace(anchor, anchor + BUSYBOX_TOLERATES[construct], 1))
    assert subprocess.run([require_busybox(), "sh", "-n", str(broken)], capture_output=True).returncode == 0
    proc = subprocess.run([str(SHELLCHECK), "-s", "sh", "-e", "SC3043,SC1091", "-S", "warning", str(broken)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "In POSIX sh" in proc.stdout, proc.stdout


# --------------------------------------------------------------------------- the ConfigMap's files
def test_the_script_runs_from_its_configmap_files_alone(cluster, tmp_path):
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    for name, text in script_data().items():
        (mounted / name).write_text(text)
    assert sorted(p.name for p in mounted.iterdir()) == ["common.sh", "drain.sh", SCRIPT]
    run = rollout(cluster, {"n1": gpu_node("inference", SUCCESS)}, [f"n1 set inference {TABLE_RESOURCES}"],
                  script=mounted / SCRIPT)
    assert run.status == 0, run.output
    assert run.verdict() == "PASS mig-rollout: every node already applies its MIG config"


def test_a_long_failure_is_cut_to_4000_bytes_in_the_termination_message(cluster):
    name = "n" * 5000
    run = rollout(cluster, {}, [f"{name} set inference"])
    assert run.status == 1
    line = run.verdict()
    assert line.startswith(f"FAIL mig-rollout: node {name} cannot be read: ") and len(line) > 4000
    assert run.termination == line[:4000] + "\n"


# --------------------------------------------------------------------------- success
def test_success_cordons_evicts_gpu_pods_relabels_waits_and_uncordons(cluster):
    pods = [
        pod("trainer", grace_reads=2),
        pod("web", gpu=False),
        pod("cpu-daemon", owner="DaemonSet", gpu=False),
        pod("done", phase="Succeeded"),
        pod("elsewhere", node="n2"),
    ]
    run = rollout(cluster, {"n1": gpu_node("all-disabled", PENDING, PENDING, SUCCESS)},
                  [f"n1 set inference {TABLE_RESOURCES}"], pods)
    assert run.status == 0, run.output
    assert run.verdict() == "PASS mig-rollout: node n1 reconfigured to MIG config 'inference'"
    evicted = [c[2] for c in run.calls if c[:2] == ["create", "--raw"]]
    # Only the running GPU pod, on this node; once (then it terminates).
    assert evicted == ["/api/v1/namespaces/team-a/pods/trainer/eviction"]
    label = ["patch", "node", "n1", "--type=merge", "-p", json.dumps(
        {"metadata": {"labels": {CONFIG: "inference", STATE: "pending"}, "annotations": {SET: "inference"}}},
        separators=(",", ":"))]
    assert run.index("annotate", "node", "n1", f"{CORDON_MARK}=true") < run.index("cordon", "n1") < run.index("create", "--raw")
    # The label is set only once the GPU pod is gone (its last listing shows it no more).
    last_pod_listing = max(i for i, c in enumerate(run.calls) if c[:3] == ["get", "pods", "--all-namespaces"])
    assert last_pod_listing < run.index(*label) < run.index("uncordon", "n1")
    node = run.cluster["nodes"]["n1"]
    assert node["labels"][CONFIG] == "inference" and node["labels"][STATE] == "success"
    assert node["unschedulable"] is False and CORDON_MARK not in node["annotations"]
    # What the rollout set is marked: removing nodes[].mig later rolls this node back.
    assert node["annotations"][SET] == "inference"
    assert [p["name"] for p in run.cluster["pods"]] == ["web", "cpu-daemon", "done", "elsewhere"]


def test_a_pod_holding_a_resource_claim_is_a_gpu_pod_of_a_dra_node(cluster):
    """On a DRA node the GPUs (and MIG devices) are held through ResourceClaims, not nvidia.com/*
    requests: such a pod is evicted before the MIG manager reconfigures the GPUs."""
    pods = [pod("claimer", gpu=False, claims=["gpu"]), pod("web", gpu=False)]
    run = rollout(cluster, {"n1": gpu_node("all-disabled", PENDING, SUCCESS)}, ["n1 set inference"], pods)
    assert run.status == 0, run.output
    evicted = [c[2] for c in run.calls if c[:2] == ["create", "--raw"]]
    assert evicted == ["/api/v1/namespaces/team-a/pods/claimer/eviction"]
    assert [p["name"] for p in run.cluster["pods"]] == ["web"]


def test_an_eviction_is_sent_from_a_file_of_its_own_never_a_stale_one(cluster):
    """A fixed scratch name (`eviction.json`) left by another run, one this run cannot write (here a
    folder), was sent as the eviction of some other pod; each eviction now has a file of its own."""
    (cluster / "tmp").mkdir(exist_ok=True)
    (cluster / "tmp" / "eviction.json").mkdir()
    run = rollout(cluster, {"n1": gpu_node("all-disabled", PENDING, SUCCESS)}, ["n1 set inference"], [pod("trainer")])
    assert run.status == 0, run.output
    assert [c[2] for c in run.calls if c[:2] == ["create", "--raw"]] == ["/api/v1/namespaces/team-a/pods/trainer/eviction"]
    assert sorted(p.name for p in (cluster / "tmp").iterdir() if p.name.startswith("eviction")) == ["eviction.json"]


def test_a_node_with_nothing_to_evict_skips_the_drain(cluster):
    run = rollout(cluster, {"n1": gpu_node("all-disabled", SUCCESS)}, [f"n1 set inference {TABLE_RESOURCES}"], [pod("web", gpu=False)])
    assert run.status == 0, run.output
    assert "node n1: no GPU pods, nothing to drain" in run.output
    assert not run.made("create", "--raw")


def test_a_node_already_at_its_config_is_left_alone(cluster):
    node = gpu_node("inference", annotations={SET: "inference"})
    run = rollout(cluster, {"n1": node}, [f"n1 set inference {TABLE_RESOURCES}"], [pod("trainer")])
    assert run.status == 0, run.output
    assert run.verdict() == "PASS mig-rollout: every node already applies its MIG config"
    assert [c[:2] for c in run.calls] == [["get", "node"]]


def test_a_node_an_earlier_rollout_set_is_marked_without_a_change(cluster):
    run = rollout(cluster, {"n1": gpu_node("inference")}, [f"n1 set inference {TABLE_RESOURCES}"], [pod("trainer")])
    assert run.status == 0, run.output
    assert [c[:2] for c in run.calls] == [["get", "node"], ["annotate", "node"]]
    assert run.cluster["nodes"]["n1"]["annotations"] == {SET: "inference"}
    assert run.cluster["nodes"]["n1"]["unschedulable"] is False and run.cluster["pods"]


def test_evict_false_relabels_without_cordon_or_eviction(cluster):
    run = rollout(cluster, {"n1": gpu_node("all-disabled", PENDING, SUCCESS)}, [f"n1 set inference {TABLE_RESOURCES}"],
                  [pod("trainer")], env={"EVICT": "false"})
    assert run.status == 0, run.output
    assert not run.made("cordon") and not run.made("create", "--raw") and not run.made("uncordon")
    assert run.cluster["nodes"]["n1"]["labels"][CONFIG] == "inference"


def test_a_node_someone_else_cordoned_stays_cordoned(cluster):
    run = rollout(cluster, {"n1": gpu_node("all-disabled", SUCCESS, unschedulable=True)}, [f"n1 set inference {TABLE_RESOURCES}"])
    assert run.status == 0, run.output
    assert not run.made("uncordon") and not run.made("cordon")
    assert run.cluster["nodes"]["n1"]["unschedulable"] is True
    assert "node n1 was already cordoned: it stays cordoned afterwards" in run.output


def test_success_waits_for_the_new_resources_too(cluster):
    half = {"state": "success", "allocatable": {"nvidia.com/mig-1g.18gb": "16"}}
    run = rollout(cluster, {"n1": gpu_node("all-disabled", half, half, SUCCESS)}, [f"n1 set inference {TABLE_RESOURCES}"])
    assert run.status == 0, run.output
    reads = [c for c in run.calls if c[:2] == ["get", "node"]]
    assert len(reads) == 5  # the first look, the look before the label, two reads with half the resources, then all
    assert ("waiting: node n1: state success but advertises nvidia.com/mig-2g.35gb=0 (expected 8), "
            "nvidia.com/mig-3g.71gb=0 (expected 8)") in run.output
    assert run.index("uncordon", "n1") > max(i for i, c in enumerate(run.calls) if c[:2] == ["get", "node"])


# --------------------------------------------------------------------------- failures
def test_failed_keeps_the_node_cordoned_and_reports_state_and_log(cluster):
    run = rollout(cluster, {"n1": gpu_node("all-disabled", PENDING, FAILED)}, [f"n1 set inference {TABLE_RESOURCES}"],
                  [pod("trainer")], managers={"n1": "nvidia-mig-manager-x7k2p"}, logs={"nvidia-mig-manager-x7k2p": LOG})
    assert run.status == 1
    assert run.termination.startswith(
        "FAIL mig-rollout: node n1: mig-manager could not apply MIG config 'inference' (nvidia.com/mig.config.state=failed); "
        "the node stays cordoned and no later wave starts; MIG manager log: nvidia-mig-manager-x7k2p: line 22 | line 23"
    )
    assert run.termination.rstrip("\n").endswith('insufficient resources"')
    assert "line 21" not in run.termination  # the last 10 lines only
    assert ["logs", "-n", "gpu-operator", "nvidia-mig-manager-x7k2p", "-c", "nvidia-mig-manager", "--tail=10"] in run.calls
    assert run.cluster["nodes"]["n1"]["unschedulable"] is True
    assert not run.made("uncordon")


def test_timeout_names_the_state_and_keeps_the_node_cordoned(cluster):
    run = rollout(cluster, {"n1": gpu_node("all-disabled", PENDING)}, [f"n1 set inference {TABLE_RESOURCES}"],
                  env={"TIMEOUT_SECONDS": "1", "POLL_SECONDS": "1"})
    assert run.status == 1
    assert run.termination.startswith(
        "FAIL mig-rollout: node n1: nvidia.com/mig.config.state=pending after 1s (mig.rollout.timeout); "
        "the node stays cordoned and no later wave starts; MIG manager log: nvidia-mig-manager-n1: "
    )
    assert run.cluster["nodes"]["n1"]["unschedulable"] is True and not run.made("uncordon")


def test_a_pdb_that_refuses_eviction_stops_before_the_label(cluster):
    run = rollout(cluster, {"n1": gpu_node("all-disabled", SUCCESS)}, [f"n1 set inference {TABLE_RESOURCES}"],
                  [pod("guarded", pdb=True), pod("free")], env={"EVICTION_TIMEOUT_SECONDS": "2", "POLL_SECONDS": "1"})
    assert run.status == 1
    assert run.termination.startswith(
        "FAIL mig-rollout: GPU pods still on the wave's nodes after 2s (mig.rollout.evictionTimeout), so the MIG config was "
        "not changed, the nodes stay cordoned and no later wave starts: node n1: team-a/guarded (eviction refused: "
        "Error from server (TooManyRequests): Cannot evict pod as it would violate the pod's disruption budget.)"
    )
    # The eviction was retried (PDBs can allow it later); the free pod went; the label never moved.
    assert sum(1 for c in run.calls if c[:2] == ["create", "--raw"] and "guarded" in c[2]) >= 2
    assert [p["name"] for p in run.cluster["pods"]] == ["guarded"]
    assert not run.made("label") and not run.made("patch")
    assert run.cluster["nodes"]["n1"]["labels"][CONFIG] == "all-disabled"
    assert run.cluster["nodes"]["n1"]["unschedulable"] is True


def test_a_node_that_does_not_exist_is_never_touched(cluster):
    run = rollout(cluster, {"n1": gpu_node("all-disabled", SUCCESS)}, [f"n1 set inference {TABLE_RESOURCES}", f"gpu-typo set inference {TABLE_RESOURCES}"])
    assert run.status == 1
    assert run.termination == (
        "FAIL mig-rollout: node gpu-typo cannot be read: Error from server (NotFound): nodes \"gpu-typo\" not found "
        "(is nodes[].name the node's Kubernetes name?)\n"
    )
    # Checked before any change: not even the existing node was cordoned.
    assert {c[0] for c in run.calls} == {"get"}


def test_a_rerun_after_failure_restarts_the_mig_manager_and_uncordons(cluster):
    node = gpu_node("inference", PENDING, SUCCESS, unschedulable=True, state="failed", annotations={CORDON_MARK: "true"})
    run = rollout(cluster, {"n1": node}, [f"n1 set inference {TABLE_RESOURCES}"], managers={"n1": "nvidia-mig-manager-x7k2p"})
    assert run.status == 0, run.output
    assert ["delete", "pods", "-n", "gpu-operator", "-l", "app=nvidia-mig-manager", "--field-selector", "spec.nodeName=n1"] in run.calls
    assert run.cluster["nodes"]["n1"]["unschedulable"] is False
    assert CORDON_MARK not in run.cluster["nodes"]["n1"]["annotations"]


# --------------------------------------------------------------------------- waves
def test_waves_run_in_order_and_never_more_than_wave_size_at_once(cluster):
    nodes = {name: gpu_node("all-disabled", PENDING, SUCCESS) for name in ("n1", "n2", "n3")}
    run = rollout(cluster, nodes, [f"{n} set inference {TABLE_RESOURCES}" for n in ("n1", "n2", "n3")], env={"WAVE_SIZE": 2})
    assert run.status == 0, run.output
    assert run.verdict() == "PASS mig-rollout: 3 nodes reconfigured in 2 wave(s)"
    # Wave 1 (n1, n2) is cordoned together and uncordoned before wave 2 (n3) is cordoned.
    assert max(run.index("cordon", "n1"), run.index("cordon", "n2")) < run.index("patch", "node", "n1")
    assert max(run.index("uncordon", "n1"), run.index("uncordon", "n2")) < run.index("cordon", "n3")
    cordoned = 0
    most = 0
    for c in run.calls:
        if c[0] in ("cordon", "uncordon"):
            cordoned += 1 if c[0] == "cordon" else -1
            most = max(most, cordoned)
    assert most == 2 and cordoned == 0


def test_a_failed_wave_stops_the_rollout_before_the_next_one(cluster):
    nodes = {
        "n1": gpu_node("all-disabled", PENDING, SUCCESS),
        "n2": gpu_node("all-disabled", PENDING, FAILED),
        "n3": gpu_node("all-disabled", PENDING, SUCCESS),
    }
    run = rollout(cluster, nodes, [f"{n} set inference {TABLE_RESOURCES}" for n in nodes], env={"WAVE_SIZE": 2})
    assert run.status == 1
    assert run.termination.startswith("FAIL mig-rollout: node n2: mig-manager could not apply MIG config 'inference'")
    assert not run.made("cordon", "n3") and not run.made("patch", "node", "n3")
    assert run.cluster["nodes"]["n3"]["labels"][CONFIG] == "all-disabled"
    assert run.cluster["nodes"]["n2"]["unschedulable"] is True


def test_only_the_nodes_that_change_form_the_waves(cluster):
    nodes = {"n1": gpu_node("inference"), "n2": gpu_node("all-disabled", SUCCESS)}
    run = rollout(cluster, nodes, [f"{n} set inference {TABLE_RESOURCES}" for n in nodes])
    assert run.status == 0, run.output
    assert "1 node(s) to reconfigure in 1 wave(s) of at most 1" in run.output
    assert not run.made("cordon", "n1") and run.made("cordon", "n2")


# --------------------------------------------------------------------------- a MIG manager that gave up
# k8s-mig-manager v0.13.1 (cmd/nvidia-mig-manager/main.go:302-313, pkg/mig/reconfigure/reconfigure.go
# Run): an attempt starts with "Updating to MIG config: <c>"; an early return (an operand pod not
# gone within 5 minutes, a failed reboot) logs its error and "Waiting for change ..." and leaves the
# state pending (or rebooting) with the operands paused; it then acts only on a new label value.
def manager_lines(*messages: tuple[str, str]) -> str:
    return "\n".join(f'time="2026-12-02T07:00:{i:02d}Z" level={level} msg="{text}"' for i, (level, text) in enumerate(messages))


WAIT = ("info", "Waiting for change to 'nvidia.com/mig.config' label")
SHUTDOWN_ERROR = "Error: failed to wait for pods to be deleted: device-plugin pod did not shutdown: context deadline exceeded"
GAVE_UP = manager_lines(
    WAIT, ("info", "Updating to MIG config: inference"), ("info", "Current value of 'nvidia.com/mig.config.state=pending'"),
    ("info", "Shutting down all GPU clients in Kubernetes by disabling their component-specific nodeSelector labels"),
    ("info", "Waiting for the device-plugin to shutdown"), ("error", SHUTDOWN_ERROR), WAIT,
)
REBOOT_FAILED = manager_lines(
    WAIT, ("info", "Updating to MIG config: inference"), ("info", "Rebooting the node..."),
    ("warning", "Failed to reboot the node: exit status 1"), ("info", "Successfully updated to MIG config: inference"), WAIT,
)
STILL_WORKING = manager_lines(WAIT, ("info", "Updating to MIG config: inference"), ("info", "Applying the selected MIG config to the node"))
OLD_ATTEMPT = manager_lines(WAIT, ("info", "Updating to MIG config: all-disabled"), ("error", "Error: an earlier failure"), WAIT)
MANAGER = "nvidia-mig-manager-x7k2p"


def test_a_manager_that_gave_up_in_the_wave_fails_it_at_once_with_its_error(cluster):
    run = rollout(cluster, {"n1": gpu_node("all-disabled", PENDING)}, [f"n1 set inference {TABLE_RESOURCES}"],
                  managers={"n1": MANAGER}, logs={MANAGER: GAVE_UP}, env={"TIMEOUT_SECONDS": "20", "POLL_SECONDS": "1"})
    assert run.status == 1
    assert run.termination.startswith(
        "FAIL mig-rollout: node n1: its MIG manager gave up applying MIG config 'inference' (nvidia.com/mig.config.state=pending, "
        f"the device plugin, GFD and the exporter left paused): {SHUTDOWN_ERROR}; the node stays cordoned and no later wave "
        "starts; fix the cause and run `pulumi up` again (the rollout restarts a MIG manager that gave up); "
        f"MIG manager log: {MANAGER}: "), run.termination
    # at its first look after the label, not after the timeout
    reads = [c for c in run.calls if c[:2] == ["get", "node"]]
    assert len(reads) <= 4, len(reads)
    assert run.cluster["nodes"]["n1"]["unschedulable"] is True


def test_a_later_run_restarts_a_manager_that_gave_up_and_the_node_recovers(cluster):
    node = gpu_node("inference", SUCCESS, state="pending", unschedulable=True,
                    annotations={CORDON_MARK: "true", SET: "inference"})
    run = rollout(cluster, {"n1": node}, [f"n1 set inference {TABLE_RESOURCES}"], managers={"n1": MANAGER},
                  logs={MANAGER: GAVE_UP}, env={"TIMEOUT_SECONDS": "3", "POLL_SECONDS": "1"})
    assert run.status == 0, run.output
    assert (f"node n1: its MIG manager {MANAGER} gave up on 'inference' (state pending: {SHUTDOWN_ERROR}) "
            "and waits for a label change: restarting it") in run.output
    assert ["delete", "pods", "-n", "gpu-operator", "-l", "app=nvidia-mig-manager", "--field-selector", "spec.nodeName=n1"] in run.calls
    node = run.cluster["nodes"]["n1"]
    assert node["labels"][STATE] == "success" and node["unschedulable"] is False


def test_a_manager_that_gave_up_at_rebooting_is_restarted_with_the_state_kept(cluster):
    node = gpu_node("inference", SUCCESS, state="rebooting", annotations={SET: "inference"})
    run = rollout(cluster, {"n1": node}, [f"n1 set inference {TABLE_RESOURCES}"], managers={"n1": MANAGER},
                  logs={MANAGER: REBOOT_FAILED}, env={"TIMEOUT_SECONDS": "3", "POLL_SECONDS": "1"})
    assert run.status == 0, run.output
    assert "(state rebooting: Failed to reboot the node: exit status 1)" in run.output
    # the new manager must see `rebooting` to check that the reboot took effect
    assert not any(c[:2] == ["label", "node"] and f"{STATE}=pending" in c for c in run.calls)
    assert run.made("delete", "pods")


@pytest.mark.parametrize("log", [STILL_WORKING, OLD_ATTEMPT], ids=["still-working", "not-yet-at-the-new-label"])
def test_a_manager_at_work_or_not_yet_at_the_new_label_is_waited_for(cluster, log):
    run = rollout(cluster, {"n1": gpu_node("all-disabled", PENDING, PENDING, SUCCESS)}, [f"n1 set inference {TABLE_RESOURCES}"],
                  managers={"n1": MANAGER}, logs={MANAGER: log})
    assert run.status == 0, run.output
    assert not run.made("delete", "pods")


def test_a_pending_node_whose_manager_works_on_it_is_not_restarted(cluster):
    node = gpu_node("inference", state="pending", annotations={SET: "inference"})
    run = rollout(cluster, {"n1": node}, [f"n1 set inference {TABLE_RESOURCES}"], managers={"n1": MANAGER},
                  logs={MANAGER: STILL_WORKING}, env={"TIMEOUT_SECONDS": "2", "POLL_SECONDS": "1"})
    assert not run.made("delete", "pods")
    assert "waiting for the MIG manager to finish 'inference'" in run.output
    assert run.termination.startswith("FAIL mig-rollout: node n1: nvidia.com/mig.config.state=pending after 2s"), run.termination


def test_a_label_set_meanwhile_to_the_target_is_not_relabelled_pending(cluster):
    # A first install: the rollout reads the node before GFD has labelled it; then the operator
    # sets its default nvidia.com/mig.config=all-disabled and the MIG manager applies it. A patch
    # with state=pending would change no label the manager watches: pending for good.
    node = gpu_node("all-disabled", state="")
    del node["labels"][CONFIG]
    node["later"] = {"at": 2, "labels": {CONFIG: "all-disabled", STATE: "success"}}
    run = rollout(cluster, {"n1": node}, ["n1 set all-disabled nvidia.com/gpu=8"],
                  env={"TIMEOUT_SECONDS": "3", "POLL_SECONDS": "1"})
    assert run.status == 0, run.output
    assert "node n1: nvidia.com/mig.config became 'all-disabled' meanwhile (state success): waiting for the MIG manager" in run.output
    assert not run.made("patch", "node") and not run.made("delete", "pods")
    assert run.cluster["nodes"]["n1"]["annotations"][SET] == "all-disabled"
