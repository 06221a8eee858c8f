"""`pulumi up` interrupted for real (SIGINT to the CLI, then SIGKILL), in the middle of node
preparation and in the middle of the release install; then the recovery docs/upgrades-and-destroy.md
gives (`pulumi cancel` for the lock the killed CLI left, then `pulumi up`) finishes the stack."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from .conftest import sandbox_for


def _out(proc) -> str:
    return proc.stdout + proc.stderr


def _wait(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def _interrupt(proc: subprocess.Popen) -> str:
    """SIGINT, a few seconds for the CLI to stop, then SIGKILL (what a user's Ctrl-C twice or a CI
    runner's cancel does)."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
    return proc.communicate()[0]


def _recover(box) -> subprocess.CompletedProcess:
    """The documented steps: `pulumi cancel` where the killed CLI left its lock, then `pulumi up`."""
    locked = box.pulumi.run("up", "--yes", check=False)
    if locked.returncode != 0 and "currently locked" in _out(locked):
        assert "pulumi cancel" in _out(locked), "the CLI names the way out"
        box.pulumi.run("cancel", "--yes")
        return box.pulumi.run("up", "--yes", check=False)
    return locked


def test_an_up_killed_during_node_preparation_leaves_no_half_prepared_node(tools, e2e_tmp):
    with sandbox_for("dev", tools, e2e_tmp / "killed-prep", validation={"timeoutSeconds": 300}) as box:
        node = box.nodes["gpu-dev-1"]
        node.fake.set_state("hang-apt-get", "")  # the package manager is slow on this node
        proc = box.pulumi.start("up", "--yes")
        _wait(lambda: any(c.startswith("apt-get") for c in node.fake.calls()), 600, "node preparation to reach apt-get")
        _interrupt(proc)
        assert proc.returncode != 0
        assert node.session_processes(), "the node script is seen running (the wait below means something)"
        # The CLI is gone; the script goes on on the node (no tty: sshd sends it no hangup) and
        # finishes its steps: the runtime config is complete, never half-written.
        node.fake.set_state("hang-apt-get", None)
        _wait(lambda: not node.session_processes(), 300, "the script to finish on the node")
        assert node.restarts() == ["systemctl restart containerd"]
        dropin = node.fake.read("etc/containerd/conf.d/99-nvidia.toml") or ""
        assert "runtimes.nvidia]" in dropin and "enable_cdi = true" in dropin
        prepared, snapshot = node.preparations(), node.fake.snapshot()
        node.fake.clear_calls()
        up = _recover(box)
        assert up.returncode == 0, _out(up)[-4000:]
        # the interrupted create was pending: it runs again, idempotent (no change, no restart)
        assert node.preparations() == prepared + 1
        assert node.restarts() == [] and node.fake.snapshot() == snapshot
        again = box.pulumi.run("up", "--yes", "--expect-no-changes", check=False)
        assert again.returncode == 0, _out(again)[-4000:]


def test_an_up_killed_during_the_release_install_is_finished_by_the_next_up(tools, e2e_tmp):
    with sandbox_for("k3s", tools, e2e_tmp / "killed-release", validation={"timeoutSeconds": 300}) as box:
        proc = box.pulumi.start("up", "--yes")

        def installing() -> bool:
            return bool(box.cluster.get_json("secrets", "-A", "-l", "owner=helm")["items"])

        _wait(installing, 300, "the Helm install to start")
        _interrupt(proc)
        assert proc.returncode != 0
        up = _recover(box)
        assert up.returncode == 0, _out(up)[-4000:]
        releases = box.cluster.get_json("secrets", "-A", "-l", "owner=helm")["items"]
        assert [(s["metadata"]["name"], s["metadata"]["labels"]["status"]) for s in releases] == [
            ("sh.helm.release.v1.gpu-operator.v1", "deployed")
        ]
        again = box.pulumi.run("up", "--yes", "--expect-no-changes", check=False)
        assert again.returncode == 0, _out(again)[-4000:]


def _kill_tree(root: int) -> None:
    """SIGKILL to a process and every process below it (the CLI starts its plugins in process
    groups of their own, so a kill of the CLI's group alone leaves the providers running)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    tree, queue = [], [root]
    while queue:
        pid = queue.pop()
        tree.append(pid)
        queue.extend(children.get(pid, []))
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _held_pod(box, check: str, proc: subprocess.Popen, not_in: frozenset[str] = frozenset()) -> str:
    """The name of the running pod of a held check, once there is one (not among `not_in`), while
    the `up` that creates it (`proc`) still runs."""
    found: list[str] = []
    deadline = time.monotonic() + 300
    while not found:
        pods = box.cluster.get_json("pods", "-n", "gpu-validation", "-l", f"gpu-stack/check={check}")["items"]
        found[:] = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running" and p["metadata"]["name"] not in not_in]
        if found:
            break
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                proc.kill()
            phases = {p["metadata"]["name"]: p["status"].get("phase") for p in pods}
            raise AssertionError(f"no running {check} pod ({phases}); the up: {proc.communicate()[0][-4000:]}")
        time.sleep(0.5)
    return found[0]


def test_an_up_killed_outright_during_the_install_is_named_with_its_fix_then_an_interrupted_check_is_run_again(tools, e2e_tmp):
    """E15: SIGKILL to every process of the run (CLI, language host, program, providers: a CI
    runner's kill, an OOM kill) while Helm installs leaves the release `pending-install`; Helm alone
    would then refuse the next install with "cannot re-use a name that is still in use". The next
    preview names the cause and the fix in one line instead, and the fix it names works.
    Then an `up` interrupted (SIGINT) while a check Job waits: the Job completes after the CLI is
    gone, and the next `up` runs the check again (a check that finished unobserved is not taken as
    passed)."""
    with sandbox_for("k3s", tools, e2e_tmp / "killed-outright", held_checks=("cuda-smoke",), validation={"timeoutSeconds": 300}) as box:
        proc = box.pulumi.start("up", "--yes")

        def pending() -> bool:
            return bool(box.cluster.get_json("secrets", "-A", "-l", "owner=helm,status=pending-install")["items"])

        _wait(pending, 300, "the Helm install to start")
        _kill_tree(proc.pid)
        proc.communicate()
        assert proc.returncode == -signal.SIGKILL
        records = box.cluster.get_json("secrets", "-n", "gpu-operator", "-l", "owner=helm")["items"]
        assert [s["metadata"]["labels"]["status"] for s in records] == ["pending-install"], "nothing finished the install"

        preview = box.pulumi.run("preview", check=False)
        if "currently locked" in _out(preview):
            box.pulumi.run("cancel", "--yes")
            preview = box.pulumi.run("preview", check=False)
        assert preview.returncode != 0, _out(preview)[-6000:]
        line = next((x for x in _out(preview).splitlines() if "is pending-install" in x), "")
        assert "the Helm release gpu-operator/gpu-operator is pending-install (revision 1)" in line, _out(preview)[-3000:]
        assert "`helm -n gpu-operator uninstall gpu-operator`" in line
        # the real Helm stamped the record (createdAt): minutes younger than the release's timeout,
        # so the line says an operation may still be under way before it names the fix (issue 41 item 6)
        assert records[0]["metadata"]["labels"]["createdAt"].isdigit()
        assert re.search(r", written [0-9]+ (s|min) ago, within the [0-9]+ min a Helm install of it can run", line), line
        assert "a Helm operation may still be under way" in line, line
        assert "if none is running (an earlier `pulumi up` was killed), run `helm" in line
        assert "cannot re-use a name" not in _out(preview), "the line comes before Helm's own failure"

        # the fix the line names, without helm (kubectl only), then `pulumi up` as it says; this
        # time the up is interrupted (SIGINT) while the cuda-smoke check's Job waits for its pod
        fix = line.split("without helm: `", 1)[1].split("`", 1)[0]
        assert fix == "kubectl -n gpu-operator delete secret sh.helm.release.v1.gpu-operator.v1"
        box.cluster.kubectl(*fix.split()[1:])
        proc = _start_up_unlocked(box)
        first_pod = _held_pod(box, "cuda-smoke", proc)
        _interrupt(proc)
        assert proc.returncode != 0
        records = box.cluster.get_json("secrets", "-n", "gpu-operator", "-l", "owner=helm")["items"]
        assert [(s["metadata"]["labels"]["version"], s["metadata"]["labels"]["status"]) for s in records] == [("1", "deployed")]
        # the check's pod finishes after the CLI is gone; its Job completes unobserved
        box.cluster.complete_pod("gpu-validation", first_pod)
        job_name = box.cluster.get_json("pod", first_pod, "-n", "gpu-validation")["metadata"]["labels"]["job-name"]
        _wait(lambda: box.cluster.get_json("job", job_name, "-n", "gpu-validation")["status"].get("succeeded") == 1, 60,
              "the Job to complete")

        up = _start_up_unlocked(box)
        second_pod = _held_pod(box, "cuda-smoke", up, not_in=frozenset({first_pod}))
        box.cluster.complete_pod("gpu-validation", second_pod)
        out = up.communicate(timeout=900)[0]
        assert up.returncode == 0, out[-4000:]
        again = box.pulumi.run("up", "--yes", "--expect-no-changes", check=False)
        assert again.returncode == 0, _out(again)[-4000:]


def _start_up_unlocked(box) -> subprocess.Popen:
    """`pulumi up` in the background; where a killed CLI left the stack locked (it ends at once
    saying so), `pulumi cancel --yes` first, as the docs say, then `pulumi up` again."""
    proc = box.pulumi.start("up", "--yes")
    try:
        out = proc.communicate(timeout=20)[0]
    except subprocess.TimeoutExpired:
        return proc
    assert "currently locked" in out, out[-3000:]
    box.pulumi.run("cancel", "--yes")
    return box.pulumi.start("up", "--yes")
