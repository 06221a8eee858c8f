"""What the real engine needs that the offline plan alone would not show: no undecryptable config
in git, a missing SSH key said in one line, a machine-independent provider, declared nodes read
during preview, Jobs that are always replaced, options that do something, and a plan in a stable
order with unknown outputs shown as unknown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_stack.components.engine import missing_ssh_key_message
from gpu_stack.config.stack_files import list_stacks, read_stack
from gpu_stack.offline import runtime
from gpu_stack.offline.diff import JOB, REPLACE, UPDATE, diff_plans
from gpu_stack.offline.plan import UNKNOWN
from gpu_stack.offline.runner import PROJECT_DIR, PlanError, run_program

from ..helpers import dev_config, plan_of, plan_stack_file, set_path, stack_config

KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nengine-test-not-a-real-key\n-----END OPENSSH PRIVATE KEY-----\n"
PROVIDER = "pulumi:providers:kubernetes"
LEASE = "kubernetes:coordination.k8s.io/v1:Lease"


def _secure_values(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return ([value] if "secure" in value else []) + [v for x in value.values() for v in _secure_values(x)]
    if isinstance(value, list):
        return [v for x in value for v in _secure_values(x)]
    return []


@pytest.fixture(scope="module")
def dev_plan():
    return plan_stack_file("dev")


# --------------------------------------------------------------------------- 1. secrets
@pytest.mark.parametrize("stack", list_stacks(PROJECT_DIR))
def test_a_fresh_clone_plans_every_committed_stack_without_any_secret(stack):
    doc = yaml.safe_load((PROJECT_DIR / f"Pulumi.{stack}.yaml").read_text())
    # The CLI decrypts every `secure:` value before the program runs: none may be committed.
    assert _secure_values(doc) == []
    assert "placeholder" not in (PROJECT_DIR / f"Pulumi.{stack}.yaml").read_text().split("config:", 1)[1]
    plan = plan_stack_file(stack)
    assert plan.resources


def test_without_a_key_the_offline_plan_shows_the_node_commands_with_a_secret_placeholder(dev_plan):
    commands = dev_plan.of_type("command:remote:Command")
    assert sorted(c.name for c in commands) == ["node-prep-gpu-dev-1", "node-prep-gpu-dev-2"]
    assert all(c.inputs["connection"] == "[secret]" for c in commands)
    assert any("gpu-stack:ssh.privateKey is not set" in w and "pulumi config set --secret" in w for w in dev_plan.warnings)


def test_under_the_engine_a_missing_key_is_one_line_naming_the_key_and_the_command():
    with pytest.raises(PlanError) as info:
        run_program(read_stack(PROJECT_DIR, "dev"), PROJECT_DIR, offline=False)
    message = str(info.value)
    assert message == missing_ssh_key_message()
    assert "\n" not in message
    assert message.startswith("gpu-stack:ssh.privateKey is not set")
    assert "pulumi config set --secret --path 'gpu-stack:ssh.privateKey' < ~/.ssh/" in message
    assert info.value.registered == 0


def test_under_the_engine_a_stack_without_ssh_or_with_a_key_plans():
    staging = run_program(read_stack(PROJECT_DIR, "staging"), PROJECT_DIR, offline=False)
    assert not staging.of_type("command:remote:Command")
    cfg = dev_config()
    ssh = {**cfg.pop("ssh"), "privateKey": KEY}
    plan = run_program(stack_config(cfg, secrets={"ssh": ssh}), PROJECT_DIR, offline=False)
    assert len(plan.of_type("command:remote:Command")) == 2
    assert not any("privateKey is not set" in w for w in plan.warnings)
    assert "engine-test-not-a-real-key" not in json.dumps(plan.to_json())


def test_a_stack_importing_an_esc_environment_plans_offline_and_says_what_it_cannot_read(tmp_path: Path):
    (tmp_path / "Pulumi.yaml").write_text((PROJECT_DIR / "Pulumi.yaml").read_text())
    (tmp_path / "__main__.py").write_text((PROJECT_DIR / "__main__.py").read_text())
    doc = yaml.safe_load((PROJECT_DIR / "Pulumi.prod.yaml").read_text())
    del doc["config"]["gpu-stack:ssh"]  # the whole ssh object comes from the environment
    doc = {"environment": ["gpu-stack/prod"], **doc}
    (tmp_path / "Pulumi.prod.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    stack = read_stack(tmp_path, "prod")
    assert stack.environments == ["gpu-stack/prod"]
    plan = run_program(stack, tmp_path)
    assert any("ESC environment 'gpu-stack/prod'" in w for w in plan.warnings)
    assert len(plan.of_type("command:remote:Command")) == 3


# --------------------------------------------------------------------------- 3. provider
def test_the_provider_has_a_cluster_identifier_and_no_kubeconfig_from_the_machine(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "laptop-kubeconfig"))
    laptop = plan_stack_file("dev")
    monkeypatch.setenv("KUBECONFIG", "/runner/temp/ci-kubeconfig")
    ci = plan_stack_file("dev")
    provider = laptop.by_name("k8s").inputs
    assert provider["clusterIdentifier"] == "gpu-stack-dev"
    assert provider["kubeconfig"] == ""  # the provider loads $KUBECONFIG itself; nothing machine-specific in inputs
    assert "laptop-kubeconfig" not in json.dumps(laptop.to_json())
    assert laptop.to_json() == ci.to_json()


def test_the_cluster_identifier_is_a_setting_and_only_its_change_replaces_the_provider():
    base = plan_of(dev_config())
    moved = plan_of(set_path(dev_config(), "kubernetes.context", "other-context"))
    change = diff_plans(base, moved).get(PROVIDER, "k8s")
    assert change is not None and change.action == UPDATE  # same cluster identity: updated, nothing replaced
    renamed = plan_of(set_path(dev_config(), "kubernetes.clusterIdentifier", "dc2-gpu"))
    assert renamed.by_name("k8s").inputs["clusterIdentifier"] == "dc2-gpu"
    diff = diff_plans(base, renamed)
    assert diff.get(PROVIDER, "k8s").action == REPLACE
    assert all(c.action == REPLACE for c in diff.changes if c.type.startswith("kubernetes:"))


def test_an_explicit_kubeconfig_reaches_the_provider_only_as_a_secret():
    cfg = dev_config()
    kube = {**cfg.pop("kubernetes"), "kubeconfig": "apiVersion: v1\nkind: Config\n"}
    plan = plan_of(cfg, secrets={"kubernetes": kube})
    assert plan.by_name("k8s").inputs["kubeconfig"] == "[secret]"


# --------------------------------------------------------------------------- 4. nodes exist
def test_every_declared_node_is_read_and_the_label_job_waits_for_every_read(dev_plan):
    # The node's Lease (kube-node-lease/<node>, kept by its kubelet, owned by the Node): it exists
    # exactly when a Node with a kubelet does, and its state is a few hundred bytes, not the Node's.
    assert [(r["type"], r["id"]) for r in dev_plan.reads if r["type"] == LEASE] == [
        (LEASE, "kube-node-lease/gpu-dev-1"),
        (LEASE, "kube-node-lease/gpu-dev-2"),
    ]
    assert not [r for r in dev_plan.reads if r["type"] == "kubernetes:core/v1:Node"]
    prod = plan_stack_file("prod")
    nodes = [f"gpu-prod-h200-{i}" for i in (1, 2, 3)]
    assert [r["id"] for r in prod.reads if r["type"] == LEASE] == [f"kube-node-lease/{n}" for n in nodes]
    # One label Job for every node, after every node's read (staging's A100 gets a label, the L40S none).
    staging = plan_stack_file("staging")
    assert not staging.of_type("kubernetes:core/v1:NodePatch")
    job = staging.by_name("gpu-operator-node-labels-job")
    assert {"node-gpu-stg-a100-1", "node-gpu-stg-l40s-1"} <= set(job.depends_on)
    table = staging.by_name("gpu-operator-node-labels-table").inputs["data"]["nodes"]
    assert table == "gpu-stg-a100-1 nvidia.com/device-plugin.config=none\ngpu-stg-l40s-1\n"


def test_the_offline_read_answers_with_the_object_asked_for():
    assert runtime.read_state("kubernetes:core/v1:Node", "gpu-1") == {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "gpu-1"},
    }
    assert runtime.read_state("kubernetes:apps/v1:Deployment", "ns/web")["metadata"] == {"name": "web", "namespace": "ns"}


MISSPELT = """
import sys
from gpu_stack.offline import fast_monitor, runtime
from gpu_stack.offline.runner import PROJECT_DIR, run_program
from gpu_stack.config.stack_files import read_stack

cluster = {"gpu-prod-h200-1", "gpu-prod-h200-2"}   # gpu-prod-h200-3 is misspelt in the stack
original = runtime.EchoMocks.new_resource
def new_resource(self, args):
    # Stands in for the provider's read: a node the cluster does not have is "not found".
    if args.resource_id and args.typ == "kubernetes:coordination.k8s.io/v1:Lease" and args.resource_id.split("/")[-1] not in cluster:
        raise Exception("resource '%s' does not exist" % args.resource_id)
    return original(self, args)
runtime.EchoMocks.new_resource = new_resource
recorded = []
register = fast_monitor.RecordingMonitor.RegisterResource
def keep(self, request):
    recorded.append(request.name)
    return register(self, request)
fast_monitor.RecordingMonitor.RegisterResource = keep
try:
    run_program(read_stack(PROJECT_DIR, "prod"), PROJECT_DIR)
except Exception as exc:
    print("FAILED:", exc)
print("LABELLED:", sorted(n for n in recorded if "node-labels" in n and n != "node-labels"))
"""


def test_a_node_missing_from_the_cluster_fails_before_the_label_job_is_registered():
    proc = subprocess.run([sys.executable, "-c", MISSPELT], capture_output=True, text=True, cwd=PROJECT_DIR, timeout=300)
    assert "FAILED: resource 'kube-node-lease/gpu-prod-h200-3' does not exist" in proc.stdout, proc.stdout + proc.stderr
    # No label is applied: the Job waits for every read (its RBAC objects wait for nothing).
    assert "gpu-operator-node-labels-job" not in proc.stdout.split("LABELLED:")[1]


# --------------------------------------------------------------------------- 5./6. Jobs, options
def test_any_change_of_a_validation_job_plans_as_a_replacement(dev_plan):
    for job in dev_plan.of_type(JOB):  # the validation Jobs and the label Job
        assert job.options["replaceOnChanges"] == ["*"]
        assert job.options["deleteBeforeReplace"] is True
    for path, value in (("validation.ttlSecondsAfterFinished", 3600), ("validation.timeoutSeconds", 900)):
        edited = plan_of(set_path(dev_config(), path, value))
        diff = diff_plans(dev_plan, edited)
        jobs = [c for c in diff.of_type(JOB) if c.name.startswith("validation-")]
        assert len(jobs) == len([j for j in dev_plan.of_type(JOB) if j.name.startswith("validation-")]), path
        assert all(c.action == REPLACE for c in jobs), path
        # The Kubernetes name covers every field; the old Job is deleted before the new one is created.
        assert all("metadata.name changed" in c.reasons for c in jobs), path
        assert all(any("deleted before" in n for n in c.notes) for c in jobs), path


def test_a_job_name_covers_labels_and_annotations_too(monkeypatch, dev_plan):
    from gpu_stack.design.validation import manifests

    monkeypatch.setattr(manifests, "VALIDATION_LABELS", {**manifests.VALIDATION_LABELS, "team": "gpu"})
    edited = plan_of(dev_config())
    before = {j.name: j.inputs["metadata"]["name"] for j in dev_plan.of_type(JOB) if j.name.startswith("validation-")}
    after = {j.name: j.inputs["metadata"]["name"] for j in edited.of_type(JOB) if j.name.startswith("validation-")}
    assert before.keys() == after.keys() and all(before[k] != after[k] for k in before)


def test_options_the_providers_ignore_or_set_themselves_are_gone(dev_plan):
    release = dev_plan.by_name("gpu-operator-release")
    assert "customTimeouts" not in release.options and release.inputs["timeout"] >= 600
    for command in dev_plan.of_type("command:remote:Command"):
        assert "customTimeouts" not in command.options
        # The launcher bounds the script itself (`timeout -k 30 <ssh.timeoutSeconds>`).
        assert command.inputs["create"].split()[5] == "1200"
        # Only the one summary line (stderr) in the log; stdout is the exported preflight line.
        assert command.inputs["logging"] == "stderr"


def test_a_failing_node_command_reports_the_step_and_the_last_lines_not_the_script(tmp_path: Path, dev_plan):
    from gpu_stack.design.node_prep import REMOTE_PATH, launch_string, launch_values, script_hash, script_text

    command = dev_plan.by_name("node-prep-gpu-dev-1").inputs
    # The real launcher in front of a body that fails after 200 lines of package-manager noise.
    launcher = script_text().split("\nset -euo pipefail\n", 1)[0]
    script = launcher + (
        '\nlog() { printf "gpu-stack[gpu-dev-1]: %s\\n" "$*" >&2; }\n'
        'log "step: preflight"\nfor i in $(seq 1 200); do echo "apt line $i" >&2; done\n'
        'log "step: toolkit"\nlog "ERROR: toolkit: the package repository is unreachable"\nexit 1\n'
    )
    (tmp_path / REMOTE_PATH).write_text(script)
    create = launch_string(launch_values(command["create"]), script_hash(script), 1200)
    proc = subprocess.run(
        ["sh", "-c", create], capture_output=True, text=True, cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp_path)}, timeout=60,
    )
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert lines[0].startswith("gpu-stack: node preparation of gpu-dev-1 failed in step toolkit (exit 1); last 20 lines")
    assert len(lines) == 21 and lines[-1].endswith("ERROR: toolkit: the package repository is unreachable")
    assert "apt line 1\n" not in proc.stderr
    # What pulumi-command quotes in its error is this one line, not the 29 KB script.
    assert len(command["create"]) < 1000 and len(script_text()) > 10_000


# --------------------------------------------------------------------------- 8. the plan itself
def test_the_plan_json_is_the_same_under_any_hash_seed():
    outs = []
    for seed in ("1", "4242"):
        proc = subprocess.run(
            [sys.executable, "-m", "gpu_stack", "plan", "--stack", "prod", "--format", "json"],
            capture_output=True, text=True, cwd=PROJECT_DIR, env={**os.environ, "PYTHONHASHSEED": seed}, timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout)
    assert outs[0] == outs[1]
    names = [r["name"] for r in json.loads(outs[0])["resources"]]
    # the platform component first, its provider next, then every resource after its parent
    assert names[:2] == ["gpu-stack", "k8s"]
    parents = {r["name"]: r["parent"] for r in json.loads(outs[0])["resources"]}
    assert all(p is None or names.index(p) < names.index(n) for n, p in parents.items())


def test_outputs_unknown_during_a_preview_are_shown_as_unknown(dev_plan):
    assert dev_plan.outputs["nodePreflight"] == {"gpu-dev-1": UNKNOWN, "gpu-dev-2": UNKNOWN}
    assert dev_plan.outputs["chartVersion"] == "v25.10.1"
    text = json.dumps(dev_plan.to_json())
    assert '"nodePreflight": {"gpu-dev-1": "[unknown]"' in text
