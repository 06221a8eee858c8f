"""`fleet plan`: one change across stacks said once, what differs per stack listed, offline."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

from gpu_stack.fleet.group import ConfigEdit, StackOutcome, config_edits, group_fleet
from gpu_stack.fleet.plan import renamed
from gpu_stack.fleet.report import MARKER, render_markdown, render_text
from gpu_stack.offline.diff.model import FieldChange, PlanDiff, ResourceChange
from gpu_stack.offline.runner import PROJECT_DIR, plan_stack

from ..helpers import committed_project_copy, git, helm_sdk_problem, reference_dir

ROLL = "rolls the device plugin on {n} nodes (a, b): the nvidia-device-plugin DaemonSet restarts"


def _diff(stack: str, nodes: int, replicas: tuple[int, int] = (4, 8)) -> PlanDiff:
    changes = [
        ResourceChange("update", "kubernetes:helm.sh/v3:Release", "gpu-operator-release",
                       fields=[FieldChange("values.devicePlugin.config.name", "sharing-a", "sharing-b")]),
        ResourceChange("replace", "kubernetes:core/v1:ConfigMap", "gpu-operator-sharing-config",
                       fields=[FieldChange("data.replicas", replicas[0], replicas[1])]),
    ]
    return PlanDiff("base", "head", stack, changes, effects=[ROLL.format(n=nodes)])


def _outcome(stack: str, nodes: int, old: int = 4, new: int = 8) -> StackOutcome:
    return StackOutcome(stack, _diff(stack, nodes, (old, new)), [ConfigEdit("sharing.replicas", str(old), str(new))])


def test_the_same_config_edit_on_many_stacks_is_one_line_with_the_nodes_it_touches_summed():
    outcomes = [_outcome(f"eu-{i}", nodes=4) for i in range(3)] + [
        _outcome("us-1", nodes=10, old=2),
        StackOutcome("lab", PlanDiff("base", "head", "lab", [])),
        StackOutcome("broken", error="invalid stack config: gpu-stack:nodes[0].name = '': ..."),
    ]
    groups = group_fleet(outcomes)
    assert [g.line() for g in groups.change_sets] == [
        "sharing.replicas 4 -> 8 on 3 stacks (eu-0, eu-1, eu-2): rolls the device plugin on 12 nodes; 3 to update, 3 to replace",
        "sharing.replicas 2 -> 8 on 1 stack (us-1): rolls the device plugin on 10 nodes; 1 to update, 1 to replace",
    ]
    # the Release's change is the same on all four stacks; the ConfigMap's differs on us-1
    assert groups.resources[0].line() == (
        "~ update kubernetes:helm.sh/v3:Release gpu-operator-release on 4 stacks (eu-0, eu-1, eu-2, us-1): "
        'values.devicePlugin.config.name "sharing-a" -> "sharing-b"'
    )
    assert [r.stacks for r in groups.resources[1:]] == [["eu-0", "eu-1", "eu-2"], ["us-1"]]
    assert groups.unchanged == ["lab"] and list(groups.failed) == ["broken"]


def test_text_and_markdown_lead_with_the_groups_and_list_every_stack():
    outcomes = [_outcome("a", 2), _outcome("b", 2), StackOutcome("c", PlanDiff("base", "head", "c", []))]
    text = render_text("main (abc)", outcomes)
    assert text.splitlines()[0] == "Fleet of 3 stacks: main (abc) -> working tree; 2 with changes, 1 unchanged, 0 cannot be planned"
    assert "  sharing.replicas 4 -> 8 on 2 stacks (a, b): rolls the device plugin on 4 nodes; 2 to update, 2 to replace" in text
    assert "  c: no changes" in text.splitlines()
    md = render_markdown("main (abc)", outcomes)
    assert md.startswith(MARKER + "\n") and md.count(MARKER) == 1
    assert "| `a` | 0 | 1 | 1 | 0 | rolls the device plugin on 2 nodes (a, b): the nvidia-device-plugin DaemonSet restarts |" in md


def test_config_edits_are_leaf_paths_and_a_secret_is_never_shown():
    old = {"sharing": {"replicas": 4, "mode": "time-slicing"}, "nodes": [{"name": "n1", "gpu": {"count": 2}}],
           "ssh": {"privateKey": "gpu-stack-offline-secret-aaaa"}}
    new = {"sharing": {"replicas": 8, "mode": "time-slicing"}, "nodes": [{"name": "n1", "gpu": {"count": 4}}],
           "ssh": {"privateKey": "gpu-stack-offline-secret-bbbb"}, "alerts": {"enabled": False}}
    assert [e.line() for e in config_edits(old, new)] == [
        "sharing.replicas 4 -> 8", "nodes[0].gpu.count 2 -> 4", "ssh.privateKey [secret] -> [secret]", "alerts.enabled set to false",
    ]


def _copy_stack(repo: Path, source: str, name: str) -> None:
    (repo / f"Pulumi.{name}.yaml").write_text((repo / f"Pulumi.{source}.yaml").read_text())


def _replicas(repo: Path, stack: str, old: int, new: int) -> None:
    path = repo / f"Pulumi.{stack}.yaml"
    text = path.read_text()
    assert f"    replicas: {old}\n" in text
    path.write_text(text.replace(f"    replicas: {old}\n", f"    replicas: {new}\n", 1))


def _cli(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_CONFIG")}
    env["PYTHONPATH"] = str(PROJECT_DIR)
    if (reference_dir() / "chart" / "Chart.yaml").exists():
        env["GPU_STACK_CHART_DIR"] = str(reference_dir() / "chart")
    return subprocess.run([sys.executable, "-m", "gpu_stack", "--project-dir", str(repo), "fleet", "plan", *args],
                          capture_output=True, text=True, timeout=600, env=env, cwd=PROJECT_DIR)


def test_fleet_plan_of_a_git_change_groups_the_copies_of_a_stack_and_renders_the_chart_once_per_values_set(tmp_path):
    repo = committed_project_copy(tmp_path)
    (repo / "fleet.yaml").unlink()  # the default order: the new stacks join a wave before prod
    for name in ("staging-eu", "staging-us"):
        _copy_stack(repo, "staging", name)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "two more staging clusters")
    clean = _cli(repo, "--base", "HEAD", "--exit-code", "--fleet-file", str(repo / "none.yaml"))
    assert clean.returncode == 2 and "none.yaml" in clean.stderr and "no such file" in clean.stderr
    clean = _cli(repo, "--base", "HEAD", "--exit-code")
    assert clean.returncode == 0, clean.stderr
    for stack in ("staging", "staging-eu", "staging-us"):
        _replicas(repo, stack, 2, 8)

    out = _cli(repo, "--base", "HEAD", "--exit-code", "--format", "json", "--jobs", "2")
    assert out.returncode == 1, out.stderr
    doc = json.loads(out.stdout)
    assert list(doc["stacks"]) == ["dev", "staging", "staging-eu", "staging-us", "prod"]  # the default order
    assert doc["unchanged"] == ["dev", "prod"] and doc["failed"] == {}
    [group] = doc["groups"]
    assert group["config"] == [{"path": "sharing.replicas", "old": "2", "new": "8"}]
    assert group["stacks"] == ["staging", "staging-eu", "staging-us"]
    assert group["effectNodes"] == {"rolls the device plugin": 6}
    release = next(r for r in doc["resources"] if r["type"] == "kubernetes:helm.sh/v3:Release")
    assert release["stacks"] == ["staging", "staging-eu", "staging-us"] and release["action"] == "update"
    # one program run per distinct stack file: dev and prod (the same before and after, the
    # revision's program being the working tree's), staging and its copies before, and after
    assert doc["programRuns"] == 4
    if (reference_dir() / "chart" / "Chart.yaml").exists() and helm_sdk_problem() is None:
        # the staging copies: one values set before, one after; dev and prod unchanged (the same
        # program and file on both sides): nothing to render
        assert doc["chartRenders"] == 2

    text = _cli(repo, "--base", "HEAD")
    assert text.returncode == 0, text.stderr
    assert ("  sharing.replicas 2 -> 8 on 3 stacks (staging, staging-eu, staging-us): rolls the device plugin on 6 nodes; "
            "3 to update, 12 to replace") in text.stdout

    # a change to the program too: the revision's side is planned by the revision's own program
    # (once per distinct stack file there), and the result is the same
    main = repo / "__main__.py"
    main.write_text(main.read_text() + "# a comment: another program, the same resources\n")
    other = _cli(repo, "--base", "HEAD", "--format", "json", "--jobs", "2")
    assert other.returncode == 0, other.stderr
    again = json.loads(other.stdout)
    assert again["programRuns"] == 6  # dev, staging, prod at HEAD; dev, staging (new file), prod here
    work = ("programRuns", "chartRenders")  # dev and prod now differ by their program: rendered too
    assert {k: v for k, v in again.items() if k not in work} == {k: v for k, v in doc.items() if k not in work}


def test_a_plan_shared_by_stacks_with_the_same_file_is_the_plan_each_stack_has_on_its_own(tmp_path):
    """`fleet plan` runs the program once for stacks whose files are the same and renames the plan:
    exact only while the stack's name reaches the plan as its `stack` and its default cluster
    identifier alone. Planned under another name, every committed stack gives the renamed plan."""
    project = tmp_path / "project"
    project.mkdir()
    for name in ("Pulumi.yaml", "__main__.py"):
        (project / name).write_text((PROJECT_DIR / name).read_text())
    for stack in ("dev", "staging", "prod"):
        text = (PROJECT_DIR / f"Pulumi.{stack}.yaml").read_text()
        (project / f"Pulumi.{stack}.yaml").write_text(text)
        (project / f"Pulumi.{stack}-eu-2.yaml").write_text(text)
        own = plan_stack(stack, project).to_json()
        other = plan_stack(f"{stack}-eu-2", project).to_json()
        assert other != own  # the name does reach the plan
        assert renamed(own, stack, f"{stack}-eu-2") == other, stack


def test_a_fleet_file_orders_the_stacks_and_a_bad_one_fails_in_one_line_per_problem(tmp_path):
    repo = committed_project_copy(tmp_path)
    (repo / "fleet.yaml").write_text("waves:\n  - {name: canary, stacks: [prod]}\n  - {name: rest, stacks: [dev, staging], parallel: 0}\n")
    bad = _cli(repo, "--base", "HEAD")
    assert bad.returncode == 2
    assert bad.stderr.splitlines() == [
        "error: invalid fleet file fleet.yaml:", "  waves[1].parallel = 0: Input should be greater than or equal to 1",
    ]
    (repo / "fleet.yaml").write_text("waves:\n  - {name: canary, stacks: [prod]}\n  - {name: rest, stacks: [dev, staging]}\n")
    out = _cli(repo, "--base", "HEAD", "--format", "json", "--stack", "staging", "--stack", "prod")
    assert out.returncode == 0, out.stderr
    assert list(json.loads(out.stdout)["stacks"]) == ["prod", "staging"]
    unknown = _cli(repo, "--base", "HEAD", "--stack", "qa")
    assert unknown.returncode == 2 and "--stack qa: not a stack of the fleet (stacks: prod, dev, staging)" in unknown.stderr


def test_a_stack_that_cannot_be_planned_is_named_and_the_rest_are_still_planned(tmp_path):
    repo = committed_project_copy(tmp_path)
    path = repo / "Pulumi.staging.yaml"
    path.write_text(path.read_text().replace("    replicas: 2\n", "    replicas: -3\n", 1))
    out = _cli(repo, "--base", "HEAD", "--format", "markdown", "--jobs", "1")
    assert out.returncode == 2
    assert "staging" in out.stdout and "cannot be planned" in out.stdout and "sharing.replicas" in out.stdout
    assert "dev" in out.stdout and "prod" in out.stdout


def test_one_helm_child_renders_every_values_set_as_a_child_per_render_does_and_a_loop_is_still_bounded(tmp_path, monkeypatch):
    """`fleet plan` renders through one long-lived Helm child (RenderServer): the same objects as
    a child per render, the child's pid the same from one render to the next, and a template that
    loops still stopped by GPU_STACK_RENDER_TIMEOUT, the next render in a new child."""
    import shutil

    import pytest

    from gpu_stack.offline.chart import ChartRenderError, RenderServer, render_release

    chart = reference_dir() / "chart"
    if not (chart / "Chart.yaml").exists() or helm_sdk_problem() is not None:
        pytest.skip("needs the reference chart and helm-python-sdk")
    release = next(r for r in plan_stack("dev").to_json()["resources"] if r["type"] == "kubernetes:helm.sh/v3:Release")["inputs"]
    args = (release["name"], release["namespace"])
    server = RenderServer()
    try:
        pids = []
        for enabled in (True, False):
            values = {**release["values"], "devicePlugin": {**release["values"].get("devicePlugin", {}), "enabled": enabled}}
            shared = render_release(chart, values, *args, server=server)
            assert [(o.key, o.body) for o in shared] == [(o.key, o.body) for o in render_release(chart, values, *args)]
            pids.append(server.proc.pid if server.proc else None)
        assert pids[0] is not None and pids[0] == pids[1]
        spin = tmp_path / "spin-chart"
        shutil.copytree(chart, spin, symlinks=True)
        (spin / "templates" / "spin.yaml").write_text("{{- range $i := until 100000 }}{{ range $j := until 100000 }}{{ end }}{{ end }}\n")
        monkeypatch.setenv("GPU_STACK_RENDER_TIMEOUT", "3")
        with pytest.raises(ChartRenderError, match=r"did not finish rendering .* within 3 s"):
            render_release(spin, release["values"], *args, server=server)
        assert server.proc is None  # killed
        again = render_release(chart, release["values"], *args, server=server)
        assert [o.key for o in again] == [o.key for o in render_release(chart, release["values"], *args)]
        assert server.proc is not None and server.proc.pid not in pids  # a new child
    finally:
        server.close()


def test_a_worker_forked_beside_a_running_helm_child_lets_it_end_when_this_process_closes_it(tmp_path):
    """`fleet plan` starts its Helm child (RenderServer) before it forks the workers, so the child
    loads while this process makes its first run: a worker closes the child's pipes it inherited.
    Holding the child's input open, it kept the child from seeing its end: close() waited out its
    10 s and killed it (status -9) instead of the child ending on its own (status 0)."""
    import pytest

    from gpu_stack.fleet.plan_workers import FORK, Workers
    from gpu_stack.offline.chart import RenderServer

    if not FORK:
        pytest.skip("workers are spawned on this platform: they inherit no descriptor")
    server = RenderServer()
    server.start()
    proc = server.proc
    assert proc is not None
    workers = Workers(1, tmp_path, close=server.fds())
    try:
        assert workers.pool.submit(sum, [1, 2]).result() == 3  # the worker runs
        server.close()  # while the worker still runs
        assert proc.returncode == 0
    finally:
        workers.close()
        server.close()


def test_runs_shared_between_this_process_and_a_worker_give_the_plans_this_process_gives_alone(tmp_path):
    from gpu_stack.fleet.plan import PlanKey, Workers, _run, _Work, expected_runs, workers_for

    (tmp_path / "Pulumi.yaml").write_text("name: tiny\nruntime: python\n")
    (tmp_path / "__main__.py").write_text("import pulumi\n\nconfig = pulumi.Config('tiny')\npulumi.export('n', config.get_int('n'))\n")
    stacks = [f"s{i:02d}" for i in range(14)]
    for i, stack in enumerate(stacks):
        (tmp_path / f"Pulumi.{stack}.yaml").write_text(f"config:\n  tiny:n: {i}\n")
    assert expected_runs(tmp_path, stacks) == 28 and workers_for(28, 2) == 1 and workers_for(28, 1) == 0
    assert workers_for(11, 4) == 0 and workers_for(12, 4) == 1 and workers_for(40, 4) == 3
    works = [_Work(PlanKey("p", stack), stack, tmp_path, here=True) for stack in stacks]
    alone = _run(works, tmp_path, tmp_path, "HEAD", jobs=1)
    workers = Workers(1, tmp_path)
    try:
        shared = _run(works, tmp_path, tmp_path, "HEAD", jobs=2, workers=workers)
    finally:
        workers.close()
    assert shared == alone
    assert [alone[w.key]["plan"]["outputs"]["n"] for w in works] == list(range(14))


def _tiny_fleet(repo: Path, stacks: int) -> None:
    """A git repository of a one-output program with `stacks` distinct stacks, each edited after the commit."""
    repo.mkdir()
    (repo / "Pulumi.yaml").write_text("name: tiny\nruntime: python\n")
    (repo / "__main__.py").write_text("import pulumi\n\nconfig = pulumi.Config('tiny')\npulumi.export('n', config.get_int('n'))\n")
    for i in range(stacks):
        (repo / f"Pulumi.s{i:02d}.yaml").write_text(f"config:\n  tiny:n: {i}\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    for i in range(stacks):
        (repo / f"Pulumi.s{i:02d}.yaml").write_text(f"config:\n  tiny:n: {i + 100}\n")


def test_a_fleet_plan_with_forked_workers_is_the_plan_of_this_process_alone(tmp_path):
    """Eight changed stacks: 16 runs, one worker beside this process with `--jobs 2`, forked after
    this process's first run (whose plan is kept): the same document as one process alone."""
    repo = tmp_path / "repo"
    _tiny_fleet(repo, 8)
    alone, shared = (_cli(repo, "--base", "HEAD", "--format", "json", "--jobs", jobs) for jobs in ("1", "2"))
    assert alone.returncode == 0 and shared.returncode == 0, alone.stderr + shared.stderr
    doc = json.loads(alone.stdout)
    assert doc["programRuns"] == 16 and doc["failed"] == {}
    assert json.loads(shared.stdout) == doc


def test_a_forked_worker_starts_with_what_this_process_has_loaded(tmp_path, monkeypatch):
    """Where workers are forked (Linux), a module this process imported is in the worker already:
    its first plan does not pay for the SDKs' imports again."""
    from gpu_stack.fleet.plan_workers import FORK, Workers

    if not FORK:
        import pytest

        pytest.skip("workers are spawned on this platform")
    (tmp_path / "loaded_here_only.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("loaded_here_only")

    workers = Workers(1, tmp_path)
    try:
        assert workers.pool.submit(_has_module, "loaded_here_only").result(timeout=60)
    finally:
        workers.close()
        sys.modules.pop("loaded_here_only", None)


def _has_module(name: str) -> bool:
    return name in sys.modules


def test_the_revision_is_read_by_the_program_and_stack_file_paths_as_by_the_filter_alone(tmp_path):
    """`fleet plan` asks git for the program and the stack files alone (a smaller archive): the
    same files unpacked as from the whole archive filtered, a link out of the tree still left out,
    and the whole archive read where git finds none of the paths."""
    from gpu_stack.fleet.plan_workers import _program_or_stack
    from gpu_stack.fleet.state import PROGRAM_PARTS
    from gpu_stack.offline.git_plan import export_tree

    repo = tmp_path / "repo"
    project = repo / "infra"
    for rel, text in {"Pulumi.yaml": "name: p\n", "__main__.py": "", "gpu_stack/a.py": "", "config/b.yaml": "",
                      "Pulumi.dev.yaml": "config: {}\n", "docs/c.md": "", "Pulumi.yaml.orig": ""}.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    (project / "Pulumi.out.yaml").symlink_to("/etc/hostname")
    (repo / "README.md").write_text("")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")

    def files(paths: tuple[str, ...]) -> set[str]:
        dest = tmp_path / f"out{len(list(tmp_path.iterdir()))}"
        tree = export_tree(project, "HEAD", dest, keep=_program_or_stack, paths=paths)
        return {p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file() or p.is_symlink()}

    whole = files(())
    assert whole == {"Pulumi.yaml", "__main__.py", "gpu_stack/a.py", "config/b.yaml", "Pulumi.dev.yaml"}
    assert files((*PROGRAM_PARTS, "Pulumi.*.yaml")) == whole
    assert files(("nowhere", "Pulumi.*.yaml")) == whole  # git finds no 'nowhere': the whole archive
