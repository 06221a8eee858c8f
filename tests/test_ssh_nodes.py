"""The sandbox's SSH nodes (sandbox/ssh_nodes.py) as a user's hosts look to pulumi-command: each
node its own sshd on its own loopback address with the host key the stack pins, a non-root login
user with passwordless sudo, sessions that start in the node's own folder with its tools first on
PATH, and a key rotation that authorizes the new key and then revokes the old one."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from sandbox.ssh_nodes import SshNodes, unavailable_reason

from .toolchain import tool

DECLARED = [
    {"name": "gpu-a", "gpu": {"model": "L4", "count": 2}, "runtime": "containerd"},
    {"name": "gpu-b", "gpu": {"model": "H200-141GB", "count": 1}, "runtime": "containerd"},
]


@pytest.fixture(scope="module")
def served():
    reason = unavailable_reason()
    if reason:
        if __import__("os").environ.get("CI") == "true":
            pytest.fail(f"CI=true and {reason}", pytrace=False)
        pytest.skip(reason)
    # Under /tmp directly, not pytest's own folder: the login user reads the authorized keys and
    # works in its node's folder, and any pytest process beside this one (the other tier, a
    # worker) sets /tmp/pytest-of-root back to 0700 when it starts using it.
    workdir = Path(tempfile.mkdtemp(prefix="gpu-stack-ssh-nodes-"))
    nodes = SshNodes(workdir, real_ctk=tool("nvidia-ctk"))
    try:
        config = nodes.start(DECLARED, ssh_port=22)
        yield nodes, config
    finally:
        nodes.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _known_host(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def _ssh(nodes: SshNodes, name: str, command: str, key: Path | None = None) -> subprocess.CompletedProcess:
    node = nodes[name]
    known = nodes.workdir / "known_hosts"
    known.write_text(f"{_known_host(node.address, node.port)} {node.host_key}\n")
    return subprocess.run(
        ["ssh", "-T", "-n", "-p", str(node.port), "-i", str(key or nodes.user_key), "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}", "-o", "IdentitiesOnly=yes",
         f"{nodes.user}@{node.address}", command],
        capture_output=True, text=True, timeout=60,
    )


def test_each_node_has_its_own_loopback_address_and_pinned_host_key(served):
    nodes, config = served
    addresses = [n["address"] for n in config["nodes"]]
    assert len(set(addresses)) == 2 and all(a.startswith("127.") for a in addresses)
    assert [n["hostKey"] for n in config["nodes"]] == [nodes["gpu-a"].host_key, nodes["gpu-b"].host_key]
    assert all(n["hostKey"].startswith("ssh-ed25519 ") for n in config["nodes"])
    assert config["ssh"]["user"] != "root" and config["ssh"]["privateKey"].startswith("-----BEGIN OPENSSH PRIVATE KEY-----")


def test_a_session_starts_in_the_nodes_folder_as_a_sudo_user_with_its_gpus(served):
    nodes, _ = served
    result = _ssh(nodes, "gpu-b", "pwd; id -u; sudo -n id -u; nvidia-smi --query-gpu=name,driver_version,mig.mode.current --format=csv,noheader")
    assert result.returncode == 0, result.stderr
    folder, uid, root, gpu = result.stdout.splitlines()
    assert folder == str(nodes["gpu-b"].fake.base) and uid != "0" and root == "0"
    assert gpu == "NVIDIA H200, 580.105.08, Disabled"  # MIG-capable in the catalog: MIG mode shown


def test_another_host_key_is_refused(served):
    nodes, _ = served
    node = nodes["gpu-a"]
    known = nodes.workdir / "known_hosts"
    known.write_text(f"{_known_host(node.address, node.port)} {nodes['gpu-b'].host_key}\n")
    result = subprocess.run(
        ["ssh", "-T", "-n", "-p", str(node.port), "-i", str(nodes.user_key), "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={known}", f"{nodes.user}@{node.address}", "true"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode != 0 and "HOST IDENTIFICATION HAS CHANGED" in result.stderr


def test_a_key_rotation_authorizes_the_new_key_then_revokes_the_old(served):
    nodes, _ = served
    old = nodes.user_key
    nodes.new_key()
    assert _ssh(nodes, "gpu-a", "true", key=old).returncode == 0
    assert _ssh(nodes, "gpu-a", "true").returncode == 0
    nodes.revoke_all_but_newest()
    assert _ssh(nodes, "gpu-a", "true", key=old).returncode != 0
    assert _ssh(nodes, "gpu-a", "true").returncode == 0


def test_a_stopped_node_refuses_connections_and_comes_back(served):
    nodes, _ = served
    nodes["gpu-b"].stop()
    assert _ssh(nodes, "gpu-b", "true").returncode == 255
    nodes["gpu-b"].start()
    assert _ssh(nodes, "gpu-b", "true").returncode == 0
