"""Update or replace: each row of the replace-rule table, on the smallest pair of plans that shows it."""

from __future__ import annotations

import re

import pytest

from gpu_stack.offline.diff import REPLACE, REPLACE_RULES, UPDATE, diff_plans

CM = "kubernetes:core/v1:ConfigMap"
SECRET = "kubernetes:core/v1:Secret"
DEPLOY = "kubernetes:apps/v1:Deployment"
JOB = "kubernetes:batch/v1:Job"
REL = "kubernetes:helm.sh/v3:Release"
CMD = "command:remote:Command"
PROV = "pulumi:providers:kubernetes"


def res(type_token, name, inputs, **options):
    return {"type": type_token, "name": name, "parent": None, "inputs": inputs, "depends_on": [], "options": options}


def plan(*resources):
    return {"project": "p", "stack": "s", "resources": list(resources), "capacity": [], "warnings": []}


def meta(name, ns="default"):
    return {"metadata": {"name": name, "namespace": ns}}


CASES = {
    "object renamed": (res(CM, "c", meta("a")), res(CM, "c", meta("b")), ["metadata.name changed"]),
    "object moved": (res(DEPLOY, "d", meta("a")), res(DEPLOY, "d", meta("a", "ns2")), ["metadata.namespace changed"]),
    "immutable ConfigMap data": (
        res(CM, "c", {**meta("a"), "immutable": True, "data": {"k": "1"}}),
        res(CM, "c", {**meta("a"), "immutable": True, "data": {"k": "2"}}),
        ["data of an immutable ConfigMap changed"],
    ),
    "immutable Secret data": (
        res(SECRET, "s", {**meta("a"), "immutable": True, "stringData": {"k": "1"}}),
        res(SECRET, "s", {**meta("a"), "immutable": True, "stringData": {"k": "2"}}),
        ["data of an immutable ConfigMap changed"],
    ),
    "ConfigMap data": (
        res(CM, "c", {**meta("a"), "data": {"k": "1"}}),
        res(CM, "c", {**meta("a"), "data": {"k": "2"}}),
        ["ConfigMap data changed (the kubernetes provider replaces ConfigMaps on data changes)"],
    ),
    "Secret data": (
        res(SECRET, "s", {**meta("a"), "binaryData": {"k": "MQ=="}}),
        res(SECRET, "s", {**meta("a"), "binaryData": {"k": "Mg=="}}),
        ["ConfigMap data changed (the kubernetes provider replaces ConfigMaps on data changes)"],
    ),
    "Job spec": (
        res(JOB, "j", {**meta("j"), "spec": {"backoffLimit": 1}}),
        res(JOB, "j", {**meta("j"), "spec": {"backoffLimit": 2}}),
        ["a Job's spec cannot be changed in place"],
    ),
    "Job labels": (
        res(JOB, "j", {"metadata": {"name": "j", "labels": {"a": "1"}}}),
        res(JOB, "j", {"metadata": {"name": "j", "labels": {"a": "2"}}}),
        [],
    ),
    "release renamed": (res(REL, "r", {"name": "a", "namespace": "n"}), res(REL, "r", {"name": "b", "namespace": "n"}), ["release name changed"]),
    "release moved": (res(REL, "r", {"name": "a", "namespace": "n"}), res(REL, "r", {"name": "a", "namespace": "m"}), ["release namespace changed"]),
    "release values": (res(REL, "r", {"name": "a", "values": {"x": 1}}), res(REL, "r", {"name": "a", "values": {"x": 2}}), []),
    "command triggers": (res(CMD, "c", {"create": "x", "triggers": ["1"]}), res(CMD, "c", {"create": "x", "triggers": ["2"]}), ["triggers changed"]),
    "command script": (res(CMD, "c", {"create": "x", "triggers": ["1"]}), res(CMD, "c", {"create": "y", "triggers": ["1"]}), []),
    "clusterIdentifier changed": (
        res(PROV, "k8s", {"clusterIdentifier": "a", "context": "x"}),
        res(PROV, "k8s", {"clusterIdentifier": "b", "context": "x"}),
        ["provider clusterIdentifier changed: it points at another cluster"],
    ),
    "clusterIdentifier kept, context changed": (
        res(PROV, "k8s", {"clusterIdentifier": "a", "context": "x"}),
        res(PROV, "k8s", {"clusterIdentifier": "a", "context": "y"}),
        [],
    ),
    "clusterIdentifier added with a new context": (
        res(PROV, "k8s", {"context": "x"}),
        res(PROV, "k8s", {"clusterIdentifier": "a", "context": "y"}),
        [],
    ),
    "kubeconfig without clusterIdentifier": (
        res(PROV, "k8s", {"kubeconfig": "[secret]"}),
        res(PROV, "k8s", {"kubeconfig": "[secret]", "context": "y"}),
        ["provider context changed: it points at another cluster"],
    ),
    "cluster without clusterIdentifier": (
        res(PROV, "k8s", {"cluster": "a", "kubeconfig": "k1"}),
        res(PROV, "k8s", {"cluster": "b", "kubeconfig": "k2"}),
        ["provider kubeconfig changed: it points at another cluster", "provider cluster changed: it points at another cluster"],
    ),
    "replaceOnChanges property": (
        res(DEPLOY, "d", {**meta("a"), "spec": {"replicas": 1}}, replaceOnChanges=["spec"]),
        res(DEPLOY, "d", {**meta("a"), "spec": {"replicas": 2}}, replaceOnChanges=["spec"]),
        ["replaceOnChanges: spec"],
    ),
    "replaceOnChanges * on an option-only change": (
        res(DEPLOY, "d", meta("a"), replaceOnChanges=["*"]),
        res(DEPLOY, "d", meta("a"), replaceOnChanges=["*"], protect=True),
        [],
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_rule_on_its_smallest_change(case):
    old, new, reasons = CASES[case]
    (change,) = diff_plans(plan(old), plan(new)).changes
    assert change.reasons == reasons
    assert change.action == (REPLACE if reasons else UPDATE)


def test_a_mutable_config_map_provider_updates_data_in_place():
    provider = res(PROV, "k8s", {"enableConfigMapMutable": "true"})
    old = res(CM, "c", {**meta("a"), "data": {"k": "1"}}, provider="k8s")
    new = res(CM, "c", {**meta("a"), "data": {"k": "2"}}, provider="k8s")
    (change,) = diff_plans(plan(provider, old), plan(provider, new)).changes
    assert (change.action, change.reasons) == (UPDATE, [])


def test_a_replaced_provider_replaces_what_it_manages_changed_or_not():
    old_p, new_p = res(PROV, "k8s", {"context": "x"}), res(PROV, "k8s", {"context": "y"})
    same = res(DEPLOY, "d", meta("a"), provider="k8s")
    changed_old = res(CM, "c", {**meta("c"), "data": {"k": "1"}, "immutable": True}, provider="k8s")
    changed_new = res(CM, "c", {**meta("c"), "data": {"k": "1"}, "immutable": False}, provider="k8s")
    result = diff_plans(plan(old_p, same, changed_old), plan(new_p, same, changed_new))
    reasons = {c.name: (c.action, c.reasons) for c in result.changes}
    assert reasons["d"] == (REPLACE, ["its provider k8s is replaced"])
    assert reasons["c"] == (REPLACE, ["data of an immutable ConfigMap changed", "its provider k8s is replaced"])
    # Two stacks compared: their providers differ by design, nothing is replaced for it.
    across = diff_plans(plan(old_p, same), plan(new_p, same), same_stack=False)
    assert [(c.name, c.action) for c in across.changes] == [("k8s", UPDATE)]


def test_every_row_of_the_table_is_shown_by_a_case():
    seen = [reason for old, new, _ in CASES.values() for c in diff_plans(plan(old), plan(new)).changes for reason in c.reasons]
    seen.append("its provider k8s is replaced")  # the cascade, shown above
    patterns = [re.compile(re.escape(r.reason).replace(r"\{path\}", ".+").replace(r"\{provider\}", ".+") + "$") for r in REPLACE_RULES]
    unseen = [r.reason for r, p in zip(REPLACE_RULES, patterns, strict=True) if not any(p.match(s) for s in seen)]
    assert unseen == []
