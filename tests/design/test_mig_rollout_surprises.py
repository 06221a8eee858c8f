"""MIG changes that never surprise a running workload, with the rollout and guard scripts run for
real as the GPU Operator image runs them (from their ConfigMap's files, under the real busybox `sh`
with only busybox's applets on PATH) against the fake `kubectl` of test_mig_rollout_script (MIG
manager pods that behave as v0.13.1's do): the rollout waits out the operator's roll of the MIG manager before it relabels a
node, refuses a wave whose GPUs are held by pods a drain cannot evict, and rolls a node whose
`mig` was removed back to whole GPUs if it set that node's config; the layout guard refuses a
layout edited under a config name nodes select."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpu_stack.design.mig_rollout import SCRIPT_DIR

from ..busybox_image import image_bin, run_sh
from .test_mig_rollout_script import (  # noqa: F401  (cluster is a fixture)
    CONFIG,
    MIG_CM,
    PENDING,
    SET,
    SHELLCHECK,
    STATE,
    SUCCESS,
    TABLE_RESOURCES,
    cluster,
    configmap_files,
    gpu_node,
    manager,
    pod,
    rollout,
)

OLD_CM = "mig-parted-config-aaaaaaaaaa"
WHOLE = {"state": "success", "allocatable": {"cpu": "64", "nvidia.com/gpu": "8"}}


def patches(run, node: str) -> list[dict]:
    return [json.loads(c[5]) for c in run.calls if c[:3] == ["patch", "node", node]]


# --------------------------------------------------------------------------- 1. the MIG manager's roll
def test_the_label_waits_until_the_node_runs_a_ready_mig_manager_with_the_new_configmap(cluster):
    # The operator rolls the DaemonSet onto the new ConfigMap: the old pod (whose ConfigMap has no
    # 'inference' and which would set state=failed), then it terminating, none, the new one not
    # ready, then ready. Only that last one may see the label.
    old = manager("nvidia-mig-manager-old", OLD_CM, configs=("all-disabled",))
    new = manager("nvidia-mig-manager-new", configs=("all-disabled", "inference"))
    roll = [[old], [old], [{**old, "deleting": True}], [], [{**new, "ready": False}], [new]]
    run = rollout(cluster, {"n1": gpu_node("all-disabled", PENDING, SUCCESS)}, [f"n1 set inference {TABLE_RESOURCES}"],
                  [pod("trainer")], managers={"n1": roll})
    assert run.status == 0, run.output
    assert run.verdict() == "PASS mig-rollout: node n1 reconfigured to MIG config 'inference'"
    assert run.cluster["manager_reads"]["n1"] >= len(roll)
    assert (f"waiting for the MIG manager: node n1: MIG manager pod nvidia-mig-manager-old mounts ConfigMap '{OLD_CM}', "
            f"not '{MIG_CM}' (the operator has not rolled the MIG manager onto the new mig-parted config there yet)") in run.output
    for seen in ("MIG manager pod nvidia-mig-manager-old is terminating", "no MIG manager pod (app=nvidia-mig-manager in namespace gpu-operator) runs there yet",
                 "MIG manager pod nvidia-mig-manager-new is not ready yet"):
        assert seen in run.output
    # Nothing was cordoned or evicted while the old pod ran.
    first_ready = [i for i, c in enumerate(run.calls) if "jsonpath=" in c[-1] and "Ready" in c[-1]][len(roll) - 1]
    assert first_ready < run.index("cordon", "n1") < run.index("patch", "node", "n1")
    assert run.cluster["nodes"]["n1"]["labels"][STATE] == "success" and run.cluster["nodes"]["n1"]["unschedulable"] is False


def test_a_mig_manager_that_never_rolls_fails_before_anything_is_cordoned(cluster):
    old = manager("nvidia-mig-manager-old", OLD_CM, configs=("all-disabled",))
    run = rollout(cluster, {"n1": gpu_node("all-disabled", PENDING, SUCCESS)}, [f"n1 set inference {TABLE_RESOURCES}"],
                  [pod("trainer")], managers={"n1": [[old]]}, env={"MANAGER_TIMEOUT_SECONDS": "1", "POLL_SECONDS": "1"})
    assert run.status == 1
    assert run.termination == (
        f"FAIL mig-rollout: node n1: MIG manager pod nvidia-mig-manager-old mounts ConfigMap '{OLD_CM}', not '{MIG_CM}' "
        "(the operator has not rolled the MIG manager onto the new mig-parted config there yet) after 1s "
        f"(mig.rollout.managerTimeout): waited for the node's MIG manager pod to be ready and mount ConfigMap '{MIG_CM}' "
        "before changing its MIG config, so the MIG config was not changed, nothing was cordoned and no later wave starts\n"
    )
    assert not run.made("cordon") and not run.made("patch") and not run.made("create", "--raw")
    assert run.cluster["nodes"]["n1"]["labels"] == {"kubernetes.io/hostname": "x", CONFIG: "all-disabled", STATE: "success"}


# --------------------------------------------------------------------------- 5. pods a drain cannot evict
def test_gpu_pods_the_drain_cannot_evict_fail_the_wave_before_the_cordon(cluster):
    pods = [pod("trainer"), pod("gpu-agent", namespace="monitoring", owner="DaemonSet"),
            pod("static-gpu", namespace="kube-system", owner="Node"), pod("cpu-agent", owner="DaemonSet", gpu=False)]
    run = rollout(cluster, {"n1": gpu_node("all-disabled", PENDING, SUCCESS)}, [f"n1 set inference {TABLE_RESOURCES}"], pods)
    assert run.status == 1
    assert run.termination == (
        "FAIL mig-rollout: GPU pods the drain cannot evict hold GPUs on the wave's nodes, and MIG manager would fail or wait "
        "on them: node n1: monitoring/gpu-agent (DaemonSet); node n1: kube-system/static-gpu (static pod); so the MIG "
        "config was not changed, nothing was cordoned and no later wave starts (stop those pods there, e.g. with a "
        "nodeSelector or affinity on their DaemonSet, or set mig.rollout.ignoreUnevictable true)\n"
    )
    assert not run.made("cordon") and not run.made("create", "--raw") and not run.made("patch")
    assert len(run.cluster["pods"]) == 4 and run.cluster["nodes"]["n1"]["unschedulable"] is False


def test_ignore_unevictable_lets_the_wave_go_on_and_says_so(cluster):
    pods = [pod("trainer"), pod("gpu-agent", namespace="monitoring", owner="DaemonSet")]
    run = rollout(cluster, {"n1": gpu_node("all-disabled", PENDING, SUCCESS)}, [f"n1 set inference {TABLE_RESOURCES}"], pods,
                  env={"IGNORE_UNEVICTABLE": "true"})
    assert run.status == 0, run.output
    assert ("node n1: not evicting monitoring/gpu-agent (DaemonSet) (mig.rollout.ignoreUnevictable is true: "
            "it must release its GPUs itself)") in run.output
    assert [p["name"] for p in run.cluster["pods"]] == ["gpu-agent"]


# --------------------------------------------------------------------------- 4. back to whole GPUs
def test_a_node_whose_mig_was_removed_goes_back_to_whole_gpus_through_the_rollout(cluster):
    node = gpu_node("inference", PENDING, WHOLE, annotations={SET: "inference"})
    node["allocatable"] = SUCCESS["allocatable"]
    run = rollout(cluster, {"n1": node}, ["n1 restore all-disabled nvidia.com/gpu=8"], [pod("trainer")])
    assert run.status == 0, run.output
    assert run.verdict() == "PASS mig-rollout: node n1 reconfigured to MIG config 'all-disabled'"
    assert ("node n1: no nodes[].mig: MIG config 'inference' (set by the rollout, state success) -> 'all-disabled' "
            "(whole GPUs)") in run.output
    assert run.index("cordon", "n1") < run.index("create", "--raw") < run.index("patch", "node", "n1") < run.index("uncordon", "n1")
    assert patches(run, "n1") == [{"metadata": {"labels": {CONFIG: "all-disabled", STATE: "pending"}, "annotations": {SET: "all-disabled"}}}]
    assert "node n1 applied MIG config 'all-disabled' and advertises nvidia.com/gpu=8" in run.output
    assert run.cluster["nodes"]["n1"]["unschedulable"] is False and not run.cluster["pods"]


def test_a_mig_config_someone_else_set_is_left_as_it_is(cluster):
    nodes = {"n1": gpu_node("all-1g.18gb", PENDING, WHOLE), "n2": gpu_node("all-1g.18gb", PENDING, WHOLE, annotations={SET: "inference"})}
    run = rollout(cluster, nodes, ["n1 restore all-disabled nvidia.com/gpu=8", "n2 restore all-disabled nvidia.com/gpu=8"],
                  [pod("trainer")])
    assert run.status == 0, run.output
    assert run.verdict() == "PASS mig-rollout: every node already applies its MIG config"
    assert "node n1 has no nodes[].mig and its MIG config 'all-1g.18gb' was not set by the rollout: left as it is" in run.output
    assert {c[0] for c in run.calls} == {"get"}


def test_a_node_already_back_at_whole_gpus_is_left_alone(cluster):
    node = gpu_node("all-disabled", annotations={SET: "all-disabled"})
    run = rollout(cluster, {"n1": node}, ["n1 restore all-disabled nvidia.com/gpu=8"], [pod("trainer")])
    assert run.status == 0, run.output
    assert [c[:2] for c in run.calls] == [["get", "node"]]


def test_a_restore_line_names_all_disabled_only(cluster):
    run = rollout(cluster, {"n1": gpu_node("inference")}, ["n1 restore inference"])
    assert run.status == 1
    assert run.verdict() == "FAIL mig-rollout: node 'n1' can only be restored to all-disabled, not 'inference'"


# --------------------------------------------------------------------------- 2. the layout guard
GUARD = SCRIPT_DIR / "mig-layout-guard.sh"
GUARD_KUBECTL = r'''#!{python}
import json, os, sys
args = sys.argv[1:]
state = json.load(open(os.environ["FAKE_CLUSTER"]))
with open(os.environ["FAKE_CLUSTER"] + ".calls", "a") as f:
    f.write(json.dumps(args) + "\n")
if args[:2] == ["get", "daemonset"]:
    assert args[2:5] == ["nvidia-mig-manager", "-n", "gpu-operator"] and "mig-parted-config" in args[-1], args
    if state.get("mounted") is None:
        print('Error from server (NotFound): daemonsets.apps "nvidia-mig-manager" not found', file=sys.stderr)
        sys.exit(1)
    print(state["mounted"], end="")
elif args[:2] == ["get", "configmap"]:
    cm = state["configmaps"].get(args[2])
    if cm is None:
        print('Error from server (NotFound): configmaps "%s" not found' % args[2], file=sys.stderr)
        sys.exit(1)
    print(json.dumps(cm, separators=(",", ":")), end="")
elif args[:2] == ["get", "node"]:
    # As the real one answers `get node <names> -o jsonpath=...`: found nodes, then NotFound lines.
    names = args[2:args.index("-o")]
    single = '{.metadata.name}{"\\t"}{.metadata.labels}{"\\n"}'
    assert args[-1] == "jsonpath=" + (single if len(names) == 1 else "{range .items[*]}" + single + "{end}"), args
    missing = [n for n in names if n not in state["nodes"]]
    for name in names:
        if name in state["nodes"]:
            print(name + "\t" + json.dumps({"nvidia.com/mig.config": state["nodes"][name]}, separators=(",", ":")))
    for name in missing:
        print('Error from server (NotFound): nodes "%s" not found' % name, file=sys.stderr)
    sys.exit(1 if missing else 0)
else:
    print("fake kubectl: unexpected call %r" % args, file=sys.stderr)
    sys.exit(2)
'''


def guard(tmp_path: Path, mounted: str | None, configmaps: dict, nodes: dict, new_layouts: str) -> tuple[int, str, list]:
    kubectl = tmp_path / "guard-kubectl"
    kubectl.write_text(GUARD_KUBECTL.replace("{python}", sys.executable))
    kubectl.chmod(0o755)
    bin_dir = image_bin(tmp_path / "guard-bin", stubs={"kubectl": kubectl})
    state = tmp_path / "guard.json"
    state.write_text(json.dumps({"mounted": mounted, "configmaps": configmaps, "nodes": nodes}))
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {"FAKE_CLUSTER": str(state), "TERMINATION_LOG": str(tmp_path / "term"), "TMPDIR": str(tmp_path / "tmp"),
           "NEW_CONFIGMAP": MIG_CM, "NEW_LAYOUTS": new_layouts, "OPERATOR_NAMESPACE": "gpu-operator",
           # The stack's nodes, one it lists that does not exist among them.
           "NODES": " ".join([*nodes, "gone"])}
    proc = run_sh(configmap_files(tmp_path / "guard", GUARD.name), env, bin_dir, timeout=60)
    calls_file = Path(str(state) + ".calls")
    calls = [json.loads(line) for line in calls_file.read_text().splitlines()] if calls_file.exists() else []
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith(("PASS ", "FAIL "))]
    assert len(lines) == 1, proc.stdout + proc.stderr
    return proc.returncode, lines[0], calls


def with_layouts(text: str) -> dict:
    return {"gpu-stack/mig-layouts": text, "other": "x"}


def test_the_guard_script_passes_shellcheck():
    proc = subprocess.run([str(SHELLCHECK), "-x", "-s", "busybox", "-S", "style", str(GUARD)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_layout_edited_under_a_name_nodes_select_is_refused(tmp_path):
    status, line, _ = guard(tmp_path, OLD_CM, {OLD_CM: with_layouts("all-disabled=d1 inference=a1 training=t1")},
                            {"n1": "inference", "n2": "inference", "n3": "training", "n4": "all-disabled"},
                            "all-disabled=d1 inference=a2 training=t1")
    assert status == 1
    assert line == (
        "FAIL mig-layout-guard: MIG config 'inference' (node(s) n1, n2) changes its layout under the same name while nodes "
        "select it: the MIG manager would re-partition those nodes as soon as it restarts with the new ConfigMap, without "
        "cordon or drain, so the operator release was not changed. Give the new layout a new name in mig.profiles "
        "(e.g. inference-v2) and point nodes[].mig at it: the rollout Job then drains and relabels the nodes wave by wave"
    )


def test_a_changed_layout_no_node_selects_new_and_removed_configs_pass(tmp_path):
    status, line, calls = guard(tmp_path, OLD_CM, {OLD_CM: with_layouts("all-disabled=d1 inference=a1 old=o1")},
                                {"n1": "all-disabled"}, "all-disabled=d1 inference=a2 inference-v2=b1")
    assert (status, line) == (0, "PASS mig-layout-guard: MIG config(s) inference change their layout, but no node of the stack selects them")
    assert calls[-1][:4] == ["get", "node", "n1", "gone"]
    status, line, _ = guard(tmp_path, OLD_CM, {OLD_CM: with_layouts("all-disabled=d1 inference=a1")},
                            {"n1": "inference"}, "all-disabled=d1 inference=a1 inference-v2=b1")
    assert (status, line) == (0, f"PASS mig-layout-guard: no MIG config changes its layout under the same name ({OLD_CM} -> {MIG_CM})")


def test_a_first_install_or_an_unchanged_configmap_passes(tmp_path):
    assert guard(tmp_path, None, {}, {"n1": "inference"}, "inference=a2")[:2] == (
        0, "PASS mig-layout-guard: no MIG manager DaemonSet gpu-operator/nvidia-mig-manager yet (first install): no node can be re-partitioned")
    assert guard(tmp_path, MIG_CM, {}, {"n1": "inference"}, "inference=a2")[:2] == (
        0, f"PASS mig-layout-guard: the MIG manager already mounts {MIG_CM}: no layout changes")


def test_without_fingerprints_a_config_nodes_select_cannot_be_compared_and_is_refused(tmp_path):
    status, line, _ = guard(tmp_path, "default-mig-parted-config", {"default-mig-parted-config": {}},
                            {"n1": "all-balanced", "n2": "all-disabled"}, "all-disabled=d1 all-balanced=b1 inference=a1")
    assert status == 1
    assert line.startswith("FAIL mig-layout-guard: MIG config 'all-balanced' (node(s) n1) may change its layout under the same "
                           "name (the ConfigMap default-mig-parted-config the MIG manager mounts carries no gpu-stack/mig-layouts")
