"""The runtime phase against runtime configs of every shape, twice in a row, with the real
`nvidia-ctk` v1.18.1 (toolchain/build.sh; the fake nodes keep a stand-in only for `cdi generate`
and `system create-dev-char-symlinks`, which read the GPUs), and (where Debian's containerd is
installed) proved with the real containerd: `containerd --config FILE config dump` shows what
containerd actually loads from the files the script left behind.
"""

from __future__ import annotations

import subprocess
import tomllib

import pytest

from gpu_stack.design.node_prep import render_script

from ..node_fakes import REAL_CONTAINERD, FakeNode
from ..toolchain import tool
from .test_node_scripts import report, restarts, values

USER_V2 = (
    "version = 2\n\n"
    '[plugins."io.containerd.grpc.v1.cri"]\n'
    '  sandbox_image = "registry.example/pause:9.9"\n'
    '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
    '    runtime_type = "io.containerd.runc.v2"\n'
    '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
    "      SystemdCgroup = true\n"
)
USER_V1 = (
    "# containerd 1.x config without a version: format 1\n"
    "[plugins.cri]\n"
    '  sandbox_image = "registry.example/pause:9.9"\n'
    "[plugins.cri.containerd.runtimes.runc]\n"
    '  runtime_type = "io.containerd.runc.v2"\n'
)
USER_V3 = (
    "version = 3\n\n"
    "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n"
    "  runtime_type = 'io.containerd.runc.v2'\n"
    "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n"
    "  SystemdCgroup = true\n"
)


def _real_version() -> str | None:
    if REAL_CONTAINERD is None:
        return None
    out = subprocess.run([REAL_CONTAINERD, "--version"], capture_output=True, text=True).stdout
    for word in out.replace("~", " ").split():
        word = word.lstrip("v")
        if word[:1].isdigit() and word.count(".") >= 2:
            return word
    return None


REAL_VERSION = _real_version()
needs_real = pytest.mark.skipif(REAL_CONTAINERD is None, reason="containerd is not installed (apt-get install containerd; .ci/run does)")


def loaded(node: FakeNode) -> dict:
    """What the real containerd loads from the node's config.toml (and its imports)."""
    config = node.root / "etc/containerd/config.toml"
    assert REAL_CONTAINERD is not None  # needs_real skips first
    proc = subprocess.run([REAL_CONTAINERD, "--config", str(config), "config", "dump"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return tomllib.loads(proc.stdout)


def cri_node(dump: dict) -> dict:
    plugins = dump["plugins"]
    return plugins.get("io.containerd.grpc.v1.cri") or plugins.get("io.containerd.cri.v1.runtime") or plugins["cri"]


def twice(node: FakeNode, script: str):
    first = node.run(script)
    assert first.rc == 0, first.stderr
    assert restarts(node) == ["systemctl restart containerd"]
    snap = node.snapshot()
    node.clear_calls()
    second = node.run(script)
    assert second.rc == 0, second.stderr
    assert node.snapshot() == snap, "the second run changed a file"
    assert restarts(node) == [] and "config unchanged; no restart" in second.stderr
    return first, second


def real_node(tmp_path) -> FakeNode:
    node = FakeNode(tmp_path / "n")
    node.set_toolkit("1.18.1")
    assert node.use_real_containerd()
    node.set_state("containerd-version", REAL_VERSION or "")
    return node


# --------------------------------------------------------------------------- real containerd
@needs_real
@pytest.mark.parametrize("shape", ["no file", "v2 file", "v1 file (no version)"])
def test_real_containerd_loads_the_nvidia_runtime_and_keeps_the_users_settings(tmp_path, shape):
    node = real_node(tmp_path)
    if shape == "v2 file":
        node.write("etc/containerd/config.toml", USER_V2)
    elif shape != "no file":
        node.write("etc/containerd/config.toml", USER_V1)
    major_minor = tuple(int(x) for x in (REAL_VERSION or "0.0").split(".")[:2])
    cdi = "true" if major_minor >= (1, 7) else "false"  # 1.6 has no CDI: the preflight refuses true
    twice(node, render_script(values(GPU_STACK_CDI=cdi)))
    cri = cri_node(loaded(node))
    runtimes = cri["containerd"]["runtimes"]
    assert runtimes["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert "runc" in runtimes  # containerd <2.1 replaces a plugin's whole section per file: runc must survive
    if cdi == "true":
        assert cri["enable_cdi"] is True
    else:
        assert cri["containerd"]["default_runtime_name"] == "nvidia"
    if shape != "no file":
        assert cri["sandbox_image"] == "registry.example/pause:9.9"
    if shape.startswith("v1"):
        assert node.read("etc/containerd/conf.d/99-nvidia.toml") is None  # never a drop-in v1 cannot import


@needs_real
def test_pinned_source_matters_a_drop_in_from_the_bare_file_loses_runc(tmp_path):
    """Why the script never lets the source flip to the (import-only) file: with the file as source,
    the drop-in carries only nvidia, and containerd before 2.1 then has no runc at all."""
    node = real_node(tmp_path)
    node.write("etc/containerd/config.toml", f'version = 2\nimports = ["{node.root}/etc/containerd/conf.d/*.toml"]\n')
    node.write("etc/containerd/conf.d/99-nvidia.toml", (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]\n  runtime_type = "io.containerd.runc.v2"\n'
    ))
    if tuple(int(x) for x in (REAL_VERSION or "9.9").split(".")[:2]) >= (2, 1):
        pytest.skip("containerd 2.1+ merges plugin sections across files")
    assert "runc" not in cri_node(loaded(node))["containerd"]["runtimes"]


@needs_real
def test_why_v1_is_configured_in_place_a_v1_drop_in_is_never_loaded(tmp_path):
    """nvidia-ctk's default for a v1 config: the whole v1 config saved to the drop-in path, which
    containerd never imports (v1 has no imports): containerd would see no nvidia runtime."""
    node = real_node(tmp_path)
    node.write("etc/containerd/config.toml", USER_V1)
    dropin = node.root / "etc/containerd/conf.d/99-nvidia.toml"
    subprocess.run([str(tool("nvidia-ctk")), "runtime", "configure", "--runtime=containerd",
                    f"--config={node.root}/etc/containerd/config.toml", f"--drop-in-config={dropin}"],
                   check=True, capture_output=True)
    assert "nvidia" in dropin.read_text()
    assert "nvidia" not in cri_node(loaded(node))["containerd"]["runtimes"]


@needs_real
def test_real_containerd_version_feeds_the_preflight(tmp_path):
    node = real_node(tmp_path)
    node.write("etc/containerd/config.toml", USER_V2)
    result = node.run(render_script(values(GPU_STACK_PHASES="preflight")))
    assert report(result.stdout)["runtimeVersion"] == REAL_VERSION
    if REAL_VERSION and tuple(int(x) for x in REAL_VERSION.split(".")[:2]) < (1, 7):
        assert result.rc != 0
        assert f"containerd {REAL_VERSION} has no CDI support (1.7 or later)" in result.stderr
        assert "set gpu-stack:toolkit.cdi false" in result.stderr and "does not match gpu-stack:nodes[0] (" in result.stderr


@needs_real
def test_v3_config_loads_in_the_real_containerd(tmp_path):
    if REAL_VERSION is None or int(REAL_VERSION.split(".")[0]) < 2:
        pytest.skip(f"the installed containerd {REAL_VERSION} reads config versions 1 and 2 only; version 3 needs containerd 2")
    node = real_node(tmp_path)
    node.write("etc/containerd/config.toml", USER_V3)
    twice(node, render_script(values()))
    cri = cri_node(loaded(node))
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    assert cri["enable_cdi"] is True


# --------------------------------------------------------------------------- fake containerd versions
@pytest.mark.parametrize("version,file,source,drop_in_version,plugin", [
    ("1.7.27", None, "command", 2, "io.containerd.grpc.v1.cri"),
    ("1.7.27", USER_V2, "command", 2, "io.containerd.grpc.v1.cri"),
    ("2.1.4", None, "command", 3, "io.containerd.cri.v1.runtime"),
    ("2.1.4", USER_V3, "command", 3, "io.containerd.cri.v1.runtime"),
    ("2.1.4", USER_V2, "file", 2, "io.containerd.grpc.v1.cri"),  # GKE/AKS: v2 file under containerd 2
])
def test_each_shape_twice_byte_identical_with_cdi(tmp_path, version, file, source, drop_in_version, plugin):
    node = FakeNode(tmp_path / "n")
    node.set_state("containerd-version", version)
    if file:
        node.write("etc/containerd/config.toml", file)
    _first, _ = twice(node, render_script(values()))
    (configure,) = [c for c in node.calls("nvidia-ctk") if "runtime configure" in c] or [None]
    assert configure is not None and f"--config-source={source}" in configure  # same source both runs
    dropin = tomllib.loads(node.read("etc/containerd/conf.d/99-nvidia.toml"))
    assert dropin["version"] == drop_in_version
    assert dropin["plugins"][plugin]["enable_cdi"] is True
    assert dropin["plugins"][plugin]["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    top = tomllib.loads(node.read("etc/containerd/config.toml"))
    assert top["imports"] == [f"{node.root}/etc/containerd/conf.d/*.toml"]
    assert top["version"] == (int(file.split("=")[1].split()[0]) if file else drop_in_version)


def test_v1_config_under_containerd_2_is_refused_naming_the_file(tmp_path):
    node = FakeNode(tmp_path / "n")
    node.set_state("containerd-version", "2.0.5")
    node.write("etc/containerd/config.toml", USER_V1)
    result = node.run(render_script(values()))
    assert result.rc != 0
    assert "is a version 1 config (no 'version' key) and containerd 2.0.5 reads version 2 or 3 only" in result.stderr
    assert node.calls("apt-get") == [] and restarts(node) == []


def test_containerd_16_with_cdi_is_refused_naming_node_and_key(tmp_path):
    node = FakeNode(tmp_path / "n")
    node.set_state("containerd-version", "1.6.20")
    result = node.run(render_script(values()))
    assert result.rc != 0
    assert "runtime: containerd 1.6.20 has no CDI support (1.7 or later), but gpu-stack:toolkit.cdi = true" in result.stderr
    assert "gpu-stack[gpu-1]" in result.stderr
    assert report(result.stdout)["ok"] is False and node.calls("apt-get") == []


def test_without_cdi_nvidia_becomes_the_default_runtime(tmp_path):
    node = FakeNode(tmp_path / "n")
    node.set_state("containerd-version", "1.6.20")
    twice(node, render_script(values(GPU_STACK_CDI="false")))
    dropin = tomllib.loads(node.read("etc/containerd/conf.d/99-nvidia.toml"))
    cri = dropin["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["default_runtime_name"] == "nvidia" and "enable_cdi" not in cri


# --------------------------------------------------------------------------- docker, cri-o, k3s
def test_docker_without_cdi_support_is_refused(tmp_path):
    node = FakeNode(tmp_path / "n")
    node.set_state("docker-version", "24.0.7")
    result = node.run(render_script(values(GPU_STACK_RUNTIME="docker")))
    assert result.rc != 0 and "Docker 24.0.7 has no CDI support (25.0 or later)" in result.stderr


def test_docker_daemon_json_twice(tmp_path):
    node = FakeNode(tmp_path / "n")
    node.write("etc/docker/daemon.json", '{"log-driver": "journald"}\n')
    script = render_script(values(GPU_STACK_RUNTIME="docker"))
    assert node.run(script).rc == 0
    snap = node.snapshot()
    node.clear_calls()
    assert node.run(script).rc == 0
    assert node.snapshot() == snap and restarts(node) == []
    assert '"log-driver": "journald"' in node.read("etc/docker/daemon.json")


def test_crio_gets_the_drop_in_and_no_cdi_flag(tmp_path):
    node = FakeNode(tmp_path / "n", stubs=("nvidia-smi", "nvidia-ctk", "systemctl", "apt-get", "apt-mark", "curl", "gpg", "crio"))
    script = render_script(values(GPU_STACK_RUNTIME="crio"))
    first = node.run(script)
    assert first.rc == 0, first.stderr
    (configure,) = [c for c in node.calls("nvidia-ctk") if "runtime configure" in c]
    assert configure == (f"nvidia-ctk runtime configure --runtime=crio --config={node.root}/etc/crio/crio.conf"
                         f" --drop-in-config={node.root}/etc/crio/conf.d/99-nvidia.toml")
    dropin = tomllib.loads(node.read("etc/crio/conf.d/99-nvidia.toml"))
    assert dropin["crio"]["runtime"]["runtimes"]["nvidia"]["runtime_path"] == "/usr/bin/nvidia-container-runtime"
    assert restarts(node) == ["systemctl restart crio"]
    node.clear_calls()
    assert node.run(script).rc == 0 and restarts(node) == []


@pytest.mark.parametrize("config,ok", [
    ("version = 3\n", True),  # k3s with containerd 2: CDI on by default
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = true\n', True),
    ('version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  stream_server_port = "10010"\n', False),
])
def test_k3s_cdi_is_read_from_its_generated_config(tmp_path, config, ok):
    node = FakeNode(tmp_path / "n", stubs=("nvidia-smi", "nvidia-ctk", "systemctl", "k3s"))
    node.write("var/lib/rancher/k3s/agent/etc/containerd/config.toml", config)
    result = node.run(render_script(values(GPU_STACK_RUNTIME="k3s", GPU_STACK_PHASES="preflight")))
    assert (result.rc == 0) is ok, result.stderr
    if not ok:
        assert "k3s's containerd config" in result.stderr and "leaves CDI off" in result.stderr
        assert "set gpu-stack:toolkit.cdi false" in result.stderr


def test_cdi_spec_is_generated_only_when_missing(tmp_path):
    node = FakeNode(tmp_path / "n")
    script = render_script(values())
    twice(node, script)  # the second run generates nothing (the file is there)
    assert "kind: nvidia.com/gpu" in node.read("var/run/cdi/nvidia.yaml")
    node2 = FakeNode(tmp_path / "n2")
    node2.write("var/run/cdi/nvidia.yaml", "kind: nvidia.com/gpu # kept current by nvidia-cdi-refresh\n")
    assert node2.run(script).rc == 0
    assert [c for c in node2.calls("nvidia-ctk") if c.startswith("nvidia-ctk cdi")] == []
    node3 = FakeNode(tmp_path / "n3")
    assert node3.run(render_script(values(GPU_STACK_CDI="false"))).rc == 0
    assert node3.read("var/run/cdi/nvidia.yaml") is None


# --------------------------------------------------------------------------- driver from the operator
def test_operator_driver_with_host_toolkit_points_the_toolkit_at_the_driver_container(tmp_path):
    node = FakeNode(tmp_path / "n")
    node.remove_stub("nvidia-smi")  # no driver on the host: the operator brings it
    script = render_script(values(GPU_STACK_DRIVER="operator"))
    first = node.run(script)
    assert first.rc == 0, first.stderr
    assert report(first.stdout)["driver"] == "operator"
    config = tomllib.loads(node.read("etc/nvidia-container-runtime/config.toml"))
    assert config["nvidia-container-cli"]["root"] == "/run/nvidia/driver"
    snap = node.snapshot()
    node.clear_calls()
    second = node.run(script)
    assert second.rc == 0 and node.snapshot() == snap and restarts(node) == []
    assert "driver root is already /run/nvidia/driver" in second.stderr


# --------------------------------------------------------------------------- distributions, time limits
@pytest.mark.parametrize("os_id,tool", [("amzn2", "yum"), ("amzn2023", "dnf"), ("rocky", "dnf")])
def test_rpm_distributions_use_their_package_manager(tmp_path, os_id, tool):
    node = FakeNode(tmp_path / "n", os_id=os_id, stubs=("nvidia-smi", "nvidia-ctk", "systemctl", "containerd", "curl", tool))
    result = node.run(render_script(values()))
    assert result.rc == 0, result.stderr
    (install,) = node.calls(tool)
    assert install.startswith(f"{tool} install -y -q") and " nvidia-container-toolkit-1.18.1-1" in install
    assert ("--allowerasing" in install) is (tool == "dnf")


def test_missing_prerequisites_are_installed_first(tmp_path):
    node = FakeNode(tmp_path / "n", stubs=("nvidia-smi", "nvidia-ctk", "systemctl", "apt-get", "apt-mark", "containerd"))
    (node.root / "etc/ssl/certs/ca-certificates.crt").unlink()
    result = node.run(render_script(values()))
    # The fake apt-get installs no curl: the key download then fails, after the prerequisites step.
    installs = [c for c in node.calls("apt-get") if c.startswith("apt-get install")]
    assert installs and installs[0].endswith("--no-install-recommends curl gnupg ca-certificates")
    assert result.rc != 0 and "downloading the toolkit repository's signing key" in result.stderr


@pytest.mark.parametrize("hung,limit,step", [
    ("apt-get", "GPU_STACK_TIMEOUT_REFRESH", "refreshing package lists (apt-get update)"),
    ("systemctl", "GPU_STACK_TIMEOUT_WAIT", "restarting containerd (systemctl restart)"),
])
def test_a_hung_step_fails_within_its_limit_naming_the_step(tmp_path, hung, limit, step):
    node = FakeNode(tmp_path / "n")
    if hung == "systemctl":
        node.set_toolkit("1.18.1")
    node.set_state(f"hang-{hung}", "")
    node.extra_env[limit] = "1"
    result = node.run(render_script(values()), timeout=40)
    assert result.rc != 0
    assert f"{step} did not finish within 1s ({limit}) and was stopped" in result.stderr


def test_a_bad_time_limit_is_refused(tmp_path):
    node = FakeNode(tmp_path / "n")
    node.extra_env["GPU_STACK_TIMEOUT_INSTALL"] = "soon"
    result = node.run(render_script(values()))
    assert result.rc != 0 and "GPU_STACK_TIMEOUT_INSTALL must be a number of seconds" in result.stderr


# --------------------------------------------------------------------------- /dev/char links
KUBELET = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: {}\n"
DEV_CHAR_RULE = ('ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", '
                 'RUN+="/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all --load-kernel-modules --create-device-nodes"\n')


def dev_char(node: FakeNode) -> dict[str, str]:
    folder = node.root / "dev/char"
    return {p.name: str(p.readlink()) for p in sorted(folder.iterdir())} if folder.exists() else {}


def gpu_node(tmp_path, name="n") -> FakeNode:
    node = FakeNode(tmp_path / name)
    node.set_state("dev-nodes", "nvidia0 195 0\nnvidia1 195 1\nnvidiactl 195 255\nnvidia-uvm 507 0\n")
    return node


@pytest.mark.parametrize("how", ["kubelet", "containerd"])
def test_systemd_cgroup_hosts_get_the_dev_char_links_and_the_rule_that_keeps_them(tmp_path, how):
    node = gpu_node(tmp_path)
    if how == "kubelet":
        node.write("var/lib/kubelet/config.yaml", KUBELET.format("systemd"))
    else:
        node.write("etc/containerd/config.toml", USER_V2)  # its runc options say SystemdCgroup = true
    script = render_script(values())
    first = node.run(script)
    assert first.rc == 0, first.stderr
    assert report(first.stdout)["cgroupDriver"] == "systemd" and report(first.stdout)["devCharRule"] is False
    assert node.read("lib/udev/rules.d/71-nvidia-dev-char.rules") == DEV_CHAR_RULE
    assert dev_char(node) == {"195:0": "/dev/nvidia0", "195:1": "/dev/nvidia1", "195:255": "/dev/nvidiactl", "507:0": "/dev/nvidia-uvm"}
    snap, links = node.snapshot(), dev_char(node)
    node.clear_calls()
    second = node.run(script)
    assert second.rc == 0 and node.snapshot() == snap and dev_char(node) == links and restarts(node) == []
    assert report(second.stdout)["devCharRule"] is True


def test_a_host_that_loads_nvidia_uvm_on_first_use_gets_its_links_too(tmp_path):
    # W1: /proc/devices without nvidia-uvm (loaded by the first CUDA process on many hosts): the
    # real `--create-all` alone exits 1 ("missing required device major nvidia-uvm"); the step
    # loads the modules first, as the operator's validator does.
    node = gpu_node(tmp_path)
    node.write("var/lib/kubelet/config.yaml", KUBELET.format("systemd"))
    node.set_state("dev-nodes", "nvidia0 195 0\nnvidiactl 195 255\n")
    node.set_state("unloaded-modules", "nvidia-uvm\n")
    result = node.run(render_script(values()))
    assert result.rc == 0, result.stderr
    (call,) = [c for c in node.calls("nvidia-ctk") if "create-dev-char-symlinks" in c]
    assert "--create-all --load-kernel-modules --create-device-nodes" in call
    assert dev_char(node) == {"195:0": "/dev/nvidia0", "195:255": "/dev/nvidiactl", "507:0": "/dev/nvidia-uvm"}


def test_the_stand_in_refuses_create_all_without_nvidia_uvm_as_the_real_tool_does(tmp_path):
    node = gpu_node(tmp_path)
    node.set_state("dev-nodes", "nvidia0 195 0\nnvidiactl 195 255\n")
    node.set_toolkit("1.18.1")  # the stub answers as an installed nvidia-ctk
    result = node.run_command_string(
        f"nvidia-ctk system create-dev-char-symlinks --create-all --dev-char-path={node.root}/dev/char"
    )
    assert result.rc != 0 and "missing required device major nvidia-uvm" in result.stderr


@pytest.mark.parametrize("case", ["cgroupfs kubelet", "operator driver", "docker saying nothing"])
def test_no_links_where_they_are_not_needed(tmp_path, case):
    node = gpu_node(tmp_path)
    extra = {}
    if case == "cgroupfs kubelet":
        node.write("var/lib/kubelet/config.yaml", KUBELET.format("cgroupfs"))
        node.write("etc/containerd/config.toml", USER_V2)  # the kubelet's word wins
    elif case == "operator driver":
        node.write("var/lib/kubelet/config.yaml", KUBELET.format("systemd"))
        node.remove_stub("nvidia-smi")
        extra["GPU_STACK_DRIVER"] = "operator"  # the operator's validator makes its own links
    else:
        extra["GPU_STACK_RUNTIME"] = "docker"
    result = node.run(render_script(values(**extra)))
    assert result.rc == 0, result.stderr
    assert dev_char(node) == {} and node.read("lib/udev/rules.d/71-nvidia-dev-char.rules") is None
    assert [c for c in node.calls("nvidia-ctk") if "dev-char" in c] == []
    if case != "operator driver":
        assert report(result.stdout)["cgroupDriver"] == ("cgroupfs" if case.startswith("cgroupfs") else "unknown")


def test_cri_o_counts_as_systemd_unless_it_says_cgroupfs(tmp_path):
    node = gpu_node(tmp_path)
    node.add_stub("crio")
    result = node.run(render_script(values(GPU_STACK_RUNTIME="crio", GPU_STACK_PHASES="preflight")))
    assert report(result.stdout)["cgroupDriver"] == "systemd"
    node.write("etc/crio/crio.conf.d/01-cgroup.conf", '[crio.runtime]\ncgroup_manager = "cgroupfs"\n')
    result = node.run(render_script(values(GPU_STACK_RUNTIME="crio", GPU_STACK_PHASES="preflight")))
    assert report(result.stdout)["cgroupDriver"] == "cgroupfs"


def test_a_loaded_driver_on_a_host_without_modprobe_gets_its_links(tmp_path):
    # Seen on the H200 VM (docs/node-preparation.md, "One real GPU node"): driver loaded at boot,
    # no kmod. The real --load-kernel-modules runs /sbin/modprobe for nvidia, nvidia-uvm and
    # nvidia-modeset every time and fails the step there; with nvidia-uvm in /proc/devices the
    # step does not ask for it.
    node = gpu_node(tmp_path)
    node.write("var/lib/kubelet/config.yaml", KUBELET.format("systemd"))
    node.set_state("no-modprobe", "")
    result = node.run(render_script(values()))
    assert result.rc == 0, result.stderr
    (call,) = [c for c in node.calls("nvidia-ctk") if "create-dev-char-symlinks" in c]
    assert "--create-all --create-device-nodes" in call and "--load-kernel-modules" not in call
    assert dev_char(node)["507:0"] == "/dev/nvidia-uvm"
    # nvidia-uvm not loaded and no modprobe: the real tool's error ends the step
    other = gpu_node(tmp_path, "unloaded")
    other.write("var/lib/kubelet/config.yaml", KUBELET.format("systemd"))
    other.set_state("dev-nodes", "nvidia0 195 0\nnvidiactl 195 255\n")
    other.set_state("unloaded-modules", "nvidia-uvm\n")
    other.set_state("no-modprobe", "")
    failed = other.run(render_script(values()))
    assert failed.rc != 0 and "fork/exec /sbin/modprobe: no such file or directory" in failed.stderr
