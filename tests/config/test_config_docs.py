"""The configuration reference and the stack file JSON Schema are generated from the settings models."""

from __future__ import annotations

import json

import jsonschema
import pytest
import yaml

from gpu_stack.config import docs as config_docs
from gpu_stack.design import docs as stack_docs
from tests.helpers import PROJECT_DIR

STACK_FILES = sorted(PROJECT_DIR.glob("Pulumi.*.yaml"))


def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(config_docs.SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_generated_docs_are_current():
    assert stack_docs.main(["--check"]) == 0, "run `make docs` and commit docs/"


@pytest.mark.parametrize("path", STACK_FILES, ids=lambda p: p.name)
def test_committed_stack_files_validate_against_the_schema(path):
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    errors = [e.message for e in _validator().iter_errors(document)]
    assert errors == []


@pytest.mark.parametrize(
    "config, fragment",
    [
        ({"gpu-stack:sharng": {"mode": "mps"}}, "gpu-stack:sharng"),
        ({"gpu-stack:sharing": {"replicas": 1}}, "1 is less than the minimum of 2"),
        ({"gpu-stack:sharing": {"mode": "timeslicing"}}, "'timeslicing' is not one of"),
        ({"gpu-stack:nodes": [{"name": "n1"}]}, "'gpu' is a required property"),
        ({"gpu-stack:mig": {"profiles": {"p": [{"mig-enabled": True, "migDevices": {}}]}}}, "migDevices"),
    ],
)
def test_schema_flags_what_the_program_refuses(config, fragment):
    def flatten(errors):
        for error in errors:
            yield error.message
            yield from flatten(error.context or ())

    messages = " | ".join(flatten(_validator().iter_errors({"config": config})))
    assert fragment in messages


def test_schema_accepts_secure_values_and_other_namespaces():
    document = {
        "environment": ["gpu-team/dev"],
        "config": {
            "gpu-stack:ssh": {"user": "ubuntu", "privateKey": {"secure": "v1:abc"}},
            "kubernetes:context": "dev",
        },
    }
    assert list(_validator().iter_errors(document)) == []


def test_reference_lists_every_key_with_its_default_and_allowed_values():
    text = config_docs.MARKDOWN_PATH.read_text(encoding="utf-8")
    assert "| `gpu-stack:sharing.replicas` | integer | `4` | >= 2; <= 1024 |" in text
    assert "| `gpu-stack:nodes[i].gpu.model` | string | required |" in text
    assert "`none`, `single`, `mixed`" in text
    documented = {line.split("`")[1] for line in text.splitlines() if line.startswith("| `gpu-stack:")}
    walked = {path for path, *_ in config_docs.iter_keys(config_docs.settings_schema())}
    assert walked - documented == {f"gpu-stack:{k}" for k in config_docs.settings_schema()["properties"]}


def test_every_key_has_a_description():
    """Each field of the models carries a docstring (or its model's), so no row of the reference is blank."""
    text = config_docs.MARKDOWN_PATH.read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `gpu-stack:")]
    assert len(rows) > 150
    blank = [row.split("`")[1] for row in rows if row.rstrip().endswith("|  |")]
    assert blank == []
