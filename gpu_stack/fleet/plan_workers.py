"""The processes of `fleet plan` (fleet/plan.py): the worker processes that plan beside this one
(`Workers`: forked from this process once its first run has warmed it up, or spawned and warmed
up on the program's imports where fork is not safe), how many runs make them worth starting, and
the chart renders shared by every stack in a thread pool (`PooledRenderer`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..config.files import FileRefused, hash_regular_file
from ..config.stack_files import MAX_FILE_BYTES, StackFileError, read_stack
from ..offline.chart import RenderedObject, RenderServer
from ..offline.git_plan import GitPlanError, plan_in_tree
from ..offline.objects import _releases, release_renderer
from ..offline.runner import PlanError, run_program
from ..offline.runtime import ENV_PATHS_FROM
from .state import PROGRAM_PARTS

FORK = sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
"""Whether the workers are forked from this process (Linux). A forked worker starts with what this
process has loaded and cached in its first run: the SDKs' modules (pulumi_kubernetes imports a
module's every class on first use), the type tables, the program's modules; a spawned one pays for
an interpreter, the imports and a first run of its own (macOS: fork is not safe there)."""
DEFAULT_JOBS = max(1, min(4, os.cpu_count() or 1))
"""Worker processes at most by default: the machine's cores, at most 4."""
WORK_PER_WORKER = 6
"""In-process plans one more worker process must have to be worth its start (an interpreter, the
imports and the program's first, slow, run: about as much as 6 plans in a warm process)."""


SWITCH_INTERVAL_S = 0.001
"""How long a thread of `fleet plan` runs before one waiting for the GIL gets it: this process's
render, pool manager and queue feeder threads each wait at every pipe they read, behind a program
run that holds the GIL; at Python's default 5 ms each wait held a worker or a render up
(BENCHMARKS.md, fleet plan round three)."""


@contextmanager
def prompt_threads(interval: float = SWITCH_INTERVAL_S) -> Iterator[None]:
    """Python's switch interval at most `interval` for the length of the block."""
    saved = sys.getswitchinterval()
    sys.setswitchinterval(min(saved, interval))
    try:
        yield
    finally:
        sys.setswitchinterval(saved)


def _program_or_stack(path: str) -> bool:
    """What a plan by this process's code reads of a revision: the program (what program_digest
    covers) and the stack files."""
    first = path.split("/", 1)[0]
    return first in PROGRAM_PARTS or ("/" not in path and path.startswith("Pulumi.") and path.endswith(".yaml"))


def _digest(path: Path) -> str | None:
    """sha256 of a stack file's bytes; None where there is none (a stack the side does not have).
    A file that is there but refused (a FIFO, a device, a dangling link, over the stack files'
    bound) is read never or at most once: its key is the refusal's, so its run fails on it."""
    if not os.path.lexists(path):
        return None
    digest = hashlib.sha256()
    try:
        hash_regular_file(digest, path, "a stack file", MAX_FILE_BYTES)
    except FileRefused as exc:
        return "refused:" + hashlib.sha256(str(exc).encode()).hexdigest()
    return digest.hexdigest()


@contextmanager
def _in_folder(folder: Path, paths_from: Path) -> Iterator[None]:
    """Plan `folder`'s stack as the engine would run it there (its working directory), with relative
    config paths taken from the working tree's project folder, as git_plan does for a revision."""
    cwd, saved = os.getcwd(), os.environ.get(ENV_PATHS_FROM)
    os.environ[ENV_PATHS_FROM] = str(paths_from)
    try:
        os.chdir(folder)
        yield
    finally:
        os.chdir(cwd)
        if saved is None:
            os.environ.pop(ENV_PATHS_FROM, None)
        else:
            os.environ[ENV_PATHS_FROM] = saved


def plan_here(stack: str, folder: str, paths_from: str) -> dict[str, Any]:
    """One stack's plan by this process's code (the working tree's program), with the `gpu-stack:`
    config it was planned from (`namespace`: the config edits are computed from it, the stack
    file not read again), or the one line why not."""
    try:
        with _in_folder(Path(folder), Path(paths_from)):
            config = read_stack(folder, stack, inside=True)  # what plan_stack reads, no link out of the project
            return {"plan": run_program(config, folder).to_json(), "namespace": config.namespace()}
    except (PlanError, StackFileError) as exc:
        return {"error": " ".join(str(exc).split())}


def warm(project_dir: str) -> None:
    """In a worker, before any plan: what a plan runs imported (the offline runner, the SDKs and
    what the project's `__main__.py` imports, from where this process imports them, as a plan
    here does), so its first plan costs what the others do."""
    import ast
    import importlib

    from .state import _imported

    try:
        tree = ast.parse((Path(project_dir) / "__main__.py").read_bytes())
    except (OSError, SyntaxError, ValueError):
        return
    for name in _imported(tree, ""):
        if name.split(".")[0] != "gpu_stack":
            continue
        # a warm-up only: what fails here, the plan itself says
        with contextlib.suppress(Exception):
            try:
                importlib.import_module(name)
            except ImportError:  # `from gpu_stack import Name`: a name, maybe loaded on first use
                parent, _, attr = name.rpartition(".")
                getattr(importlib.import_module(parent), attr, None)


def _forked(close: list[int]) -> None:
    """In a forked worker, before its first plan: the descriptors `close` closed (the Helm child's
    pipes, RenderServer.fds: held here too, its input would never end), and an event loop of its
    own. The one inherited from this process shares its epoll instance and wake-up pipe with it; it
    is left alone, not closed (closing would unregister the pipe from the instance both processes
    share)."""
    import asyncio

    for fd in close:
        with contextlib.suppress(OSError):
            os.close(fd)
    asyncio.set_event_loop(asyncio.new_event_loop())


def _started() -> None:
    """A forked worker's first task: nothing (submitting it forks the workers at once)."""


class Workers:
    """Up to `count` worker processes for in-process plans, started at once. Forked (`FORK`) from
    this process, which must run no other thread then (fleet/plan.py forks them after its first
    run, before its render thread: a thread holding a lock at the fork leaves it held in the
    child), closing `close` (a child process's pipes), else spawned and warming up."""

    def __init__(self, count: int, project_dir: Path, close: list[int] | None = None):
        self.count = count
        if FORK:
            for stream in (sys.stdout, sys.stderr):
                stream.flush()  # nothing buffered here is written again by a worker at its exit
            forked = multiprocessing.get_context("fork")
            self.pool = ProcessPoolExecutor(max_workers=count, mp_context=forked, initializer=_forked,
                                            initargs=(list(close or ()),))
            self.warming = [self.pool.submit(_started) for _ in range(count)]
        else:
            spawned = multiprocessing.get_context("spawn")
            self.pool = ProcessPoolExecutor(max_workers=count, mp_context=spawned)
            self.warming = [self.pool.submit(warm, str(project_dir)) for _ in range(count)]

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def expected_runs(project_dir: Path, stacks: list[str]) -> int:
    """How many in-process runs a fleet plan will likely have: one per distinct stack file of the
    working tree, twice (its revision's side, mostly distinct too when each stack changed)."""
    return 2 * len({_digest(project_dir / f"Pulumi.{stack}.yaml") for stack in stacks})


def workers_for(runs: int, jobs: int) -> int:
    """Worker processes beside this one for `runs` in-process runs: one per WORK_PER_WORKER runs,
    counting this process as one, at most `jobs` processes in all."""
    return max(0, min(jobs, runs // WORK_PER_WORKER) - 1)


def _plan_there(tree: Path, project_dir: Path, stack: str, label: str) -> dict[str, Any]:
    try:
        return {"plan": plan_in_tree(tree, project_dir, stack, label)}
    except GitPlanError as exc:
        return {"error": " ".join(str(exc).split())}


class PooledRenderer:
    """A renderer (offline/objects.Renderer) that renders each distinct release once, as
    memo_renderer does, in a thread pool: `prefetch(plan)` starts the renders a plan will need
    while the next program runs (each render is a Helm child process). `calls`: the real renders."""

    def __init__(self, chart_dir: Path | None, pool: ThreadPoolExecutor):
        self.chart_dir = chart_dir
        self.pool = pool
        self.server = RenderServer()
        """One Helm child for every render (an interpreter and Helm's SDK loaded once)."""
        self.futures: dict[str, Future[tuple[list[RenderedObject], str]]] = {}
        self.lock = threading.Lock()
        self.last_chart = ""
        self.renderer = release_renderer(chart_dir, server=self.server)
        """One renderer for every render: it locates each chart once."""
        self.rendering = threading.Lock()

    @property
    def calls(self) -> int:
        return len(self.futures)

    def _render(self, inputs: Mapping[str, Any]) -> tuple[list[RenderedObject], str]:
        with self.rendering:  # the chart it used, read before another render sets it
            return self.renderer(inputs), str(getattr(self.renderer, "last_chart", ""))

    def _future(self, inputs: Mapping[str, Any]) -> Future[tuple[list[RenderedObject], str]]:
        key = json.dumps(inputs, sort_keys=True, default=str)
        with self.lock:
            if key not in self.futures:
                self.futures[key] = self.pool.submit(self._render, dict(inputs))
            return self.futures[key]

    def prefetch(self, plan: Mapping[str, Any]) -> None:
        for inputs in _releases(plan).values():
            self._future(inputs)

    def __call__(self, inputs: Mapping[str, Any]) -> list[RenderedObject]:
        objects, self.last_chart = self._future(inputs).result()
        return objects

    def close(self) -> None:
        with self.lock:
            for future in self.futures.values():
                future.cancel()  # a render not started yet is not needed any more
        self.server.close()
