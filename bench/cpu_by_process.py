"""CPU seconds of a command, by process: where a `pulumi preview` (or any command) spends its CPU.

    .venv/bin/python bench/cpu_by_process.py -- pulumi preview --stack k3s

Runs the command and samples /proc every 50 ms for it and every descendant, keeping each
process's last user+system time; at the end prints the CPU seconds per program (the CLI, the
language host, the program's Python, `pip list`, each provider plugin), the wall time and the sum.
A process that lives less than one sample is missed (its CPU still counts in the total from
RUSAGE_CHILDREN, printed beside the sum of the samples).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _tree(root: int) -> list[int]:
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        seen.append(pid)
        todo += _children(pid)
    return seen


def _sample(pid: int) -> tuple[str, float] | None:
    """(what the process runs, its CPU seconds so far) or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    cpu = (int(fields[11]) + int(fields[12])) / TICK
    words = [a.decode(errors="replace") for a in argv if a]
    return label(words), cpu


def label(argv: list[str]) -> str:
    """A short name for a process: the program, and for Python its module or script."""
    if not argv:
        return "?"
    prog = Path(argv[0]).name
    if prog.startswith("python"):
        if "-m" in argv[:-1]:
            module = argv[argv.index("-m") + 1:]
            # pip's subcommand too: `pip list` and `pip --version` are the language host's
            return "python -m " + " ".join(module[:2] if module[0] == "pip" else module[:1])
        if "-c" in argv:
            return "python -c <script>"
        rest = [a for a in argv[1:] if not a.startswith("-")]
        return f"python {Path(rest[0]).name}" if rest else "python"
    return prog


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    last: dict[int, tuple[str, float]] = {}
    start = time.monotonic()
    # stderr to a file, not a pipe: a pipe nobody reads while the command runs would stop it when full
    with tempfile.TemporaryFile() as errors:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=errors)
        while proc.poll() is None:
            for pid in _tree(proc.pid):
                got = _sample(pid)
                if got is not None:
                    # an exited process (a zombie) has no command line left: keep the name it had
                    name = got[0] if got[0] != "?" or pid not in last else last[pid][0]
                    last[pid] = (name, got[1])
            time.sleep(0.05)
        errors.seek(0)
        tail = errors.read().decode(errors="replace")[-3000:]
    wall = time.monotonic() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    by_label: dict[str, list[float]] = defaultdict(list)
    for name, cpu in last.values():
        by_label[name].append(cpu)
    for name, cpus in sorted(by_label.items(), key=lambda kv: -sum(kv[1])):
        print(f"{sum(cpus):8.2f} s  x{len(cpus):<3d} {name}")
    print(f"{sum(c for _, c in last.values()):8.2f} s  sampled; {usage.ru_utime + usage.ru_stime:.2f} s by rusage; wall {wall:.2f} s; exit {proc.returncode}")
    if proc.returncode:
        sys.stderr.write(tail)
    return proc.returncode or 0


if __name__ == "__main__":
    raise SystemExit(main())
