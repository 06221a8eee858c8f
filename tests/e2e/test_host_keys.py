"""Pinned SSH host keys against the real sshd (OpenSSH of the machine, which refuses the SHA-1
`ssh-rsa` host-key algorithm since 8.8) through the real CLI, language host and command provider
1.2.1: one host serving an ed25519 and an RSA host key, as many hosts do.

- the failure the stack's refusal prevents: a `remote.Command` with the host's RSA key pinned never
  connects (pulumi-command offers only the key's own type, `ssh-rsa`: connection.go SSHConfig), and
  the sshd says why; the line `ssh-keyscan -t ed25519 <host>` prints, pinned, connects;
- the refusal: the gpu-stack program with that RSA line as `nodes[0].hostKey` stops `pulumi preview`
  with one line naming the key and the command that prints the right key, before any connection.

No Kubernetes cluster is involved (both stop or finish before one is needed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sandbox.harness import stack_document
from sandbox.pulumi_cli import PulumiProject
from sandbox.ssh_nodes import SshNodes, unavailable_reason
from sandbox.toolchain import PROJECT_DIR, ToolchainMissing, find

from .conftest import _unavailable, only_loopback

NO_CLUSTER = ("pulumi-release", "command-provider", "kubernetes-provider", "nvidia-ctk")
"""The part of the toolchain these tests use: the CLI as released, both plugins (the project's
install step installs both), the real nvidia-ctk of the SSH node's fake root; no control plane."""

PIN_PROGRAM = '''"""One remote.Command whose connection pins the host key it is given."""
import pulumi
from pulumi_command import remote

cfg = pulumi.Config("pin")
connection = remote.ConnectionArgs(
    host=cfg.require("host"), port=cfg.require_int("port"), user=cfg.require("user"),
    private_key=cfg.require_secret("privateKey"), host_key=cfg.require("hostKey"), dial_error_limit=1,
)
command = remote.Command("pinned", connection=connection, create="echo pinned-ok", add_previous_output_in_env=False)
pulumi.export("stdout", command.stdout)
'''
NO_COMMON_ALGORITHM = "ssh: handshake failed: ssh: no common algorithm for host key; we offered: [ssh-rsa], peer offered: ["


def _out(proc) -> str:
    return proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def tools():
    try:
        found = find(NO_CLUSTER)
    except ToolchainMissing as exc:
        _unavailable(str(exc))
    if not only_loopback():
        _unavailable("the harness runs in its own network namespace with only loopback: use `make e2e`")
    return found


@pytest.fixture(scope="module")
def host(tools, e2e_tmp):
    reason = unavailable_reason()
    if reason:
        _unavailable(reason)
    nodes = SshNodes(e2e_tmp / "host-keys" / "nodes", real_ctk=tools["nvidia-ctk"])
    nodes.start([])
    spec = next(n for n in stack_document("dev")["config"]["gpu-stack:nodes"] if n["name"] == "gpu-dev-1")
    served = nodes.add_host("gpu-dev-1", spec, rsa=True)
    try:
        yield nodes, served
    finally:
        nodes.stop()


def _keyscan(served, *kind: str) -> list[str]:
    """The lines the real ssh-keyscan prints for the host (`host type base64`)."""
    proc = subprocess.run(
        ["ssh-keyscan", "-p", str(served.port), *kind, served.address], capture_output=True, text=True, timeout=60, check=True
    )
    return [line for line in proc.stdout.splitlines() if line and not line.startswith("#")]


def _pin_project(tools, workdir: Path, nodes: SshNodes, served, host_key: str) -> PulumiProject:
    """A project of its own with PIN_PROGRAM, its stack pinning `host_key` for `served`."""
    source = workdir / "source"
    (source / "gpu_stack").mkdir(parents=True)
    (source / "config").mkdir()
    (source / "requirements.txt").write_text("")
    (source / "__main__.py").write_text(PIN_PROGRAM)
    (source / "Pulumi.yaml").write_text(yaml.safe_dump({
        "name": "pin-check", "runtime": {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}},
    }))
    (source / ".venv").symlink_to(PROJECT_DIR / ".venv")
    stack_file = source / "Pulumi.pin.yaml"
    stack_file.write_text(yaml.safe_dump({"config": {
        "pin:host": served.address, "pin:port": str(served.port), "pin:user": nodes.user, "pin:hostKey": host_key,
    }}))
    project = PulumiProject(tools, workdir / "pulumi", "pin", workdir / "no-kubeconfig", source=source)
    project.prepare(stack_file)
    assert nodes.user_key is not None
    project.set_secret("pin:privateKey", nodes.user_key.read_text())
    return project


def test_a_pinned_rsa_host_key_never_connects_and_the_ed25519_line_keyscan_prints_does(tools, e2e_tmp, host):
    nodes, served = host
    scanned = _keyscan(served)
    rsa = next(line for line in scanned if line.split()[1] == "ssh-rsa")
    assert rsa.split(None, 1)[1] == served.rsa_host_key, scanned
    # the failure: the provider offers only ssh-rsa (SHA-1); this OpenSSH offers rsa-sha2-* only
    log_before = served.log.read_text()
    pinned_rsa = _pin_project(tools, e2e_tmp / "host-keys" / "rsa", nodes, served, rsa)
    failed = pinned_rsa.run("up", "--yes", "--skip-preview", check=False, timeout=600)
    assert failed.returncode != 0
    assert NO_COMMON_ALGORITHM in _out(failed), _out(failed)[-4000:]
    assert "rsa-sha2-512" in _out(failed), "the server's offer, named in the same error"
    refused = served.log.read_text()[len(log_before):]
    assert "no matching host key type found. Their offer: ssh-rsa" in refused, refused[-2000:]
    assert "pinned-ok" not in _out(failed)
    # the way out the stack's refusal names: the ed25519 line, pinned, connects and runs
    (ed25519,) = _keyscan(served, "-t", "ed25519")
    assert ed25519.split(None, 1)[1] == served.host_key
    pinned_ed25519 = _pin_project(tools, e2e_tmp / "host-keys" / "ed25519", nodes, served, ed25519)
    pinned_ed25519.run("up", "--yes", "--skip-preview", timeout=600)
    assert pinned_ed25519.run("stack", "output", "stdout", "--show-secrets").stdout.strip() == "pinned-ok"


def test_the_stack_refuses_the_rsa_line_in_one_line_with_the_command_before_any_connection(tools, e2e_tmp, host):
    nodes, served = host
    rsa = next(line for line in _keyscan(served) if line.split()[1] == "ssh-rsa")
    doc = stack_document("dev")
    cfg = doc["config"]
    cfg["gpu-stack:ssh"] = {**(cfg.get("gpu-stack:ssh") or {}), "user": nodes.user, "port": served.port}
    cfg["gpu-stack:nodes"] = [
        {**n, "address": served.address, "hostKey": rsa} if n["name"] == "gpu-dev-1" else n for n in cfg["gpu-stack:nodes"]
    ]
    workdir = e2e_tmp / "host-keys" / "stack"
    workdir.mkdir(parents=True)
    stack_file = workdir / "Pulumi.dev.yaml"
    stack_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    project = PulumiProject(tools, workdir / "pulumi", "dev", workdir / "no-kubeconfig")
    project.prepare(stack_file)
    assert nodes.user_key is not None
    project.set_secret("gpu-stack:ssh.privateKey", nodes.user_key.read_text())
    log_before = served.log.read_text()
    preview = project.run("preview", check=False, timeout=600)
    assert preview.returncode != 0
    lines = [x for x in _out(preview).splitlines() if "gpu-stack:nodes[0].hostKey" in x]
    assert len(lines) == 1, _out(preview)[-4000:]
    assert "is an ssh-rsa key" in lines[0] and "`ssh-keyscan -t ed25519 <host>`" in lines[0], lines[0]
    assert served.rsa_host_key is not None and served.rsa_host_key.split()[1] not in _out(preview), "the key is not echoed"
    # nothing was registered, so nothing dialled the host
    assert "node-prep" not in _out(preview)
    assert served.log.read_text() == log_before
    shutil.rmtree(workdir / "pulumi" / "project", ignore_errors=True)
