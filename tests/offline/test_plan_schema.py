"""The plan's JSON (the contract other tools read) is described by docs/plan.schema.json, generated from
the plan models in gpu_stack/offline/plan.py."""

from __future__ import annotations

import copy
import json

import jsonschema
import pytest

from gpu_stack.offline import plan as plan_module
from tests.helpers import plan_stack_file


def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(plan_module.SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(doc) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator().iter_errors(doc)]


def test_committed_plan_schema_is_current():
    assert plan_module.main(["--check"]) == 0, "run `python -m gpu_stack.offline.plan` and commit docs/plan.schema.json"


@pytest.fixture(scope="module", params=["dev", "staging", "prod"])
def plan_json(request):
    # Through the JSON text, as a consumer of `plan --format json` reads it.
    return json.loads(json.dumps(plan_stack_file(request.param).to_json()))


def test_real_plans_validate_against_the_schema(plan_json):
    assert _errors(plan_json) == []
    assert list(plan_json) == ["project", "stack", "resources", "capacity", "warnings", "outputs", "reads"]
    assert plan_json["capacity"] == plan_json["outputs"]["capacity"]


def test_schema_requires_the_contract_keys(plan_json):
    assert set(_validator().schema["required"]) >= {"project", "stack", "resources", "capacity", "warnings"}
    resource_required = set(_validator().schema["$defs"]["ResourceRecord"]["required"])
    assert resource_required >= {"type", "name", "parent", "inputs", "depends_on"}
    doc = copy.deepcopy(plan_json)
    del doc["resources"][0]["depends_on"]
    assert any("'depends_on' is a required property" in e for e in _errors(doc))


def test_schema_flags_an_undocumented_key_or_option(plan_json):
    doc = copy.deepcopy(plan_json)
    doc["resources"][0]["options"]["protected"] = True  # misspelt `protect`
    doc["extra"] = 1
    errors = _errors(doc)
    assert any("'protected' was unexpected" in e for e in errors), errors
    assert any("'extra' was unexpected" in e for e in errors), errors


def test_schema_flags_a_wrongly_typed_value(plan_json):
    doc = copy.deepcopy(plan_json)
    doc["resources"][0]["parent"] = 3
    doc["warnings"] = "none"
    errors = _errors(doc)
    assert any(e.startswith("resources/0/parent") for e in errors), errors
    assert any(e.startswith("warnings") for e in errors), errors
