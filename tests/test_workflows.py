"""GitHub Actions: valid against GitHub's schema, least privilege, and their scripts do what they say."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpu_stack.config.fleet import load_fleet
from gpu_stack.config.stack_files import SECRET_PLACEHOLDER_PREFIX, list_stacks
from gpu_stack.fleet.report import MARKER as FLEET_MARKER
from gpu_stack.offline.runner import PROJECT_DIR

from .helpers import committed_project_copy, git, reference_dir

WORKFLOWS = PROJECT_DIR / ".github" / "workflows"
BIN = Path(sys.executable).parent
PR = WORKFLOWS / "pull-request.yml"
DEPLOY = WORKFLOWS / "deploy.yml"
CHART = reference_dir() / "chart"


def _load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    # YAML 1.1 reads the key `on` as True.
    if True in doc:
        doc["on"] = doc.pop(True)
    return doc


def _tool(name: str) -> str:
    path = BIN / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed (requirements-dev.txt lists it)")
    return found


def _step(job: dict, name: str) -> dict:
    return next(s for s in job["steps"] if s.get("name") == name)


def _uses(job: dict, action: str) -> dict:
    return next(s for s in job["steps"] if str(s.get("uses", "")).startswith(action + "@"))


def test_workflows_validate_against_githubs_schema():
    files = sorted(WORKFLOWS.glob("*.yml"))
    assert {p.name for p in files} == {"pull-request.yml", "deploy.yml"}
    proc = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *map(str, files)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_schema_check_rejects_a_broken_workflow(tmp_path: Path):
    doc = _load(PR)
    doc["permissions"] = {"contents": "everything"}
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump(doc))
    proc = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(bad)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0


def _scripts() -> list[tuple[str, str]]:
    out = []
    for path in sorted(WORKFLOWS.glob("*.yml")):
        for job_id, job in _load(path)["jobs"].items():
            for i, step in enumerate(job["steps"]):
                if "run" in step:
                    out.append((f"{path.name}:{job_id}:{step.get('name', i)}", step["run"]))
    return out


def test_scripts_pass_shellcheck_and_take_context_only_through_env(tmp_path: Path):
    for where, script in _scripts():
        # `${{ }}` inside a script is a script-injection hole; values come in through `env:`.
        assert "${{" not in script, where
        path = tmp_path / (re.sub(r"[^A-Za-z0-9]+", "_", where) + ".sh")
        path.write_text("#!/bin/bash\n" + script)
        proc = subprocess.run([_tool("shellcheck"), str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{where}:\n{proc.stdout}"


def test_least_privilege_permissions():
    for path in (PR, DEPLOY):
        doc = _load(path)
        assert doc["permissions"] == {"contents": "read"}, path.name
        for job_id, job in doc["jobs"].items():
            perms = job.get("permissions", doc["permissions"])
            comments = any(
                str(s.get("uses", "")).startswith("marocchino/sticky-pull-request-comment@")
                or str(s.get("with", {}).get("comment-on-pr", "")).lower() == "true"
                for s in job["steps"]
            )
            writes = {k for k, v in perms.items() if v == "write"}
            assert writes == ({"pull-requests"} if comments else set()), f"{path.name}:{job_id}"


def test_pull_request_workflow_shape():
    doc = _load(PR)
    assert set(doc["on"]) == {"pull_request"}
    jobs = doc["jobs"]
    assert any(s.get("run") == "make test" for s in jobs["test"]["steps"])
    diff = jobs["offline-diff"]
    assert _uses(diff, "actions/checkout")["with"]["fetch-depth"] == 0
    step = _step(diff, "Diff every stack against the base branch")
    assert step["env"] == {"BASE_REF": "${{ github.base_ref }}"}
    assert 'python -m gpu_stack fleet plan --base "origin/$BASE_REF" --format markdown' in step["run"]
    # The object view's chart is pulled into the user cache once and kept between runs.
    cache = _uses(diff, "actions/cache")
    assert cache["with"]["path"] == "~/.cache/gpu-stack/charts"
    steps = [s.get("name") for s in diff["steps"]]
    assert steps.index("Cache the GPU Operator chart") < steps.index("Diff every stack against the base branch")
    sticky = _uses(diff, "marocchino/sticky-pull-request-comment")
    assert sticky["with"]["path"] == "${{ steps.diff.outputs.comment }}"
    assert sticky["with"]["header"] == "gpu-stack-fleet-plan"
    preview = jobs["preview"]
    assert preview["needs"] == "test"
    # Each stack a pull request may preview, with its own environment's credentials; prod never.
    assert preview["strategy"]["matrix"]["stack"] == ["dev", "staging"]
    assert set(preview["strategy"]["matrix"]["stack"]) | {"prod"} == set(list_stacks(PROJECT_DIR))
    assert preview["environment"] == "${{ matrix.stack }}"
    assert "prod" not in PR.read_text().replace("production", "").split("matrix:")[1]
    pulumi = next(s for s in preview["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@") and "with" in s)
    assert pulumi["if"] == "steps.credentials.outputs.available == 'true'"
    assert pulumi["with"]["command"] == "preview"
    assert pulumi["with"]["diff"] is True and pulumi["with"]["comment-on-pr"] is True
    assert pulumi["with"]["stack-name"] == "${{ matrix.stack }}"
    assert pulumi["env"] == {"PULUMI_ACCESS_TOKEN": "${{ secrets.PULUMI_ACCESS_TOKEN }}"}


def _runs(job: dict) -> list[str]:
    return [str(s["run"]) for s in job["steps"] if "gpu_stack fleet" in str(s.get("run", ""))]


def test_deploy_workflow_rolls_out_the_fleets_waves_dev_staging_then_prod_behind_reviewers():
    doc = _load(DEPLOY)
    assert doc["on"] == {"push": {"branches": ["main"]}}
    assert doc["concurrency"]["cancel-in-progress"] is False
    up = doc["jobs"]["up"]
    assert up["needs"] == "test"
    assert up["strategy"]["matrix"]["stack"] == ["dev", "staging"]
    assert up["strategy"]["max-parallel"] == 1
    assert up["environment"] == "${{ matrix.stack }}"
    # each job runs its environment's wave of the fleet, through the Automation API
    assert _runs(up) == ['.venv/bin/python -m gpu_stack fleet up --wave "$WAVE"']
    assert _step(up, "fleet up (the wave of this environment)")["env"]["WAVE"] == "${{ matrix.stack }}"
    preview = doc["jobs"]["preview-prod"]
    assert preview["needs"] == "up" and preview["environment"] == "prod-preview"
    assert _runs(preview) == [".venv/bin/python -m gpu_stack fleet preview --wave prod --verbose"]
    prod = doc["jobs"]["up-prod"]
    assert prod["needs"] == "preview-prod" and prod["environment"] == "prod"
    assert _runs(prod) == [".venv/bin/python -m gpu_stack fleet up --wave prod"]
    # no job runs pulumi up or preview on its own any more: the fleet does
    for job in (up, preview, prod):
        assert not [s for s in job["steps"] if "command" in s.get("with", {})]
        assert _uses(job, "pulumi/actions")  # the CLI the Automation API runs
        for step in job["steps"]:
            if "gpu_stack fleet" in str(step.get("run", "")):
                assert step["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}"
    # Every job that runs the program for real gets the SSH key step before the fleet runs.
    for job in (up, preview, prod):
        names = [s.get("name") for s in job["steps"]]
        assert names.index("Provide the SSH key") < len(names) - 1
        assert _step(job, "Provide the SSH key")["env"]["SSH_PRIVATE_KEY"] == "${{ secrets.SSH_PRIVATE_KEY }}"
    # The jobs' waves are the fleet file's, in its order, and cover every stack.
    fleet, _ = load_fleet(PROJECT_DIR)
    assert [w.name for w in fleet.waves] == ["dev", "staging", "prod"]
    assert all(w.stacks == [w.name] for w in fleet.waves)
    deployed = set(up["strategy"]["matrix"]["stack"]) | {"prod"}
    assert deployed == set(list_stacks(PROJECT_DIR)) == set(fleet.stacks), "every environment is deployed, and only those"


def _run_step(script: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    # GitHub runs `run:` with `bash --noprofile --norc -eo pipefail {0}`.
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


@pytest.mark.parametrize(
    "token, kubeconfig, expected", [("", "", "false"), ("tok", "", "false"), ("", "kc", "false"), ("tok", "kc", "true")]
)
def test_credentials_check_skips_preview_without_both_secrets(tmp_path: Path, token, kubeconfig, expected):
    step = _step(_load(PR)["jobs"]["preview"], "Cluster credentials present?")
    out = tmp_path / "out"
    env = {"PATH": os.environ["PATH"], "GITHUB_OUTPUT": str(out), "PULUMI_ACCESS_TOKEN": token, "KUBECONFIG_CONTENT": kubeconfig}
    proc = _run_step(step["run"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _outputs(out) == {"available": expected}


def test_offline_diff_step_builds_one_fleet_comment_for_every_stack(tmp_path: Path):
    """Run the workflow's own fleet plan script in a repository whose PR edits dev's replicas."""
    repo = committed_project_copy(tmp_path)
    git(repo, "update-ref", "refs/remotes/origin/main", "HEAD")
    dev = repo / "Pulumi.dev.yaml"
    dev.write_text(dev.read_text().replace("    replicas: 4\n", "    replicas: 8\n", 1))

    runner_temp = tmp_path / "runner"
    runner_temp.mkdir()
    env = {
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "BASE_REF": "main",
        "RUNNER_TEMP": str(runner_temp),
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
        # The chart from the reference copy instead of the network (the workflow pulls it).
        "GPU_STACK_CHART_DIR": str(CHART) if (CHART / "Chart.yaml").exists() else "",
        "GPU_STACK_CHART_PULL": "off",
    }
    step = _step(_load(PR)["jobs"]["offline-diff"], "Diff every stack against the base branch")
    proc = _run_step(step["run"], env, repo)
    assert proc.returncode == 0, proc.stderr
    outputs = _outputs(tmp_path / "output")
    assert outputs["failed"] == "0"
    comment = Path(outputs["comment"]).read_text()
    assert comment.startswith(f"{FLEET_MARKER}\n## Fleet plan\n")
    assert "- sharing.replicas 4 -&gt; 8 on 1 stack (dev): rolls the device plugin on 2 nodes; 1 to update, 7 to replace" in comment
    for stack in set(list_stacks(repo)) - {"dev"}:
        assert f"| `{stack}` | 0 | 0 | 0 | 0 | none |" in comment, stack
        assert f"### Stack `{stack}`" not in comment  # unchanged stacks: one table row only
    dev_part = comment.split("### Stack `dev`")[1]
    assert "**0 to create, 1 to update," in dev_part
    assert "-      replicas: 4" in dev_part.splitlines() and "+      replicas: 8" in dev_part.splitlines()
    assert "- ⚠️ rolls the device plugin on 2 nodes (gpu-dev-1, gpu-dev-2)" in dev_part
    if env["GPU_STACK_CHART_DIR"]:
        assert "~ change ClusterPolicy cluster-policy" in dev_part.splitlines()
        assert any(line.startswith("    spec.devicePlugin.config.name: ") for line in dev_part.splitlines())
    assert (tmp_path / "summary").read_text() == comment
    assert SECRET_PLACEHOLDER_PREFIX not in comment and "v1:placeholder" not in comment


def _fake_pulumi(tmp_path: Path) -> Path:
    """A `pulumi` on PATH that records its arguments and its stdin."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "pulumi"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {tmp_path}/args\ncat >> {tmp_path}/stdin\n')
    fake.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("key", ["", "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----"])
def test_deploy_sets_the_ssh_key_as_a_secret_only_when_the_environment_has_one(tmp_path: Path, key):
    step = _step(_load(DEPLOY)["jobs"]["up"], "Provide the SSH key")
    env = {
        "PATH": f"{_fake_pulumi(tmp_path)}{os.pathsep}{os.environ['PATH']}",
        "PULUMI_ACCESS_TOKEN": "tok",
        "SSH_PRIVATE_KEY": key,
        "STACK": "dev",
    }
    proc = _run_step(step["run"], env, tmp_path)
    assert proc.returncode == 0, proc.stderr
    if not key:
        assert not (tmp_path / "args").exists()
        return
    assert (tmp_path / "args").read_text() == "config set --secret --path gpu-stack:ssh.privateKey --stack dev\n"
    assert (tmp_path / "stdin").read_text() == key + "\n"
    # The key goes through stdin, never the command line (which CI logs could show).
    assert "abc" not in step["run"]
