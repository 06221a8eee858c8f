"""Hostile and careless input, round two: every stack config is planned right or refused cleanly.

One group per class of mistake: whole-string matching and invisible characters, the stack file
reader, keys in the wrong namespace, secrets anywhere, semantic checks, error output a terminal can
trust, and the diff CLI's failures. CLI cases run `python -m gpu_stack` as a user would.
"""

from __future__ import annotations

import base64
import copy
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_stack.config import SettingsError, load_settings
from gpu_stack.config.host_keys import check_ssh_public_key
from gpu_stack.config.safe_input import invisible_character
from gpu_stack.config.stack_files import MAX_FILE_BYTES, StackFileError, read_stack
from gpu_stack.design.generated_limits import CONFIGMAP_LIMIT, generated_problems
from gpu_stack.offline.runner import PROJECT_DIR, PlanError

from ..helpers import committed_project_copy, dev_config, plan_of, set_path

CANARY_CIPHERTEXT = "v1:AAAcanaryCiphertextDoNotLeak42"


def _refused(cfg: dict[str, Any], **kwargs: Any) -> str:
    with pytest.raises(PlanError) as info:
        plan_of(cfg, **kwargs)
    assert info.value.registered == 0
    return str(info.value)


def _edit(path: str, value: Any) -> dict[str, Any]:
    return set_path(dev_config(), path, value)


def project(tmp_path: Path, stack_text: str | bytes, stack: str = "t", pulumi_yaml: str | None = None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "Pulumi.yaml").write_text(pulumi_yaml if pulumi_yaml is not None else (PROJECT_DIR / "Pulumi.yaml").read_text())
    (tmp_path / "__main__.py").write_text((PROJECT_DIR / "__main__.py").read_text())
    target = tmp_path / f"Pulumi.{stack}.yaml"
    if isinstance(stack_text, bytes):
        target.write_bytes(stack_text)
    else:
        target.write_text(stack_text)
    return tmp_path


def stack_yaml(cfg: dict[str, Any], secure: dict[str, Any] | None = None, extra: dict[str, Any] | None = None) -> str:
    """A stack file for `gpu-stack:*` values; the dev stack's private key stays a `secure:` value."""
    cfg = copy.deepcopy(cfg)
    cfg.setdefault("ssh", {})
    cfg["ssh"] = {**cfg["ssh"], "privateKey": {"secure": CANARY_CIPHERTEXT}}
    for path, _ in (secure or {}).items():
        set_path(cfg, path, {"secure": CANARY_CIPHERTEXT + "-" + path})
    doc = {f"gpu-stack:{k}": v for k, v in cfg.items()}
    doc.update(extra or {})
    return yaml.safe_dump({"config": doc}, sort_keys=False)


def limit_memory(limit: int = 3 * 1024**3):
    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def cli(root: Path, *args: str, env: dict[str, str] | None = None, memory: int = 3 * 1024**3) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpu_stack", "--project-dir", str(root), *args],
        capture_output=True, text=True, errors="replace", cwd=PROJECT_DIR, env=env,
        preexec_fn=limit_memory(memory), timeout=300,
    )


def assert_clean_refusal(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 2, nothing on stdout, no traceback, no raw control character, no canary; one line per problem."""
    err = proc.stderr
    assert proc.returncode == 2, (proc.returncode, err[-2000:])
    assert proc.stdout == ""
    assert "Traceback" not in err
    assert CANARY_CIPHERTEXT not in err
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f\u2028\u2029\u200b\u202e]", err), repr(err)
    assert err.startswith("error: ")
    for line in err.splitlines():
        assert len(line) <= 420, line
    for needle in needles:
        assert needle in err, err
    return err


# =========================================================================== 1. whole-string matching
NAME_LIKE_FIELDS = [
    "nodes[0].name", "nodes[0].address", "nodes[0].user", "nodes[0].gpu.model", "nodes[0].sharing",
    "operator.namespace", "operator.releaseName", "validation.namespace", "driver.version",
    "validation.images.cuda", "dcgmExporter.serviceMonitor.interval", "kubernetes.context",
]
VALID_VALUE = {
    "nodes[0].name": "gpu-dev-1", "nodes[0].address": "10.20.0.11", "nodes[0].user": "ubuntu",
    "nodes[0].gpu.model": "L4", "nodes[0].sharing": "default", "operator.namespace": "gpu-operator",
    "operator.releaseName": "gpu-operator", "validation.namespace": "gpu-validation",
    "driver.version": "580.105.08", "validation.images.cuda": "nvcr.io/nvidia/cuda:12",
    "dcgmExporter.serviceMonitor.interval": "15s", "kubernetes.context": "dev-cluster",
}
INVISIBLE = {
    "trailing-newline": "\n", "carriage-return": "\r", "tab": "\t", "escape": "\x1b[31m", "nul": "\x00",
    "zero-width-space": "\u200b", "zero-width-joiner": "\u200d", "bidi-override": "\u202e", "bom": "\ufeff",
    "line-separator": "\u2028", "no-break-space": "\u00a0", "ideographic-space": "\u3000",
}


@pytest.mark.parametrize("suffix", list(INVISIBLE.values()), ids=list(INVISIBLE))
@pytest.mark.parametrize("field", NAME_LIKE_FIELDS)
def test_control_and_invisible_characters_are_refused_in_every_name_like_value(field, suffix):
    cfg = _edit(field, VALID_VALUE[field] + suffix)
    if field == "nodes[0].sharing":
        cfg["sharing"]["profiles"] = {"default-2": {"replicas": 2}}
    text = _refused(cfg)
    assert f"gpu-stack:{field} = " in text
    assert "contains an invisible or control character" in text
    assert f"U+{ord(suffix[0]):04X}" in text


def test_a_trailing_newline_no_longer_slips_past_the_duplicate_node_rule():
    cfg = _edit("nodes[1].name", "gpu-dev-1\n")
    text = _refused(cfg)
    assert "gpu-stack:nodes[1].name = 'gpu-dev-1\\n': contains an invisible or control character" in text


@pytest.mark.parametrize("key", ["bad\nkey", "a\u200bb", "fast\n"])
def test_mapping_keys_are_checked_too(key):
    cfg = dev_config()
    cfg["sharing"]["profiles"] = {key: {"replicas": 2}}
    text = _refused(cfg)
    assert "gpu-stack:sharing.profiles[" in text and "invisible or control character" in text


def test_no_format_check_in_the_package_matches_only_a_prefix():
    """Every regex check in gpu_stack is a fullmatch: `re.match`/`.match(` would let a suffix through."""
    offenders = []
    for path in (PROJECT_DIR / "gpu_stack").rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"(?<!full)match\(", line) and "fullmatch" not in line and "def " not in line:
                offenders.append(f"{path.name}:{n}: {line.strip()}")
    assert offenders == []


def test_multi_line_text_fields_still_take_newlines_but_not_escapes():
    ok = _edit("dcgmExporter.metrics", "DCGM_FI_DEV_GPU_UTIL, gauge, GPU use\nDCGM_FI_DEV_FB_USED, gauge, used\n")
    plan_of(ok)
    text = _refused(_edit("dcgmExporter.metrics", "DCGM_FI_DEV_GPU_UTIL, gauge, GPU\x1b[2J use\n"))
    assert "gpu-stack:dcgmExporter.metrics" in text and "U+001B" in text


def test_invisible_character_finder():
    assert invisible_character("gpu-dev-1") is None
    assert invisible_character("NVIDIA H100 NVL") is None
    assert invisible_character("café") is None  # printable non-ASCII letters are not invisible
    assert invisible_character("a\u200bb") == (1, "\u200b")
    assert invisible_character("a\nb", frozenset("\n")) is None


# =========================================================================== 2. the stack file reader
ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)
) + "config: {gpu-stack:nodes: *i}\n"


def test_alias_bomb_is_refused_before_it_expands(tmp_path):
    proc = cli(project(tmp_path, ALIAS_BOMB), "plan", "--stack", "t", memory=1024**3)
    assert_clean_refusal(proc, "refused before expanding")


def test_deep_nesting_is_refused(tmp_path):
    text = "config:\n  gpu-stack:nodes: " + "[" * 50000 + "]" * 50000 + "\n"
    assert_clean_refusal(cli(project(tmp_path, text), "plan", "--stack", "t"), "nesting deeper than")


def test_a_self_referencing_alias_is_refused(tmp_path):
    text = "config:\n  gpu-stack:nodes: &n [*n]\n"
    assert_clean_refusal(cli(project(tmp_path, text), "plan", "--stack", "t"))


@pytest.mark.parametrize(
    "data,message",
    [
        (b"config:\n  gpu-stack:sharing: {mode: \xff\xfe}\n", "not UTF-8 text (byte 0xff on line 2)"),
        (b"config:\n  gpu-stack:sharing:\n    mode: time\x00slicing\n", "holds a NUL byte (line 3)"),
        (b"config:\n  gpu-stack:sharing: {mode: a}\n  gpu-stack:sharing: {mode: b}\n", "key 'gpu-stack:sharing' is already defined at line 2"),
        (b"config:\n  gpu-stack:sharing:\n    mode: mps\n    mode: none\n", "line 4: key 'mode' is already defined at line 3"),
        (b"config:\n  gpu-stack:sharing: [\n", "not valid YAML: line"),
        (b"\x1b]0;pwned\x07config: {a: [}\n", "not valid YAML"),
    ],
    ids=["invalid-utf8", "nul", "duplicate-top-key", "duplicate-nested-key", "unclosed", "escape-in-yaml"],
)
def test_unreadable_stack_files_give_one_line_and_exit_2(tmp_path, data, message):
    err = assert_clean_refusal(cli(project(tmp_path, data), "plan", "--stack", "t"), message)
    assert len(err.strip().splitlines()) == 1


def test_an_oversized_stack_file_is_refused_without_parsing(tmp_path):
    data = b"config:\n  gpu-stack:sharing: {mode: none}\n#" + b"x" * MAX_FILE_BYTES + b"\n"
    assert_clean_refusal(cli(project(tmp_path, data), "plan", "--stack", "t", memory=1024**3), "larger than 4 MiB")


def test_a_directory_or_a_symlink_loop_is_refused(tmp_path):
    root = project(tmp_path, "config: {}\n")
    (root / "Pulumi.t.yaml").unlink()
    (root / "Pulumi.t.yaml").mkdir()
    assert_clean_refusal(cli(root, "plan", "--stack", "t"), "is a folder")
    (root / "Pulumi.t.yaml").rmdir()
    (root / "Pulumi.t.yaml").symlink_to(root / "Pulumi.t.yaml")
    assert_clean_refusal(cli(root, "plan", "--stack", "t"), "cannot be read")


@pytest.mark.parametrize("stack", ["../..", "/", "..", "a/b", "dev\n", "x" * 101, ""])
def test_a_stack_name_must_be_a_plain_name(tmp_path, stack):
    root = project(tmp_path, "config: {}\n")
    err = assert_clean_refusal(cli(root, "plan", "--stack", stack), "is not a plain stack name")
    assert len(err.strip().splitlines()) == 1
    with pytest.raises(StackFileError):
        read_stack(root, stack)


def test_values_load_as_yaml_1_2(tmp_path):
    """yes/on/off are strings (so `protect: yes` is refused, not true); true/false, ints and ~ as YAML 1.2."""
    root = project(tmp_path, "config:\n  gpu-stack:operator:\n    protect: yes\n  gpu-stack:kubernetes:\n    context: off\n")
    cfg = read_stack(root, "t")
    assert cfg.values["gpu-stack:operator"] == {"protect": "yes"}
    assert cfg.values["gpu-stack:kubernetes"] == {"context": "off"}
    assert_clean_refusal(cli(root, "plan", "--stack", "t"), "gpu-stack:operator.protect = 'yes': must be true or false")
    root2 = project(tmp_path / "b", "config:\n  gpu-stack:sharing: {mode: time-slicing, replicas: 0x8, renameByDefault: TRUE}\n  gpu-stack:mig: ~\n")
    cfg2 = read_stack(root2, "t")
    assert cfg2.values["gpu-stack:sharing"] == {"mode": "time-slicing", "replicas": 8, "renameByDefault": True}
    assert cfg2.values["gpu-stack:mig"] is None


# =========================================================================== 3. keys in the wrong namespace
@pytest.mark.parametrize(
    "key,hint",
    [("gpu_stack:nodes", "gpu-stack:nodes"), ("GPU-Stack:sharing", "gpu-stack:sharing"),
     ("gpu-stak:sharing", "gpu-stack:sharing"), ("gpustack:sharng", "gpu-stack:sharing")],
)
def test_keys_in_a_misspelt_namespace_are_reported_with_a_did_you_mean(tmp_path, key, hint):
    cfg = dev_config()
    text = stack_yaml(cfg, extra={key: {"mode": "time-slicing"}})
    err = assert_clean_refusal(cli(project(tmp_path, text), "plan", "--stack", "t"), f"did you mean '{hint}'?")
    assert key in err


def test_other_namespaces_are_left_alone():
    plan_of(dev_config())  # baseline
    assert load_settings({}, other_keys=["kubernetes:context", "pulumi:tags", "aws:region"]) is not None


# =========================================================================== 4. secrets anywhere
@pytest.mark.parametrize("path", ["nodes[0].address", "nodes[0].port", "nodes[0].user", "nodes[0].hostKey", "ssh.user", "ssh.port", "kubernetes.context"])
def test_secure_values_are_accepted_offline_where_a_plain_value_is(tmp_path, path):
    root = project(tmp_path, stack_yaml(dev_config(), secure={path: True}))
    proc = cli(root, "plan", "--stack", "t", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert CANARY_CIPHERTEXT not in proc.stdout and "gpu-stack-offline-secret-" not in proc.stdout
    import json

    plan = json.loads(proc.stdout)
    if path.startswith("kubernetes."):
        provider = next(r for r in plan["resources"] if r["type"] == "pulumi:providers:kubernetes")
        assert provider["inputs"]["context"] == "[secret]"
    else:
        for r in plan["resources"]:
            if r["type"] == "command:remote:Command":
                assert r["inputs"]["connection"] == "[secret]"


@pytest.mark.parametrize("path", ["nodes[0].name", "nodes[0].sharing", "sharing.replicas", "operator.namespace", "nodes[0].gpu.model"])
def test_a_secret_where_it_cannot_stay_secret_is_refused_with_the_reason(tmp_path, path):
    root = project(tmp_path, stack_yaml(dev_config(), secure={path: True}))
    assert_clean_refusal(cli(root, "plan", "--stack", "t"), f"gpu-stack:{path} = [secret]: is a secret, but", "Pulumi cannot keep it secret")


def test_under_the_engine_a_secret_key_is_narrowed_by_the_stack_file():
    """`pulumi config set --secret --path nodes[0].address` marks all of gpu-stack:nodes secret for
    the program; the stack file says which value it was, so the node names stay usable."""
    cfg = dev_config()
    settings = load_settings(cfg, secret_keys={"nodes", "ssh"}, secret_paths={"nodes": [("nodes", 0, "address")], "ssh": [("ssh", "privateKey")]})
    assert settings.is_secret("nodes[*].address") and not settings.is_secret("nodes[*].user")
    with pytest.raises(SettingsError) as info:
        load_settings(cfg, secret_keys={"nodes", "ssh"}, secret_paths={"nodes": [("nodes", 0, "name")]})
    assert "gpu-stack:nodes[0].name = [secret]: is a secret" in str(info.value)


def test_a_secret_context_stays_a_secret_in_the_provider():
    cfg = dev_config()
    kubernetes = cfg.pop("kubernetes")
    plan = plan_of(cfg, secrets={"kubernetes": kubernetes})
    provider = plan.of_type("pulumi:providers:kubernetes")[0]
    assert provider.inputs["context"] == "[secret]"


def test_pulumi_yaml_secret_true_needs_a_secure_value(tmp_path):
    pulumi_yaml = (PROJECT_DIR / "Pulumi.yaml").read_text() + "config:\n  kubernetes:\n    type: object\n    secret: true\n"
    cfg = dev_config()
    plain = stack_yaml(cfg)
    err = assert_clean_refusal(cli(project(tmp_path, plain, pulumi_yaml=pulumi_yaml), "plan", "--stack", "t"), "secret: true")
    assert "pulumi config set --secret gpu-stack:kubernetes" in err
    cfg.pop("kubernetes")
    secure = stack_yaml(cfg, extra={"gpu-stack:kubernetes": {"secure": CANARY_CIPHERTEXT}})
    proc = cli(project(tmp_path / "b", secure, pulumi_yaml=pulumi_yaml), "plan", "--stack", "t")
    # The whole key is a secret and offline it is one opaque string: refused as a secret, never shown.
    assert_clean_refusal(proc, "gpu-stack:kubernetes = [secret]: is one secret as a whole", "--secret --path")


def test_key_material_pasted_into_host_key_is_never_printed():
    private = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQ\n-----END OPENSSH PRIVATE KEY-----\n"
    text = _refused(_edit("nodes[0].hostKey", private))
    assert "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ" not in text and "PRIVATE KEY" not in text
    assert "gpu-stack:nodes[0].hostKey = [hidden:" in text
    one_line = private.replace("\n", " ")
    text = _refused(_edit("nodes[0].hostKey", one_line))
    assert "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQ" not in text


# =========================================================================== 5. semantic checks
@pytest.mark.parametrize("field", ["operator.namespace", "validation.namespace"])
@pytest.mark.parametrize("namespace", ["kube-system", "default", "kube-public", "kube-node-lease"])
def test_system_namespaces_are_refused(field, namespace):
    text = _refused(_edit(field, namespace))
    assert f"gpu-stack:{field} = '{namespace}': is a Kubernetes system namespace" in text


@pytest.mark.parametrize(
    "first,second",
    [("10.20.0.11", "10.20.0.11"), ("fd00::1", "fd00:0:0::1"), ("gpu-1.example.com", "GPU-1.example.com")],
)
def test_two_nodes_at_one_address_are_refused(first, second):
    cfg = dev_config()
    cfg["nodes"][0]["address"], cfg["nodes"][1]["address"] = first, second
    text = _refused(cfg)
    assert "gpu-stack:nodes[1].address" in text and "is also the address of nodes[0] (gpu-dev-1)" in text


def test_one_address_on_two_ports_is_two_nodes():
    cfg = dev_config()
    cfg["nodes"][1]["address"] = cfg["nodes"][0]["address"]
    cfg["nodes"][1]["port"] = 2222
    plan_of(cfg)


@pytest.mark.parametrize("address", ["999.1.1.1", "10.0.0", "a..b", "-gpu.example.com", "gpu_1", "10.0.0.1:22", "[fd00::1]", "x" * 254, "1.2.3.04"])
def test_addresses_must_be_an_ip_or_a_dns_name(address):
    assert "must be a host name or an IP address" in _refused(_edit("nodes[0].address", address))


@pytest.mark.parametrize("address", ["10.0.0.1", "fd00::5", "gpu-1", "gpu-1.dc1.example.com", "2001:db8::1"])
def test_valid_addresses_pass(address):
    plan_of(_edit("nodes[0].address", address))


@pytest.mark.parametrize(
    "path,value",
    [("ssh.port", True), ("nodes[0].port", "yes"), ("nodes[0].gpu.count", True), ("sharing.replicas", False),
     ("validation.timeoutSeconds", "600s"), ("nodes[0].gpu.count", "٣"), ("sharing.replicas", "4 "), ("sharing.replicas", 4.5)],
)
def test_booleans_and_text_are_not_numbers(path, value):
    text = _refused(_edit(path, value))
    assert "must be a whole number" in text


@pytest.mark.parametrize("path,value", [("operator.protect", "yes"), ("operator.protect", 1), ("validation.enabled", "on"), ("sharing.renameByDefault", "y")])
def test_numbers_and_yes_are_not_flags(path, value):
    assert "must be true or false" in _refused(_edit(path, value))


def test_numbers_and_flags_as_pulumi_config_set_stores_them():
    cfg = dev_config()
    cfg["ssh"]["port"] = "22"
    cfg["sharing"]["replicas"] = "8"
    cfg["operator"] = {"protect": "true"}
    plan = plan_of(cfg)
    release = plan.of_type("kubernetes:helm.sh/v3:Release")[0]
    assert plan.by_name("gpu-operator-namespace").options.get("protect") is True
    assert release is not None


def _blob(*fields: bytes) -> str:
    return base64.b64encode(b"".join(struct.pack(">I", len(f)) + f for f in fields)).decode()


@pytest.mark.parametrize(
    "key",
    [
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAA",  # truncated
        "ssh-ed25519 " + _blob(b"ssh-rsa", b"\x01\x00\x01", b"\x00" * 64),  # an RSA blob under the ed25519 name
        "ssh-ed25519 " + _blob(b"ssh-ed25519", b"\x00" * 31),  # 31-byte key
        "ssh-ed25519 " + _blob(b"ssh-ed25519", b"\x00" * 32) + "=",  # bad padding
        "ecdsa-sha2-nistp256 " + _blob(b"ecdsa-sha2-nistp256", b"nistp384", b"\x04" * 65),
        "ssh-dss " + _blob(b"ssh-dss", b"p", b"q", b"g", b"y"),
        "ssh-ed25519 " + _blob(b"ssh-ed25519", b"\x00" * 32) + " root@host\nssh-rsa x",
    ],
    ids=["truncated", "type-mismatch", "short-key", "padding", "wrong-curve", "dss", "two-lines"],
)
def test_host_keys_that_do_not_parse_are_refused(key):
    text = _refused(_edit("nodes[0].hostKey", key))
    expected = "contains an invisible or control character" if "\n" in key else "must be an OpenSSH public host key"
    # A long base64 run is shown as [hidden: ...] (it may be key material); a short one as typed.
    assert "gpu-stack:nodes[0].hostKey = " in text and expected in text


def test_real_host_keys_parse(tmp_path):
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is not installed")
    # (an ssh-rsa key parses too, and is refused as a pin: test_hostile_round3.py)
    for kind in ("ed25519", "ecdsa"):
        subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(tmp_path / kind)], check=True)
        key = " ".join((tmp_path / f"{kind}.pub").read_text().split()[:2])
        assert check_ssh_public_key(key) == key
        plan = plan_of(_edit("nodes[0].hostKey", key))
        assert plan.of_type("command:remote:Command")


def test_a_configmap_over_one_mib_is_refused_before_anything_is_registered():
    cfg = dev_config()
    cfg["sharing"]["profiles"] = {f"p{i}": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2 + i % 500}]} for i in range(9000)}
    text = _refused(cfg)
    assert "gpu-stack:sharing: makes the ConfigMap device-plugin-sharing-" in text
    assert "over Kubernetes' 1 MiB limit" in text


def test_names_that_collide_after_derivation_are_refused():
    problems = generated_problems(
        [(("sharing",), "ns", "cm-a", {"k": "v"}), (("mig", "profiles"), "ns", "cm-a", {"k": "w"}), (("dcgmExporter", "metrics"), "ns", "big", {"m": "x" * CONFIGMAP_LIMIT})],
        [(("nodes",), "Job", "sharing-pods-a"), (("nodes",), "Job", "sharing-pods-a")],
    )
    text = "\n".join(p.render() for p in problems)
    assert "gpu-stack:mig.profiles = 'cm-a': gives ConfigMap ns/cm-a a name gpu-stack:sharing already gives another" in text
    assert "gpu-stack:dcgmExporter.metrics: makes the ConfigMap big 1.00 MiB" in text
    assert "derives the resource name 'sharing-pods-a'" in text


# =========================================================================== 6. error output
def test_escape_sequences_and_newlines_in_keys_and_values_are_escaped(tmp_path):
    cfg = dev_config()
    cfg["sharing"]["profiles"] = {"\x1b[2Jevil\nFAKE LINE": {"replicas": 2}}
    cfg["nodes"][0]["name"] = "gpu\x1b]0;title\x07-1\nerror: all good"
    err = assert_clean_refusal(cli(project(tmp_path, stack_yaml(cfg)), "plan", "--stack", "t"))
    assert "\\x1b" in err and "\\n" in err
    lines = err.strip().splitlines()
    assert lines[0] == "error: invalid stack config (2 problems):"
    assert len(lines) == 3 and not any(line.startswith(("FAKE", "error: all")) for line in lines)


def test_repeated_problems_are_collapsed_with_a_count():
    cfg = dev_config()
    cfg["nodes"] = [{"name": f"gpu-{i}", "address": "not an address", "gpu": {"model": "L4", "count": 1}} for i in range(200)]
    text = _refused(cfg)
    lines = text.splitlines()
    assert len(lines) == 2, text
    assert "gpu-stack:nodes[0].address = 'not an address': must be a host name" in lines[1]
    assert "(and 199 more like it: gpu-stack:nodes[1].address, gpu-stack:nodes[2].address, gpu-stack:nodes[3].address, ...)" in lines[1]


def test_each_problem_is_at_most_a_few_hundred_characters():
    cfg = _edit("nodes[0].gpu.model", "L" * 10000)
    cfg["dcgmExporter"] = {"metrics": "X" * 5000 + ", gauge\n"}
    text = _refused(cfg)
    for line in text.splitlines():
        assert len(line) <= 402


def test_many_distinct_problems_are_capped():
    cfg = dev_config()
    cfg["nodes"] = [{"name": "n" + "x" * i, "gpu": {"model": "L4", "count": 1}, "colour": i} for i in range(60)]
    text = _refused(cfg)
    assert len(text.splitlines()) <= 43


# =========================================================================== 7. the diff CLI
def test_diff_without_git_on_path(tmp_path):
    root = project(tmp_path, stack_yaml(dev_config()))
    env = {**os.environ, "PATH": str(tmp_path / "empty")}
    err = assert_clean_refusal(cli(root, "diff", "--stack", "t", env=env), "git is not installed or not on PATH")
    assert len(err.strip().splitlines()) == 1


def test_diff_outside_a_repository(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = project(tmp_path, stack_yaml(dev_config()))
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)}
    assert_clean_refusal(cli(root, "diff", "--stack", "t", env=env), "is not inside a git repository")


def test_diff_with_an_unknown_revision(tmp_path):
    repo = committed_project_copy(tmp_path)
    for ref in ("no-such-branch", "--output=/tmp/x", "main\n"):
        err = assert_clean_refusal(cli(repo, "diff", "--stack", "dev", f"--base={ref}"), "unknown git revision")
        assert len(err.strip().splitlines()) == 1


def test_diff_names_the_stack_that_refuses(tmp_path):
    cfg = dev_config()
    root = project(tmp_path, stack_yaml(cfg), stack="good")
    (root / "Pulumi.bad.yaml").write_text(stack_yaml(set_path(dev_config(), "sharing.replicas", 1)))
    err = assert_clean_refusal(cli(root, "diff", "--stack", "good", "--against", "bad"), "stack 'bad' (--against")
    assert "stack 'good'" not in err
    err = assert_clean_refusal(cli(root, "diff", "--stack", "bad", "--against", "good"), "stack 'bad' (--stack")
    (root / "Pulumi.worse.yaml").write_text("config: [\n")
    assert_clean_refusal(cli(root, "diff", "--stack", "good", "--against", "worse"), "stack 'worse' (--against", "not valid YAML")


def test_the_program_narrows_a_secret_key_by_the_stack_file_in_its_folder(tmp_path, monkeypatch):
    """As under `pulumi up`: the engine passes decrypted values and only says `gpu-stack:nodes` is
    secret; the program reads Pulumi.<stack>.yaml in its working folder to see that only
    nodes[0].address was set with --secret, so the node names stay plannable."""
    cfg = dev_config()
    (tmp_path / "Pulumi.eng.yaml").write_text(stack_yaml(cfg, secure={"nodes[0].address": True}))
    monkeypatch.chdir(tmp_path)
    nodes = cfg.pop("nodes")
    plan = plan_of(cfg, stack="eng", secrets={"nodes": nodes})
    commands = plan.of_type("command:remote:Command")
    assert [c.name for c in commands] == ["node-prep-gpu-dev-1", "node-prep-gpu-dev-2"]
    assert all(c.inputs["connection"] == "[secret]" for c in commands)
    # Without the file the whole key counts as secret: its node names are refused, saying why.
    (tmp_path / "Pulumi.eng.yaml").unlink()
    with pytest.raises(PlanError) as info:
        plan_of(cfg, stack="eng", secrets={"nodes": nodes})
    assert "gpu-stack:nodes[0].name = [secret]: is a secret, but" in str(info.value)
