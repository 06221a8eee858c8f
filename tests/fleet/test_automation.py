"""The Automation API runner's pure parts: secrets kept out of outputs, the engine's error lines,
an unreachable cluster recognised, a missing CLI said in one line (the engine itself: tests/e2e/test_fleet.py)."""

from __future__ import annotations

import pytest
from pulumi.automation import OutputValue

from gpu_stack.fleet.automation import UNREACHABLE, EngineUnavailable, _error_text, _outputs, pulumi_command


def test_a_secret_output_is_kept_as_a_placeholder_never_its_value():
    outputs = _outputs({"capacity": OutputValue([{"node": "TOTAL"}], False), "kubeconfig": OutputValue("apiVersion: v1 token", True)})
    assert outputs == {"capacity": [{"node": "TOTAL"}], "kubeconfig": "[secret]"}


def test_the_error_is_the_engines_error_lines_not_the_whole_log():
    log = ["Updating (k3s-canary):", "  kubernetes:batch/v1:Job validation-dcgm-metrics creating (3s)",
           "  kubernetes:batch/v1:Job validation-dcgm-metrics **creating failed** error: check dcgm-metrics failed",
           "Resources:", "    38 unchanged"]
    text = _error_text(RuntimeError("code: 255"), log)
    assert "check dcgm-metrics failed" in text and "Resources:" not in text and "38 unchanged" not in text


@pytest.mark.parametrize("line", [
    "warning: configured Kubernetes cluster is unreachable: unable to load schema information",
    'Get "https://127.0.0.1:33445/version": dial tcp 127.0.0.1:33445: connect: connection refused',
    # pulumi-kubernetes 4.25.0's preview of a stack whose cluster is gone (seen in tests/e2e/test_fleet.py)
    ("kubernetes:coordination.k8s.io/v1:Lease node-k3s-gpu-2  error: Preview failed: failed to read resource "
    "state due to unreachable cluster. If the cluster was deleted, you can remove this resource"),
])
def test_an_unreachable_cluster_is_recognised(line):
    assert UNREACHABLE.search(line)
    assert not UNREACHABLE.search("error: check cuda-smoke failed: FAIL simulated")


def test_a_missing_cli_is_one_line_naming_it(tmp_path):
    (tmp_path / "nowhere").mkdir()
    with pytest.raises(EngineUnavailable, match=r"the Pulumi CLI \(.*nowhere/pulumi\) cannot be run: no pulumi there"):
        pulumi_command(str(tmp_path / "nowhere" / "pulumi"))
