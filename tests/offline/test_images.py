"""Every image from the mirror, checked against the real chart: for every committed stack with
`images.mirror` set, no rendered object, no ClusterPolicy component (switched on or off) and no Job
of the stack names an image outside the mirror, each keeps its path and tag, and every pod pulls
with the pull secrets; `python -m gpu_stack images` lists exactly the pulled set."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_stack.config import CHART_IMAGES, ImageSettings
from gpu_stack.config.stack_files import StackConfig, list_stacks, read_stack
from gpu_stack.design.images import MIRROR_PULL_SECRET, mirror_ref, split_ref
from gpu_stack.offline.images import DRIVER_OS_PLACEHOLDER, ImageUse, plan_images, pod_images, pulled, release_images
from gpu_stack.offline.objects import release_renderer
from gpu_stack.offline.runner import PROJECT_DIR, run_program

from ..helpers import CHART_REF, assert_refused, dev_config, helm_sdk_problem, needs_reference, plan_of, reference_dir

CHART = reference_dir() / "chart"
NO_SDK = helm_sdk_problem()


def needs_chart(test):
    """The reference chart and Helm's Go SDK to render it."""
    return needs_reference(CHART_REF)(pytest.mark.skipif(NO_SDK is not None, reason=f"needs helm-python-sdk ({NO_SDK})")(test))
SAMPLES = Path(__file__).resolve().parents[1] / "stacks"
MIRROR = "registry.example.internal"
RELEASE = "gpu-operator-release"


def committed_stacks() -> list[str]:
    return [*list_stacks(PROJECT_DIR), *(p.name[len("Pulumi."):-len(".yaml")] for p in sorted(SAMPLES.glob("Pulumi.*.yaml")))]


def sample_project(tmp_path: Path, stack: str) -> Path:
    """A project folder holding the stack file, the project's Pulumi.yaml and program, and the
    chart where the air-gapped sample expects its local copy (charts/gpu-operator)."""
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy2(PROJECT_DIR / name, project / name)
    source = PROJECT_DIR if (PROJECT_DIR / f"Pulumi.{stack}.yaml").exists() else SAMPLES
    shutil.copy2(source / f"Pulumi.{stack}.yaml", project / f"Pulumi.{stack}.yaml")
    charts = project / "charts"
    charts.mkdir(exist_ok=True)
    if CHART.exists() and not (charts / "gpu-operator").exists():
        (charts / "gpu-operator").symlink_to(CHART, target_is_directory=True)
    return project


def stack_plan(tmp_path: Path, stack: str, images: dict[str, Any] | None = None):
    project = sample_project(tmp_path, stack)
    cfg: StackConfig = read_stack(project, stack)
    if images is not None:
        cfg.values["gpu-stack:images"] = images
        driver = cfg.values.setdefault("gpu-stack:driver", {})
        if images.get("mirror") and driver.get("placement", "operator") == "operator" and "repoConfig" not in driver:
            # A mirrored stack with the operator's driver names its OS package mirror (rules/driver.py).
            driver["repoConfig"] = {"files": {"mirror.list": "deb http://packages.example.internal/ubuntu jammy main\n"}}
    return run_program(cfg, project)


def all_uses(plan_doc: dict[str, Any]) -> list[ImageUse]:
    render = release_renderer(CHART)
    uses: list[ImageUse] = []
    for r in plan_doc["resources"]:
        if r["type"] == "kubernetes:helm.sh/v3:Release":
            uses.extend(release_images(render(r["inputs"]), ("ubuntu22.04",)))
    return uses + plan_images(plan_doc)


def _path_of(image: str) -> str:
    repository, suffix = split_ref(image)
    first, _, rest = repository.partition("/")
    return (rest if "." in first else repository) + suffix


# --------------------------------------------------------------------------- the table
@needs_reference(CHART_REF)
def test_the_image_table_is_the_charts_own_defaults():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    app = str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])
    nfd_chart = yaml.safe_load((CHART / "charts/node-feature-discovery/Chart.yaml").read_text())
    nfd_values = yaml.safe_load((CHART / "charts/node-feature-discovery/values.yaml").read_text())
    templates = "".join(p.read_text() for p in sorted((CHART / "templates").glob("*.yaml")))
    assert ".Values.imagePullSecrets" in (CHART / "charts/node-feature-discovery/templates/_helpers.tpl").read_text() + "".join(
        p.read_text() for p in (CHART / "charts/node-feature-discovery/templates").glob("*.yaml")
    )
    for row in CHART_IMAGES:
        if row.key == "node-feature-discovery":
            assert (nfd_values["image"]["repository"], nfd_chart["appVersion"]) == (row.repository, row.tag)
            continue
        spec: Any = values
        for part in row.key.split("."):
            spec = spec[part]
        assert f"{spec['repository']}/{spec['image']}" == row.repository, row.key
        assert str(spec.get("version") or app) == row.tag, row.key
        # The pods of the component pull with the secrets its templates read.
        assert f".Values.{row.pull_secrets}.imagePullSecrets" in templates, row.key
    components = {k for k, v in values.items() if isinstance(v, dict) and "repository" in v and v["repository"]}
    assert components <= {r.key for r in CHART_IMAGES}


# --------------------------------------------------------------------------- the mapping
@pytest.mark.parametrize(
    "ref, expected",
    [
        ("nvcr.io/nvidia/driver:580.105.08", f"{MIRROR}/nvidia/driver:580.105.08"),
        ("registry.k8s.io/kubectl:v1.31.4", f"{MIRROR}/kubectl:v1.31.4"),
        ("nvcr.io/nvidia/gpu-operator@sha256:" + "a" * 64, f"{MIRROR}/nvidia/gpu-operator@sha256:" + "a" * 64),
        ("localhost:5000/x/y:1", f"{MIRROR}/x/y:1"),
        ("busybox:1.36", f"{MIRROR}/busybox:1.36"),
        (f"{MIRROR}/already/there:1", f"{MIRROR}/already/there:1"),
    ],
)
def test_an_image_keeps_its_path_and_tag_under_the_mirror(ref: str, expected: str):
    assert mirror_ref(ref, ImageSettings(mirror=MIRROR)) == expected


def test_an_override_wins_and_keeps_the_tag_and_a_mirror_path_prefix_is_kept():
    im = ImageSettings(mirror=f"{MIRROR}:5000/gpu", overrides={"nvcr.io/nvidia/driver": "drivers.example.internal/nv/driver"})
    assert mirror_ref("nvcr.io/nvidia/driver:580.105.08", im) == "drivers.example.internal/nv/driver:580.105.08"
    assert mirror_ref("nvcr.io/nvidia/k8s-device-plugin:v0.18.1", im) == f"{MIRROR}:5000/gpu/nvidia/k8s-device-plugin:v0.18.1"


def test_without_a_mirror_the_release_values_name_no_image():
    values = plan_of(dev_config()).by_name(RELEASE).inputs["values"]
    # (the NFD subchart's values carry only the tolerations of tainted GPU node pools)
    assert "image" not in values["node-feature-discovery"] and "validator" not in values
    assert set(values["node-feature-discovery"]) == {"master", "gc"}
    assert "repository" not in values["devicePlugin"]


# --------------------------------------------------------------------------- every committed stack
@needs_chart
@pytest.mark.parametrize("stack", committed_stacks())
def test_with_the_mirror_set_no_image_of_any_committed_stack_is_outside_it(tmp_path: Path, stack: str):
    before = all_uses(stack_plan(tmp_path, stack, {}).to_json())
    plan = stack_plan(tmp_path, stack, {"mirror": MIRROR, "pullSecrets": ["mirror-pull"]})
    doc = plan.to_json()
    after = all_uses(doc)
    outside = sorted({f"{u.source}: {u.image}" for u in after if not u.image.startswith(MIRROR + "/")})
    assert outside == []
    # Every component of the ClusterPolicy is checked, switched on or not, and the chart's objects too.
    assert any(not u.runs for u in after) and any(u.source.startswith("Deployment") for u in after)
    # Each image keeps its path and tag: the mirrored set is the original set moved under the mirror.
    assert sorted({u.image for u in after}) == sorted({f"{MIRROR}/{_path_of(u.image)}" for u in before})
    # Every pod pulls with the pull secret: rendered objects, ClusterPolicy components and Jobs.
    render = release_renderer(CHART)
    objects = render(plan.by_name(RELEASE).inputs)
    for obj in objects:
        for template in _pod_specs(obj.body):
            assert {"name": "mirror-pull"} in template.get("imagePullSecrets", []), obj.key
        if obj.kind == "ClusterPolicy":
            for row in CHART_IMAGES:
                if row.pull_secrets is None:
                    continue
                component = _dig(obj.body["spec"], row.pull_secrets)
                if component is not None and row.key not in ("operator", "node-feature-discovery"):
                    assert component.get("imagePullSecrets") == ["mirror-pull"], row.key
    for r in doc["resources"]:
        for template in _pod_specs(r.get("inputs") or {}):
            assert {"name": "mirror-pull"} in template.get("imagePullSecrets", []), r["name"]


def _dig(spec: Any, key: str) -> Any:
    for part in key.split("."):
        spec = spec.get(part) if isinstance(spec, dict) else None
    return spec


def _pod_specs(body: Any) -> list[dict[str, Any]]:
    """Every pod spec in an object: a mapping that holds `containers`."""
    out = []
    if isinstance(body, dict):
        if isinstance(body.get("containers"), list):
            out.append(body)
        for value in body.values():
            out.extend(_pod_specs(value))
    elif isinstance(body, list):
        for value in body:
            out.extend(_pod_specs(value))
    return out


# --------------------------------------------------------------------------- the images command
def _cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG")}
    env["PYTHONPATH"] = str(PROJECT_DIR)
    env["GPU_STACK_CHART_DIR"] = str(CHART)
    return subprocess.run(
        [sys.executable, "-m", "gpu_stack", "--project-dir", str(project), "images", *args],
        cwd=tmp_cwd(project), env=env, capture_output=True, text=True, timeout=300,
    )


def tmp_cwd(project: Path) -> Path:
    return project.parent


@needs_chart
@pytest.mark.parametrize("stack", ["airgap", "staging"])
def test_the_images_command_lists_what_the_cluster_pulls(tmp_path: Path, stack: str):
    project = sample_project(tmp_path, stack)
    expected = pulled(all_uses(run_program(read_stack(project, stack), project).to_json()))
    text = _cli(project, "--stack", stack, "--driver-os", "ubuntu22.04")
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines() == expected
    listed = json.loads(_cli(project, "--stack", stack, "--driver-os", "ubuntu22.04", "--format", "json").stdout)
    assert [e["image"] for e in listed["images"]] == expected and listed["needDriverOs"] == []
    assert all(e["usedBy"] for e in listed["images"])
    if stack == "airgap":
        assert all(i.startswith(MIRROR + "/") for i in expected)
        # What to copy where: each mirrored image next to the image it is a copy of.
        copy = _cli(project, "--stack", stack, "--driver-os", "ubuntu22.04", "--format", "copy")
        pairs = [line.split(" ") for line in copy.stdout.splitlines()]
        assert [dst for _, dst in pairs] == expected
        im = ImageSettings(mirror=MIRROR)
        assert all(not src.startswith(MIRROR) and mirror_ref(src, im) == dst for src, dst in pairs)
        assert {e["copyOf"] for e in listed["images"]} == {src for src, _ in pairs}


@needs_chart
def test_without_driver_os_the_driver_image_is_named_on_stderr_not_guessed(tmp_path: Path):
    project = sample_project(tmp_path, "staging")
    out = _cli(project, "--stack", "staging")
    assert out.returncode == 0
    assert DRIVER_OS_PLACEHOLDER not in out.stdout and "/driver:" not in out.stdout
    assert "nvidia/driver:580.105.08-<os>" in out.stderr and "--driver-os" in out.stderr


def test_pod_images_reads_every_container_kind():
    body = {"spec": {"template": {"spec": {"initContainers": [{"image": "a:1"}], "containers": [{"image": "b:2"}]}}}}
    assert pod_images(body) == ["a:1", "b:2"]


# --------------------------------------------------------------------------- refused settings
def test_an_override_of_an_image_the_stack_does_not_pull_is_refused():
    cfg = dev_config()
    cfg["images"] = {"mirror": MIRROR, "overrides": {"nvcr.io/nvidia/drivr": f"{MIRROR}/x"}}
    assert_refused(cfg, "key is not an image repository this stack pulls")


@pytest.mark.parametrize(
    "mirror, message",
    [
        ("https://registry.example.internal", "without a scheme"),
        ("robot:pw@registry.example.internal", "carries credentials"),
        ("registry.example.internal/nvidia/driver:1", "no tag"),
    ],
)
def test_a_bad_mirror_is_refused(mirror: str, message: str):
    cfg = dev_config()
    cfg["images"] = {"mirror": mirror}
    assert_refused(cfg, message)


def test_a_mirror_login_without_a_mirror_is_refused():
    cfg = dev_config()
    assert_refused(
        {**cfg, "images": {"registryCredentials": {"username": "u", "password": "p"}}},
        "is a login to the mirror, and images.mirror is not set",
    )


@needs_reference(CHART_REF)
def test_the_mirror_login_becomes_a_pull_secret_in_both_namespaces_that_every_pod_uses(tmp_path: Path):
    project = sample_project(tmp_path, "airgap")
    stack = project / "Pulumi.airgap.yaml"
    doc = yaml.safe_load(stack.read_text())
    doc["config"]["gpu-stack:images"]["registryCredentials"] = {"username": "robot", "password": {"secure": "v1:AAAA"}}
    stack.write_text(yaml.safe_dump(doc))
    plan = run_program(read_stack(project, "airgap"), project)
    if (CHART / "Chart.yaml").exists() and NO_SDK is None:
        copy = _cli(project, "--stack", "airgap", "--format", "copy")  # the source plan drops the login too
        assert copy.returncode == 0, copy.stderr
    secrets = [r for r in plan.resources if r.type == "kubernetes:core/v1:Secret"]
    assert sorted(r.inputs["metadata"]["namespace"] for r in secrets) == sorted(
        [doc["config"].get("gpu-stack:operator", {}).get("namespace", "gpu-operator"), "gpu-validation"]
    )
    for r in secrets:
        assert r.inputs["metadata"]["name"] == MIRROR_PULL_SECRET and r.inputs["type"] == "kubernetes.io/dockerconfigjson"
        assert r.inputs["stringData"] == "[secret]"
    values = plan.by_name(RELEASE).inputs["values"]
    assert values["devicePlugin"]["imagePullSecrets"][0] == MIRROR_PULL_SECRET
    jobs = [r for r in plan.resources if r.type == "kubernetes:batch/v1:Job"]
    assert jobs and all(
        {"name": MIRROR_PULL_SECRET} in j.inputs["spec"]["template"]["spec"]["imagePullSecrets"] for j in jobs
    )
    # The label Job, which runs before the release, waits for the Secret it pulls with.
    assert "gpu-operator-mirror-pull" in plan.by_name("gpu-operator-node-labels-job").depends_on
