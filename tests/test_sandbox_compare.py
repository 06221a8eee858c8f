"""The offline-plan-versus-preview comparison the end-to-end tests rely on (sandbox/compare.py):
it finds every real difference, and forgives only secrets, preview-unknowns and the defaults the
provider's Check is known to add."""

from __future__ import annotations

import copy

from sandbox.compare import UNKNOWN_ENGINE, differences

URN = "urn:pulumi:dev::gpu-stack::"
STACK = URN + "pulumi:pulumi:Stack::gpu-stack-dev"


def _plan():
    return {
        "resources": [
            {"type": "pulumi:providers:kubernetes", "name": "k8s", "parent": None, "inputs": {"context": "dev"}, "depends_on": []},
            {"type": "gpu-stack:index:GpuOperator", "name": "gpu-operator", "parent": None, "inputs": {}, "depends_on": []},
            {"type": "kubernetes:helm.sh/v3:Release", "name": "gpu-operator-release", "parent": "gpu-operator",
             "inputs": {"chart": "/c", "compat": "true", "values": {"a": 1, "key": "[secret]", "name": "[unknown]"}},
             "depends_on": ["gpu-operator-ns"]},
        ],
        "reads": [{"type": "kubernetes:core/v1:Node", "name": "node-a", "id": "a"}],
    }


def _preview():
    comp = URN + "gpu-stack:index:GpuOperator::gpu-operator"
    return {"steps": [
        {"op": "create", "urn": STACK, "newState": {"type": "pulumi:pulumi:Stack", "urn": STACK}},
        {"op": "create", "urn": URN + "pulumi:providers:kubernetes::k8s", "newState": {
            "type": "pulumi:providers:kubernetes", "custom": True, "parent": STACK,
            "inputs": {"context": "dev", "version": "4.25.0", "__internal": {}}}},
        {"op": "create", "urn": comp, "newState": {"type": "gpu-stack:index:GpuOperator", "parent": STACK, "inputs": {}}},
        {"op": "create", "urn": URN + "gpu-stack:index:GpuOperator$kubernetes:helm.sh/v3:Release::gpu-operator-release",
         "newState": {"type": "kubernetes:helm.sh/v3:Release", "custom": True, "parent": comp,
                      "dependencies": [URN + "kubernetes:core/v1:Namespace::gpu-operator-ns"],
                      "inputs": {"chart": "/c", "skipAwait": False, "description": "",
                                 "values": {"a": 1, "key": "[secret]", "name": UNKNOWN_ENGINE}}}},
        {"op": "read", "urn": URN + "kubernetes:core/v1:Node::node-a", "newState": {"type": "kubernetes:core/v1:Node", "parent": STACK}},
    ]}


def test_the_same_resources_have_no_difference():
    assert differences(_plan(), _preview()) == []


def test_a_changed_input_is_named_by_resource_and_path():
    preview = _preview()
    preview["steps"][3]["newState"]["inputs"]["values"]["a"] = 2
    assert differences(_plan(), preview) == ["gpu-operator-release: values.a: planned 1, preview 2"]


def test_a_provider_default_at_another_value_is_a_difference():
    preview = _preview()
    preview["steps"][3]["newState"]["inputs"]["skipAwait"] = True
    assert differences(_plan(), preview) == ["gpu-operator-release: skipAwait: not planned, preview has True"]


def test_missing_resources_reads_parents_and_dependencies_are_differences():
    plan = copy.deepcopy(_plan())
    plan["resources"][2]["parent"] = None
    plan["resources"][2]["depends_on"] = []
    plan["reads"].append({"type": "kubernetes:core/v1:Node", "name": "node-b", "id": "b"})
    preview = _preview()
    del preview["steps"][2]
    assert differences(plan, preview) == [
        "gpu-operator: planned (gpu-stack:index:GpuOperator), not in the preview",
        "gpu-operator-release: parent planned None, preview 'gpu-operator'",
        "gpu-operator-release: depends_on planned [], preview ['gpu-operator-ns']",
        "read:node-b: planned (kubernetes:core/v1:Node), not in the preview",
    ]
