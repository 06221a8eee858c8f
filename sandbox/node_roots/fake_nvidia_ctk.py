"""The two `nvidia-ctk` v1.18.1 commands the fake nodes cannot run for real: both read the GPUs.

- `cdi generate --output=FILE` enumerates the devices through NVML (the driver's libnvidia-ml):
  here it writes a small spec naming each GPU by index and by UUID, and `all`: the names the real
  one gave the H200 machine (`nvidia.com/gpu=0`, `=GPU-<uuid>`, `=all`; spec version 1.0.0), with
  made-up UUIDs.
- `system create-dev-char-symlinks [--create-all] [--dev-char-path=DIR]` links DIR/MAJOR:MINOR to
  each /dev/nvidia* node (the real one reads the host's /dev, or /proc/devices with --create-all,
  whatever --driver-root says: cmd/nvidia-ctk/system/create-dev-char-symlinks). Here the node's
  state/dev-nodes lists "NAME MAJOR MINOR" lines (FakeNode writes the matching root/proc/devices);
  a link that exists is left alone; with none and --create-all it fails as the real one does
  without the driver ("no NVIDIA devices found"). `--load-kernel-modules` runs modprobe for
  nvidia, nvidia-uvm and nvidia-modeset whether they are loaded or not, as the real one does
  (internal/system/nvmodules/modules.go): on a node whose state/no-modprobe exists (a host without
  kmod, like the H200 VM) it fails with the real one's error, loaded driver or not.

Everything else is the real binary (sandbox/node_roots/fake-tool).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def arg(args: list[str], name: str, default=None):
    for a in args:
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return default


def dev_char_links(args: list[str]) -> None:
    """As the real command: `--create-all` needs the majors of nvidia and nvidia-uvm in
    /proc/devices (state/dev-nodes); `--load-kernel-modules` loads the modules listed in
    state/unloaded-modules first (the real one modprobes nvidia, nvidia-uvm, nvidia-modeset)."""
    state = Path(os.environ.get("GPU_STACK_FAKE_STATE") or Path(sys.argv[0]).parent)
    out = Path(arg(args, "--dev-char-path", "/dev/char"))
    nodes = state / "dev-nodes"
    lines = [x.strip() for x in nodes.read_text().split("\n") if x.strip()] if nodes.exists() else []
    unloaded = state / "unloaded-modules"
    if "--create-all" in args and "--load-kernel-modules" in args and (state / "no-modprobe").exists():
        sys.exit('level=error msg="failed to create symlink creator: failed to load NVIDIA kernel modules: '
                 'failed to load module nvidia: fork/exec /sbin/modprobe: no such file or directory; output="')
    if lines and unloaded.exists() and "--create-all" in args and "--load-kernel-modules" in args:
        # the driver is there (nvidia's major is listed): modprobe brings the rest
        loaded = {"nvidia-uvm": "nvidia-uvm 507 0", "nvidia-modeset": "nvidia-modeset 195 254"}
        lines += [loaded[m] for m in unloaded.read_text().split() if m in loaded]
        nodes.write_text("".join(line + "\n" for line in lines))
        unloaded.unlink()
        root = os.environ.get("GPU_STACK_ROOT")
        if root:
            proc = Path(root) / "proc" / "devices"
            proc.parent.mkdir(parents=True, exist_ok=True)
            proc.write_text(proc_devices(lines))
    if not lines and "--create-all" in args:  # as the real one without the driver loaded
        sys.exit('level=error msg="failed to create symlink creator: failed to create all possible device lister: '
                 'failed reading device majors: no NVIDIA devices found"')
    majors = {line.split()[0] for line in lines}
    if "--create-all" in args and "nvidia-uvm" not in majors:
        sys.exit('level=error msg="failed to create symlink creator: failed to create all possible device lister: '
                 'missing required device major nvidia-uvm"')
    for line in lines:
        name, major, minor = line.split()
        link = out / f"{major}:{minor}"
        print(f'level=info msg="Creating link {link} => /dev/{name}"', file=sys.stderr)
        out.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(f"/dev/{name}")


def proc_devices(lines: list[str]) -> str:
    """/proc/devices for "NAME MAJOR MINOR" device nodes: one line per driver major, by the name
    the NVIDIA driver registers it under (nvidia, nvidia-uvm, nvidia-caps)."""
    majors: dict[str, str] = {}
    for line in lines:
        name, major, _ = line.split()
        driver = "nvidia-uvm" if name.startswith("nvidia-uvm") else "nvidia-caps" if name.startswith("nvidia-cap") else "nvidia"
        majors.setdefault(driver, major)
    body = "".join(f"{major:>3} {driver}\n" for driver, major in sorted(majors.items(), key=lambda kv: int(kv[1])))
    return "Character devices:\n  1 mem\n" + body + "\nBlock devices:\n  7 loop\n"


def cdi_spec(state: Path) -> str:
    """The host spec's shape as the real 1.18.1 generates it: per GPU its index and its UUID, then `all`."""
    gpus = state / "gpus"
    count = len([x for x in gpus.read_text().splitlines() if x.strip()]) if gpus.exists() else 1
    names = [n for i in range(count) for n in (f'"{i}"', f"GPU-00000000-0000-4000-8000-{i:012d}")] + ["all"]
    return "cdiVersion: 1.0.0\nkind: nvidia.com/gpu\ndevices:\n" + "".join(f"- name: {n}\n" for n in names)


def main(argv: list[str]) -> None:
    if argv[:2] == ["cdi", "generate"]:
        state = Path(os.environ.get("GPU_STACK_FAKE_STATE") or Path(sys.argv[0]).parent)
        out = Path(arg(argv, "--output", "/dev/stdout"))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(cdi_spec(state))
    elif argv[:2] == ["system", "create-dev-char-symlinks"]:
        dev_char_links(argv[2:])
    else:
        sys.exit(f"fake nvidia-ctk: unsupported: {' '.join(argv)}")


if __name__ == "__main__":
    main(sys.argv[1:])
