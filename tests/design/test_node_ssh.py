"""The node script copied and run over a real sshd on 127.0.0.1, the way remote.CopyToRemote and
remote.Command do it.

The fixture starts Debian's /usr/sbin/sshd on a free port with a throwaway host key and user key,
logs in as a non-root user with passwordless sudo (created here when the tests run as root),
copies the script over SFTP to the relative path CopyToRemote gets (so into the login directory),
and runs each node's command string as one non-interactive exec without a tty against a fake node.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from gpu_stack.config import load_settings
from gpu_stack.design.derive import derive
from gpu_stack.design.node_prep import preflight_line, preflight_report
from gpu_stack.offline.runner import PROJECT_DIR
from sandbox.ssh_nodes import sshd_config

from ..helpers import dev_config
from ..node_fakes import CONTAINERD_V2, FakeNode

SSHD = Path("/usr/sbin/sshd")
# One test user and sudoers file per pytest-xdist worker (each worker starts its own sshd for this
# module): two workers sharing one would rewrite and remove the sudoers file under each other.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
TEST_USER = f"gpustack-ssh-{_WORKER}"
SUDOERS = Path(f"/etc/sudoers.d/gpu-stack-ssh-{_WORKER}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ensure_user() -> str:
    """A non-root login user with passwordless sudo (root only: creates it)."""
    try:
        pwd.getpwnam(TEST_USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", TEST_USER], check=True, capture_output=True)
    # '*' : no password, but not a locked account (sshd refuses locked accounts even for keys).
    subprocess.run(["usermod", "-p", "*", TEST_USER], check=True, capture_output=True)
    # The test node's stubs and GPU_STACK_ROOT come in through PATH and the environment, which sudo
    # would reset: keep them for this user only. Real hosts need only `NOPASSWD` (or root).
    SUDOERS.write_text(
        f'Defaults:{TEST_USER} !secure_path, env_keep += "GPU_STACK_ROOT"\n'
        f"{TEST_USER} ALL=(ALL) NOPASSWD: ALL\n"
    )
    SUDOERS.chmod(0o440)
    return TEST_USER


@pytest.fixture(scope="module")
def sshd():
    if not SSHD.exists():
        pytest.skip("sshd not installed (apt-get install openssh-server; .ci/run does this)")
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("ssh client not installed (apt-get install openssh-client)")
    if os.geteuid() != 0:
        pytest.skip("needs root to start sshd for another user and to create a sudo-capable test user")
    if shutil.which("sudo") is None:
        pytest.skip("sudo not installed (apt-get install sudo; .ci/run does this)")
    # Under /tmp directly, readable by the login user: its shell looks up `id` and `sudo` on PATH.
    base = Path(tempfile.mkdtemp(prefix="gpu-stack-sshd-"))
    base.chmod(0o755)
    user = _ensure_user()
    host_key = base / "host_ed25519"
    user_key = base / "user_ed25519"
    for key in (host_key, user_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    authorized = base / "authorized_keys"
    shutil.copyfile(f"{user_key}.pub", authorized)
    os.chown(authorized, pwd.getpwnam(user).pw_uid, -1)
    authorized.chmod(0o600)
    node = FakeNode(base / "node")
    port = _free_port()
    config = base / "sshd_config"
    # CopyToRemote writes over SFTP; the session gets the test node's stubs first on PATH and its root
    config.write_text(sshd_config(
        f"127.0.0.1:{port}", host_key, authorized, base / "sshd.pid", user,
        sftp="internal-sftp", env=f"PATH={node.path} GPU_STACK_ROOT={node.root}",
    ))
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    log = base / "sshd.log"
    proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stdout=log.open("w"), stderr=subprocess.STDOUT)
    known_hosts = base / "known_hosts"
    key_type, key_data = Path(f"{host_key}.pub").read_text().split()[:2]
    known_hosts.write_text(f"[127.0.0.1]:{port} {key_type} {key_data}\n")
    try:
        for _ in range(100):
            if proc.poll() is not None:
                pytest.skip(f"sshd could not be started: {log.read_text()[-500:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        else:
            pytest.skip(f"sshd did not listen on 127.0.0.1:{port}: {log.read_text()[-500:]}")

        def ssh(command: str, stdin: str | None = None) -> subprocess.CompletedProcess:
            """One exec of `command` (no tty, the pinned host key; `stdin` as the command's
            standard input, else none), like remote.Command."""
            return subprocess.run(
                [
                    "ssh", "-T", *(["-n"] if stdin is None else []), "-p", str(port), "-i", str(user_key),
                    "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                    "-o", f"UserKnownHostsFile={known_hosts}", "-o", "IdentitiesOnly=yes",
                    f"{user}@127.0.0.1", command,
                ],
                capture_output=True, text=True, timeout=120, input=stdin,
            )

        def copy(local: Path, remote: str) -> subprocess.CompletedProcess:
            """One SFTP upload of `local` to the (relative) `remote` path, like remote.CopyToRemote."""
            return subprocess.run(
                [
                    "sftp", "-b", "-", "-P", str(port), "-i", str(user_key),
                    "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                    "-o", f"UserKnownHostsFile={known_hosts}", "-o", "IdentitiesOnly=yes",
                    f"{user}@127.0.0.1",
                ],
                capture_output=True, text=True, timeout=60, input=f'put "{local}" "{remote}"\n',
            )

        ssh.copy = copy  # type: ignore[attr-defined]
        yield ssh, node, user
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        SUDOERS.unlink(missing_ok=True)
        shutil.rmtree(base, ignore_errors=True)


def _commands():
    cfg = dev_config()
    cfg["ssh"]["privateKey"] = "unused here"
    return list(derive(load_settings(cfg)).commands)


def _copy_script(ssh, command) -> None:
    copied = ssh.copy(PROJECT_DIR / command.source, command.remote_path)
    assert copied.returncode == 0, copied.stderr


def test_login_is_a_non_root_user_without_a_tty(sshd):
    ssh, _, user = sshd
    result = ssh("id -un; id -u; if [ -t 0 ] || [ -t 1 ]; then echo tty; else echo no-tty; fi")
    assert result.returncode == 0, result.stderr
    name, uid, tty = result.stdout.splitlines()
    assert name == user and uid != "0" and tty == "no-tty"


def test_node_command_over_ssh_as_sudo_user_prepares_once_then_changes_nothing(sshd):
    ssh, node, _ = sshd
    node.clear_calls()
    node.write("etc/containerd/config.toml", CONTAINERD_V2)
    node.set_toolkit(None)
    command = _commands()[0]  # gpu-dev-1: 2 x L4 on containerd
    _copy_script(ssh, command)
    first = ssh(command.create)
    assert first.returncode == 0, first.stderr
    rep = preflight_report(first.stdout)
    assert rep["node"] == "gpu-dev-1" and rep["ok"] is True and rep["count"] == 2
    assert first.stdout.strip().count("\n") == 0  # the one report line
    assert len(first.stderr.splitlines()) == 1 and "done (steps: preflight toolkit runtime; runtime restarted)" in first.stderr
    # The whole log stays on the node, beside the copied script in the login user's home.
    assert ssh("cat .gpu-stack-node-prep.log").stdout.count("step: ") == 3
    assert [c for c in node.calls("apt-get") if c.startswith("apt-get install")]
    assert [c for c in node.calls("systemctl") if c.startswith("systemctl restart")] == ["systemctl restart containerd"]
    # The script ran as root through sudo: the files it wrote belong to root.
    assert (node.root / "etc/apt/sources.list.d/nvidia-container-toolkit.list").stat().st_uid == 0

    before = node.snapshot()
    node.clear_calls()
    second = ssh(command.create)
    assert second.returncode == 0, second.stderr
    assert preflight_report(second.stdout)["toolkit"] == "1.18.1"
    assert node.snapshot() == before
    assert node.calls("systemctl") == [] and node.calls("apt-get") == []


def test_node_command_over_ssh_fails_clearly_on_a_wrong_gpu_count(sshd):
    ssh, node, _ = sshd
    node.set_gpus("NVIDIA L4, 580.105.08, [N/A]")
    try:
        command = _commands()[0]
        _copy_script(ssh, command)
        result = ssh(command.create)
    finally:
        node.set_gpus("NVIDIA L4, 580.105.08, [N/A]", "NVIDIA L4, 580.105.08, [N/A]")
    assert result.returncode == 1
    assert "GPU count: the gpu of node gpu-dev-1 in gpu-stack:nodes declares 2 x L4, nvidia-smi finds 1" in result.stderr
    assert preflight_report(result.stdout)["ok"] is False
    # What pulumi-command would put in its error: the failed step and the last lines, not the script.
    assert "gpu-stack: node preparation of gpu-dev-1 failed in step preflight (exit 1)" in result.stderr
    assert "GPU_STACK_EXPECT_COUNT=" not in result.stdout + result.stderr
    assert len(result.stderr.splitlines()) <= 21


def test_update_command_over_ssh_changes_nothing(sshd):
    # What pulumi-command runs when only the connection or ssh.timeoutSeconds changed.
    ssh, node, _ = sshd
    command = _commands()[0]
    _copy_script(ssh, command)
    ran = ssh(command.create)
    before = node.snapshot()
    node.clear_calls()
    result = ssh(command.update)
    assert result.returncode == 0 and "node preparation does not run again" in result.stderr
    # stdout is the report line the last run kept on the node: what nodePreflight keeps showing
    assert preflight_line(ran.stdout) is not None and result.stdout == preflight_line(ran.stdout) + "\n"
    assert node.snapshot() == before and node.calls() == []
