"""ssh.agentSocketPath: node preparation authenticates with an SSH agent's keys, so the connection
(stored four times per node: inputs and outputs of the copy and of the command) holds no private
key, and no key need be set. The exact connection inputs, the checks under the engine, and the
config refusals."""

from __future__ import annotations

import socket

import pytest
from pulumi_command import remote

from gpu_stack.offline.runner import PROJECT_DIR, PlanError, run_program

from ..helpers import assert_refused, dev_config, plan_of, set_path, stack_config

COMMAND, COPY = "command:remote:Command", "command:remote:CopyToRemote"


@pytest.fixture
def connections(monkeypatch):
    """Every ConnectionArgs the program builds, as the keyword arguments it passed."""
    seen: list[dict] = []
    original = remote.ConnectionArgs

    def record(**kwargs):
        seen.append(kwargs)
        return original(**kwargs)

    monkeypatch.setattr(remote, "ConnectionArgs", record)
    return seen


def test_with_the_agent_of_ssh_auth_sock_the_connection_names_neither_key_nor_path(connections):
    plan = plan_of(set_path(dev_config(), "ssh.agentSocketPath", "$SSH_AUTH_SOCK"))
    assert connections == [
        {"host": "10.20.0.11", "port": 22, "user": "ubuntu", "host_key": None},
        {"host": "10.20.0.12", "port": 22, "user": "ubuntu", "host_key": None},
    ]
    # No key was needed: no placeholder warning, and both resources of each node are planned.
    assert not any("privateKey is not set" in w for w in plan.warnings)
    assert len(plan.of_type(COMMAND)) == len(plan.of_type(COPY)) == 2


def test_with_a_socket_path_the_connection_carries_the_path_and_no_key(connections):
    plan_of(set_path(dev_config(), "ssh.agentSocketPath", "/run/user/1000/ssh-agent.socket"))
    assert {tuple(sorted(c)) for c in connections} == {("agent_socket_path", "host", "host_key", "port", "user")}
    assert {c["agent_socket_path"] for c in connections} == {"/run/user/1000/ssh-agent.socket"}


def test_without_an_agent_the_connection_carries_the_key(connections):
    plan_of(dev_config())
    assert all("private_key" in c and "agent_socket_path" not in c for c in connections)


def test_under_the_engine_an_agent_that_is_not_there_is_one_line(monkeypatch, tmp_path):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    cfg = set_path(dev_config(), "ssh.agentSocketPath", "$SSH_AUTH_SOCK")
    with pytest.raises(PlanError) as info:
        run_program(stack_config(cfg), PROJECT_DIR, offline=False)
    assert str(info.value).startswith("gpu-stack:ssh.agentSocketPath is '$SSH_AUTH_SOCK', but SSH_AUTH_SOCK is not set")
    assert info.value.registered == 0
    plain = tmp_path / "not-a-socket"
    plain.write_text("")
    with pytest.raises(PlanError) as info:
        run_program(stack_config(set_path(dev_config(), "ssh.agentSocketPath", str(plain))), PROJECT_DIR, offline=False)
    assert str(info.value) == f"gpu-stack:ssh.agentSocketPath: {plain} is not a socket (an SSH agent's socket is)"


def test_under_the_engine_a_running_agent_needs_no_key(monkeypatch, tmp_path):
    path = tmp_path / "agent.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    try:
        monkeypatch.setenv("SSH_AUTH_SOCK", str(path))
        plan = run_program(stack_config(set_path(dev_config(), "ssh.agentSocketPath", "$SSH_AUTH_SOCK")), PROJECT_DIR, offline=False)
        assert len(plan.of_type(COMMAND)) == 2
    finally:
        server.close()


def test_an_agent_and_a_key_together_or_a_relative_path_are_refused():
    assert_refused(
        set_path(set_path(dev_config(), "ssh.agentSocketPath", "$SSH_AUTH_SOCK"), "ssh.privateKey", "k"),
        "gpu-stack:ssh.agentSocketPath = '$SSH_AUTH_SOCK': is set together with ssh.privateKey: set one of them",
    )
    assert_refused(
        set_path(dev_config(), "ssh.agentSocketPath", "agent.sock"),
        "gpu-stack:ssh.agentSocketPath = 'agent.sock': must be the agent socket's absolute path (no spaces, no '..') or '$SSH_AUTH_SOCK'",
    )


# --------------------------------------------------------------------------- a dead agent beside the key
def _with_key_under_the_engine():
    cfg = dev_config()
    ssh = {**cfg.pop("ssh"), "privateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nagent-test-not-a-real-key\n-----END OPENSSH PRIVATE KEY-----\n"}
    return run_program(stack_config(cfg, secrets={"ssh": ssh}), PROJECT_DIR, offline=False)


def test_under_the_engine_a_dead_ssh_auth_sock_beside_the_key_is_one_line_with_the_way_out(monkeypatch, tmp_path):
    """pulumi-command 1.2.1 dials SSH_AUTH_SOCK even with ssh.privateKey (connection.go SSHConfig) and
    fails the connection when the dial fails (audit 5, F4): preview says so before anything is registered."""
    stale = tmp_path / "agent.sock"  # an agent that died: its socket file stays, nothing listens
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(stale))
    server.close()
    for dead, why in ((tmp_path / "gone" / "agent.sock", "No such file or directory"), (stale, "Connection refused")):
        monkeypatch.setenv("SSH_AUTH_SOCK", str(dead))
        with pytest.raises(PlanError) as info:
            _with_key_under_the_engine()
        message = str(info.value)
        assert "\n" not in message and info.value.registered == 0
        assert message.startswith(f"SSH_AUTH_SOCK names no SSH agent that answers ({dead}: {why})"), message
        assert "even with gpu-stack:ssh.privateKey set" in message and "`unset SSH_AUTH_SOCK`" in message


def test_under_the_engine_a_live_agent_or_none_beside_the_key_plans(monkeypatch, tmp_path):
    path = tmp_path / "agent.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(4)
    try:
        for value in (str(path), ""):
            monkeypatch.setenv("SSH_AUTH_SOCK", value)
            assert len(_with_key_under_the_engine().of_type(COMMAND)) == 2
        monkeypatch.delenv("SSH_AUTH_SOCK")
        assert len(_with_key_under_the_engine().of_type(COMMAND)) == 2
    finally:
        server.close()


def test_offline_a_dead_ssh_auth_sock_changes_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("SSH_AUTH_SOCK", str(tmp_path / "gone.sock"))
    assert len(plan_of(dev_config()).of_type(COMMAND)) == 2
