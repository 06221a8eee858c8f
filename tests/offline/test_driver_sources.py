"""What the operator's driver container fetches besides its image (issue 33 items 5 and 11):
`driver.repoConfig` and `driver.certConfig` become ConfigMaps in the operator namespace that the
chart names, `driver.usePrecompiled` makes one driver image per kernel (listed by `images`), a
mirrored stack whose operator driver would still reach the public package repositories is
refused; the kata artifacts follow the mirror and `operator.initContainer` is not listed as pulled."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_stack.config.images import KATA_RUNTIME_CLASSES
from gpu_stack.offline.diff import CONFIGMAP, CREATE, RELEASE, REPLACE, UPDATE, diff_plans, render_text
from gpu_stack.offline.effects import RESTARTS_DRIVER, add_objects_and_effects
from gpu_stack.offline.images import clusterpolicy_images, pulled
from gpu_stack.offline.objects import release_renderer

from ..crd_schema import check_custom_resource
from ..helpers import assert_refused, dev_config, plan_of, set_path
from .test_images import CHART, MIRROR, _cli, all_uses, needs_chart, sample_project, stack_plan

RELEASE_NAME = "gpu-operator-release"
REPO_CM = "gpu-operator-driver-repo-config"
CERT_CM = "gpu-operator-driver-cert-config"
SOURCES = (
    "deb [arch=amd64] http://packages.example.internal/ubuntu jammy main universe\n"
    "deb [arch=amd64] http://packages.example.internal/ubuntu jammy-updates main universe\n"
)
RHEL_REPO = "[baseos]\nname=BaseOS\nbaseurl=http://packages.example.internal/rhel9/baseos\ngpgcheck=0\n"
PEM = (  # a real self-signed CA (openssl req -x509, P-256, "Example Internal CA"): certConfig parses each block
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBkjCCATmgAwIBAgIUNpFJWp8Xr00CkAFqnxJiHg0gRr4wCgYIKoZIzj0EAwIw\n"
    "HjEcMBoGA1UEAwwTRXhhbXBsZSBJbnRlcm5hbCBDQTAgFw0yNjEyMDQxOTE5Mzla\n"
    "GA8yMTI2MTExMDE5MTkzOVowHjEcMBoGA1UEAwwTRXhhbXBsZSBJbnRlcm5hbCBD\n"
    "QTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABE6EupCxEgoZny6m5YjLb1kICgIG\n"
    "hQyHRcxC3wzmKko1h8q0Zev73TFNVLhft+aU7wTb68wU13CLtxwtJ6D3viSjUzBR\n"
    "MB0GA1UdDgQWBBR5fPaPJMUmFZsnFdWvfvQS6DjwGDAfBgNVHSMEGDAWgBR5fPaP\n"
    "JMUmFZsnFdWvfvQS6DjwGDAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0cA\n"
    "MEQCIGkMG9lkqQevsS7I9OsudSJnmOII6tpBhrAPuX9S9GIKAiBuJB2KPCdAHxU8\n"
    "3Zr5aVb9tkkQyCfjvSIVoA3Zmq4uaw==\n"
    "-----END CERTIFICATE-----\n"
)


def operator_driver(**driver: Any) -> dict[str, Any]:
    """The dev stack with the operator's driver (its toolkit stays on the hosts) and `driver` set."""
    cfg = dev_config()
    cfg["driver"] = {"placement": "operator", **driver}
    return cfg


# --------------------------------------------------------------------------- item 5: repoConfig, certConfig
def test_repo_and_cert_config_become_configmaps_in_the_operator_namespace_that_the_chart_names():
    plan = plan_of(operator_driver(
        repoConfig={"files": {"ubuntu-mirror.list": SOURCES, "rhel-mirror.repo": RHEL_REPO}},
        certConfig={"files": {"internal-ca.crt": PEM}},
    ))
    repo, certs = plan.by_name(REPO_CM).inputs, plan.by_name(CERT_CM).inputs
    # The files exactly as given, one key each: the operator mounts each key as one file.
    assert repo["data"] == {"rhel-mirror.repo": RHEL_REPO, "ubuntu-mirror.list": SOURCES}
    assert certs["data"] == {"internal-ca.crt": PEM}
    assert repo["metadata"]["namespace"] == certs["metadata"]["namespace"] == "gpu-operator"
    repo_name, cert_name = repo["metadata"]["name"], certs["metadata"]["name"]
    assert repo_name.startswith("driver-repo-config-") and cert_name.startswith("driver-cert-config-")
    release = plan.by_name(RELEASE_NAME)
    driver = release.inputs["values"]["driver"]
    assert driver["repoConfig"] == {"configMapName": repo_name}
    assert driver["certConfig"] == {"name": cert_name}
    assert "usePrecompiled" not in driver and driver["version"] == "580.105.08"
    # The operator reads the ConfigMaps when it builds the driver DaemonSet: they exist first.
    assert {REPO_CM, CERT_CM} <= set(release.depends_on)


def test_without_them_the_chart_gets_no_driver_source_values_and_no_configmap_is_made():
    plan = plan_of(operator_driver())
    driver = plan.by_name(RELEASE_NAME).inputs["values"]["driver"]
    assert not {"repoConfig", "certConfig", "usePrecompiled"} & set(driver)
    assert not any("driver-" in r.name and r.type.endswith(":ConfigMap") for r in plan.resources)


def _clusterpolicy(objects: list[Any]) -> dict[str, Any]:
    """The rendered ClusterPolicy, checked against the chart's own CRD: the API server keeps every
    field the stack set (nothing pruned) and accepts it."""
    (policy,) = [o for o in objects if o.kind == "ClusterPolicy"]
    (crd,) = [o.body for o in objects if o.kind == "CustomResourceDefinition" and o.body["spec"]["names"]["kind"] == "ClusterPolicy"]
    pruned, errors, _ = check_custom_resource(policy.body, crd)
    assert (pruned, errors) == ([], [])
    return dict(policy.body)


@needs_chart
def test_the_rendered_clusterpolicy_carries_them_where_the_operator_reads_them():
    plan = plan_of(operator_driver(repoConfig={"files": {"m.list": SOURCES}}, certConfig={"files": {"ca.crt": PEM}}))
    spec = _clusterpolicy(release_renderer(CHART)(plan.by_name(RELEASE_NAME).inputs))["spec"]["driver"]
    assert spec["repoConfig"] == {"configMapName": plan.by_name(REPO_CM).inputs["metadata"]["name"]}
    assert spec["certConfig"] == {"name": plan.by_name(CERT_CM).inputs["metadata"]["name"]}
    assert spec["usePrecompiled"] is False
    precompiled = plan_of(operator_driver(usePrecompiled=True, version="580"))
    spec = _clusterpolicy(release_renderer(CHART)(precompiled.by_name(RELEASE_NAME).inputs))["spec"]["driver"]
    assert (spec["usePrecompiled"], spec["version"]) == (True, "580")


def test_precompiled_sets_the_chart_value_with_the_branch_and_needs_no_package_sources():
    plan = plan_of(set_path(operator_driver(usePrecompiled=True, version="580"), "images", {"mirror": MIRROR}))
    driver = plan.by_name(RELEASE_NAME).inputs["values"]["driver"]
    assert driver["usePrecompiled"] is True and driver["version"] == "580"
    assert "repoConfig" not in driver and driver["repository"] == f"{MIRROR}/nvidia"


# --------------------------------------------------------------------------- item 5: refusals
@pytest.mark.parametrize(
    "driver, message",
    [
        (
            {"publicOsRepositories": False},
            (
                "gpu-stack:driver.repoConfig: is not set while driver.publicOsRepositories is false: the operator's "
                "driver container would fetch each node's kernel headers with apt-get or dnf from repositories the "
                "nodes cannot reach; set driver.repoConfig.files (your mirror of them), or driver.usePrecompiled: "
                "true with driver.version a branch (580), or driver.placement: 'host'"
            ),
        ),
        (
            {"publicOsRepositories": "false", "certConfig": {"files": {"ca.crt": PEM}}},  # a CA alone reaches no repository
            "gpu-stack:driver.repoConfig: is not set while driver.publicOsRepositories is false",
        ),
        (
            {"usePrecompiled": True},
            "gpu-stack:driver.version = '580.105.08': must be a driver branch such as 580 with driver.usePrecompiled",
        ),
        (
            {"usePrecompiled": True, "version": "580", "repoConfig": {"files": {"m.list": SOURCES}}},
            "gpu-stack:driver.repoConfig: is not used with driver.usePrecompiled: true",
        ),
        (
            {"version": "580", "repoConfig": {"files": {"m.list": SOURCES}}},
            "gpu-stack:driver.version = '580': is a driver branch, which only the precompiled images are tagged with",
        ),
    ],
)
def test_a_stack_whose_nodes_reach_no_os_repository_is_refused_a_driver_that_would_need_them(driver, message):
    assert_refused(set_path(operator_driver(**driver), "images", {"mirror": MIRROR}), message)
    if driver.get("publicOsRepositories") is False:
        assert_refused(operator_driver(**driver), message)  # with or without a registry mirror


def test_with_a_mirror_repo_config_or_precompiled_drivers_plan():
    for driver in ({"repoConfig": {"files": {"m.list": SOURCES}}}, {"usePrecompiled": True, "version": "580"}):
        for reach in ({}, {"publicOsRepositories": False}):
            plan = plan_of(set_path(operator_driver(**driver, **reach), "images", {"mirror": MIRROR}))
            assert plan.resources and not [w for w in plan.warnings if "driver container still installs" in w]


FETCHES = (
    "apt-get update, then linux-headers-<kernel> installed and linux-image-<kernel> and linux-modules-<kernel> "
    "downloaded (Ubuntu); dnf makecache, then elfutils-libelf-devel, kernel-headers-<kernel>, kernel-devel-<kernel>, "
    "kernel-<kernel> and the kernel's gcc (RHEL)"
)


def test_a_registry_mirror_is_not_an_air_gap_the_plan_says_what_the_driver_container_fetches():
    """Issue 41 item 10: a mirror (a pull-through cache, a corporate registry) is common on clusters
    that reach their OS repositories; only driver.publicOsRepositories: false refuses the driver
    that installs from them, and otherwise the plan says what it will fetch."""
    plan = plan_of(set_path(operator_driver(), "images", {"mirror": MIRROR}))
    assert plan.resources
    (warning,) = [w for w in plan.warnings if "driver container still installs" in w]
    assert warning.startswith("gpu-stack:images.mirror is set, but the operator's driver container still installs packages")
    assert f"from the distribution's public package repositories: {FETCHES}" in warning
    assert "set driver.publicOsRepositories: false, then driver.repoConfig" in warning
    # without a mirror (nothing suggests an air gap) or with the host's driver: nothing to say
    for cfg in (operator_driver(), set_path(dev_config(), "images", {"mirror": MIRROR})):
        assert not [w for w in plan_of(cfg).warnings if "driver container" in w]



def test_a_host_driver_takes_none_of_them():
    cfg = dev_config()
    cfg["driver"]["repoConfig"] = {"files": {"m.list": SOURCES}}
    assert_refused(cfg, "gpu-stack:driver.placement = 'host': is 'host', and driver.repoConfig applies to the operator's driver container only")
    cfg = dev_config()
    cfg["driver"]["usePrecompiled"] = True
    assert_refused(cfg, "gpu-stack:driver.placement = 'host': is 'host', and driver.usePrecompiled applies to the operator's")


@pytest.mark.parametrize(
    "driver, message",
    [
        ({"repoConfig": {"files": {"mirror.txt": SOURCES}}}, "must end in .list, .sources, .repo"),
        ({"repoConfig": {"files": {"../m.list": SOURCES}}}, "is not a file name the ConfigMap can hold"),
        ({"repoConfig": {"files": {"m.list": "  \n"}}}, "is empty: give the file's content"),
        ({"repoConfig": {"files": {}}}, "repoConfig.files"),
        ({"repoConfig": {"files": {"m.list": SOURCES}}, "certConfig": {"files": {"ca.pem": PEM}}}, "must end in .crt"),
        ({"repoConfig": {"files": {"m.list": SOURCES}}, "certConfig": {"files": {"ca.crt": "not a certificate"}}},
         "holds no PEM certificate"),
        ({"repoConfig": {"files": {"m.list": SOURCES}}, "certConfig": {"files": {"ca.crt": PEM + "-----BEGIN PRIVATE KEY-----\n"}}},
         "holds a private key"),
    ],
)
def test_bad_package_source_or_ca_files_are_refused_naming_the_key(driver, message):
    with pytest.raises(Exception) as info:
        plan_of(operator_driver(**driver))
    text = str(info.value)
    assert message in text and "gpu-stack:driver." in text
    assert getattr(info.value, "registered", 0) == 0


def test_the_rhel_ca_bundle_name_is_accepted():
    plan = plan_of(operator_driver(repoConfig={"files": {"m.repo": RHEL_REPO}}, certConfig={"files": {"tls-ca-bundle.pem": PEM}}))
    assert plan.by_name(CERT_CM).inputs["data"] == {"tls-ca-bundle.pem": PEM}


# --------------------------------------------------------------------------- item 5: the offline diff
def test_the_diff_shows_the_new_configmap_and_that_the_driver_is_rolled():
    base = plan_of(operator_driver())
    head = plan_of(operator_driver(repoConfig={"files": {"m.list": SOURCES}}))
    diff = diff_plans(base, head, "main", "working tree")
    cm = diff.get(CONFIGMAP, REPO_CM)
    assert cm is not None and cm.action == CREATE
    release = diff.get(RELEASE, RELEASE_NAME)
    assert release is not None and release.action == UPDATE and release.paths == ["values.driver.repoConfig"]
    add_objects_and_effects(diff, base, head, CHART if (CHART / "Chart.yaml").exists() else None)
    assert any(line.startswith(RESTARTS_DRIVER) for line in diff.effects), diff.effects
    text = render_text(diff)
    assert f"+ create {CONFIGMAP} {REPO_CM}" in text

    # An edit of the sources: a new ConfigMap name, so the driver pods are rolled onto files that exist.
    edited = plan_of(operator_driver(repoConfig={"files": {"m.list": SOURCES + "deb http://packages.example.internal/x jammy main\n"}}))
    change = diff_plans(head, edited).get(CONFIGMAP, REPO_CM)
    assert change is not None and change.action == REPLACE and "metadata.name changed" in change.reasons


# --------------------------------------------------------------------------- item 5: precompiled images per kernel
def _precompiled_project(tmp_path: Path) -> Path:
    project = sample_project(tmp_path, "airgap")
    path = project / "Pulumi.airgap.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["config"]["gpu-stack:driver"] = {"placement": "operator", "usePrecompiled": True, "version": "580"}
    path.write_text(yaml.safe_dump(doc))
    return project


@needs_chart
def test_images_lists_one_precompiled_driver_image_per_kernel(tmp_path: Path):
    project = _precompiled_project(tmp_path)
    kernels = ("--driver-kernel", "5.15.0-1048-aws", "--driver-kernel", "6.8.0-51-generic")
    out = _cli(project, "--stack", "airgap", "--driver-os", "ubuntu22.04", *kernels)
    assert out.returncode == 0, out.stderr
    drivers = [line for line in out.stdout.splitlines() if "/nvidia/driver:" in line]
    assert drivers == [
        f"{MIRROR}/nvidia/driver:580-5.15.0-1048-aws-ubuntu22.04",
        f"{MIRROR}/nvidia/driver:580-6.8.0-51-generic-ubuntu22.04",
    ]
    # Without the kernels: no guessed driver image, and stderr says what to add.
    bare = _cli(project, "--stack", "airgap", "--driver-os", "ubuntu22.04", "--format", "json")
    listed = json.loads(bare.stdout)
    assert not any("/nvidia/driver:" in e["image"] for e in listed["images"])
    assert listed["needDriverKernel"] == [f"{MIRROR}/nvidia/driver:580-<kernel>-ubuntu22.04"]
    assert "--driver-kernel" in bare.stderr and "one driver image per kernel" in bare.stderr
    bad = _cli(project, "--stack", "airgap", "--driver-kernel", "5.15.0; rm -rf /")
    assert bad.returncode == 2 and "is not a kernel release" in bad.stderr


@needs_chart
def test_several_driver_os_values_are_listed_with_the_one_os_per_cluster_note(tmp_path: Path):
    project = sample_project(tmp_path, "airgap")
    out = _cli(project, "--stack", "airgap", "--driver-os", "ubuntu22.04", "--driver-os", "ubuntu24.04")
    assert out.returncode == 0, out.stderr
    assert "ClusterPolicy driver runs one OS per cluster" in out.stderr and "NVIDIADriver CRD" in out.stderr


def test_the_precompiled_driver_tag_is_the_operators():
    spec = {"driver": {"repository": "r.example/nvidia", "image": "driver", "version": "580", "usePrecompiled": True}}
    uses = clusterpolicy_images(spec, ("ubuntu22.04",), ("5.15.0-1048-aws",))
    assert [u.image for u in uses if "driver" in u.source] == ["r.example/nvidia/driver:580-5.15.0-1048-aws-ubuntu22.04"]
    plain = clusterpolicy_images({"driver": {**spec["driver"], "usePrecompiled": False, "version": "580.105.08"}}, ("ubuntu22.04",))
    assert [u.image for u in plain if "driver" in u.source] == ["r.example/nvidia/driver:580.105.08-ubuntu22.04"]


# --------------------------------------------------------------------------- item 11: kata artifacts, initContainer
@pytest.mark.skipif(not (CHART / "values.yaml").exists(), reason=f"needs the reference chart at {CHART}")
def test_the_kata_runtime_classes_are_the_charts_own_defaults():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = values["kataManager"]["config"]["runtimeClasses"]
    assert [(rc["name"], tuple(rc["nodeSelector"].items()), rc["artifacts"]["url"]) for rc in chart] == [
        (rc.name, rc.node_selector, rc.artifacts) for rc in KATA_RUNTIME_CLASSES
    ]


@needs_chart
def test_the_kata_artifacts_follow_the_mirror_and_pull_with_its_secret(tmp_path: Path):
    plan = stack_plan(tmp_path, "airgap", {"mirror": MIRROR, "pullSecrets": ["mirror-pull"]})
    config = _clusterpolicy(release_renderer(CHART)(plan.by_name(RELEASE_NAME).inputs))["spec"]["kataManager"]["config"]
    assert config["artifactsDir"] == "/opt/nvidia-gpu-operator/artifacts/runtimeclasses"  # the chart's, kept
    assert [rc["artifacts"] for rc in config["runtimeClasses"]] == [
        {"url": f"{MIRROR}/nvidia/cloud-native/kata-gpu-artifacts:ubuntu22.04-535.54.03", "pullSecret": "mirror-pull"},
        {"url": f"{MIRROR}/nvidia/cloud-native/kata-gpu-artifacts:ubuntu22.04-535.86.10-snp", "pullSecret": "mirror-pull"},
    ]
    kata = [u for u in all_uses(plan.to_json()) if "kataManager.config" in u.source]
    assert len(kata) == 2 and not any(u.runs for u in kata)  # sandbox workloads off: listed, not pulled


@needs_chart
def test_the_openshift_init_container_is_not_listed_as_pulled(tmp_path: Path):
    uses = all_uses(stack_plan(tmp_path, "airgap").to_json())
    (init,) = [u for u in uses if u.source == "ClusterPolicy spec.operator.initContainer"]
    assert init.image == f"{MIRROR}/nvidia/cuda:13.0.1-base-ubi9"  # mirrored all the same
    assert not init.runs and "OpenShift only" in init.note
    assert init.image not in pulled(uses)


def test_an_openshift_only_component_never_counts_as_pulled():
    spec = {"operator": {"initContainer": {"repository": "r/nvidia", "image": "cuda", "version": "13"}}}
    uses = clusterpolicy_images(spec)
    assert [(u.image, u.runs) for u in uses] == [("r/nvidia/cuda:13", False)]
