"""The offline-plan-versus-preview comparison the end-to-end tests rely on (sandbox/compare.py):
it finds every real difference, and forgives only what its ALLOWED table lists (the defaults the
provider's Check adds, the engine's provider bookkeeping at the pinned version). A secret matches
only a secret, an unknown only an unknown, a value only a value of the same kind."""

from __future__ import annotations

import copy

from sandbox.compare import UNKNOWN_ENGINE, differences

VERSIONS = {"kubernetes": "4.25.0", "command": "1.2.1"}

URN = "urn:pulumi:dev::gpu-stack::"
STACK = URN + "pulumi:pulumi:Stack::gpu-stack-dev"


def _plan():
    return {
        "resources": [
            {"type": "pulumi:providers:kubernetes", "name": "k8s", "parent": None, "inputs": {"context": "dev"}, "depends_on": []},
            {"type": "gpu-stack:index:GpuOperator", "name": "gpu-operator", "parent": None, "inputs": {}, "depends_on": []},
            {"type": "kubernetes:helm.sh/v3:Release", "name": "gpu-operator-release", "parent": "gpu-operator",
             "inputs": {"chart": "/c", "compat": "true", "values": {"a": 1, "on": True, "key": "[secret]", "name": "[unknown]"}},
             "depends_on": ["gpu-operator-ns"], "options": {"provider": "k8s", "customTimeouts": {"create": "6m"}}},
            {"type": "command:remote:Command", "name": "prep", "parent": None, "inputs": {"create": "true"}, "depends_on": [],
             "options": {"deleteBeforeReplace": True}},
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
                      "provider": URN + "pulumi:providers:kubernetes::k8s::04da6b54", "customTimeouts": {"create": 360},
                      "inputs": {"chart": "/c", "skipAwait": False, "description": "",
                                 "values": {"a": 1, "on": True, "key": "[secret]", "name": UNKNOWN_ENGINE}}}},
        {"op": "create", "urn": URN + "pulumi:providers:command::default_1_2_1", "newState": {
            "type": "pulumi:providers:command", "custom": True, "parent": STACK, "inputs": {"version": "1.2.1"}}},
        {"op": "create", "urn": URN + "command:remote:Command::prep", "newState": {
            "type": "command:remote:Command", "custom": True, "parent": STACK, "inputs": {"create": "true"},
            "provider": URN + "pulumi:providers:command::default_1_2_1::04da6b54"}},
        {"op": "read", "urn": URN + "kubernetes:core/v1:Node::node-a",
         "newState": {"type": "kubernetes:core/v1:Node", "parent": STACK, "id": "a"}},
    ]}


def _plan_file(delete_before_replace=True):
    return {"resourcePlans": {URN + "command:remote:Command::prep": {"goal": {"deleteBeforeReplace": delete_before_replace}}}}


def _differences(plan, preview, plan_file=None):
    return differences(plan, preview, _plan_file() if plan_file is None else plan_file, VERSIONS)


def test_the_same_resources_have_no_difference():
    assert _differences(_plan(), _preview()) == []


def test_a_changed_input_is_named_by_resource_and_path():
    preview = _preview()
    preview["steps"][3]["newState"]["inputs"]["values"]["a"] = 2
    assert _differences(_plan(), preview) == ["gpu-operator-release: values.a: planned 1, preview 2"]


def test_a_provider_default_at_another_value_is_a_difference():
    preview = _preview()
    preview["steps"][3]["newState"]["inputs"]["skipAwait"] = True
    assert _differences(_plan(), preview) == ["gpu-operator-release: skipAwait: not planned, preview has True"]


def test_missing_resources_reads_parents_and_dependencies_are_differences():
    plan = copy.deepcopy(_plan())
    plan["resources"][2]["parent"] = None
    plan["resources"][2]["depends_on"] = []
    plan["reads"].append({"type": "kubernetes:core/v1:Node", "name": "node-b", "id": "b"})
    preview = _preview()
    del preview["steps"][2]
    assert _differences(plan, preview) == [
        "gpu-operator: planned (gpu-stack:index:GpuOperator), not in the preview",
        "gpu-operator-release: parent planned None, preview 'gpu-operator'",
        "gpu-operator-release: depends_on planned [], preview ['gpu-operator-ns']",
        "read:node-b: planned (kubernetes:core/v1:Node), not in the preview",
    ]


def test_a_secret_matches_only_a_secret():
    preview = _preview()
    preview["steps"][3]["newState"]["inputs"]["values"]["key"] = "plain text"
    assert _differences(_plan(), preview) == ["gpu-operator-release: values.key: planned '[secret]', preview 'plain text'"]
    plan = _plan()
    plan["resources"][2]["inputs"]["values"]["a"] = "[secret]"
    assert _differences(plan, _preview()) == ["gpu-operator-release: values.a: planned '[secret]', preview 1"]


def test_an_unknown_matches_only_an_unknown():
    preview = _preview()
    preview["steps"][3]["newState"]["inputs"]["values"]["a"] = UNKNOWN_ENGINE
    assert _differences(_plan(), preview) == ["gpu-operator-release: values.a: planned 1, preview '[unknown]'"]


def test_a_value_of_another_kind_is_a_difference():
    preview = _preview()
    preview["steps"][3]["newState"]["inputs"]["values"]["on"] = 1
    assert _differences(_plan(), preview) == ["gpu-operator-release: values.on: planned True, preview 1"]


def test_resource_options_are_compared():
    assert _differences(_plan(), _preview(), _plan_file(delete_before_replace=False)) == [
        "prep: option deleteBeforeReplace planned True, preview None"
    ]
    preview = _preview()
    preview["steps"][3]["newState"]["customTimeouts"] = {"create": 300}
    preview["steps"][3]["newState"]["protect"] = True
    assert _differences(_plan(), preview) == [
        "gpu-operator-release: option customTimeouts planned {'create': 360.0}, preview {'create': 300.0}",
        "gpu-operator-release: option protect planned None, preview True",
    ]


def test_providers_must_be_at_the_pinned_versions():
    preview = _preview()
    preview["steps"][1]["newState"]["inputs"]["version"] = "4.26.0"
    preview["steps"][4]["newState"]["inputs"]["version"] = "1.2.0"
    assert _differences(_plan(), preview) == [
        "default_1_2_1: default provider of command at '1.2.0', pinned '1.2.1'",
        "k8s: version: not planned, preview has '4.26.0'",
    ]


def test_a_read_of_another_object_is_a_difference():
    preview = _preview()
    preview["steps"][-1]["newState"]["id"] = "b"
    assert _differences(_plan(), preview) == ["read:node-a: read id planned 'a', preview 'b'"]


def test_a_file_asset_is_compared_by_path_and_bytes(tmp_path):
    script = tmp_path / "config" / "node-prep.sh"
    script.parent.mkdir()
    script.write_text("echo one\n")
    import hashlib

    digest = hashlib.sha256(b"echo one\n").hexdigest()
    plan = _plan()
    plan["resources"][3]["inputs"]["source"] = {"fileAsset": "config/node-prep.sh"}
    preview = _preview()
    asset = {"4dabf18193072939515e22adb298388d": "c44067f5952c0a294b673a41bacd8c17", "path": "config/node-prep.sh", "hash": digest}
    preview["steps"][5]["newState"]["inputs"]["source"] = asset
    assert differences(plan, preview, _plan_file(), VERSIONS, tmp_path) == []
    script.write_text("echo two\n")  # the engine read other bytes than the plan's file holds
    assert differences(plan, preview, _plan_file(), VERSIONS, tmp_path) == [
        f"prep: source.sha256: planned {hashlib.sha256(b'echo two' + bytes([10])).hexdigest()!r}, preview {digest!r}"
    ]

