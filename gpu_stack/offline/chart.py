"""The GPU Operator chart itself, rendered with Helm's Go SDK (helm-python-sdk), for the offline plan.

- `locate_chart`: the release's own local chart (`operator.chartPath`: a folder or .tgz, which
  the release names by its absolute path), else a local chart folder (`--chart-dir` /
  `GPU_STACK_CHART_DIR`), else the chart pulled once from the release's repository or oci://
  registry at the release's version into the user cache (`$XDG_CACHE_HOME/gpu-stack/charts`,
  default `~/.cache/gpu-stack/charts`).
- `render_release`: the Kubernetes objects a release with these values creates (templates, hooks
  and the chart's `crds/`), as `helm template` would, without a cluster.
- `lint`: `helm lint` with the release's values.

helm-python-sdk is optional for the program: where it cannot be imported, `ChartUnavailable`
says so in one line and the callers carry on without the object view.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import select
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .chart_files import (  # the chart's files, re-exported for the callers of chart.py
    ENV_CHART_DIR as ENV_CHART_DIR,
    ENV_PULL as ENV_PULL,
    HOOK_ANNOTATION as HOOK_ANNOTATION,
    SECRET_REPOSITORY as SECRET_REPOSITORY,
    ChartRef as ChartRef,
    ChartUnavailable as ChartUnavailable,
    _chart_version as _chart_version,
    cache_root as cache_root,
    helm_sdk as helm_sdk,
    locate_chart as locate_chart,
    pull_chart as pull_chart,
    require_helm_sdk as require_helm_sdk,
)


# --------------------------------------------------------------------------- render
@dataclass(frozen=True)
class RenderedObject:
    """One Kubernetes object the release creates."""

    api_version: str
    kind: str
    name: str
    namespace: str | None
    source: str
    """The template (or crds/ file) it came from."""
    body: dict[str, Any] = field(compare=False)

    @property
    def hook(self) -> str | None:
        ann = (self.body.get("metadata") or {}).get("annotations") or {}
        return ann.get(HOOK_ANNOTATION)

    @property
    def key(self) -> str:
        """`ClusterPolicy cluster-policy`, `DaemonSet gpu-operator/nvidia-...`: stable across renders."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}"

    @property
    def group(self) -> str:
        return self.api_version.split("/")[0] if "/" in self.api_version else ""


CLUSTER_SCOPED = {
    "ClusterRole", "ClusterRoleBinding", "ClusterPolicy", "CustomResourceDefinition", "Namespace",
    "NodeFeatureRule", "PriorityClass", "RuntimeClass", "SecurityContextConstraints", "NVIDIADriver",
    # the DRA driver's chart
    "DeviceClass", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
}


SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader where PyYAML has it: a rendered GPU Operator release (its CRDs are most of
it) is parsed about ten times faster than by the pure-Python one; both build the same documents."""


@functools.lru_cache(maxsize=256)
def _objects_of(text: str, source: str, namespace: str) -> tuple[RenderedObject, ...]:
    """The objects of one rendered manifest (or CRD file). Cached: renders of a chart with other
    values give most manifests (its CRDs above all) unchanged, parsed once and shared (read only)."""
    out = []
    for doc in yaml.load_all(text, Loader=SAFE_LOADER):
        if not isinstance(doc, dict) or not doc.get("kind"):
            continue
        meta = doc.get("metadata") or {}
        ns = None if doc["kind"] in CLUSTER_SCOPED else (meta.get("namespace") or namespace)
        out.append(RenderedObject(str(doc.get("apiVersion", "")), str(doc["kind"]), str(meta.get("name", "")), ns, source, doc))
    return tuple(out)


class ChartRenderError(Exception):
    """Helm cannot load or render the release's chart with its values (one line why): the release
    would fail at `pulumi up` too, so the plan fails instead of leaving its objects out."""


ENV_RENDER_TIMEOUT = "GPU_STACK_RENDER_TIMEOUT"
RENDER_TIMEOUT_S = 120
"""How long one render may take (the GPU Operator chart renders in about half a second)."""
ANSWER_PIPE_BYTES = 1024**2
"""The Helm child's answer pipe (Linux's default bound for an unprivileged process) and read size."""
RENDER_MEMORY_BYTES = 4 * 1024**3
"""The address space of the rendering process (a template that loops on memory stops there)."""


def _render_timeout() -> float:
    try:
        value = float(os.environ.get(ENV_RENDER_TIMEOUT) or RENDER_TIMEOUT_S)
    except ValueError:
        return RENDER_TIMEOUT_S
    return value if 0 < value <= 3600 else RENDER_TIMEOUT_S


def _chart_problem(chart_path: Path) -> str | None:
    """Why Helm must not load this chart (links out of it, devices, Helm's size bounds), or None."""
    from ..config.chart_source import _archive_meta, folder_problems

    try:
        is_dir = chart_path.is_dir()
    except OSError:
        is_dir = False
    problems = folder_problems(chart_path) if is_dir else _archive_meta(chart_path)[2]
    return problems[0] if problems else None


def _one_line(text: str, limit: int = 400) -> str:
    from ..config.safe_input import escape

    return escape(" ".join(str(text).split()))[:limit]


CODE_ROOT = Path(__file__).resolve().parents[2]
"""The folder this code's `gpu_stack` is in: the render child runs from it, so `-m` finds this code
first (the working directory comes before PYTHONPATH, and may hold another revision's copy)."""


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(CODE_ROOT)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _timed_out(chart_path: Path, timeout: float) -> ChartRenderError:
    return ChartRenderError(
        f"Helm did not finish rendering the chart {chart_path} within {timeout:g} s (a template that includes "
        f"itself or loops?); {ENV_RENDER_TIMEOUT} sets the bound"
    )


class RenderServer:
    """One Helm child process for many renders (`python -m gpu_stack.offline.chart --serve`: one
    JSON request per line in, one answer per line out), bounded as render_release's own child is:
    its memory from the start, each render in time (the child is killed, and started again for
    the next). For a caller with many values sets to render (the fleet plan): one interpreter and
    one load of Helm's SDK for all. Thread-safe (one render at a time); `close()` ends it. It
    starts no thread: the answer is read by the caller, in large reads (a process busy in another
    thread hands this one the GIL about every 5 ms, and an answer is about 240 KiB), so a process
    may fork after `start()` (closing `fds()` in the forked one)."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.pending = b""
        self.stderr: Any = None
        self.lock = threading.Lock()
        self.checked: set[Path] = set()
        """The charts checked already (render_release): one walk of a chart's files per server, as a
        fleet's renders are of one chart, while its renders run beside the program runs."""

    def _start(self) -> subprocess.Popen[bytes]:
        if self.stderr is not None:
            self.stderr.close()
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 (closed by the next start or close())
        proc = subprocess.Popen(
            [sys.executable, "-m", "gpu_stack.offline.chart", "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.stderr, env=_child_env(), cwd=CODE_ROOT,
        )
        assert proc.stdout is not None
        with contextlib.suppress(ImportError, OSError, AttributeError):  # Linux: room for a whole answer
            import fcntl

            fcntl.fcntl(proc.stdout.fileno(), fcntl.F_SETPIPE_SZ, ANSWER_PIPE_BYTES)
        self.proc, self.pending = proc, b""
        return proc

    def _stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.proc = None

    def _stderr_tail(self) -> str:
        try:
            self.stderr.seek(0)
            return self.stderr.read().decode(errors="replace")[-600:]
        except (OSError, ValueError, AttributeError):
            return ""

    def _line(self, proc: subprocess.Popen[bytes], deadline: float) -> bytes | None:
        """The child's next answer line; None when its output ended. TimeoutError at `deadline`."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        while b"\n" not in self.pending:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            if select.select([fd], [], [], left)[0]:
                chunk = os.read(fd, ANSWER_PIPE_BYTES)
                if not chunk:
                    return None
                self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line

    def start(self) -> None:
        """Start the child now: its interpreter and Helm's SDK load while the caller works on."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()

    def fds(self) -> list[int]:
        """The child's pipes as this process holds them: a process forked from this one closes
        them, or the child would not see its input end when this one closes it."""
        proc = self.proc
        return [f.fileno() for f in (proc.stdin, proc.stdout) if f is not None] if proc is not None else []

    def answer(self, payload: str, chart_path: Path, timeout: float) -> tuple[dict[str, Any], str, int | None]:
        """(the child's answer, its stderr when it ended, its exit status when it ended)."""
        with self.lock:
            proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
            assert proc.stdin is not None
            try:
                proc.stdin.write(payload.encode() + b"\n")
                proc.stdin.flush()
                line = self._line(proc, time.monotonic() + timeout)
            except TimeoutError:
                self._stop()
                raise _timed_out(chart_path, timeout) from None
            except OSError:  # the child is gone (its pipe closed)
                line = None
            if line is None:
                status = proc.wait()
                tail = self._stderr_tail()
                self.proc = None
                return {}, tail, status
            try:
                return json.loads(line), "", None
            except json.JSONDecodeError:
                return {}, "", None

    def close(self) -> None:
        with self.lock:
            if self.proc is not None and self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=10)
            self._stop()
            if self.stderr is not None:
                self.stderr.close()
                self.stderr = None


def render_release(
    chart_path: Path | str, values: dict[str, Any], name: str, namespace: str, server: RenderServer | None = None,
) -> list[RenderedObject]:
    """Every object of a release: rendered templates (hooks included) and the chart's CRDs.

    The chart is checked first (no link out of it, no FIFO or device, within Helm's bounds), then
    rendered by Helm in a child process bounded in time (`GPU_STACK_RENDER_TIMEOUT`, default
    RENDER_TIMEOUT_S) and memory, so a template that includes itself or loops ends the plan with one
    line instead of hanging it (`server`: the long-lived child of a RenderServer instead of one per
    render). Raises ChartUnavailable (no SDK) or ChartRenderError."""
    chart_path = Path(chart_path)
    if server is None or chart_path not in server.checked:
        problem = _chart_problem(chart_path)
        if problem is not None:
            raise ChartRenderError(f"the chart {chart_path} cannot be rendered: {problem}")
        if server is not None:
            server.checked.add(chart_path)
    payload = json.dumps({"chart": str(chart_path), "values": values, "name": name, "namespace": namespace})
    timeout = _render_timeout()
    if server is not None:
        answer, stderr, status = server.answer(payload, chart_path, timeout)
    else:
        try:
            done = subprocess.run(
                [sys.executable, "-m", "gpu_stack.offline.chart"], input=payload, capture_output=True, text=True,
                timeout=timeout, env=_child_env(), cwd=CODE_ROOT, check=False,
            )
        except subprocess.TimeoutExpired:
            raise _timed_out(chart_path, timeout) from None
        try:
            answer = json.loads(done.stdout or "{}")
        except json.JSONDecodeError:
            answer = {}
        stderr, status = done.stderr, done.returncode
    if "unavailable" in answer:
        raise ChartUnavailable(str(answer["unavailable"]))
    if "error" in answer or "manifests" not in answer:
        reason = answer.get("error") or (
            "it ran out of memory" if "MemoryError" in stderr or "out of memory" in stderr
            else f"the rendering process ended with status {status}: {_one_line(stderr[-300:])}"
        )
        raise ChartRenderError(f"Helm cannot render the chart {chart_path}: {_one_line(reason)}")
    objects: list[RenderedObject] = []
    manifests = answer["manifests"]
    for source in sorted(manifests):
        if source.endswith((".txt", "NOTES.txt")):
            continue
        objects.extend(_objects_of(manifests[source], source, namespace))
    for crd in answer["crds"]:
        objects.extend(_objects_of(crd.get("data") or "", f"crds/{crd.get('filename') or crd.get('name')}", namespace))
    return objects


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    """One render's answer: `manifests` and `crds`, or `error`, or `unavailable`."""
    try:
        helm = helm_sdk()
    except ChartUnavailable as exc:
        return {"unavailable": str(exc)}
    try:
        with helm.Chart.load(request["chart"]) as chart:
            manifests = chart.render(request["values"], name=request["name"], namespace=request["namespace"], is_install=True)
            crds = [{k: c.get(k) for k in ("data", "filename", "name")} for c in chart.crds]
    except MemoryError:
        return {"error": "it ran out of memory"}
    except Exception as exc:  # Helm's load and template errors, one line each
        return {"error": " ".join(str(exc).split())[:600] or type(exc).__name__}
    return {"manifests": dict(manifests), "crds": crds}


def _render_child() -> None:
    """`python -m gpu_stack.offline.chart`: render one release read as JSON on stdin, print JSON
    (`manifests` and `crds`, or `error`, or `unavailable`); with `--serve`, one request per line
    until stdin ends, one answer per line. Its memory is bounded before Helm loads."""
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (RENDER_MEMORY_BYTES, RENDER_MEMORY_BYTES))
    except (ImportError, ValueError, OSError):
        pass
    if sys.argv[1:] == ["--serve"]:
        with contextlib.suppress(ChartUnavailable):  # loaded before the first request (said by its answer)
            helm_sdk()
        for line in sys.stdin:
            sys.stdout.write(json.dumps(_answer(json.loads(line))) + "\n")
            sys.stdout.flush()
        return
    print(json.dumps(_answer(json.loads(sys.stdin.read()))))


def lint(chart_path: Path | str, values: dict[str, Any], namespace: str, kube_version: str | None = None) -> list[str]:
    """`helm lint` findings of warning or error severity, as 'path: message'."""
    helm = helm_sdk()
    report = helm.lint(str(chart_path), values, namespace=namespace, kube_version=kube_version, with_subcharts=True)
    out = [f"{m.get('path')}: {m.get('error')}" for m in report.get("messages") or [] if int(m.get("severity", 0)) >= 2]
    out.extend(str(e) for e in report.get("errors") or [])
    return out


if __name__ == "__main__":
    _render_child()
