"""The two `nvidia-ctk` v1.18.1 commands the fake nodes cannot run for real: both read the GPUs.

- `cdi generate --output=FILE` enumerates the devices through NVML (the driver's libnvidia-ml):
  here it writes a small spec naming device 0 and `all`, the names the real one gives a 1-GPU host.
- `system create-dev-char-symlinks [--create-all] [--dev-char-path=DIR]` links DIR/MAJOR:MINOR to
  each /dev/nvidia* node (the real one reads the host's /dev, or /proc/devices with --create-all,
  whatever --driver-root says: cmd/nvidia-ctk/system/create-dev-char-symlinks). Here the node's
  state/dev-nodes lists "NAME MAJOR MINOR" lines; a link that exists is left alone; with none and
  --create-all it fails as the real one does without the driver ("no NVIDIA devices found").

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
    if lines and unloaded.exists() and "--create-all" in args and "--load-kernel-modules" in args:
        # the driver is there (nvidia's major is listed): modprobe brings the rest
        loaded = {"nvidia-uvm": "nvidia-uvm 507 0", "nvidia-modeset": "nvidia-modeset 195 254"}
        lines += [loaded[m] for m in unloaded.read_text().split() if m in loaded]
        nodes.write_text("".join(line + "\n" for line in lines))
        unloaded.unlink()
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


def main(argv: list[str]) -> None:
    if argv[:2] == ["cdi", "generate"]:
        out = Path(arg(argv, "--output", "/dev/stdout"))
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text('cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: "0"\n- name: all\n')
    elif argv[:2] == ["system", "create-dev-char-symlinks"]:
        dev_char_links(argv[2:])
    else:
        sys.exit(f"fake nvidia-ctk: unsupported: {' '.join(argv)}")


if __name__ == "__main__":
    main(sys.argv[1:])
