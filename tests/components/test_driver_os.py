"""The operator's ClusterPolicy driver supports one OS per cluster (issue 33 item 10): nodes whose
preflight reports differ in OS are refused where the reports are read, before the release is
registered, with the way out; nodes of one OS, or a host driver, go on."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpu_stack.config.cluster import DriverSettings
from gpu_stack.design.node_prep import PREFLIGHT_PREFIX, mixed_os_problem, one_driver_os, os_tag
from gpu_stack.offline.runner import PROJECT_DIR

from ..helpers import dev_config, plan_of


def line(node: str, os_field: str) -> str:
    return PREFLIGHT_PREFIX + json.dumps({"node": node, "ok": True, "os": os_field})


def test_the_preflight_os_is_tagged_as_the_operator_tags_the_driver_image():
    assert os_tag("ubuntu 22.04") == "ubuntu22.04" and os_tag("rhel 9.6") == "rhel9.6"


def test_nodes_of_two_oses_are_refused_with_the_way_out():
    problem = mixed_os_problem({
        "gpu-a": line("gpu-a", "ubuntu 22.04"), "gpu-b": line("gpu-b", "ubuntu 24.04"), "gpu-c": line("gpu-c", "ubuntu 22.04"),
    })
    assert problem is not None
    assert "finds 2 OSes on the GPU nodes (ubuntu22.04: gpu-a, gpu-c; ubuntu24.04: gpu-b)" in problem
    assert "one OS per cluster" in problem
    assert "driver.placement: host" in problem and "NVIDIADriver CRD" in problem


def test_a_large_fleet_is_named_in_short_and_host_text_is_escaped():
    lines = {f"gpu-{i:03}": line(f"gpu-{i:03}", "ubuntu 22.04") for i in range(500)}
    lines["odd"] = line("odd", "evil\x1b[31m 1")
    problem = mixed_os_problem(lines)
    assert problem is not None and "gpu-000, gpu-001, gpu-002 and 497 more" in problem
    assert "\x1b" not in problem and len(problem) < 1000


def test_one_os_or_no_report_is_no_problem():
    assert mixed_os_problem({"a": line("a", "ubuntu 22.04"), "b": line("b", "ubuntu 22.04")}) is None
    # A node without a report (its command failed, or an older script) decides nothing.
    assert mixed_os_problem({"a": line("a", "ubuntu 22.04"), "b": None, "c": "GPU_STACK_PREFLIGHT {not json"}) is None


def test_only_the_operators_driver_needs_one_os():
    assert one_driver_os(DriverSettings(placement="operator"))
    assert not one_driver_os(DriverSettings(placement="host"))


# The program under mocks, with each node command answering a preflight line for its node's OS
# (as pulumi-command returns the script's stdout); what gets registered is recorded.
PROGRAM = """
import json, sys
from google.protobuf import struct_pb2
from pulumi.runtime.proto import resource_pb2
from gpu_stack.offline import fast_monitor
from gpu_stack.offline.runner import PROJECT_DIR, run_program
from tests.helpers import dev_config, stack_config

OS = json.loads(sys.argv[1])
cfg = dev_config()
cfg["driver"] = {"placement": sys.argv[2]}
register = fast_monitor.RecordingMonitor.RegisterResource
recorded = []
def answer(self, request):
    recorded.append(request.name)
    resp = register(self, request)
    node = request.name[len("node-prep-"):]
    if request.type == "command:remote:Command" and node in OS:
        state = struct_pb2.Struct()
        state.CopyFrom(resp.object)
        report = {"node": node, "ok": True, "os": OS[node]}
        state.fields["stdout"].string_value = "GPU_STACK_PREFLIGHT " + json.dumps(report) + "\\n"
        return resource_pb2.RegisterResourceResponse(urn=resp.urn, id=resp.id, object=state)
    return resp
fast_monitor.RecordingMonitor.RegisterResource = answer
try:
    run_program(stack_config(cfg), PROJECT_DIR)
except Exception as exc:
    print("FAILED:", exc)
print("REGISTERED:", json.dumps(sorted(recorded)))
"""


def run_with_oses(oses: dict[str, str], placement: str = "operator") -> tuple[str, list[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM, json.dumps(oses), placement],
        capture_output=True, text=True, cwd=PROJECT_DIR, timeout=300,
    )
    out, _, registered = proc.stdout.partition("REGISTERED: ")
    assert registered, proc.stdout + proc.stderr
    return out, json.loads(registered)


@pytest.fixture(scope="module")
def dev_nodes() -> list[str]:
    return [n["name"] for n in dev_config()["nodes"]]


def test_the_release_is_never_registered_when_the_operator_driver_nodes_differ_in_os(dev_nodes):
    assert len(dev_nodes) >= 2
    oses = dict.fromkeys(dev_nodes, "ubuntu 22.04") | {dev_nodes[-1]: "ubuntu 24.04"}
    out, registered = run_with_oses(oses)
    assert "FAILED: gpu-stack:driver.placement = 'operator', but the node preflight finds 2 OSes" in out, out
    assert f"ubuntu24.04: {dev_nodes[-1]}" in out
    assert "gpu-operator-release" not in registered
    assert all(f"node-prep-{n}" in registered for n in dev_nodes)  # the nodes were prepared, then it stopped


def test_nodes_of_one_os_go_on_to_the_release(dev_nodes):
    out, registered = run_with_oses(dict.fromkeys(dev_nodes, "ubuntu 22.04"))
    assert "FAILED" not in out and "gpu-operator-release" in registered


def test_a_host_driver_may_run_on_nodes_of_several_oses(dev_nodes):
    out, registered = run_with_oses({n: f"ubuntu {22 + 2 * i}.04" for i, n in enumerate(dev_nodes)}, placement="host")
    assert "FAILED" not in out and "gpu-operator-release" in registered


def test_the_check_leaves_the_release_dependencies_of_the_plan_as_they_were():
    cfg = dev_config()
    cfg["driver"] = {"placement": "operator"}
    release = plan_of(cfg).by_name("gpu-operator-release")
    assert {f"node-prep-{n['name']}" for n in cfg["nodes"]} <= set(release.depends_on)
