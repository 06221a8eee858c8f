"""The free-capacity gate (config/validation/free-capacity.sh) against a stub kubectl: it passes
only when each sampled node has free what the validation pods will request (allocatable minus the
requests of the non-terminated pods bound to it), and otherwise fails naming the node, what is
free, what others hold and what the sample needs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .test_validation_payloads import KUBECTL, fake_node, fake_nodes, run, stubs, table, verdict  # noqa: F401

# `kubectl get pods --all-namespaces --field-selector=spec.nodeName=N,... -o jsonpath=...`: as the
# API server answers it, only the pods bound to N, one line each: every container's requests as
# compact JSON (empty when it has none), tab-separated. Each list is logged (FAKE_LISTS).
PODS_BRANCH = r'''
if args[:2] == ["get", "pods"]:
    (selector,) = [a.split("=", 1)[1] for a in args if a.startswith("--field-selector=")]
    terms = selector.split(",")
    assert "--all-namespaces" in args and "status.phase!=Succeeded" in terms and "status.phase!=Failed" in terms
    (wanted,) = [t.split("=", 1)[1] for t in terms if t.startswith("spec.nodeName=")]
    with open(os.environ["FAKE_PODS"] + ".lists", "a") as log:
        log.write(wanted + "\n")
    for pod in json.load(open(os.environ["FAKE_PODS"])):
        if pod.get("node") != wanted:
            continue
        cells = [json.dumps(c, separators=(",", ":"), sort_keys=True) if c else "" for c in pod["requests"]]
        print("".join(c + "\t" for c in cells))
    sys.exit(0)
'''


def _kubectl_with_pods(stubs_dir: Path) -> None:
    text = KUBECTL.replace("{python}", sys.executable, 1)
    marker = 'if args[:2] != ["get", "node"]'
    path = stubs_dir / "bin" / "kubectl"
    path.write_text(text.replace(marker, PODS_BRANCH.strip("\n") + "\n" + marker, 1))
    path.chmod(0o755)


def _pods(stubs_dir: Path, pods: list[dict]) -> str:
    path = stubs_dir / "pods.json"
    path.write_text(json.dumps(pods))
    return str(path)


def test_passes_when_the_sample_fits_in_what_is_free(stubs):
    _kubectl_with_pods(stubs)
    nodes = fake_node(stubs, ({"nvidia.com/gpu": "8"}, {}))
    pods = _pods(stubs, [
        {"node": "gpu-dev-1", "requests": [{"cpu": "1", "nvidia.com/gpu": "3"}, {}]},
        {"node": "other-node", "requests": [{"nvidia.com/gpu": "8"}]},
        {"requests": [{"nvidia.com/gpu": "4"}]},  # pending, not bound: holds nothing yet
    ])
    env = {"FAKE_NODES": nodes, "FAKE_PODS": pods, "EXPECTED_FILE": table(stubs, "gpu-dev-1 nvidia.com/gpu=5"), "DEADLINE_SECONDS": 0}
    status, out, _ = run(stubs, "free-capacity.sh", env)
    assert status == 0, out
    assert verdict(out).startswith("PASS validation: every sampled node has the GPU capacity")


def test_fails_naming_the_busy_node_and_what_the_sample_needs(stubs):
    _kubectl_with_pods(stubs)
    nodes = fake_node(stubs, ({"nvidia.com/gpu": "8"}, {}))
    pods = _pods(stubs, [{"node": "gpu-dev-1", "requests": [{"nvidia.com/gpu": "6"}]}])
    env = {
        "FAKE_NODES": nodes, "FAKE_PODS": pods, "EXPECTED_FILE": table(stubs, "gpu-dev-1 nvidia.com/gpu=3"),
        "DEADLINE_SECONDS": 0, "CHECK_NAME": "free-capacity",
    }
    status, out, term = run(stubs, "free-capacity.sh", env)
    assert status == 1
    expected = (
        "FAIL free-capacity: node gpu-dev-1 has 2 of 8 nvidia.com/gpu free (6 requested by other pods), "
        "the validation sample needs 3"
    )
    assert verdict(out).startswith(expected) and term.startswith(expected)
    assert "gpu-stack:validation.podBudget" in term and "(waited 0s)" in term


def test_a_node_that_does_not_exist_is_named(stubs):
    _kubectl_with_pods(stubs)
    nodes = fake_node(stubs, ({"nvidia.com/gpu": "8"}, {}))
    pods = _pods(stubs, [])
    env = {"FAKE_NODES": nodes, "FAKE_PODS": pods, "EXPECTED_FILE": table(stubs, "gpu-dev-9 nvidia.com/gpu=1"), "DEADLINE_SECONDS": 0}
    status, out, _ = run(stubs, "free-capacity.sh", env)
    assert status == 1
    assert 'node gpu-dev-9 cannot be read: Error from server (NotFound): nodes "gpu-dev-9" not found' in verdict(out)


def test_each_poll_lists_only_the_pods_of_the_sampled_nodes(stubs):
    # A cluster's every pod, listed every poll under the Job's 128 Mi limit, would not fit at scale:
    # one list per sampled node, filtered by the API server (spec.nodeName).
    _kubectl_with_pods(stubs)
    nodes = fake_nodes(stubs, {"gpu-dev-1": ({"nvidia.com/gpu": "8"}, {}), "gpu-dev-2": ({"nvidia.com/gpu": "4"}, {})})
    pods = _pods(stubs, [
        {"node": "gpu-dev-1", "requests": [{"nvidia.com/gpu": "2"}]},
        {"node": "gpu-dev-2", "requests": [{"nvidia.com/gpu": "1"}]},
        *({"node": f"cpu-{i}", "requests": [{"cpu": "1"}]} for i in range(50)),
    ])
    env = {
        "FAKE_NODES": nodes, "FAKE_PODS": pods, "DEADLINE_SECONDS": 0,
        "EXPECTED_FILE": table(stubs, "gpu-dev-1 nvidia.com/gpu=6\ngpu-dev-2 nvidia.com/gpu=3"),
    }
    status, out, _ = run(stubs, "free-capacity.sh", env)
    assert status == 0, out
    assert Path(pods + ".lists").read_text().split() == ["gpu-dev-1", "gpu-dev-2"]
