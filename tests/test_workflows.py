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
TESTS = WORKFLOWS / "tests.yml"
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
    assert {p.name for p in files} == {"pull-request.yml", "deploy.yml", "tests.yml"}
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
            for i, step in enumerate(job.get("steps", [])):
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
    for path in (PR, DEPLOY, TESTS):
        doc = _load(path)
        assert doc["permissions"] == {"contents": "read"}, path.name
        for job_id, job in doc["jobs"].items():
            perms = job.get("permissions", doc["permissions"])
            comments = any(
                str(s.get("uses", "")).startswith("marocchino/sticky-pull-request-comment@")
                or str(s.get("with", {}).get("comment-on-pr", "")).lower() == "true"
                for s in job.get("steps", [])
            )
            writes = {k for k, v in perms.items() if v == "write"}
            assert writes == ({"pull-requests"} if comments else set()), f"{path.name}:{job_id}"


def test_pull_request_workflow_shape():
    doc = _load(PR)
    assert set(doc["on"]) == {"pull_request"}
    jobs = doc["jobs"]
    assert jobs["test"]["uses"] == "./.github/workflows/tests.yml"
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
    pulumi = next(s for s in preview["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@") and "command" in s.get("with", {}))
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
    assert doc["jobs"]["test"]["uses"] == "./.github/workflows/tests.yml"
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


# --------------------------------------------------------------------------- the test suite's jobs
TOOLS_CACHE = "~/.cache/gpu-stack/tools"


def _restores_the_toolchain(job: dict) -> bool:
    return any(
        str(s.get("uses", "")).startswith(("actions/cache/restore@", "actions/cache@"))
        and s.get("with", {}).get("path") == TOOLS_CACHE
        for s in job.get("steps", [])
    )


def _needs(job: dict) -> list[str]:
    needs = job.get("needs", [])
    return [needs] if isinstance(needs, str) else list(needs)


def test_no_job_runs_tests_that_need_a_toolchain_it_never_gets():
    """Under CI (GitHub sets CI=true) the NVIDIA binaries' tests and the end-to-end tier fail when
    the toolchain is missing: every job that runs them gets it from the job that builds it."""
    runners = []
    for path in (PR, DEPLOY, TESTS):
        for job_id, job in _load(path)["jobs"].items():
            runs = " ".join(str(s.get("run", "")) for s in job.get("steps", []))
            if re.search(r"make (test|test-unit|e2e)$", runs, re.M):
                runners.append(f"{path.name}:{job_id}")
                assert _restores_the_toolchain(job) and "toolchain" in _needs(job), f"{path.name}:{job_id}"
                restore = next(s for s in job["steps"] if str(s.get("uses", "")).startswith("actions/cache/restore@"))
                assert restore["with"]["key"] == "${{ needs.toolchain.outputs.cache-key }}"
                assert restore["with"]["fail-on-cache-miss"] is True
    assert sorted(runners) == ["tests.yml:e2e", "tests.yml:unit"]
    # both workflows run that one suite before anything else
    assert _load(TESTS)["on"] == {"workflow_call": None}
    for path in (PR, DEPLOY):
        assert _load(path)["jobs"]["test"]["uses"] == "./.github/workflows/tests.yml", path.name


def test_the_toolchain_is_built_in_its_own_job_and_its_cache_saved_even_when_a_step_fails():
    jobs = _load(TESTS)["jobs"]
    toolchain = jobs["toolchain"]
    assert 30 <= toolchain["timeout-minutes"] <= 120
    assert all(job["timeout-minutes"] <= 30 for name, job in jobs.items() if name != "toolchain")
    names = [s.get("name") for s in toolchain["steps"]]
    build = _step(toolchain, "Reference data and toolchain")
    assert "make e2e-tools" in build["run"] and "make reference" in build["run"]
    save = _uses(toolchain, "actions/cache/save")
    key = _step(toolchain, "Key of what the cache holds")
    assert save["if"] == "always()" and key["if"] == "always()"
    assert save["with"] == {"path": TOOLS_CACHE, "key": "${{ steps.key.outputs.key }}"} and key["id"] == "key"
    assert names.index("Reference data and toolchain") < names.index("Key of what the cache holds") < len(names) - 1
    assert toolchain["outputs"]["cache-key"] == "${{ steps.key.outputs.key }}"
    restore = _uses(toolchain, "actions/cache/restore")
    assert restore["with"]["restore-keys"] == "gpu-stack-tools-"  # the newest cache: only what changed is built
    assert names.index("Restore the toolchain cache") < names.index("Reference data and toolchain")


def _key(tmp_path: Path, recipes: dict[str, str]) -> str:
    home = tmp_path / "home"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir()
    for folder, recipe in recipes.items():
        (home / ".cache" / "gpu-stack" / "tools" / folder).mkdir(parents=True)
        (home / ".cache" / "gpu-stack" / "tools" / folder / ".recipe").write_text(recipe + "\n")
    out = tmp_path / "out"
    out.unlink(missing_ok=True)
    step = _step(_load(TESTS)["jobs"]["toolchain"], "Key of what the cache holds")
    proc = _run_step(step["run"], {"PATH": os.environ["PATH"], "HOME": str(home), "GITHUB_OUTPUT": str(out)}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    return _outputs(out)["key"]


def test_the_cache_key_is_what_the_cache_holds(tmp_path: Path):
    """The same complete components give the same key (a cache saved once, not per run); one more
    component, or one rebuilt by a changed recipe, gives a new key, so a half-finished build is
    saved and the next run starts from it."""
    full = {"etcd-3.6.14": "aaaa", "kwok-0.8.0": "bbbb"}
    key = _key(tmp_path, full)
    assert re.fullmatch(r"gpu-stack-tools-[0-9a-f]{16}", key)
    assert _key(tmp_path, dict(reversed(full.items()))) == key
    assert _key(tmp_path, {"etcd-3.6.14": "aaaa"}) != key
    assert _key(tmp_path, {**full, "kwok-0.8.0": "cccc"}) != key
    assert _key(tmp_path, {}).startswith("gpu-stack-tools-")


def test_the_end_to_end_tier_runs_as_root_with_the_runners_caches():
    """Ubuntu 24.04 runners refuse unprivileged user namespaces: `make e2e` runs under sudo (make
    then takes a plain `unshare --net`), given the runner's PATH and cache folders."""
    step = _step(_load(TESTS)["jobs"]["e2e"], "make e2e (as root)")
    command = " ".join(step["run"].replace("\\\n", " ").split())
    assert re.search(r'sudo env "PATH=\$PATH" CI=true .*make e2e$', command), command
    assert 'GPU_STACK_TOOLS="$HOME/.cache/gpu-stack/tools"' in command
    assert 'GPU_STACK_REFERENCE="$HOME/.cache/gpu-stack/reference"' in command
    makefile = (PROJECT_DIR / "Makefile").read_text()
    assert "NETNS  := $(if $(filter 0,$(shell id -u)),unshare --net," in makefile


def test_every_pulumi_cli_the_workflows_install_is_the_pinned_one():
    from sandbox.toolchain import versions

    pin = versions()["PULUMI_VERSION"]
    seen = 0
    for path in (PR, DEPLOY):
        for job_id, job in _load(path)["jobs"].items():
            for step in job.get("steps", []):
                if str(step.get("uses", "")).startswith("pulumi/actions@"):
                    seen += 1
                    assert str(step.get("with", {}).get("pulumi-version")) == pin, f"{path.name}:{job_id}:{step.get('name')}"
    assert seen == 5  # deploy: up, preview-prod, up-prod; pull request: the install and the preview
