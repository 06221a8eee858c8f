"""The offline plan of a stack at a git revision, computed by that revision's own code.

`git archive REF` is unpacked into a temporary folder and `python -m gpu_stack plan --format json`
runs there (cwd and PYTHONPATH point at the old tree), so a plan at `main` is what `main` would
register: its program, its stack files, its `config/`. The working tree is never touched.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .plan import Plan
from .runtime import ENV_PATHS_FROM

MAIN_BRANCHES = ("main", "origin/main")


class GitPlanError(Exception):
    """The revision cannot be read or its program refused to plan the stack."""


@dataclass(frozen=True)
class Revision:
    ref: str
    """What the user asked for (or the default that was picked)."""
    commit: str

    @property
    def label(self) -> str:
        short = self.commit[:12]
        return short if self.ref in (self.commit, short) else f"{self.ref} ({short})"


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    try:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True)
    except FileNotFoundError:
        raise GitPlanError(
            "git is not installed or not on PATH: comparing with a git revision needs it "
            "(--against STACK compares two stacks of the working tree without git)"
        ) from None
    if check and proc.returncode != 0:
        raise GitPlanError(f"git {' '.join(args)}: {proc.stderr.decode(errors='replace').strip()}")
    return proc


def repo_root(project_dir: Path | str) -> Path:
    proc = _git(Path(project_dir), "rev-parse", "--show-toplevel", check=False)
    if proc.returncode != 0:
        raise GitPlanError(
            f"{project_dir} is not inside a git repository: comparing with a git revision needs one "
            "(--against STACK compares two stacks without git)"
        )
    return Path(proc.stdout.decode().strip())


def resolve(project_dir: Path | str, ref: str) -> Revision:
    repo_root(project_dir)
    if ref.startswith("-"):
        raise GitPlanError(f"unknown git revision {ref!r}: a revision does not start with '-'")
    proc = _git(Path(project_dir), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", check=False)
    if proc.returncode != 0:
        raise GitPlanError(f"unknown git revision {ref!r} (not a branch, tag or commit of {project_dir})")
    return Revision(ref=ref, commit=proc.stdout.decode().strip())


def default_base(project_dir: Path | str) -> Revision:
    """The merge-base of HEAD with main (or origin/main); HEAD itself when there is neither."""
    repo = Path(project_dir)
    repo_root(repo)
    proc = _git(repo, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
    if proc.returncode != 0:
        raise GitPlanError(f"the git repository of {project_dir} has no commit yet: nothing to compare with")
    head = Revision(ref="HEAD", commit=proc.stdout.decode().strip())
    for branch in MAIN_BRANCHES:
        if _git(repo, "rev-parse", "--verify", "--quiet", f"{branch}^{{commit}}", check=False).returncode != 0:
            continue
        proc = _git(repo, "merge-base", "HEAD", branch, check=False)
        if proc.returncode == 0:
            commit = proc.stdout.decode().strip()
            if commit == head.commit:
                return Revision(ref="HEAD", commit=commit)
            return Revision(ref=f"merge-base with {branch}", commit=commit)
    return head


def export_tree(
    project_dir: Path | str, commit: str, dest: Path, keep: Callable[[str], bool] | None = None,
    paths: tuple[str, ...] = (),
) -> Path:
    """Unpack the repository at `commit` into dest; returns the project folder inside it.

    Only regular files, folders and links that stay inside the tree are unpacked: a link that
    leaves it (`Pulumi.dev.yaml -> /etc/passwd`, `-> ../../x`), a link to a device and anything
    but a file is left out, so the program at that revision reports the file as missing.
    `keep(path)`, given a path relative to the project folder, unpacks only the files it accepts
    (the fleet first unpacks the program and the stack files alone); `paths` (glob patterns
    relative to the project folder, the same files) asks git for those alone, a smaller archive
    to read (the whole one where git finds none of them)."""
    project_dir = Path(project_dir).resolve()
    root = repo_root(project_dir).resolve()
    rel = project_dir.relative_to(root).as_posix()
    prefix = "" if rel == "." else rel + "/"
    proc = _git(root, "archive", "--format=tar", commit, "--", *(f":(glob){prefix}{p}" for p in paths),
                check=False) if paths else None
    archive = proc.stdout if proc is not None and proc.returncode == 0 else _git(root, "archive", "--format=tar", commit).stdout

    def wanted(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
        if keep is not None and not member.isdir():
            name = member.name if rel == "." else member.name.removeprefix(rel + "/")
            if (rel != "." and name == member.name) or not keep(name):
                return None
        return _inside_tree(member, dest)

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(dest, filter=wanted)
    return dest / project_dir.relative_to(root)


def _inside_tree(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's `data` filter, but a member it refuses is skipped instead of ending the export."""
    if not (member.isfile() or member.isdir() or member.issym()):
        return None
    if member.issym():
        target = os.path.normpath(os.path.join(os.path.dirname(member.name), member.linkname))
        if os.path.isabs(member.linkname) or target.startswith(".."):
            return None
    if hasattr(tarfile, "data_filter"):
        try:
            return tarfile.data_filter(member, dest)
        except tarfile.FilterError:
            return None
    return member


def stack_exists_at(project_dir: Path | str, commit: str, stack: str) -> bool:
    project_dir = Path(project_dir).resolve()
    root = repo_root(project_dir).resolve()
    rel = (project_dir / f"Pulumi.{stack}.yaml").relative_to(root).as_posix()
    return _git(root, "cat-file", "-e", f"{commit}:{rel}", check=False).returncode == 0


def empty_plan(stack: str) -> dict[str, Any]:
    """The plan document of a stack that did not exist at a revision: nothing registered."""
    return Plan(project="", stack=stack, resources=[], outputs={}, warnings=[]).to_json()


def plan_at(project_dir: Path | str, revision: Revision, stack: str, timeout: float = 300) -> dict[str, Any]:
    """The plan JSON of `stack` at `revision`; an empty plan when the stack did not exist there."""
    if not stack_exists_at(project_dir, revision.commit, stack):
        return empty_plan(stack)
    with tempfile.TemporaryDirectory(prefix="gpu-stack-base-") as tmp:
        tree = export_tree(project_dir, revision.commit, Path(tmp))
        return plan_in_tree(tree, project_dir, stack, revision.label, timeout)


def plan_in_tree(tree: Path, project_dir: Path | str, stack: str, label: str, timeout: float = 300) -> dict[str, Any]:
    """The plan JSON of `stack` by the program of an exported tree (export_tree); an empty plan
    when the tree has no stack file for it. The fleet exports a revision once and plans every
    stack in it."""
    if not (tree / f"Pulumi.{stack}.yaml").is_file():
        return empty_plan(stack)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG")}
    env["PYTHONPATH"] = str(tree)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # A local chart (operator.chartPath) is rarely in git: both sides name the working tree's copy.
    env[ENV_PATHS_FROM] = str(Path(project_dir).resolve())
    cmd = [sys.executable, "-m", "gpu_stack", "--project-dir", str(tree), "plan", "--stack", stack, "--format", "json"]
    try:
        proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise GitPlanError(f"the plan of stack {stack!r} at {label} took over {timeout:.0f}s") from None
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).strip().splitlines()
        raise GitPlanError(f"the program at {label} could not plan stack {stack!r}:\n  " + "\n  ".join(detail[-20:]))
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError as exc:
        raise GitPlanError(f"the plan at {label} is not JSON: {exc}") from None
