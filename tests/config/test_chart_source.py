"""The operator chart from a local folder, a packaged .tgz, an https repository or an oci:// registry:
what the release is given, where a relative path leads, what is refused before anything is
registered, and the offline object view rendering the same local copy with pulling off."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from gpu_stack.offline.chart import ChartRef, locate_chart
from gpu_stack.offline.objects import plan_objects, release_renderer
from gpu_stack.offline.runner import PROJECT_DIR, PlanError

from ..helpers import CHART_REF, assert_refused, dev_config, helm_sdk_problem, needs_reference, plan_of, reference_dir

CHART = reference_dir() / "chart"
NO_SDK = helm_sdk_problem()
needs_chart = needs_reference(CHART_REF)


def needs_helm(test):
    """The reference chart and Helm's Go SDK to render it."""
    return needs_chart(pytest.mark.skipif(NO_SDK is not None, reason=f"needs helm-python-sdk ({NO_SDK})")(test))


def _release(cfg: dict) -> dict:
    return plan_of(cfg).by_name("gpu-operator-release").inputs


def _with_operator(**operator: object) -> dict:
    cfg = dev_config()
    cfg["operator"] = {**(cfg.get("operator") or {}), **operator}
    return cfg


def _package(src: Path, dest: Path, skip: tuple[str, ...] = ()) -> Path:
    """`helm package` layout: every file under `gpu-operator/` in a gzipped tar."""
    with tarfile.open(dest, "w:gz") as tar:
        for path in sorted(src.rglob("*")):
            rel = path.relative_to(src)
            if path.is_file() and not any(rel.as_posix().startswith(s) for s in skip):
                tar.add(path, arcname=f"gpu-operator/{rel.as_posix()}")
    return dest


# --------------------------------------------------------------------------- what the release gets
def test_the_default_is_the_https_repository():
    inputs = _release(dev_config())
    assert inputs["chart"] == "gpu-operator"
    assert inputs["repositoryOpts"] == {"repo": "https://helm.ngc.nvidia.com/nvidia"}


def test_an_oci_registry_is_the_chart_reference_itself_without_a_repo():
    inputs = _release(_with_operator(repository="oci://registry.example.internal/charts/nvidia/"))
    assert inputs["chart"] == "oci://registry.example.internal/charts/nvidia/gpu-operator"
    assert inputs["version"] == "v25.10.1"
    assert not inputs.get("repositoryOpts")


@needs_chart
def test_a_local_folder_is_given_by_absolute_path_with_no_repository_options():
    inputs = _release(_with_operator(chartPath=str(CHART)))
    assert inputs["chart"] == str(CHART)
    assert inputs["version"] == "v25.10.1"
    assert not inputs.get("repositoryOpts")


@needs_chart
def test_a_relative_path_is_taken_from_the_project_folder_whatever_the_cwd(tmp_path: Path, monkeypatch):
    relative = os.path.relpath(CHART, PROJECT_DIR)
    cfg = _with_operator(chartPath=relative)
    # Joined to the project folder and cleaned lexically, as the provider's filepath.Abs does (a
    # symlinked ../shared stays as written, not resolved to its target).
    expected = os.path.normpath(PROJECT_DIR.resolve() / relative)
    seen = set()
    for cwd in (PROJECT_DIR, tmp_path, CHART / "templates"):
        monkeypatch.chdir(cwd)
        plan = plan_of(cfg)
        seen.add(json.dumps(plan.to_json(), sort_keys=True))
        assert plan.by_name("gpu-operator-release").inputs["chart"] == expected
    assert len(seen) == 1


@needs_chart
def test_the_cli_plan_of_a_project_elsewhere_resolves_against_that_project(tmp_path: Path):
    """A project folder with its own chart copy: `--project-dir` from two working directories plans
    the same chart path, inside that project."""
    project = tmp_path / "proj"
    project.mkdir()
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy2(PROJECT_DIR / name, project / name)
    shutil.copytree(CHART, project / "charts" / "gpu-operator")
    (project / "Pulumi.local.yaml").write_text(
        "config:\n  gpu-stack:operator:\n    chartPath: charts/gpu-operator\n"
        "  gpu-stack:nodes:\n    - name: gpu-1\n      gpu:\n        model: L4\n        count: 1\n"
    )
    outs = []
    for cwd in (project, tmp_path, Path("/")):
        env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG")}
        env["PYTHONPATH"] = str(PROJECT_DIR)
        proc = subprocess.run(
            [sys.executable, "-m", "gpu_stack", "--project-dir", str(project), "plan", "--stack", "local", "--format", "json"],
            cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        outs.append(proc.stdout)
    assert outs[0] == outs[1] == outs[2]
    release = next(r for r in json.loads(outs[0])["resources"] if r["name"] == "gpu-operator-release")
    assert release["inputs"]["chart"] == str((project / "charts" / "gpu-operator").resolve())


@needs_chart
def test_a_packaged_chart_is_accepted(tmp_path: Path):
    tgz = _package(CHART, tmp_path / "gpu-operator-v25.10.1.tgz")
    assert _release(_with_operator(chartPath=str(tgz)))["chart"] == str(tgz)


# --------------------------------------------------------------------------- refused before registering
def test_a_missing_path_is_refused_naming_the_key_and_where_it_looked(tmp_path: Path):
    assert_refused(_with_operator(chartPath="charts/nowhere"), "gpu-stack:operator.chartPath = 'charts/nowhere'")
    assert_refused(_with_operator(chartPath="charts/nowhere"), f"{PROJECT_DIR / 'charts' / 'nowhere'} does not exist")


def test_a_folder_that_is_not_a_chart_is_refused(tmp_path: Path):
    assert_refused(_with_operator(chartPath=str(tmp_path)), "is a folder but not a chart")


@needs_chart
def test_another_chart_version_is_refused(tmp_path: Path):
    copy = shutil.copytree(CHART, tmp_path / "gpu-operator")
    meta = (copy / "Chart.yaml").read_text().replace("version: v25.10.1", "version: v25.3.0", 1)
    (copy / "Chart.yaml").write_text(meta)
    assert_refused(_with_operator(chartPath=str(copy)), "holds chart 'gpu-operator' version 'v25.3.0'; the stack needs gpu-operator v25.10.1")


@needs_chart
def test_a_chart_without_its_nfd_subchart_is_refused_folder_and_archive(tmp_path: Path):
    copy = shutil.copytree(CHART, tmp_path / "gpu-operator", ignore=shutil.ignore_patterns("node-feature-discovery"))
    assert_refused(_with_operator(chartPath=str(copy)), "lacks its node-feature-discovery subchart under charts/")
    # The provider refuses it whether or not NFD is on, so the stack does too.
    assert_refused(
        _with_operator(chartPath=str(copy), nodeFeatureDiscovery=False), "lacks its node-feature-discovery subchart"
    )
    tgz = _package(CHART, tmp_path / "bare.tgz", skip=("charts/",))
    assert_refused(_with_operator(chartPath=str(tgz)), "lacks its node-feature-discovery subchart")


def test_a_file_that_is_not_a_packaged_chart_is_refused(tmp_path: Path):
    junk = tmp_path / "gpu-operator.tgz"
    junk.write_text("not a tarball")
    assert_refused(_with_operator(chartPath=str(junk)), "is not a packaged chart")


@needs_chart
def test_a_local_chart_and_a_repository_together_are_refused():
    assert_refused(
        _with_operator(chartPath=str(CHART), repository="https://charts.example.internal/nvidia"),
        "is set together with operator.repository; set one",
    )


def test_a_url_in_chart_path_is_refused_with_where_it_goes():
    assert_refused(_with_operator(chartPath="https://charts.example.internal/gpu-operator-v25.10.1.tgz"), "goes in operator.repository")


# --------------------------------------------------------------------------- the object view
@needs_helm
@pytest.mark.parametrize("form", ["folder", "tgz"])
def test_the_object_view_renders_the_releases_local_chart_with_pulling_off(tmp_path: Path, monkeypatch, form: str):
    monkeypatch.setenv("GPU_STACK_CHART_PULL", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("GPU_STACK_CHART_DIR", raising=False)
    source = CHART if form == "folder" else _package(CHART, tmp_path / "gpu-operator-v25.10.1.tgz")
    plan = plan_of(_with_operator(chartPath=str(source)))
    render = release_renderer()
    ((_name, objects),) = plan_objects(plan.to_json(), render)
    assert not isinstance(objects, str), objects
    keys = {o.key for o in objects}
    assert "ClusterPolicy cluster-policy" in keys
    assert any(k.startswith("DaemonSet") and "node-feature-discovery" in k for k in keys)  # the vendored subchart
    assert render.last_chart == str(source)  # type: ignore[attr-defined]


def test_locate_chart_prefers_the_releases_own_local_chart_over_chart_dir(tmp_path: Path):
    mine = tmp_path / "mine.tgz"
    mine.write_bytes(b"")
    ref = ChartRef.of_release({"chart": str(mine), "version": "v25.10.1"})
    assert ref.local == mine
    assert locate_chart(ref, chart_dir=tmp_path / "other") == mine
    oci = ChartRef.of_release({"chart": "oci://registry.example.internal/nvidia/gpu-operator", "version": "v25.10.1"})
    assert oci.local is None and oci.name == "gpu-operator"


# --------------------------------------------------------------------------- private repositories
CANARY_USER = "canary-robot-user-DoNotLeak-51c"
CANARY_TOKEN = "canary-repo-token-DoNotLeak-9e2"


def _credentials_plan(monkeypatch=None, **operator: object):
    cfg = _with_operator(**operator)
    return plan_of(cfg, secrets={"operator": {"repositoryCredentials": {"username": CANARY_USER, "password": CANARY_TOKEN}}})


def test_repository_credentials_reach_the_provider_as_secrets_and_no_output(monkeypatch):
    from pulumi.runtime import rpc

    from gpu_stack.offline import diff, fast_monitor
    from gpu_stack.offline.render import render_text

    seen: dict = {}
    original = fast_monitor.RecordingMonitor.RegisterResource

    def register(monitor, request):
        seen[request.name] = rpc.deserialize_properties(request.object)
        return original(monitor, request)

    monkeypatch.setattr(fast_monitor.RecordingMonitor, "RegisterResource", register)
    plan = _credentials_plan()
    # Pulumi reads a secret inside an object as the whole object secret: the options, repo included.
    opts = seen["gpu-operator-release"]["repositoryOpts"]
    assert rpc.is_rpc_secret(opts)
    assert rpc.unwrap_rpc_secret(opts) == {
        "repo": "https://helm.ngc.nvidia.com/nvidia", "username": CANARY_USER, "password": CANARY_TOKEN
    }
    everything = render_text(plan) + json.dumps(plan.to_json()) + "\n".join(plan.warnings)
    rotated = plan_of(
        _with_operator(timeoutSeconds=1200),
        secrets={"operator": {"repositoryCredentials": {"username": CANARY_USER, "password": "rotated-DoNotLeak"}}},
    )
    changes = diff.diff_plans(plan, rotated)
    everything += diff.render(changes, "text") + diff.render(changes, "markdown")
    for canary in (CANARY_USER, CANARY_TOKEN, "rotated-DoNotLeak"):
        assert canary not in everything
    assert plan.by_name("gpu-operator-release").inputs["repositoryOpts"] == "[secret]"


def test_a_plain_text_password_is_refused_with_the_command_that_sets_it_secret():
    cfg = _with_operator(repositoryCredentials={"username": "robot", "password": CANARY_TOKEN})
    with pytest.raises(PlanError) as info:
        plan_of(cfg)
    message = str(info.value)
    assert "gpu-stack:operator.repositoryCredentials.password = [secret]: is stored in plain text" in message
    assert "pulumi config set --secret --path 'gpu-stack:operator.repositoryCredentials.password'" in message
    assert CANARY_TOKEN not in message and info.value.registered == 0


@pytest.mark.parametrize(
    "url, carried",
    [
        (f"https://robot:{CANARY_TOKEN}@charts.example.internal/nvidia", "user:password@"),
        (f"https://{CANARY_TOKEN}@charts.example.internal/nvidia", "user:password@"),
        (f"https://charts.example.internal/nvidia?token={CANARY_TOKEN}", "a query string (?token=...)"),
        (f"oci://robot:{CANARY_TOKEN}@registry.example.internal/charts", "user:password@"),
    ],
)
def test_a_url_with_credentials_is_refused_without_showing_them(url: str, carried: str):
    with pytest.raises(PlanError) as info:
        plan_of(_with_operator(repository=url))
    message = str(info.value)
    assert "gpu-stack:operator.repository = " in message and f"carries credentials ({carried})" in message
    assert "operator.repositoryCredentials.password" in message
    assert CANARY_TOKEN not in message
    assert "[credentials hidden]" in message or "?[hidden]" in message


def test_a_ca_file_is_passed_by_absolute_path_and_a_missing_one_refused(tmp_path: Path):
    from .test_hostile_round5_settings import CA_PEM

    ca = tmp_path / "internal-ca.pem"
    ca.write_text(CA_PEM)
    inputs = _release(_with_operator(repository="https://charts.example.internal/nvidia", repositoryCaFile=str(ca)))
    assert inputs["repositoryOpts"] == {"repo": "https://charts.example.internal/nvidia", "caFile": str(ca)}
    assert_refused(
        _with_operator(repository="https://charts.example.internal/nvidia", repositoryCaFile="certs/none.pem"),
        f"{PROJECT_DIR / 'certs' / 'none.pem'} is not a file",
    )


def test_repository_options_where_the_provider_ignores_them_are_refused(tmp_path: Path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    assert_refused(
        _with_operator(repository="oci://registry.example.internal/charts", repositoryCaFile=str(ca)),
        "reads `helm registry login <registry>`",
    )
    assert_refused(_with_operator(chartPath=str(tmp_path), repositoryCaFile=str(ca)), "loads the chart from disk: remove it")


# --------------------------------------------------------------------------- diff against a revision
@needs_helm
def test_diff_with_a_local_chart_outside_git_shows_only_the_edit(tmp_path: Path):
    """The base revision is planned from its git archive, where an untracked chart is absent: both
    sides take the working tree's copy, so the diff is the edit alone, not a changed chart path."""
    from ..helpers import committed_project_copy, git

    repo = committed_project_copy(tmp_path)
    (repo / "charts").mkdir()
    (repo / "charts" / "gpu-operator").symlink_to(CHART, target_is_directory=True)
    (repo / ".gitignore").write_text((repo / ".gitignore").read_text() + "\ncharts/\n" if (repo / ".gitignore").exists() else "charts/\n")
    stack = repo / "Pulumi.air.yaml"
    stack.write_text(
        "config:\n  gpu-stack:operator:\n    chartPath: charts/gpu-operator\n"
        "  gpu-stack:nodes:\n    - name: gpu-1\n      gpu:\n        model: L4\n        count: 1\n"
        "  gpu-stack:sharing:\n    mode: time-slicing\n    replicas: 2\n"
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "air stack")
    stack.write_text(stack.read_text().replace("replicas: 2", "replicas: 4"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG")}
    env.update({"PYTHONPATH": str(repo), "GPU_STACK_CHART_PULL": "off", "XDG_CACHE_HOME": str(tmp_path / "cache")})
    env.pop("GPU_STACK_CHART_DIR", None)
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_stack", "diff", "--stack", "air", "--base", "HEAD"],
        cwd=repo, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "replicas" in proc.stdout and "chart:" not in proc.stdout and "not shown" not in proc.stdout
    assert "ClusterPolicy cluster-policy" in proc.stdout


def test_the_object_view_of_a_release_with_secret_repository_options_says_to_pass_a_chart_dir(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("GPU_STACK_CHART_DIR", raising=False)
    monkeypatch.delenv("GPU_STACK_CHART_PULL", raising=False)
    plan = _credentials_plan()
    if NO_SDK is not None:
        pytest.skip(NO_SDK)
    ((_, why),) = plan_objects(plan.to_json(), release_renderer(pull=lambda *a: pytest.fail("pulled")))
    assert why == (
        "the release's repository options are a secret (operator.repositoryCredentials): "
        "pass --chart-dir DIR with a local copy of the chart"
    )
    if (CHART / "Chart.yaml").exists():
        ((_, objects),) = plan_objects(plan.to_json(), release_renderer(CHART))
        assert not isinstance(objects, str) and objects
