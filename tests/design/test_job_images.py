"""Every Job of every committed stack starts with a shell its image really has, and the script it
starts is one that shell runs: the API Jobs' scripts (on the GPU Operator image, whose shell is
busybox: config/job-images.yaml) parse under the real busybox `sh -n` and pass
`shellcheck -s busybox`, exactly as the stack ships them in its ConfigMaps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpu_stack.config.job_images import JOB_IMAGE_KEYS, TABLE_PATH, contents_by_copy, table
from gpu_stack.config.stack_files import list_stacks
from gpu_stack.config.validation import SharingBenchmarkSettings, ValidationImages
from gpu_stack.offline.runner import PROJECT_DIR

from ..busybox_image import require_busybox
from ..helpers import plan_stack_file

SHELLCHECK = Path(sys.executable).parent / "shellcheck"
JOB = "kubernetes:batch/v1:Job"
CONFIGMAP = "kubernetes:core/v1:ConfigMap"


def test_every_row_says_where_each_fact_comes_from():
    raw = yaml.safe_load(TABLE_PATH.read_text())["images"]
    assert len({r["image"] for r in raw}) == len(raw), "one row per image"
    for row in raw:
        assert row["shell"] in ("bash", "busybox", "none") and row["utilities"] in ("gnu", "busybox", "none")
        assert row["evidence"], row["image"]
        for line in row["evidence"]:
            # repository@ref:path:line, or a plain statement of what the row cannot claim
            assert "@" in line or "not served" in line, line


def test_every_default_job_image_has_a_row_with_what_its_job_starts():
    from gpu_stack.config.dra import DraRolloutSettings
    from gpu_stack.config.mig import MigRolloutSettings

    defaults = {
        ("validation", "images", "kubectl"): ValidationImages().kubectl,
        ("validation", "images", "cuda"): ValidationImages().cuda,
        ("validation", "images", "toolbox"): ValidationImages().toolbox,
        ("validation", "sharingBenchmark", "image"): SharingBenchmarkSettings().image,
        ("mig", "rollout", "image"): MigRolloutSettings().image,
        ("dra", "rollout", "image"): DraRolloutSettings().image,
    }
    assert set(defaults) == set(JOB_IMAGE_KEYS)
    for key, image in defaults.items():
        row = table()[image]
        assert not JOB_IMAGE_KEYS[key].missing(row), (key, image)


def _scripts_by_configmap(plan) -> dict[str, dict[str, str]]:
    return {r.inputs["metadata"]["name"]: r.inputs.get("data") or {} for r in plan.of_type(CONFIGMAP)}


def _started_scripts(stack: str) -> list[tuple[str, str, str, str]]:
    """(job, image, shell, script text) for each Job container of the stack's plan that starts a
    script from a ConfigMap volume."""
    plan = plan_stack_file(stack)
    maps = _scripts_by_configmap(plan)
    out = []
    for job in plan.of_type(JOB):
        pod = job.inputs["spec"]["template"]["spec"]
        volumes = {v["name"]: v["configMap"]["name"] for v in pod.get("volumes") or [] if "configMap" in v}
        for c in pod["containers"]:
            shell, script = c["command"][0], c["command"][-1]
            for m in c.get("volumeMounts") or []:
                if script.startswith(m["mountPath"] + "/") and m["name"] in volumes:
                    text = maps[volumes[m["name"]]][script.rsplit("/", 1)[-1]]
                    out.append((job.name, c["image"], shell, text))
    return out


@pytest.mark.parametrize("stack", list_stacks(PROJECT_DIR))
def test_each_job_script_runs_under_the_shell_of_its_image(stack, tmp_path):
    busybox = require_busybox()
    started = _started_scripts(stack)
    assert started
    on_busybox = 0
    for job, image, shell, text in started:
        row = contents_by_copy(image)
        assert row is not None, (job, image)
        assert row.has(shell), (job, image, shell)
        if row.shell == "busybox":
            on_busybox += 1
            assert shell == "sh" and text.startswith("#!/bin/sh\n"), job
            script = tmp_path / f"{job}.sh"
            script.write_text(text)
            parsed = subprocess.run([busybox, "sh", "-n", str(script)], capture_output=True, text=True)
            assert parsed.returncode == 0, (job, parsed.stderr)
    assert on_busybox, "every stack has Jobs on the operator image (the node label Job at least)"


def test_the_busybox_scripts_pass_shellcheck_for_busybox():
    scripts = sorted(
        p for folder in ("validation", "mig-rollout") for p in (PROJECT_DIR / "config" / folder).glob("*.sh")
        if p.read_text().startswith("#!/bin/sh\n") or p.name in ("common.sh", "drain.sh")
    )
    assert {p.name for p in scripts} >= {"common.sh", "drain.sh", "mig-state.sh", "node-capacity.sh", "free-capacity.sh", "sharing-cost.sh"}
    proc = subprocess.run([str(SHELLCHECK), "-x", "-s", "busybox", "-S", "warning", *map(str, scripts)],
                          capture_output=True, text=True, cwd=PROJECT_DIR)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_busybox_refuses_the_bash_the_scripts_no_longer_use(tmp_path):
    """The check above can fail: busybox's sh -n rejects a bash array, as it did the old scripts."""
    busybox = require_busybox()
    script = tmp_path / "bash.sh"
    script.write_text('#!/bin/sh\nnames=(a b)\necho "${names[1]}"\n')
    assert subprocess.run([busybox, "sh", "-n", str(script)], capture_output=True).returncode != 0
