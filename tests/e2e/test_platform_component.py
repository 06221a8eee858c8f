"""A stack made before `GpuPlatform` (every component a child of the stack itself) keeps every
resource when the program becomes a user of the component: the real engine takes each resource,
the release, the node labels and the Jobs included, for the one already there (aliases), so
`pulumi preview` shows one create (the component) and the next `up` changes nothing."""

from __future__ import annotations

import json

from .conftest import sandbox_for

BEFORE_MAIN = '''"""gpu-stack: a Kubernetes cluster with NVIDIA GPUs made into a shareable, monitored GPU platform."""

import pulumi

from gpu_stack.components.program import load_settings_from_pulumi
from gpu_stack.components.stack import build_stack

settings = load_settings_from_pulumi()
for key, value in build_stack(settings).items():
    pulumi.export(key, value)
'''
"""The project's __main__.py before the component (commit 250b1e5): build_stack under the stack."""


def _out(proc) -> str:
    return proc.stdout + proc.stderr


def test_a_stack_from_before_the_component_keeps_every_resource(tools, e2e_tmp):
    with sandbox_for("k3s", tools, e2e_tmp / "platform-aliases", validation={"timeoutSeconds": 180}) as box:
        main = box.pulumi.project_dir / "__main__.py"
        now = main.read_text()
        assert "GpuPlatform(" in now
        main.write_text(BEFORE_MAIN)
        first = box.pulumi.up(check=False)
        assert first.returncode == 0, _out(first)[-3000:]
        before = json.loads(box.pulumi.run("stack", "export").stdout)["deployment"]["resources"]
        assert not any(r["type"] == "gpu-stack:index:GpuPlatform" for r in before)

        main.write_text(now)
        preview = box.pulumi.run("preview", "--json", check=False)
        assert preview.returncode == 0, _out(preview)[-3000:]
        steps = json.loads(preview.stdout).get("steps") or []
        changed = [(s["op"], s["urn"]) for s in steps if s["op"] not in ("same", "read")]
        # the component itself is the one new resource; no replace, no delete, no create of anything else
        assert [op for op, urn in changed if "GpuPlatform" not in urn] == [], changed
        assert [op for op, _ in changed] in ([], ["create"]), changed

        again = box.pulumi.up(check=False)
        assert again.returncode == 0, _out(again)[-3000:]
        after = json.loads(box.pulumi.run("stack", "export").stdout)["deployment"]["resources"]
        by_name = {r["urn"].rsplit("::", 1)[-1]: r for r in after}
        # the same objects, now under the component: the release was neither replaced nor reinstalled
        old_release = next(r for r in before if r["type"] == "kubernetes:helm.sh/v3:Release")
        new_release = next(r for r in after if r["type"] == "kubernetes:helm.sh/v3:Release")
        assert new_release["id"] == old_release["id"] and "GpuPlatform$gpu-stack:index:GpuOperator" in new_release["urn"]
        assert by_name["gpu-stack"]["type"] == "gpu-stack:index:GpuPlatform"
        records = box.cluster.get_json("secrets", "-n", "gpu-operator", "-l", "owner=helm")["items"]
        assert len(records) == 1, [s["metadata"]["name"] for s in records]
        old_jobs = {r["id"] for r in before if r["type"] == "kubernetes:batch/v1:Job"}
        assert old_jobs and old_jobs == {r["id"] for r in after if r["type"] == "kubernetes:batch/v1:Job"}
