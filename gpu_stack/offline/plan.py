"""The plan document: what one offline run of the program registers, and THE JSON contract.

`python -m gpu_stack plan --format json` prints `Plan.to_json()`; the diff, the git-revision plans
and any other tool read that JSON. Its JSON Schema, `docs/plan.schema.json`, is generated from the
models below (`python -m gpu_stack.offline.plan` rewrites it, `--check` fails when it is stale).

Keys of the document, in order: `project`, `stack`, `resources` (type token, name, parent, inputs
as the provider would receive them, camelCase, `depends_on`, `options`), `capacity` (the stack's
capacity table), `warnings`, `outputs` (every stack output) and `reads` (existing objects the
program reads with `<Type>.get`). A secret shows as `[secret]`, a value the engine knows only once
the resource exists as `[unknown]`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, computed_field
from typing_extensions import TypedDict

from ..config.package_data import CLONE_ROOT, docs_path

SECRET = "[secret]"
"""What the plan shows for a Pulumi secret, or any string carrying a secret config value."""
UNKNOWN = "[unknown]"
"""What the plan shows for a value the engine knows only once the resource exists."""

SCHEMA_PATH = docs_path("plan.schema.json")


class CustomTimeouts(TypedDict, total=False):
    create: str
    update: str
    delete: str


class ResourceOptions(TypedDict, total=False):
    """The resource options a reviewer must see; a key is present only when the option is set."""

    protect: bool
    deleteBeforeReplace: bool
    replaceOnChanges: list[str]
    ignoreChanges: list[str]
    additionalSecretOutputs: list[str]
    customTimeouts: CustomTimeouts
    provider: str
    """The name of the explicit provider resource."""
    retainOnDelete: bool
    aliases: list[dict[str, Any]]
    """Where the resource was before (`{"noParent": true}`: a child of the stack itself), so the
    engine takes it for the resource already there."""


class ReadRecord(TypedDict):
    """An existing object the program reads (`Node.get`): `pulumi preview` fails when it is missing."""

    type: str
    name: str
    id: str
    parent: str | None
    depends_on: list[str]
    """What the read waits for (its `depends_on` and the resources its id comes from), by name."""


class ResourceRecord(BaseModel):
    """One registered resource (custom resource, component or provider)."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(description="Pulumi type token, e.g. `kubernetes:helm.sh/v3:Release`.")
    name: str = Field(description="The resource name (unique in a plan).")
    parent: str | None = Field(description="Name of the parent component; null under the stack.")
    inputs: dict[str, Any] = Field(
        description="What the provider would receive, camelCase keys as the SDK sends them; {} for a component."
    )
    depends_on: list[str] = Field(description="Names of the resources it waits for, sorted.")
    options: ResourceOptions = Field(default_factory=lambda: ResourceOptions())
    secrets: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Input path -> fingerprint of each value shown as `[secret]` (absent when none): the diff says "
            "which secret input changed without either value. Offline a fingerprint digests the ciphertext's "
            "placeholder, never the secret."
        ),
    )
    custom: bool = Field(True, exclude=True, description="False for a component (not in the JSON).")

    def to_json(self) -> dict[str, Any]:
        out = {
            "type": self.type,
            "name": self.name,
            "parent": self.parent,
            "inputs": self.inputs,
            "depends_on": self.depends_on,
            "options": self.options,
        }
        if self.secrets:
            out["secrets"] = self.secrets
        return out


class Plan(BaseModel):
    """The whole plan of one stack."""

    model_config = ConfigDict(
        extra="forbid",
        title="gpu-stack offline plan",
        json_schema_extra={"description": "The output of `python -m gpu_stack plan --format json`."},
    )

    project: str
    stack: str
    resources: list[ResourceRecord] = Field(description="Providers first, then depth-first by name.")
    outputs: dict[str, Any] = Field(description="The stack outputs (secrets as `[secret]`).")
    warnings: list[str]
    reads: list[ReadRecord] = Field(default_factory=list, description="Existing objects the program reads.")

    # pydantic's documented form; mypy does not follow a decorator over a property
    @computed_field(description="The capacity table (the `capacity` output): one row per node, then TOTAL.")  # type: ignore[prop-decorator]
    @property
    def capacity(self) -> list[dict[str, Any]]:
        return list(self.outputs.get("capacity") or [])

    def to_json(self) -> dict[str, Any]:
        """The JSON document, keys in the contract's order."""
        return {
            "project": self.project,
            "stack": self.stack,
            "resources": [r.to_json() for r in self.resources],
            "capacity": self.capacity,
            "warnings": self.warnings,
            "outputs": self.outputs,
            "reads": self.reads,
        }

    def by_name(self, name: str) -> ResourceRecord:
        for r in self.resources:
            if r.name == name:
                return r
        raise KeyError(name)

    def of_type(self, type_token: str) -> list[ResourceRecord]:
        return [r for r in self.resources if r.type == type_token]


def plan_schema() -> dict[str, Any]:
    """The JSON Schema of `Plan.to_json()` (serialization mode: `capacity` in, `custom` out)."""
    schema = Plan.model_json_schema(mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://github.com/gpu-stack/gpu-stack/docs/plan.schema.json",
        **schema,
    }


def rendered_schema() -> str:
    return json.dumps(plan_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpu_stack.offline.plan", description="Write docs/plan.schema.json.")
    parser.add_argument("--check", action="store_true", help="fail when the committed schema is stale")
    args = parser.parse_args(argv)
    text = rendered_schema()
    current = SCHEMA_PATH.read_text(encoding="utf-8") if SCHEMA_PATH.exists() else None
    if current == text:
        return 0
    if args.check:
        print("stale docs/plan.schema.json; run `python -m gpu_stack.offline.plan`", file=sys.stderr)
        return 1
    if CLONE_ROOT is None:
        print("python -m gpu_stack.offline.plan rewrites a clone's docs/plan.schema.json; this gpu-stack is an "
              "installed package: run it in a clone", file=sys.stderr)
        return 2
    SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA_PATH.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
