"""A fake GPU node in a folder: stub host tools on PATH, real config files under a root.

`FakeNode.run(script)` runs a rendered node script for real with bash, with GPU_STACK_ROOT set to
the node's root; `calls()` lists what the stubs were asked to do (see fake-tool for the layout).
`nvidia-ctk` is the real v1.18.1 binary built by toolchain/build.sh (`real_ctk`), but for the
commands that read the GPUs (fake_nvidia_ctk.py). The unit tests use these nodes directly
(tests/node_fakes); the sandbox serves them over SSH (sandbox/ssh_nodes.py).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

FAKE_TOOL = Path(__file__).with_name("fake-tool")
FAKE_CTK = Path(__file__).with_name("fake_nvidia_ctk.py")
STUBS = ("nvidia-smi", "nvidia-ctk", "systemctl", "apt-get", "apt-mark", "dnf", "curl", "gpg", "containerd", "docker")
REAL_CONTAINERD = shutil.which("containerd", path="/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
# Real tools the script needs besides bash builtins; linked into a private dir so that PATH holds
# nothing else (a real nvidia-smi or apt-get on the test machine can never be reached).
REAL_TOOLS = (
    "bash", "sh", "id", "hostname", "tr", "sed", "head", "cat", "sha256sum", "cut", "grep", "mkdir",
    "dirname", "basename", "mv", "env", "sudo", "rm", "touch", "sleep",
    "tail", "timeout", "cp",  # the script's launcher (node_prep.launch_string)
)
OS_RELEASE = {
    "debian": 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n',
    "ubuntu": 'NAME="Ubuntu"\nVERSION_ID="22.04"\nID=ubuntu\nID_LIKE=debian\n',
    "rocky": 'NAME="Rocky Linux"\nID="rocky"\nID_LIKE="rhel centos fedora"\nVERSION_ID="9.4"\n',
    "amzn2": 'NAME="Amazon Linux"\nVERSION="2"\nID="amzn"\nID_LIKE="centos rhel fedora"\nVERSION_ID="2"\n',
    "amzn2023": 'NAME="Amazon Linux"\nVERSION="2023"\nID="amzn"\nID_LIKE="fedora"\nVERSION_ID="2023"\n',
    "arch": 'NAME="Arch Linux"\nID=arch\n',
}
CONTAINERD_V2 = 'version = 2\n\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.9"\n'


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str


class FakeNode:
    def __init__(self, base: Path, *, os_id: str = "debian", gpus: tuple[str, ...] = ("NVIDIA L4, 580.105.08, [N/A]",) * 2,
                 stubs: tuple[str, ...] = STUBS, real_ctk: Path | None = None):
        self.base = base
        self.bin = base / "bin"
        self.sysbin = base / "sysbin"
        self.root = base / "root"
        self.state = base / "state"
        for d in (self.bin, self.sysbin, self.root / "etc", self.state):
            d.mkdir(parents=True, exist_ok=True)
        for name in stubs:
            self.add_stub(name)
        for name in REAL_TOOLS:
            real = shutil.which(name, path="/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin")
            if real:
                (self.sysbin / name).symlink_to(real)
        self.set_os(os_id)
        self.set_gpus(*gpus)
        (self.state / "python").write_text(sys.executable)
        (self.state / "fake-ctk").write_text(str(FAKE_CTK))
        if "nvidia-ctk" in stubs:
            if real_ctk is None:
                raise ValueError("a node with the nvidia-ctk stub needs the real nvidia-ctk (real_ctk)")
            (self.state / "real-ctk").write_text(str(real_ctk))
        # A working host has CA certificates (the script installs them where missing).
        self.write("etc/ssl/certs/ca-certificates.crt", "fake CA bundle\n")
        self.write("etc/pki/tls/certs/ca-bundle.crt", "fake CA bundle\n")
        self.extra_env: dict[str, str] = {}

    # ------------------------------------------------------------------ setup
    def add_stub(self, name: str) -> None:
        target = self.bin / name
        shutil.copyfile(FAKE_TOOL, target)
        target.chmod(0o755)

    def remove_stub(self, name: str) -> None:
        (self.bin / name).unlink()

    def set_os(self, os_id: str) -> None:
        (self.root / "etc" / "os-release").write_text(OS_RELEASE[os_id])

    def set_gpus(self, *lines: str) -> None:
        """nvidia-smi's CSV lines; the driver's device nodes follow (see fake_nvidia_ctk.py)."""
        (self.state / "gpus").write_text("".join(line + "\n" for line in lines))
        nodes = [f"nvidia{i} 195 {i}" for i in range(len(lines))] + ["nvidiactl 195 255", "nvidia-uvm 507 0"] if lines else []
        self.set_state("dev-nodes", "".join(n + "\n" for n in nodes) or None)

    def set_toolkit(self, version: str | None) -> None:
        path = self.state / "toolkit-version"
        if version is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(version + "\n")

    def set_state(self, name: str, text: str | None) -> None:
        """A fake-tool switch under state/ (see fake-tool); None removes it. The driver's device
        nodes (dev-nodes) also give the root its /proc/devices, as the loaded driver does."""
        path = self.state / name
        if text is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(text)
        if name == "dev-nodes":
            from .fake_nvidia_ctk import proc_devices

            proc = self.root / "proc" / "devices"
            lines = [x.strip() for x in (text or "").splitlines() if x.strip()]
            if lines:
                proc.parent.mkdir(parents=True, exist_ok=True)
                proc.write_text(proc_devices(lines))
            else:
                proc.unlink(missing_ok=True)

    def use_real_containerd(self) -> bool:
        """`containerd config dump` answers with the real binary (False when it is not installed)."""
        if REAL_CONTAINERD is None:
            return False
        self.set_state("real-containerd", REAL_CONTAINERD)
        return True

    def set_active_units(self, *units: str) -> None:
        (self.state / "active-units").write_text("".join(u + "\n" for u in units))

    def write(self, relative: str, text: str) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def read(self, relative: str) -> str | None:
        path = self.root / relative
        return path.read_text() if path.exists() else None

    # ------------------------------------------------------------------ running
    @property
    def path(self) -> str:
        return f"{self.bin}:{self.sysbin}"

    def env(self) -> dict[str, str]:
        return {"PATH": self.path, "GPU_STACK_ROOT": str(self.root), "HOME": str(self.base), "LC_ALL": "C", **self.extra_env}

    def run(self, script: str, timeout: int = 60) -> Result:
        """Run a rendered bash script the way the command string does: `bash -c <script>`."""
        proc = subprocess.run(
            [str(self.sysbin / "bash"), "-c", script, "gpu-stack-node-prep"],
            env=self.env(), cwd=self.base, capture_output=True, text=True, timeout=timeout,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def run_command_string(self, command: str, timeout: int = 60) -> Result:
        """Run the whole SSH command string with a POSIX sh, as sshd would."""
        proc = subprocess.run(
            [str(self.sysbin / "sh"), "-c", command],
            env=self.env(), cwd=self.base, capture_output=True, text=True, timeout=timeout,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def launch(self, values: dict[str, str], timeout_seconds: int = 60, script: str | None = None) -> Result:
        """What a node's remote.Command does: the static script copied where CopyToRemote puts it
        (the login directory, here the node's base), then the node's command string run with sh."""
        from gpu_stack.design.node_prep import REMOTE_PATH, launch_string, script_hash, script_text

        (self.base / REMOTE_PATH).write_text(script_text() if script is None else script)
        return self.run_command_string(launch_string(values, script_hash(), timeout_seconds), timeout=timeout_seconds + 60)

    def calls(self, tool: str | None = None) -> list[str]:
        log = self.base / "calls.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return [line for line in lines if tool is None or line.split(" ", 1)[0] == tool]

    def clear_calls(self) -> None:
        (self.base / "calls.log").unlink(missing_ok=True)

    def snapshot(self) -> dict[str, bytes]:
        """Every file under the root, for 'nothing changed' checks."""
        return {str(p.relative_to(self.root)): p.read_bytes() for p in sorted(self.root.rglob("*")) if p.is_file()}


