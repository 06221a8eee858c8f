"""What the components register is decided by derive(), without Pulumi: the operator namespace's
pod-security labels, whether the ServiceMonitor and PrometheusRule CRDs are read, whether there is
a monitoring component at all, the mirror's pull Secrets, the release inputs; and every object the
stack creates carries the one base label set."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from gpu_stack.config import load_settings
from gpu_stack.design.derive import StackDesign, derive
from gpu_stack.design.labels import BASE_LABELS

NODES = [
    {"name": "a", "gpu": {"model": "L4", "count": 2}},
    {"name": "b", "gpu": {"model": "L4", "count": 1}, "sharing": "none"},
]
PASSWORD = "mirror-login-password-1234"
REPO_CONFIG = {"repoConfig": {"files": {"m.list": "deb http://packages.example.internal/ubuntu jammy main\n"}}}
"""A mirrored stack with the operator's driver names its OS package mirror (config/rules/driver.py)."""


def _design(**config: Any) -> StackDesign:
    return derive(load_settings({"nodes": NODES, "sharing": {"mode": "time-slicing", "replicas": 4}, **config}))


def _objects(design: StackDesign) -> Iterator[tuple[str, dict[str, Any]]]:
    """(what, manifest) of every object of the design that lands in the cluster, but the release."""
    op = design.operator
    yield "operator namespace", op.namespace
    yield from ((f"operator ConfigMap {suffix}", cm) for suffix, cm in op.config_maps)
    if op.pull_secret is not None:
        yield "operator pull Secret", op.pull_secret
    if design.monitoring is not None:
        for what in ("rule", "dashboard"):
            if (manifest := getattr(design.monitoring, what)) is not None:
                yield f"monitoring {what}", manifest
    if design.validation is not None:
        yield "validation namespace", design.validation.namespace
        yield "validation payloads", design.validation.configmap
        yield from ((f"validation Job {job.key}", job.manifest) for job in design.validation.jobs)
    for what, plan in (("rollout", design.rollout), ("layout guard", design.guard)):
        if plan is not None:
            yield f"{what} Job", plan.job


def test_the_operator_namespace_is_privileged_and_the_validation_namespace_restricted():
    design = _design()
    labels = design.operator.namespace["metadata"]["labels"]
    assert {k: v for k, v in labels.items() if k.startswith("pod-security.")} == {
        f"pod-security.kubernetes.io/{mode}": "privileged" for mode in ("enforce", "audit", "warn")
    }
    assert design.operator.namespace["metadata"]["name"] == design.operator.release["namespace"] == "gpu-operator"
    assert design.validation is not None
    restricted = design.validation.namespace["metadata"]["labels"]
    assert {v for k, v in restricted.items() if k.startswith("pod-security.")} == {"restricted"}


def test_the_servicemonitor_crd_is_read_only_when_the_values_ask_for_a_servicemonitor():
    on = _design(dcgmExporter={"enabled": True, "serviceMonitor": {"enabled": True}})
    assert on.values["dcgmExporter"]["serviceMonitor"]["enabled"] is True
    assert on.operator.servicemonitor_crd == "servicemonitors.monitoring.coreos.com"
    off = _design(dcgmExporter={"enabled": True, "serviceMonitor": {"enabled": False}})
    assert off.operator.servicemonitor_crd is None
    assert _design(dcgmExporter={"enabled": False}).operator.servicemonitor_crd is None


def test_monitoring_is_planned_only_for_what_is_wanted():
    both = _design(alerts={"enabled": True, "dashboard": {"enabled": True, "folder": "GPUs"}})
    assert both.monitoring is not None and both.monitoring.rule is not None and both.monitoring.dashboard is not None
    assert both.monitoring.rule_crd == "prometheusrules.monitoring.coreos.com"
    assert both.monitoring.dashboard["metadata"]["annotations"]  # the folder
    dashboard_only = _design(alerts={"enabled": False, "dashboard": {"enabled": True}})
    assert dashboard_only.monitoring is not None
    assert (dashboard_only.monitoring.rule, dashboard_only.monitoring.rule_crd) == (None, None)
    assert "annotations" not in dashboard_only.monitoring.dashboard["metadata"]
    assert _design(alerts={"enabled": False, "dashboard": {"enabled": False}}).monitoring is None


def test_every_object_carries_the_base_labels():
    design = _design(
        nodes=[*NODES, {"name": "h", "gpu": {"model": "H100-80GB", "count": 1}, "mig": "all-1g.10gb"}],
        mig={"strategy": "mixed"},
        alerts={"enabled": True, "dashboard": {"enabled": True}},
        images={"mirror": "registry.example.internal/gpu", "registryCredentials": {"username": "bot", "password": PASSWORD}},
        driver=REPO_CONFIG,
    )
    seen = dict(_objects(design))
    assert {"operator pull Secret", "monitoring rule", "monitoring dashboard", "rollout Job"} <= seen.keys()
    assert "operator ConfigMap driver-repo-config" in seen
    for what, manifest in seen.items():
        labels = manifest["metadata"]["labels"]
        assert labels.items() >= BASE_LABELS.items(), what


def test_a_mirror_login_gives_one_pull_secret_per_namespace_and_never_shows_in_the_design():
    design = _design(
        images={"mirror": "registry.example.internal/gpu", "registryCredentials": {"username": "bot", "password": PASSWORD}},
        driver=REPO_CONFIG,
    )
    operator, validation = design.operator.pull_secret, design.validation_pull_secret
    assert operator is not None and validation is not None
    assert (operator["metadata"]["namespace"], validation["metadata"]["namespace"]) == ("gpu-operator", "gpu-validation")
    assert operator["type"] == "kubernetes.io/dockerconfigjson" and PASSWORD in operator["stringData"][".dockerconfigjson"]
    assert PASSWORD not in repr(design)
    plain = _design()
    assert (plain.operator.pull_secret, plain.validation_pull_secret) == (None, None)


def test_the_release_inputs_follow_the_operator_settings():
    design = _design(operator={"protect": True, "upgradeCRD": False, "timeoutSeconds": 1200, "releaseName": "gpus"})
    release = design.operator.release
    assert (release["name"], release["timeout"], release["disable_openapi_validation"]) == ("gpus", 1200, None)
    assert release["values"] is design.values and design.operator.protect is True
    assert _design().operator.release["disable_openapi_validation"] is True

