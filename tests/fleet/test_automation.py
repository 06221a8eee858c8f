"""The Automation API runner, run by the real SDK (pulumi.automation 3.259.0) against a stand-in CLI
(tests/fleet/fake_pulumi.py): what a step means is taken from the SDK's typed errors and the
engine's events, not from the CLI's text; secrets kept out of outputs; a missing CLI said in one
line. The engine itself: tests/e2e/test_fleet.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pulumi.automation import OutputValue

from gpu_stack.fleet.automation import AutomationRunner, EngineUnavailable, _outputs, pulumi_command

FAKE = Path(__file__).with_name("fake_pulumi.py")
JOB = "urn:pulumi:dev::gpu-stack::gpu-stack:index:ValidationSuite$kubernetes:batch/v1:Job::validation-dcgm-metrics"
PROVIDER = "urn:pulumi:dev::gpu-stack::pulumi:providers:kubernetes::k8s"
LEASE = "urn:pulumi:dev::gpu-stack::kubernetes:coordination.k8s.io/v1:Lease::node-k3s-gpu-2"
SSH = "urn:pulumi:dev::gpu-stack::gpu-stack:index:NodePreparation$command:remote:Command::node-a-preflight"


def fake_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: dict[str, Any]) -> Path:
    """A release-like folder (bin/pulumi) whose CLI is fake_pulumi.py with `script`."""
    (tmp_path / "cli" / "bin").mkdir(parents=True)
    cli = tmp_path / "cli" / "bin" / "pulumi"
    cli.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    cli.chmod(0o755)
    (tmp_path / "script.json").write_text(json.dumps(script))
    monkeypatch.setenv("FAKE_PULUMI_DIR", str(tmp_path))
    return tmp_path / "cli"


def _diag(message: str, severity: str, urn: str) -> dict[str, Any]:
    return {"diagnosticEvent": {"message": message + "\n", "color": "never", "severity": severity, "urn": urn}}


def _summary(**changes: int) -> dict[str, Any]:
    return {"summaryEvent": {"maybeCorrupt": False, "durationSeconds": 1, "resourceChanges": changes, "PolicyPacks": {}}}


def _runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: dict[str, Any]) -> AutomationRunner:
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: gpu-stack\nruntime: python\n")
    return AutomationRunner(project, cli=str(fake_cli(tmp_path, monkeypatch, script)))


def test_a_secret_output_is_kept_as_a_placeholder_never_its_value():
    outputs = _outputs({"capacity": OutputValue([{"node": "TOTAL"}], False), "kubeconfig": OutputValue("apiVersion: v1 token", True)})
    assert outputs == {"capacity": [{"node": "TOTAL"}], "kubeconfig": "[secret]"}


def test_the_error_is_the_engines_error_diagnostics_not_the_log(tmp_path, monkeypatch):
    runner = _runner(tmp_path, monkeypatch, {"dev": {"up": {
        "stdout": ["Updating (dev):", "  kubernetes:batch/v1:Job validation-dcgm-metrics creating (3s)",
                   "Resources:", "    38 unchanged", "error: update failed"],
        "events": [_diag("check dcgm-metrics failed: no DCGM_FI_DEV_GPU_TEMP series", "error", JOB),
                   _diag("update failed", "error", "urn:pulumi:dev::gpu-stack::pulumi:pulumi:Stack::gpu-stack-dev")],
        "code": 255,
    }}})
    result = runner.up("dev")
    assert not result.ok and not result.unreachable and not result.cancelled
    assert result.error == "check dcgm-metrics failed: no DCGM_FI_DEV_GPU_TEMP series | update failed"


def test_an_up_that_succeeds_gives_the_engines_changes_and_the_stack_outputs(tmp_path, monkeypatch):
    runner = _runner(tmp_path, monkeypatch, {"dev": {"up": {"events": [_summary(update=1, same=30)]},
                                                     "outputs": {"validationJobs": {"cuda": "cuda-1"}}}})
    assert runner.cli_version == "3.200.0"  # the version the SDK read (`pulumi version`): part of the resume key
    result = runner.up("dev")
    assert result.ok and result.outputs == {"validationJobs": {"cuda": "cuda-1"}} and result.changes == {"update": 1}


@pytest.mark.parametrize(("events", "code"), [
    # pulumi-kubernetes 4.25.0's Configure of a cluster it cannot reach: a warning, and a preview with unknowns
    ([_diag("configured Kubernetes cluster is unreachable: unable to load schema information from the API server: "
            'Get "https://127.0.0.1:33445/openapi/v2": dial tcp 127.0.0.1:33445: connect: connection refused',
            "warning", PROVIDER), _summary(same=40)], 0),
    # its read of a resource of a stack whose cluster is gone (seen in tests/e2e/test_fleet.py)
    ([_diag("Preview failed: failed to read resource state due to unreachable cluster. If the cluster was deleted, "
            "you can remove this resource", "error", LEASE)], 255),
    # its check of a resource against an API server it cannot reach, and the Helm release's create
    ([_diag(' Kubernetes API server at "https://127.0.0.1:6443" is unreachable. It\'s possible that the URL or '
            "authentication information in your kubeconfig is incorrect", "error",
            "urn:pulumi:dev::gpu-stack::kubernetes:core/v1:Namespace::gpu-operator")], 255),
    ([_diag("can't create Helm Release with unreachable cluster: unable to load schema information", "error",
            "urn:pulumi:dev::gpu-stack::gpu-stack:index:Operator$kubernetes:helm.sh/v3:Release::gpu-operator")], 255),
])
def test_an_unreachable_cluster_is_what_the_kubernetes_providers_diagnostics_say(tmp_path, monkeypatch, events, code):
    runner = _runner(tmp_path, monkeypatch, {"dev": {"preview": {"events": events, "code": code}}})
    result = runner.preview("dev")
    assert not result.ok and result.unreachable
    assert "unreachable" in (result.error or "")


def test_a_node_that_refuses_ssh_is_a_failure_not_an_unreachable_cluster(tmp_path, monkeypatch):
    # the old runner matched "connection refused" anywhere in the CLI's text: under onUnreachable: skip
    # a node whose sshd is down was skipped as if its cluster were
    message = "ssh: dial tcp 10.0.0.5:22: connect: connection refused"
    runner = _runner(tmp_path, monkeypatch, {"dev": {"preview": {
        "stdout": [f"    command:remote:Command node-a-preflight  error: {message}"],
        "events": [_diag(message, "error", SSH)], "code": 255,
    }}})
    result = runner.preview("dev")
    assert not result.ok and not result.unreachable and result.error == message
    # nor is a node script's own line about a cluster: only the kubernetes provider's diagnostics say that
    (tmp_path / "again").mkdir()
    runner = _runner(tmp_path / "again", monkeypatch, {"dev": {"up": {
        "events": [_diag("node-prep: the node's own kubelet says its cluster is unreachable", "error", SSH)], "code": 255,
    }}})
    assert not runner.up("dev").unreachable


def test_a_stack_missing_from_the_backend_is_said_from_the_sdks_stack_not_found_error(tmp_path, monkeypatch):
    runner = _runner(tmp_path, monkeypatch, {"missing": ["dev"]})
    result = runner.preview("dev")
    assert not result.ok and not result.unreachable
    assert result.error is not None and result.error.startswith("stack dev does not exist in this backend")
    assert "`pulumi stack init dev`" in result.error


def test_a_locked_stack_is_said_from_the_sdks_concurrent_update_error_with_the_way_out(tmp_path, monkeypatch):
    runner = _runner(tmp_path, monkeypatch, {"dev": {"preview": {"code": 255, "stderr": [
        ("error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) to end or delete "
        "the lock file with `pulumi cancel`."),
    ]}}})
    result = runner.preview("dev")
    assert not result.ok and result.error is not None
    assert result.error.startswith("the stack is currently locked by another update") and "`pulumi cancel -s dev --yes`" in result.error


def test_a_missing_cli_is_one_line_naming_it(tmp_path):
    (tmp_path / "nowhere").mkdir()
    with pytest.raises(EngineUnavailable, match=r"the Pulumi CLI \(.*nowhere/pulumi\) cannot be run: no pulumi there"):
        pulumi_command(str(tmp_path / "nowhere" / "pulumi"))
