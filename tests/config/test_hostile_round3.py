"""Hostile and careless input, round three: credentials, host keys as users copy them, and careless
but meaningful input, through the CLI as a user runs it (`python -m gpu_stack plan`).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
import yaml

from gpu_stack.config import SECRET_CAPABLE, SettingsError, load_settings
from gpu_stack.config.host_keys import check_ssh_public_key

from ..helpers import dev_config, set_path
from .test_hostile_input import CANARY_CIPHERTEXT, assert_clean_refusal, cli, project, stack_yaml

# =========================================================================== credentials
KUBECONFIG = {
    "apiVersion": "v1", "kind": "Config", "current-context": "c",
    "clusters": [{"name": "c", "cluster": {"server": "https://10.0.0.1:6443", "certificate-authority-data": "QUJD"}}],
    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
}
CREDENTIALS = {
    "token": {"token": "eyJhbGciOiJSUzI1NiJ9.canary-token"},
    "password": {"username": "admin", "password": "canary-password"},
    "client-key-data": {"client-certificate-data": "QUJD", "client-key-data": "Y2FuYXJ5LWtleQ=="},
    "auth-provider id-token": {"auth-provider": {"name": "oidc", "config": {"id-token": "canary-id", "client-id": "k"}}},
    "auth-provider refresh-token": {"auth-provider": {"name": "oidc", "config": {"refresh-token": "canary-refresh"}}},
}


def _kubeconfig(user: dict, as_json: bool) -> str:
    doc = {**KUBECONFIG, "users": [{"name": "u", "user": user}]}
    return json.dumps(doc, indent=1) if as_json else yaml.safe_dump(doc)


@pytest.mark.parametrize("as_json", [False, True], ids=["yaml", "json"])
@pytest.mark.parametrize("field", list(CREDENTIALS))
def test_a_kubeconfig_with_credentials_in_plain_text_is_refused_naming_the_secret_way(tmp_path, field, as_json):
    cfg = set_path(dev_config(), "kubernetes.kubeconfig", _kubeconfig(CREDENTIALS[field], as_json))
    err = assert_clean_refusal(cli(project(tmp_path, stack_yaml(cfg)), "plan", "--stack", "t"),
                               "gpu-stack:kubernetes.kubeconfig = [secret]: holds credentials",
                               "pulumi config set --secret --path 'gpu-stack:kubernetes.kubeconfig'")
    assert field in err
    assert "canary" not in err


def test_a_kubeconfig_path_or_one_without_credentials_or_one_set_as_a_secret_is_accepted(tmp_path):
    for i, (value, secure) in enumerate([("/home/ci/.kube/config", False),
                                         (_kubeconfig({"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "aws"}}, False), False),
                                         (None, True)]):
        cfg = dev_config() if value is None else set_path(dev_config(), "kubernetes.kubeconfig", value)
        text = stack_yaml(cfg, secure={"kubernetes.kubeconfig": None} if secure else None)
        proc = cli(project(tmp_path / str(i), text), "plan", "--stack", "t", "--format", "json")
        assert proc.returncode == 0, proc.stderr[-2000:]


def test_every_secret_capable_key_that_holds_credentials_is_either_refused_in_plain_text_or_checked():
    """The credential-bearing secret keys: a plain private key and a plain kubeconfig with credentials
    are refused when the program knows which keys are secret (as under `pulumi up`)."""
    credential_keys = {"ssh.privateKey", "kubernetes.kubeconfig"}
    assert credential_keys <= set(SECRET_CAPABLE)
    plain = {
        "ssh.privateKey": "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n",
        "kubernetes.kubeconfig": _kubeconfig(CREDENTIALS["token"], False),
    }
    for key in credential_keys:
        with pytest.raises(SettingsError) as info:
            load_settings(set_path(dev_config(), key, plain[key]), secret_keys=[])
        assert f"gpu-stack:{key} = [secret]:" in str(info.value) and "--secret" in str(info.value)
        top = key.split(".")[0]
        load_settings(set_path(dev_config(), key, plain[key]), secret_keys=[top])


# =========================================================================== host keys as users copy them
def _blob(*fields: bytes) -> str:
    return base64.b64encode(b"".join(struct.pack(">I", len(f)) + f for f in fields)).decode()


ED25519 = "ssh-ed25519 " + _blob(b"ssh-ed25519", bytes(range(32)))
ECDSA = (  # a real nistp256 host key (ssh-keygen -t ecdsa): its point lies on the curve
    "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBHtuNefOQz5pS2e7g/FShX2TSWq4OUHhswAUmhdOHPsz"
    "kedQyIui3aqn+fwXIbQPEoymOMgbiGl5OC7BAmT2L/o="
)
RSA = "ssh-rsa " + _blob(b"ssh-rsa", b"\x01\x00\x01", b"\x00" + bytes(range(256)))


def _host_key_lines(key: str) -> dict[str, str]:
    return {
        "bare": key,
        "pub-with-comment": f"{key} root@gpu-dev-1",
        "pub-with-long-comment": f"{key} root@gpu-dev-1 added 2026-01-01",
        "keyscan": f"10.20.0.11 {key}",
        "keyscan-port": f"[10.20.0.11]:2222 {key}",
        "keyscan-names": f"gpu-dev-1,10.20.0.11 {key}",
        # `ssh-keygen -H` of a line for 10.20.0.11 (nodes[0].address): the host field hashes the address.
        "known-hosts-hashed": f"|1|CUn+tKpp0P1tlnPZ1iwsOJ3EgJQ=|9M+2CoGKez7s0kprVbhgo4PnYh0= {key}",
        "keyscan-with-comment": f"10.20.0.11 {key} from keyscan",
    }


@pytest.mark.parametrize("key", [ED25519, ECDSA], ids=["ed25519", "ecdsa"])
def test_host_key_lines_as_users_copy_them_are_accepted_and_normalised(key):
    for form, line in _host_key_lines(key).items():
        settings = load_settings(set_path(dev_config(), "nodes[0].hostKey", line))
        assert settings.nodes[0].host_key == key, form


def test_a_pinned_rsa_host_key_is_refused_in_every_form_with_the_command_that_prints_the_right_key():
    """pulumi-command 1.2.1 offers only `ssh-rsa` (SHA-1) for a pinned RSA key, which OpenSSH >= 8.8
    refuses (tests/e2e/test_node_prep_flow.py shows the handshake failing against the real sshd)."""
    for form, line in _host_key_lines(RSA).items():
        with pytest.raises(SettingsError) as info:
            load_settings(set_path(dev_config(), "nodes[0].hostKey", line))
        text = str(info.value)
        assert "gpu-stack:nodes[0].hostKey" in text and "is an ssh-rsa key" in text, (form, text)
        assert "OpenSSH 8.8+ refuses" in text and "`ssh-keyscan -t ed25519 <host>`" in text, (form, text)
        assert len(text.splitlines()) == 2, text  # the heading and one line


def test_real_pub_files_and_keyscan_lines_are_accepted(tmp_path):
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is not installed")
    for kind in ("ed25519", "rsa", "ecdsa"):
        subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "root@gpu-dev-1", "-f", str(tmp_path / kind)], check=True)
        line = (tmp_path / f"{kind}.pub").read_text().strip()
        if kind == "rsa":
            with pytest.raises(ValueError, match="is an ssh-rsa key"):
                check_ssh_public_key(f"gpu-dev-1 {line}")
            continue
        assert check_ssh_public_key(line) == " ".join(line.split()[:2])
        assert check_ssh_public_key(f"gpu-dev-1 {line}") == " ".join(line.split()[:2])


WRONG = {
    "unknown-type": ("ssh-dss " + _blob(b"ssh-dss", b"p", b"q", b"g", b"y"), "of a type this stack pins"),
    "certificate": ("ssh-ed25519-cert-v01@openssh.com " + _blob(b"x"), "of a type this stack pins"),
    "type-mismatch": ("ssh-rsa " + ED25519.split()[1], "is a ssh-ed25519 key, but the line says ssh-rsa"),
    "truncated": ("ssh-ed25519 " + ED25519.split()[1][:-8], "base64 part"),
    "not-base64": ("ssh-ed25519 AAAA$$$$", "characters base64 does not use"),
    "no-base64": ("10.20.0.11 ssh-ed25519", "no base64 part"),
    "bad-host-field": (f"gpu'dev {ED25519}", "host field"),
    "revoked-marker": (f"@revoked 10.20.0.11 {ED25519}", "marked @revoked"),
    "wrong-curve": ("ecdsa-sha2-nistp384 " + _blob(b"ecdsa-sha2-nistp384", b"nistp256", b"\x04" * 65), "curve"),
    "nothing": ("root@gpu-dev-1", "must be an OpenSSH public host key"),
}


@pytest.mark.parametrize("case", list(WRONG))
def test_a_wrong_host_key_line_is_refused_saying_which_part_is_wrong(case):
    line, part = WRONG[case]
    with pytest.raises(SettingsError) as info:
        load_settings(set_path(dev_config(), "nodes[0].hostKey", line))
    assert "gpu-stack:nodes[0].hostKey" in str(info.value) and part in str(info.value), str(info.value)


# =========================================================================== careless but meaningful
def test_a_secret_kubernetes_version_plans_offline_with_a_warning(tmp_path):
    proc = cli(project(tmp_path, stack_yaml(dev_config(), secure={"kubernetes.version": None})), "plan", "--stack", "t", "--format", "json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = json.loads(proc.stdout)["warnings"]
    assert any("kubernetes.version is a secret the offline plan cannot read" in w for w in warnings)


def test_one_secret_leaf_does_not_hide_the_plain_values_beside_it(tmp_path):
    cfg = set_path(dev_config(), "nodes[1].gpu.count", "two")
    cfg = set_path(cfg, "nodes[0].user", "bad;user")
    err = assert_clean_refusal(cli(project(tmp_path, stack_yaml(cfg, secure={"nodes[0].address": None})), "plan", "--stack", "t"))
    assert "gpu-stack:nodes[1].gpu.count = 'two': must be a whole number" in err
    assert "gpu-stack:nodes[0].user = 'bad;user'" in err


def test_a_secret_leaf_itself_stays_hidden_when_its_value_is_wrong():
    # As under `pulumi up`: the engine marks all of `nodes` secret, the stack file says which leaf is.
    with pytest.raises(SettingsError) as info:
        load_settings(set_path(set_path(dev_config(), "nodes[0].port", "v1:cipher"), "nodes[1].gpu.count", "two"),
                      secret_keys=["nodes"], secret_paths={"nodes": [("nodes", 0, "port")]})
    shown = str(info.value)
    assert "gpu-stack:nodes[0].port = [secret]" in shown and "gpu-stack:nodes[1].gpu.count = 'two'" in shown
    assert "v1:cipher" not in shown


@pytest.mark.parametrize("stray", ["gpu-stack:sharing", "gpu-stack:nodes", "aws:region"])
def test_a_config_key_outside_config_is_reported_not_ignored(tmp_path, stray):
    text = stack_yaml(dev_config()) + f"{stray}:\n  replicas: 8\n"
    assert_clean_refusal(cli(project(tmp_path, text), "plan", "--stack", "t"),
                         f"{stray} is at the top of the file, outside 'config:', where Pulumi ignores it")


def test_an_unquoted_version_is_refused_with_write_it_as_a_string(tmp_path):
    text = stack_yaml(dev_config()).replace("version: '1.31'", "version: 1.30")
    assert "version: 1.30" in text
    assert_clean_refusal(cli(project(tmp_path, text), "plan", "--stack", "t"),
                         "gpu-stack:kubernetes.version = 1.3: must be one of", 'write it as a string, in quotes ("1.30")')


def test_an_unknown_gpu_model_is_warned_about_by_name(tmp_path):
    cfg = set_path(dev_config(), "nodes[1].gpu.model", "H100-80G")
    proc = cli(project(tmp_path, stack_yaml(cfg)), "plan", "--stack", "t", "--format", "json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    warnings = json.loads(proc.stdout)["warnings"]
    assert any("GPU model 'H100-80G' (gpu-stack:nodes[1].gpu.model) is not in the GPU catalog" in w and "did you mean 'H100-80GB'" in w
               for w in warnings), warnings


@pytest.mark.parametrize("kind", ["fifo", "char-device", "link-to-device", "pulumi-yaml-fifo"])
def test_a_stack_file_that_is_a_fifo_or_a_device_is_refused_not_waited_on(tmp_path, kind):
    root = project(tmp_path, stack_yaml(dev_config()))
    target = root / ("Pulumi.yaml" if kind == "pulumi-yaml-fifo" else "Pulumi.t.yaml")
    target.unlink()
    if kind in ("fifo", "pulumi-yaml-fifo"):
        os.mkfifo(target)
    elif kind == "char-device":
        if not Path("/dev/null").exists():
            pytest.skip("no /dev/null")
        target.symlink_to("/dev/null")
    else:
        target.symlink_to("/dev/zero")
    proc = cli(root, "plan", "--stack", "t")  # cli() has a timeout: a read that waits fails the test
    assert_clean_refusal(proc, "not a regular file")
    assert CANARY_CIPHERTEXT not in proc.stderr
