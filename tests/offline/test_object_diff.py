"""Object-level plan and diff with the real chart, the chart pull into the user cache (a local
repository on 127.0.0.1, never the network), the one-line fallback, and the effects every change
carries."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from gpu_stack.offline.chart import ChartRef, ChartUnavailable, helm_sdk, locate_chart
from gpu_stack.offline.diff import RELEASE, diff_plans, render_markdown, render_text
from gpu_stack.offline.effects import add_objects_and_effects
from gpu_stack.offline.runner import PROJECT_DIR

from ..helpers import (
    CHART_REF,
    committed_project_copy,
    dev_config,
    git,
    helm_sdk_problem,
    needs_reference,
    plan_of,
    reference_dir,
    set_path,
)

CHART = reference_dir() / "chart"
NO_SDK = helm_sdk_problem()


def needs_chart(test):
    """The reference chart and Helm's Go SDK to render it."""
    return needs_reference(CHART_REF)(pytest.mark.skipif(NO_SDK is not None, reason=f"needs helm-python-sdk ({NO_SDK})")(test))


def _cli(*args: str, cwd: Path = PROJECT_DIR, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG")}
    base["PYTHONPATH"] = str(cwd)
    base.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gpu_stack", *args], cwd=cwd, env=base, capture_output=True, text=True, timeout=300
    )


def _edit(repo: Path, stack: str, old: str, new: str) -> None:
    path = repo / f"Pulumi.{stack}.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


# --------------------------------------------------------------------------- the "done when"
@needs_chart
def test_replicas_edit_shows_the_clusterpolicy_field_and_the_device_plugin_roll(tmp_path: Path):
    repo = committed_project_copy(tmp_path)
    _edit(repo, "dev", "    replicas: 4\n", "    replicas: 8\n")
    out = _cli("diff", "--stack", "dev", "--base", "HEAD", "--chart-dir", str(CHART), cwd=repo)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    old_cm = git(repo, "show", "HEAD:Pulumi.dev.yaml")  # the base is what HEAD plans
    assert "replicas: 4" in old_cm
    # The summary leads with the effect on running work.
    assert lines[2] == "Effects on running work:"
    assert lines[3].startswith("  ! rolls the device plugin on 2 nodes (gpu-dev-1, gpu-dev-2)")
    # The object view: one object changes, the ClusterPolicy, in exactly the device plugin's config name.
    start = next(i for i, line in enumerate(lines) if line.startswith("Objects of release gpu-operator-release (rendered with Helm"))
    assert lines[start].endswith("0 to add, 1 to change, 0 to remove (of 32 rendered)")
    assert lines[start + 1] == "  ~ change ClusterPolicy cluster-policy"
    assert lines[start + 2] == "      effect: rolls the device plugin"
    field = lines[start + 3]
    assert field.startswith('      spec.devicePlugin.config.name: "device-plugin-sharing-')
    old_name, new_name = (p.strip().strip('"') for p in field.split(": ", 1)[1].split(" -> "))
    assert old_name != new_name
    assert lines[start + 4] == ""  # nothing else changes in the object
    # The Release's values change carries the same effect, through its ClusterPolicy.
    rel = lines.index("~ update kubernetes:helm.sh/v3:Release gpu-operator-release")
    assert lines[rel + 1] == "    effect: rolls the device plugin (via ClusterPolicy cluster-policy)"
    # No runtime restart, no driver or MIG effect for a replicas edit.
    effects = lines[3 : lines.index("Node commands that re-run: none")]
    assert len(effects) == 1


@needs_chart
def test_without_chart_dir_the_chart_is_pulled_and_a_failed_pull_is_one_line(tmp_path: Path):
    repo = committed_project_copy(tmp_path)
    # The release's repository: a closed port on 127.0.0.1 (no network is touched).
    pulumi_yaml = (repo / "Pulumi.dev.yaml").read_text()
    (repo / "Pulumi.dev.yaml").write_text(
        pulumi_yaml.replace("config:\n", "config:\n  gpu-stack:operator:\n    repository: https://127.0.0.1:9/charts\n", 1)
    )
    git(repo, "commit", "-qam", "local repository")
    _edit(repo, "dev", "    replicas: 4\n", "    replicas: 8\n")
    env = {"GPU_STACK_CHART_PULL": "", "XDG_CACHE_HOME": str(tmp_path / "cache"), "GPU_STACK_CHART_DIR": ""}
    out = _cli("diff", "--stack", "dev", "--base", "HEAD", cwd=repo, env=env)
    assert out.returncode == 0, out.stderr
    notes = [line for line in out.stdout.splitlines() if line.startswith("Objects of release")]
    assert len(notes) == 1
    assert notes[0].startswith(
        "Objects of release gpu-operator-release: not shown: could not pull chart gpu-operator v25.10.1 "
        "from https://127.0.0.1:9/charts ("
    )
    # ... and the values diff carries on, with the effect read from the values.
    assert "        -    name: device-plugin-sharing-" in out.stdout
    assert "  ! rolls the device plugin on 2 nodes (gpu-dev-1, gpu-dev-2)" in out.stdout
    assert "    effect: rolls the device plugin" in out.stdout.splitlines()
    # The same repository in the plan: one line, the plan itself is whole.
    plan = _cli("plan", "--stack", "dev", cwd=repo, env=env)
    assert plan.returncode == 0, plan.stderr
    plan_notes = [line for line in plan.stdout.splitlines() if "not shown" in line]
    assert len(plan_notes) == 1 and plan_notes[0].startswith(notes[0].split(" (", 1)[0])


@needs_chart
def test_the_chart_is_pulled_once_into_the_user_cache(tmp_path: Path, monkeypatch):
    helm = helm_sdk()
    served = tmp_path / "repo"
    served.mkdir()
    helm.package(str(CHART), destination=str(served))
    requests: list[str] = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(served), **kw)

        def log_message(self, *args):
            requests.append(self.path)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    helm.repo_index_generate(str(served), base_url=url)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("GPU_STACK_CHART_PULL", raising=False)
    monkeypatch.delenv("GPU_STACK_CHART_DIR", raising=False)
    try:
        ref = ChartRef(url, "gpu-operator", "v25.10.1")
        first = locate_chart(ref)
        assert first == tmp_path / "cache" / "gpu-stack" / "charts" / ref.cache_dir().parent.name / "gpu-operator-v25.10.1" / "gpu-operator"
        assert (first / "templates" / "clusterpolicy.yaml").exists()
        pulled = len(requests)
        assert any(r.endswith(".tgz") for r in requests)
        assert locate_chart(ref) == first
        assert len(requests) == pulled  # the second time: the cache, no request
        # Another version is not taken from the cache of this one.
        with pytest.raises(ChartUnavailable, match=r"could not pull chart gpu-operator v99\.0\.0"):
            locate_chart(ChartRef(url, "gpu-operator", "v99.0.0"))
    finally:
        server.shutdown()


def test_a_chart_dir_of_another_version_is_not_used_and_pulling_off_says_so(tmp_path: Path, monkeypatch):
    other = tmp_path / "chart"
    other.mkdir()
    (other / "Chart.yaml").write_text("apiVersion: v2\nname: gpu-operator\nversion: v24.9.0\n")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("GPU_STACK_CHART_PULL", "off")
    with pytest.raises(ChartUnavailable, match=r"is not in the cache and pulling is off \(GPU_STACK_CHART_PULL\)"):
        locate_chart(ChartRef("https://127.0.0.1:9", "gpu-operator", "v25.10.1"), other)
    with pytest.raises(ChartUnavailable, match="is not a chart folder"):
        locate_chart(ChartRef("https://127.0.0.1:9", "gpu-operator", "v25.10.1"), tmp_path / "nowhere")


def test_plan_works_without_the_helm_sdk_and_says_what_is_missing(tmp_path: Path):
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "helm_python.py").write_text("raise ImportError('No module named helm_python')\n")
    # Even with a chart at hand (or none: a clone without ../shared), the missing SDK is what is said.
    env = {"PYTHONPATH": f"{blocker}{os.pathsep}{PROJECT_DIR}", "GPU_STACK_CHART_DIR": str(CHART)}
    base = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG")}
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_stack", "plan", "--stack", "dev"],
        cwd=PROJECT_DIR, env={**base, **env}, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    missing = [line for line in proc.stdout.splitlines() if "helm-python-sdk" in line]
    assert missing == [
        ("Objects of release gpu-operator-release: not shown: helm-python-sdk is not available "
        "(ImportError: No module named helm_python); install it with: pip install -r requirements.txt")
    ]
    assert "Resources by type: " in proc.stdout


@needs_chart
def test_plan_lists_the_objects_the_release_creates():
    out = _cli("plan", "--stack", "dev", "--chart-dir", str(CHART))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "Objects of release gpu-operator-release (rendered with Helm): 32" in lines
    assert "  + ClusterPolicy cluster-policy" in lines
    assert "  + Job gpu-operator/gpu-operator-upgrade-crd (hook pre-upgrade)" in lines
    assert "  + CustomResourceDefinition clusterpolicies.nvidia.com" in lines


# --------------------------------------------------------------------------- effects
def _diff(before_cfg, after_cfg, chart: bool = True):
    before, after = plan_of(before_cfg), plan_of(after_cfg)
    diff = diff_plans(before, after, "base", "head")
    add_objects_and_effects(diff, before, after, CHART if chart else Path("/nonexistent-chart"))
    return diff


@needs_chart
def test_markdown_summary_leads_with_the_effects():
    diff = _diff(dev_config(), set_path(dev_config(), "sharing.replicas", 8))
    md = render_markdown(diff)
    effects = md.index("**Effects on running work:**")
    assert effects < md.index("<details>")
    assert "- ⚠️ rolls the device plugin on 2 nodes (gpu-dev-1, gpu-dev-2)" in md
    assert "~ change ClusterPolicy cluster-policy" in md
    assert "#   effect: rolls the device plugin" in md


def _prod():
    from gpu_stack.config.stack_files import read_stack

    return read_stack(PROJECT_DIR, "prod").namespace()


def _staging():
    from gpu_stack.config.stack_files import read_stack

    return read_stack(PROJECT_DIR, "staging").namespace()


@needs_chart
def test_a_mig_label_change_reconfigures_mig_on_that_node_only():
    after = set_path(_prod(), "nodes[2].mig", "inference-balanced")
    diff = _diff(_prod(), after)
    assert diff.effects[0].startswith("reconfigures MIG on 1 node (gpu-prod-h200-3): GPU pods there are evicted")
    rollout = diff.get("kubernetes:batch/v1:Job", "mig-rollout-job")
    assert rollout.effects == ["reconfigures MIG"]


@needs_chart
def test_a_driver_version_change_warns_of_driver_restarts_with_the_upgrade_policy():
    after = set_path(_staging(), "driver.version", "580.95.05")
    after = set_path(after, "driver.upgradePolicy.drain.enable", True)
    diff = _diff(_staging(), after)
    text = render_text(diff)
    assert diff.effects[0] == (
        "upgrades or restarts the driver on 2 nodes (gpu-stg-a100-1, gpu-stg-l40s-1): GPU pods on each node are evicted before its driver reloads; "
        "the operator upgrades 1 node at a time (maxUnavailable 25%): cordon, evict GPU pods, drain, reload the driver"
    )
    assert "      effect: upgrades or restarts the driver" in text.splitlines()
    assert '      spec.driver.version: "580.105.08" -> "580.95.05"' in text.splitlines()
    # The policy alone restarts nothing.
    only_policy = _diff(_staging(), set_path(_staging(), "driver.upgradePolicy.maxParallelUpgrades", 2))
    assert only_policy.effects == []
    assert "      spec.driver.upgradePolicy.maxParallelUpgrades: 1 -> 2" in render_text(only_policy).splitlines()


def test_without_the_chart_the_values_carry_the_driver_warning():
    after = set_path(_staging(), "driver.version", "580.95.05")
    diff = _diff(_staging(), after, chart=False)
    assert diff.effects[0].startswith("upgrades or restarts the driver on 2 nodes")
    assert diff.get(RELEASE, "gpu-operator-release").effects == ["upgrades or restarts the driver"]


def test_a_protected_release_that_would_be_replaced_is_said_first():
    diff = _diff(_prod(), set_path(_prod(), "operator.releaseName", "gpu-operator-2"), chart=False)
    assert diff.effects[0].startswith("replaces a protected resource: gpu-operator-release")
    assert "replaces a protected resource" in diff.get(RELEASE, "gpu-operator-release").effects


@pytest.mark.parametrize("path,value", [("operator.releaseName", "gpu-operator-2"), ("operator.namespace", "gpu-system")])
def test_a_renamed_or_moved_release_says_the_operator_is_reinstalled_old_one_first(path, value):
    # E14: the provider would replace the Release create-before-delete and Helm refuses to adopt
    # the chart's objects the old release owns: the Release is replaced delete-before-replace, and
    # the reviewer is told what that means for running work.
    diff = _diff(_staging(), set_path(_staging(), path, value), chart=False)
    change = diff.get(RELEASE, "gpu-operator-release")
    assert change.action == "replace" and "reinstalls the operator" in change.effects
    (line,) = [e for e in diff.effects if e.startswith("reinstalls the operator")]
    assert "the old release is uninstalled before the new one is installed" in line and "no operator runs" in line
    release = next(r for r in plan_of(set_path(_staging(), path, value)).resources if r.type == RELEASE)
    assert release.options.get("deleteBeforeReplace") is True


def test_node_command_reruns_restart_the_runtime_only_when_its_config_changes():
    runtime = _diff(dev_config(), set_path(dev_config(), "nodes[0].runtime", "docker"), chart=False)
    assert runtime.effects == [
        "restarts the container runtime on 1 node (gpu-dev-1): the kubelet loses its runtime for a moment"
    ]
    count = _diff(dev_config(), set_path(dev_config(), "nodes[0].gpu.count", 4), chart=False)
    assert [c.name for c in count.node_commands] == ["node-prep-gpu-dev-1"]
    assert not any(e.startswith("restarts the container runtime") for e in count.effects)


@needs_chart
def test_objects_added_and_removed_are_listed():
    after = set_path(dev_config(), "operator.nodeFeatureDiscovery", False)
    after = set_path(after, "operator.upgradeCRD", False)
    diff = _diff(dev_config(), after)
    (rel,) = diff.objects
    removed = {c.key for c in rel.changes if c.action == "delete"}
    assert "DaemonSet gpu-operator/gpu-operator-node-feature-discovery-worker" in removed
    assert "Job gpu-operator/gpu-operator-upgrade-crd" in removed
    assert not [c for c in rel.changes if c.action == "create"]
    text = render_text(diff).splitlines()
    assert "  - remove Job gpu-operator/gpu-operator-upgrade-crd (hook pre-upgrade)" in text
    assert "  - remove DaemonSet gpu-operator/gpu-operator-node-feature-discovery-worker" in text
    back = _diff(after, dev_config())
    assert {c.key for c in back.objects[0].changes if c.action == "create"} == removed


def test_reopening_the_gpu_isolation_says_what_it_restarts_and_rolls():
    """toolkit.acceptEnvvarWhenUnprivileged on each path: the operator's toolkit rolls (and restarts
    the runtime); a host toolkit's config.toml is read at every container start (its node command
    re-runs, nothing restarts); without CDI the device plugin changes strategy and rolls."""
    operator = _diff(_prod(), set_path(_prod(), "toolkit.acceptEnvvarWhenUnprivileged", True), chart=False)
    assert any(e.startswith("restarts the container runtime on 3 nodes") for e in operator.effects), operator.effects
    assert not any(e.startswith("rolls the device plugin") for e in operator.effects)

    host = _diff(dev_config(), set_path(dev_config(), "toolkit.acceptEnvvarWhenUnprivileged", True), chart=False)
    assert host.effects == []
    assert [c.name for c in host.node_commands] == ["node-prep-gpu-dev-1", "node-prep-gpu-dev-2"]

    no_cdi = set_path(dev_config(), "toolkit.cdi", False)
    reopened = set_path(set_path(dev_config(), "toolkit.cdi", False), "toolkit.acceptEnvvarWhenUnprivileged", True)
    host_no_cdi = _diff(no_cdi, reopened, chart=False)
    assert [e.split(":")[0] for e in host_no_cdi.effects] == ["rolls the device plugin on 2 nodes (gpu-dev-1, gpu-dev-2)"]
    assert host_no_cdi.get(RELEASE, "gpu-operator-release").effects == ["rolls the device plugin"]
