"""Real SSH nodes for node preparation: one Debian sshd per host-prepared node of a stack, each on
its own loopback address, in front of a fake node root of its own (sandbox/node_roots: the real
nvidia-ctk, Debian's `containerd config dump`, stub package managers and systemctl).

What a user's node has, the sandbox's has: a host key the stack file pins (`nodes[i].hostKey`),
a login user with passwordless sudo (not root), a key pair whose private half goes into the
stack's config as a secret (`ssh.privateKey`), SFTP for `remote.CopyToRemote` and one
non-interactive exec for `remote.Command`. Each sshd starts its sessions in its node's own folder
(the copied script and its log stay per node) with the node's stubs first on PATH.

Needs root (sshd serving another user, the login user, its sudoers entry). Every listener is on
127.0.0.0/8.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpu_stack.config.gpu_models import catalog
from gpu_stack.design.node_prep import accepted_gpu_names

from .node_roots import CONTAINERD_V2, FakeNode

SSHD = Path("/usr/sbin/sshd")
LOGIN_USER = "gpustack-node"
SUDOERS = Path("/etc/sudoers.d/gpu-stack-sandbox-node")
LOGIN_SHELL = Path("/usr/local/libexec/gpu-stack/node-login-shell")
_LOGIN_SHELL_TEXT = (
    "#!/bin/sh\n"
    "# gpu-stack sandbox: a fake node's SSH session starts in that node's folder (sshd's SetEnv)\n"
    'cd "${GPU_STACK_NODE_HOME:?}" || exit 1\n'
    'exec /bin/sh "$@"\n'
)
LOOPBACK_NET = "127.0"


class SshNodesUnavailable(RuntimeError):
    """sshd, ssh-keygen or sudo is missing, or this process is not root."""


def _real_root() -> bool:
    """Root of the host, not root mapped inside a user namespace (which cannot add a user)."""
    if os.geteuid() != 0:
        return False
    try:
        return Path("/proc/self/uid_map").read_text().split()[:3] == ["0", "0", "4294967295"]
    except OSError:
        return True


def unavailable_reason() -> str | None:
    if not _real_root():
        return "SSH nodes need root (sshd serving a login user with sudo): run `make e2e` as root"
    for tool in (str(SSHD), "ssh-keygen", "sudo", "useradd"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install openssh-server openssh-client sudo; .ci/run does this)"
    return None


def _ensure_login_user() -> str:
    """The login user of every fake node: no password, a key only, passwordless sudo keeping the
    node's PATH and root (what a real host needs is only the NOPASSWD line)."""
    LOGIN_SHELL.parent.mkdir(parents=True, exist_ok=True)
    if not LOGIN_SHELL.exists() or LOGIN_SHELL.read_text() != _LOGIN_SHELL_TEXT:
        LOGIN_SHELL.write_text(_LOGIN_SHELL_TEXT)
        LOGIN_SHELL.chmod(0o755)
    try:
        pwd.getpwnam(LOGIN_USER)
    except KeyError:
        subprocess.run(["useradd", "--create-home", "--shell", str(LOGIN_SHELL), LOGIN_USER], check=True, capture_output=True)
    subprocess.run(["usermod", "-p", "*", "-s", str(LOGIN_SHELL), LOGIN_USER], check=True, capture_output=True)
    SUDOERS.write_text(
        f'Defaults:{LOGIN_USER} !secure_path, env_keep += "GPU_STACK_ROOT"\n'
        f"{LOGIN_USER} ALL=(ALL) NOPASSWD: ALL\n"
    )
    SUDOERS.chmod(0o440)
    return LOGIN_USER


def _keygen(path: Path, kind: str = "ed25519") -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "", "-f", str(path)], check=True)
    return " ".join(Path(f"{path}.pub").read_text().split()[:2])


def sshd_config(
    listen: str, host_key: Path, authorized: Path, pid_file: Path, user: str, *, sftp: str, env: str,
    more_host_keys: tuple[Path, ...] = (),
) -> str:
    """A test host's sshd_config: key logins of `user` only (no password, no root, no PAM), SFTP
    through `sftp`, and `env` (`NAME=value ...`) set in every session; `more_host_keys`: further
    host keys it serves (an RSA one, as many hosts have beside their ed25519 key)."""
    return "\n".join([
        f"ListenAddress {listen}", f"HostKey {host_key}", *(f"HostKey {k}" for k in more_host_keys),
        f"AuthorizedKeysFile {authorized}", f"PidFile {pid_file}",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
        "PermitRootLogin no", "UsePAM no", "StrictModes no", f"AllowUsers {user}",
        f"Subsystem sftp {sftp}", f"SetEnv {env}", "",
    ])


def _bindable(address: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


def _free_port(address: str) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


def gpu_lines(model: str, count: int, driver: str = "580.105.08") -> tuple[str, ...]:
    """`nvidia-smi --query-gpu=name,driver_version,mig.mode.current` of `count` GPUs of a catalog
    model, as the real tool prints them (the product name; MIG `Disabled` where the GPU has MIG)."""
    names = accepted_gpu_names(model).names
    name = next((n for n in names if n.startswith("NVIDIA ")), names[0])
    known = catalog().lookup(model)
    mig = "Disabled" if known is not None and known.mig is not None else "[N/A]"
    return (f"{name}, {driver}, {mig}",) * count


@dataclass
class SshNode:
    """One stack node served by its own sshd."""

    name: str
    address: str
    port: int
    fake: FakeNode
    host_key: str
    """`ssh-ed25519 AAAA...`: what the stack file pins as nodes[i].hostKey."""
    config: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    rsa_host_key: str | None = None
    """`ssh-rsa AAAA...` where the host also serves an RSA host key (`add_host(..., rsa=True)`)."""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        if self.running:
            return
        self.proc = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(self.config)], stdout=self.log.open("a"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd of node {self.name} exited: {self.log.read_text()[-800:]}")
            with socket.socket() as s:
                if s.connect_ex((self.address, self.port)) == 0:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd of node {self.name} does not listen on {self.address}:{self.port}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop listening (sessions already open end with it)."""
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def preparations(self) -> int:
        """How many times the node script ran on this node: its preflight's GPU query, once a run
        (the fake root's call log that is never cleared)."""
        log = self.fake.base / "calls-all.log"
        lines = log.read_text().splitlines() if log.exists() else []
        return sum(1 for line in lines if line.startswith("nvidia-smi --query-gpu=name,driver_version"))

    def session_processes(self) -> list[int]:
        """The processes still running from this node's SSH sessions, found by the node root its
        sshd sets in their environment (a script whose client went away is no longer sshd's child;
        sudo keeps that variable, env_keep)."""
        marker = f"GPU_STACK_ROOT={self.fake.root}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if marker in environ.split(b"\0"):
                found.append(int(entry.name))
        return found

    def restarts(self) -> list[str]:
        return [c for c in self.fake.calls("systemctl") if c.startswith("systemctl restart")]


@dataclass
class SshNodes:
    """The sshd nodes of one stack: `start(nodes)` with the stack file's node list returns the
    config the harness writes into its copy of the stack file. The login user must reach
    `workdir` (its parents get o+x here): not under pytest's basetemp, which another pytest
    process sets back to 0700."""

    workdir: Path
    real_ctk: Path
    _port: int | None = None
    nodes: dict[str, SshNode] = field(default_factory=dict)
    user_key: Path | None = None
    subnet: int = 0
    user: str = LOGIN_USER

    def start(self, declared: Iterable[dict[str, Any]], ssh_port: int = 22) -> dict[str, Any]:
        """One sshd and fake root per declared node; returns `{"ssh": {...}, "nodes": [...]}`: the
        declared nodes with `address` and `hostKey` pointing at their sshd, the login user, the
        port (the stack's own where it is free on every address) and the private key text."""
        reason = unavailable_reason()
        if reason:
            raise SshNodesUnavailable(reason)
        declared = list(declared)
        user = self.user = _ensure_login_user()
        self.workdir.mkdir(parents=True, exist_ok=True)
        for folder in (self.workdir, *self.workdir.parents):
            if folder == Path("/"):
                break
            # the login user walks down to its node's folder
            if folder.stat().st_uid == 0 and not folder.stat().st_mode & 0o001:
                folder.chmod(folder.stat().st_mode | 0o011)
        self.user_key = self.workdir / "node-key"
        _keygen(self.user_key)
        authorized = self.workdir / "authorized_keys"
        shutil.copyfile(f"{self.user_key}.pub", authorized)
        authorized.chmod(0o644)
        # room for a few more hosts (`add_host`) in the same subnet
        subnet = self._subnet(len(declared) + 4, ssh_port)
        port = ssh_port if subnet is not None else None
        if subnet is None:
            subnet = self._subnet(len(declared) + 4, None)
            assert subnet is not None
        self.subnet = subnet
        self._port = port
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder
        nodes_out = []
        for spec in declared:
            node = self.add_host(spec["name"], spec)
            nodes_out.append({**spec, "address": node.address, "hostKey": node.host_key, **({"port": node.port} if port is None else {})})
        return {
            "ssh": {"user": user, "port": port or ssh_port, "privateKey": self.user_key.read_text()},
            "nodes": nodes_out,
        }

    def add_host(self, name: str, spec: dict[str, Any], *, rsa: bool = False) -> SshNode:
        """Another host with its own sshd and fake root for a node `spec` of the stack file (as
        declared: gpu, runtime), on the next free address; `name` keys it here; `rsa`: it serves an
        RSA host key too (its `rsa_host_key`)."""
        address = f"{LOOPBACK_NET}.{self.subnet}.{10 + len(self.nodes)}"
        port = self._port if self._port is not None else _free_port(address)
        node = self._make_node({**spec, "name": name}, address, port, self.workdir / "authorized_keys", self.user, rsa=rsa)
        node.start()
        self.nodes[name] = node
        return node

    def new_key(self) -> str:
        """A new login key, authorized on every node beside the current one (a key rotation's
        first step); returns the private key text. `revoke_all_but_newest()` finishes it."""
        index = len(list(self.workdir.glob("node-key*.pub")))
        key = self.workdir / f"node-key-{index}"
        _keygen(key)
        authorized = self.workdir / "authorized_keys"
        authorized.write_text(authorized.read_text() + Path(f"{key}.pub").read_text())
        self.user_key = key
        return key.read_text()

    def revoke_all_but_newest(self) -> None:
        assert self.user_key is not None
        (self.workdir / "authorized_keys").write_text(Path(f"{self.user_key}.pub").read_text())

    def _subnet(self, count: int, port: int | None) -> int | None:
        """A third octet whose addresses .10, .11, ... are free for `port` (None: any port)."""
        for subnet in range(1, 250):
            if all(_bindable(f"{LOOPBACK_NET}.{subnet}.{10 + i}", port or 0) for i in range(count)):
                return subnet
        return None

    def _make_node(self, spec: dict[str, Any], address: str, port: int, authorized: Path, user: str, *, rsa: bool = False) -> SshNode:
        name = spec["name"]
        base = self.workdir / name
        gpu = spec.get("gpu") or {}
        fake = FakeNode(base / "node", gpus=gpu_lines(gpu.get("model", "L4"), int(gpu.get("count", 1))), real_ctk=self.real_ctk)
        fake.base.chmod(0o777)  # the login user writes the copy and its log here
        runtime = spec.get("runtime", "containerd")
        if runtime == "containerd":
            fake.write("etc/containerd/config.toml", CONTAINERD_V2)
        fake.use_real_containerd()
        # a kubeadm-style kubelet with the systemd cgroup driver (its default since 1.22)
        fake.write("var/lib/kubelet/config.yaml", "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n")
        fake.set_toolkit(None)
        fake.set_active_units({"k3s": "k3s", "rke2": "rke2-agent"}.get(runtime, runtime))
        host_key = _keygen(base / "host_ed25519")
        rsa_host_key = _keygen(base / "host_rsa", "rsa") if rsa else None
        config = base / "sshd_config"
        config.write_text(sshd_config(
            f"{address}:{port}", base / "host_ed25519", authorized, base / "sshd.pid", user,
            # remote.CopyToRemote writes over SFTP: relative paths land in the node's folder
            sftp=f"internal-sftp -d {fake.base}",
            env=f"PATH={fake.path} GPU_STACK_ROOT={fake.root} GPU_STACK_NODE_HOME={fake.base}",
            more_host_keys=(base / "host_rsa",) if rsa else (),
        ))
        return SshNode(
            name=name, address=address, port=port, fake=fake, host_key=host_key, config=config, log=base / "sshd.log",
            rsa_host_key=rsa_host_key,
        )

    def stop(self) -> None:
        for node in self.nodes.values():
            node.stop()

    def __getitem__(self, name: str) -> SshNode:
        return self.nodes[name]
