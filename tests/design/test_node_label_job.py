"""The node labels come from one Job reading one table (gpu_stack/design/node_label_job.py): the exact
labels each node gets, the Job's RBAC and options, its place before the release, and the script
run for real as the GPU Operator image runs it (the real busybox `sh`, only busybox's applets on
PATH: tests/busybox_image.py) against a fake `kubectl` that keeps Nodes in a JSON file and applies
the way the API server's server-side apply does for one field manager."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpu_stack.design.mig_rollout import script_data
from gpu_stack.design.node_label_job import FIELD_MANAGER, SCRIPT, parse_table

from ..busybox_image import image_bin, run_sh
from ..helpers import dev_config, plan_of, plan_stack_file, set_path

TABLE = "gpu-operator-node-labels-table"
JOB = "gpu-operator-node-labels-job"
ROLE = "gpu-operator-node-labels-cluster-role"


def table_of(plan) -> dict[str, dict[str, str]]:
    return parse_table(plan.by_name(TABLE).inputs["data"]["nodes"])


def test_every_node_of_the_stack_gets_exactly_its_labels_from_the_table():
    cfg = set_path(set_path(dev_config(), "nodes[1].sharing", "none"), "sharing.profiles.ts-2", {"mode": "time-slicing", "replicas": 2})
    cfg = set_path(cfg, "nodes[0].sharing", "ts-2")
    plan = plan_of(cfg)
    assert table_of(plan) == {
        "gpu-dev-1": {"nvidia.com/device-plugin.config": "ts-2"},
        "gpu-dev-2": {"nvidia.com/device-plugin.config": "none"},
    }
    # A node without a profile is in the table with no labels: what the Job set before is removed.
    assert table_of(plan_stack_file("staging")) == {
        "gpu-stg-a100-1": {"nvidia.com/device-plugin.config": "none"},
        "gpu-stg-l40s-1": {},
    }
    # The MIG config of a node the rollout relabels is never in the table (it is set after a drain).
    assert all("nvidia.com/mig.config" not in labels for labels in table_of(plan_stack_file("prod")).values())
    assert not plan.of_type("kubernetes:core/v1:NodePatch")


def test_the_job_may_only_get_and_patch_the_stacks_nodes():
    plan = plan_stack_file("staging")
    assert plan.by_name(ROLE).inputs["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"], "resourceNames": ["gpu-stg-a100-1", "gpu-stg-l40s-1"]}
    ]
    assert not [r for r in plan.resources if r.parent == "gpu-operator-node-labels" and r.type.endswith(":Role")]
    binding = plan.by_name("gpu-operator-node-labels-cluster-role-binding").inputs
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpu-stack-node-labels", "namespace": "gpu-operator"}]


def test_the_job_runs_after_every_node_read_and_before_the_release_and_reruns_when_the_table_changes():
    plan = plan_stack_file("dev")
    job = plan.by_name(JOB)
    assert {"node-gpu-dev-1", "node-gpu-dev-2", TABLE, "gpu-operator-namespace"} <= set(job.depends_on)
    assert JOB in plan.by_name("gpu-operator-release").depends_on
    assert job.options["replaceOnChanges"] == ["*"] and job.options["deleteBeforeReplace"] is True
    changed = plan_of(set_path(dev_config(), "nodes[1].sharing", "none"))
    assert changed.by_name(JOB).inputs["metadata"]["name"] != job.inputs["metadata"]["name"]
    assert plan_of(dev_config()).by_name(JOB).inputs["metadata"]["name"] == job.inputs["metadata"]["name"]


FAKE_KUBECTL = r'''
import json, os, sys
import yaml
db = os.environ["FAKE_NODES"]
nodes = json.load(open(db))
args = sys.argv[1:]
if args[:2] == ["get", "node"]:
    names = [a for a in args[2:] if not a.startswith("-o") and not a.startswith("jsonpath")]
    names = names[: names.index("-o")] if "-o" in names else names
    for n in names:
        if n in nodes:
            print(f"{n}\t{n}")
        else:
            print(f'Error from server (NotFound): nodes "{n}" not found', file=sys.stderr)
    sys.exit(1 if any(n not in nodes for n in names) else 0)
if args[:2] == ["apply", "--server-side"]:
    manager = [a for a in args if a.startswith("--field-manager=")][0].split("=", 1)[1]
    assert "--force-conflicts" in args
    for doc in yaml.safe_load_all(open(args[args.index("-f") + 1])):
        if not doc:
            continue
        node = nodes.setdefault(doc["metadata"]["name"], {"labels": {}, "owners": {}})
        want = doc["metadata"].get("labels") or {}
        for key, owner in list(node["owners"].items()):
            if owner == manager and key not in want:
                del node["labels"][key], node["owners"][key]
        for key, value in want.items():
            node["labels"][key] = value
            node["owners"][key] = manager
        print(f"node/{doc['metadata']['name']} serverside-applied")
    json.dump(nodes, open(db, "w"))
    sys.exit(0)
sys.exit(f"fake kubectl: unexpected {args}")
'''


def run_script(tmp_path: Path, nodes: dict, table: str) -> tuple[subprocess.CompletedProcess, dict]:
    kubectl = tmp_path / "fake-kubectl"
    kubectl.write_text(f"#!{sys.executable}\n{FAKE_KUBECTL}")
    kubectl.chmod(0o755)
    bin_dir = image_bin(tmp_path / "bin", stubs={"kubectl": kubectl})
    db = tmp_path / "nodes.json"
    db.write_text(json.dumps(nodes))
    (tmp_path / "table").write_text(table)
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env = {"HOME": str(tmp_path), "TMPDIR": str(tmp_path / "tmp"), "FAKE_NODES": str(db),
           "NODES_FILE": str(tmp_path / "table"), "FIELD_MANAGER": FIELD_MANAGER,
           "TERMINATION_LOG": str(tmp_path / "termination-log")}
    # The Job's ConfigMap: the script and common.sh side by side.
    mounted = tmp_path / "node-labels"
    mounted.mkdir(exist_ok=True)
    for name, text in script_data(SCRIPT).items():
        (mounted / name).write_text(text)
    proc = run_sh(mounted / SCRIPT, env, bin_dir, timeout=60)
    return proc, json.loads(db.read_text())


def test_the_script_sets_the_tables_labels_removes_what_it_set_before_and_leaves_others_alone(tmp_path):
    plugin = "nvidia.com/device-plugin.config"
    nodes = {
        "a": {"labels": {plugin: "ts-2"}, "owners": {plugin: FIELD_MANAGER}},
        "b": {"labels": {plugin: "ts-8", "team": "x"}, "owners": {plugin: FIELD_MANAGER, "team": "kubectl-label"}},
        "c": {"labels": {plugin: "by-hand"}, "owners": {plugin: "kubectl-label"}},
    }
    proc, after = run_script(tmp_path, nodes, f"a {plugin}=ts-8\nb\nc\n")
    assert proc.returncode == 0, proc.stderr
    assert "PASS node-labels: labels of 3 node(s) applied" in proc.stdout
    assert after["a"]["labels"] == {plugin: "ts-8"}
    # b's profile was removed: the label the Job set goes, the team's label stays
    assert after["b"]["labels"] == {"team": "x"}
    # a label set by hand on a node without a profile is not the Job's: it stays
    assert after["c"]["labels"] == {plugin: "by-hand"}


def test_the_script_never_applies_a_node_that_is_not_in_the_cluster_and_names_it(tmp_path):
    proc, after = run_script(tmp_path, {"a": {"labels": {}, "owners": {}}}, "a k=v\ngone k=v\n")
    assert proc.returncode == 1
    assert "gone" not in after  # a server-side apply would have created it
    assert after["a"]["labels"] == {"k": "v"}
    message = (tmp_path / "termination-log").read_text()
    assert message.startswith("FAIL node-labels: not labelled, not read from the cluster")
    assert 'gone (Error from server (NotFound): nodes "gone" not found)' in message
    assert "the other 1 node(s) are labelled" in message
