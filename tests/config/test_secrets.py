"""Canary secrets put into a stack never come out: not in the plan, the diff, the outputs, an error
message or a node's command log; the SSH key only ever reaches a remote.Command's `connection`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pulumi.runtime import rpc

from gpu_stack.config import load_settings
from gpu_stack.design.derive import derive
from gpu_stack.offline import diff, fast_monitor
from gpu_stack.offline.render import render_text
from gpu_stack.offline.runner import PROJECT_DIR, PlanError

from .. import node_fakes as fakes
from ..helpers import dev_config, plan_of

# Distinctive strings that occur nowhere else: any hit is a leak.
KEY_BODY = "b3BlbnNzaC1rZXktdjEAAAAACanaryKeyBodyDoNotLeak0123456789"
CANARY_KEY = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_BODY}\n-----END OPENSSH PRIVATE KEY-----\n"
CANARY_PASSWORD = "canary-Pa55word-DoNotLeak-7f3a"
CANARY_KUBECONFIG = (
    "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://10.0.0.1:6443'}\n"
    f"users:\n- name: admin\n  user:\n    username: admin\n    password: {CANARY_PASSWORD}\n"
    "contexts:\n- name: c\n  context: {cluster: c, user: admin}\ncurrent-context: c\n"
)
CANARIES = (KEY_BODY, CANARY_PASSWORD)
COMMAND = "command:remote:Command"
COPY = "command:remote:CopyToRemote"


def _assert_clean(text: str, where: str) -> None:
    for canary in CANARIES:
        assert canary not in text, f"a canary secret leaked into {where}"


def canary_config() -> tuple[dict[str, Any], dict[str, Any]]:
    """The dev stack with the canary key and a kubeconfig holding the canary password, as secrets."""
    cfg = dev_config()
    ssh = {**cfg.pop("ssh"), "privateKey": CANARY_KEY}
    kubernetes = {**cfg.pop("kubernetes"), "kubeconfig": CANARY_KUBECONFIG}
    return cfg, {"ssh": ssh, "kubernetes": kubernetes}


class _RawInputs:
    """What the program hands the engine, before the runner scrubs it (secrets still wrapped)."""

    def __init__(self) -> None:
        self.by_resource: dict[tuple[str, str], dict[str, Any]] = {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = fast_monitor.RecordingMonitor.RegisterResource
        seen = self.by_resource

        def register(monitor, request):
            seen[(request.type, request.name)] = rpc.deserialize_properties(request.object)
            return original(monitor, request)

        monkeypatch.setattr(fast_monitor.RecordingMonitor, "RegisterResource", register)


def _canary_paths(value: Any, path: str = "", secret: bool = False) -> Iterator[tuple[str, bool]]:
    """(path, inside a Pulumi secret?) for every string holding a canary."""
    if rpc.is_rpc_secret(value):
        yield from _canary_paths(rpc.unwrap_rpc_secret(value), path, True)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _canary_paths(v, f"{path}.{k}" if path else k, secret)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _canary_paths(v, f"{path}[{i}]", secret)
    elif isinstance(value, str) and any(c in value for c in CANARIES):
        yield path, secret


@pytest.fixture(scope="module")
def canary_plan():
    cfg, secrets = canary_config()
    return plan_of(cfg, secrets=secrets)


def test_plan_text_json_and_outputs_hold_no_canary(canary_plan):
    _assert_clean(render_text(canary_plan), "the text plan")
    _assert_clean(json.dumps(canary_plan.to_json()), "the JSON plan")
    _assert_clean(json.dumps(canary_plan.outputs), "the stack outputs")
    _assert_clean("\n".join(canary_plan.warnings), "the warnings")


def test_kubeconfig_reaches_the_provider_as_a_secret(canary_plan):
    (provider,) = canary_plan.of_type("pulumi:providers:kubernetes")
    assert provider.inputs["kubeconfig"] == "[secret]"


def test_key_reaches_only_the_connection_of_node_commands_as_a_secret(monkeypatch):
    raw = _RawInputs()
    raw.install(monkeypatch)
    cfg, secrets = canary_config()
    plan = plan_of(cfg, secrets=secrets)
    hits = {
        (typ, name, path, secret)
        for (typ, name), inputs in raw.by_resource.items()
        for path, secret in _canary_paths(inputs)
    }
    for typ, name, path, secret in hits:
        assert secret, f"{typ} {name}: {path} carries a canary outside a Pulumi secret"
        assert (typ, path) in {
            (COMMAND, "connection.privateKey"), (COPY, "connection.privateKey"), ("pulumi:providers:kubernetes", "kubeconfig")
        }, f"{typ} {name}: canary at {path}"
    commands = plan.of_type(COMMAND) + plan.of_type(COPY)
    # Every node command and script copy gets the key, each exactly once, in its connection.
    key_hits = sorted(name for typ, name, path, _ in hits if typ in (COMMAND, COPY))
    assert key_hits == sorted(c.name for c in commands)
    for command in commands:
        assert command.inputs["connection"] == "[secret]" or command.inputs["connection"]["privateKey"] == "[secret]"


def test_node_commands_get_the_key_when_nodes_are_host_managed(canary_plan):
    nodes = canary_config()[0]["nodes"]
    assert len(canary_plan.of_type(COMMAND)) == len(nodes) > 0


def test_node_scripts_and_their_command_log_hold_no_canary(tmp_path):
    cfg, secrets = canary_config()
    settings = load_settings({**cfg, **secrets})
    commands = list(derive(settings).commands)
    assert commands
    for command in commands:
        for text in (command.create, command.update, *command.triggers, *command.copy_triggers, json.dumps(command.values)):
            _assert_clean(text, f"node {command.node}'s command")
    node = fakes.FakeNode(tmp_path / "node")
    result = node.launch(commands[0].values)
    _assert_clean(result.stdout + result.stderr, "the node script's output")
    _assert_clean(json.dumps(node.calls()), "the node's recorded command log")


def test_diff_text_and_markdown_hold_no_canary():
    cfg, secrets = canary_config()
    old = plan_of(cfg, secrets=secrets)
    rotated = {
        "ssh": {**secrets["ssh"], "privateKey": CANARY_KEY.replace("Canary", "Rotated")},
        "kubernetes": {**secrets["kubernetes"], "kubeconfig": CANARY_KUBECONFIG.replace(CANARY_PASSWORD, "rotated-pw")},
    }
    new_cfg = {**cfg, "sharing": {"mode": "time-slicing", "replicas": 8}}
    new = plan_of(new_cfg, secrets=rotated)
    changes = diff.diff_plans(old, new)
    for fmt in ("text", "markdown"):
        text = diff.render(changes, fmt)
        assert "replicas" in text  # the diff does show the visible change
        _assert_clean(text, f"the {fmt} diff")
        assert "Rotated" not in text and "rotated-pw" not in text


@pytest.mark.parametrize(
    "secrets",
    [
        {"ssh": CANARY_KEY},  # `pulumi config set --secret gpu-stack:ssh < key`: the whole key, not the path
        {"ssh": {"user": "ubuntu", "privateKey": [CANARY_KEY]}},
        {"ssh": {"user": "ubuntu", "privateKey": CANARY_KEY, "port": CANARY_PASSWORD}},
        {"kubernetes": {"kubeconfig": CANARY_KUBECONFIG, "version": CANARY_PASSWORD}},
    ],
    ids=["ssh-as-string", "key-as-list", "bad-port", "bad-version"],
)
def test_errors_name_the_key_but_never_show_a_secret_value(secrets):
    cfg = dev_config()
    for key in secrets:
        cfg.pop(key, None)
    with pytest.raises(PlanError) as info:
        plan_of(cfg, secrets=secrets)
    message = str(info.value)
    _assert_clean(message, "the error message")
    assert "[secret]" in message and "gpu-stack:" in message
    assert info.value.registered == 0


def test_private_key_value_is_hidden_even_when_not_marked_secret():
    cfg = dev_config()
    cfg["ssh"] = {"user": "ubuntu", "privateKey": {"key": CANARY_KEY}}
    with pytest.raises(PlanError) as info:
        plan_of(cfg)
    assert "gpu-stack:ssh.privateKey = [secret]: must be a string" in str(info.value)
    _assert_clean(str(info.value), "the error message")


def _project(tmp_path: Path, stack: str, config: dict[str, Any]) -> Path:
    (tmp_path / "Pulumi.yaml").write_text((PROJECT_DIR / "Pulumi.yaml").read_text())
    (tmp_path / "__main__.py").write_text((PROJECT_DIR / "__main__.py").read_text())
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    return tmp_path


def _cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpu_stack", "--project-dir", str(project), *args],
        capture_output=True, text=True, cwd=PROJECT_DIR,
    )


def test_cli_never_prints_a_secure_value(tmp_path):
    """`secure:` ciphertext from a stack file shows as [secret] in the text and JSON plans."""
    ciphertext = "v1:AAAABBBBcanaryCiphertextDoNotLeak=="
    config = {f"gpu-stack:{k}": v for k, v in dev_config().items()}
    config["gpu-stack:ssh"] = {"user": "ubuntu", "privateKey": {"secure": ciphertext}}
    config["gpu-stack:kubernetes"] = {"context": "dev-cluster", "kubeconfig": {"secure": ciphertext + "2"}}
    project = _project(tmp_path, "canary", config)
    for fmt in ("text", "json"):
        proc = _cli(project, "plan", "--stack", "canary", "--format", fmt)
        assert proc.returncode == 0, proc.stderr
        assert ciphertext not in proc.stdout + proc.stderr
        assert "gpu-stack-offline-secret-" not in proc.stdout
    assert "[secret]" in proc.stdout


def test_cli_error_on_a_secret_key_shows_no_value(tmp_path):
    config = {f"gpu-stack:{k}": v for k, v in dev_config().items()}
    config["gpu-stack:ssh"] = {"secure": "v1:canaryCiphertextAsWholeKey=="}
    project = _project(tmp_path, "bad", config)
    proc = _cli(project, "plan", "--stack", "bad")
    assert proc.returncode == 2
    assert "gpu-stack:ssh = [secret]: must be a mapping" in proc.stderr
    assert "canaryCiphertext" not in proc.stderr + proc.stdout
    assert "gpu-stack-offline-secret-" not in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_private_key_in_plain_text_is_refused():
    """`pulumi config set --path gpu-stack:ssh.privateKey ...` without --secret puts the key in git."""
    from gpu_stack.config.stack_files import StackConfig
    from gpu_stack.offline.runner import run_program

    cfg = StackConfig(project="gpu-stack", stack="plain")
    for key, value in dev_config().items():
        cfg.values[f"gpu-stack:{key}"] = value
    cfg.values["gpu-stack:ssh"] = {"user": "ubuntu", "privateKey": CANARY_KEY}
    with pytest.raises(PlanError) as info:
        run_program(cfg, PROJECT_DIR)
    message = str(info.value)
    assert "gpu-stack:ssh.privateKey = [secret]: is stored in plain text in the stack file" in message
    _assert_clean(message, "the error message")
    assert info.value.registered == 0


def test_cli_refuses_a_plain_text_key_in_a_stack_file(tmp_path):
    config = {f"gpu-stack:{k}": v for k, v in dev_config().items()}
    config["gpu-stack:ssh"] = {"user": "ubuntu", "privateKey": CANARY_KEY}
    proc = _cli(_project(tmp_path, "plain", config), "plan", "--stack", "plain")
    assert proc.returncode == 2
    assert "is stored in plain text in the stack file" in proc.stderr
    _assert_clean(proc.stderr + proc.stdout, "the CLI output")


def test_secret_keys_come_from_the_cli_environment_too(monkeypatch):
    """Under `pulumi up` the language host names the secret keys in PULUMI_CONFIG_SECRET_KEYS."""
    from pulumi.runtime import config as runtime_config

    from gpu_stack.config.pulumi_config import secret_keys

    monkeypatch.setattr(runtime_config, "CONFIG", runtime_config.ContextVar("test_config", default={}))
    monkeypatch.setattr(runtime_config, "_SECRET_KEYS", runtime_config.ContextVar("test_secret_keys", default=set()))
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({"gpu-stack:ssh": "{}", "gpu-stack:nodes": "[]"}))
    monkeypatch.setenv("PULUMI_CONFIG_SECRET_KEYS", json.dumps(["gpu-stack:ssh", "other:thing"]))
    assert secret_keys() == {"ssh"}
