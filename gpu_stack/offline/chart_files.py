"""Where the GPU Operator chart comes from for the offline plan (chart.py renders it): the
release's own local chart, a local chart folder, or the chart pulled once into the user cache;
and Helm's Go SDK (helm-python-sdk), optional for the program."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ENV_CHART_DIR = "GPU_STACK_CHART_DIR"
ENV_PULL = "GPU_STACK_CHART_PULL"
"""`off`: never pull (air-gapped machines, tests); the object view then says so in one line."""
HOOK_ANNOTATION = "helm.sh/hook"
SECRET_REPOSITORY = "[secret]"
"""The repository of a release whose repository options are a secret in the plan."""


class ChartUnavailable(Exception):
    """The chart cannot be rendered here (no SDK, no local chart, pull failed); one line why."""


def helm_sdk() -> Any:
    """The `helm_python` module, or ChartUnavailable naming what is missing."""
    try:
        import helm_python
    except Exception as exc:  # ImportError, or an OSError loading its shared library
        raise ChartUnavailable(
            f"helm-python-sdk is not available ({type(exc).__name__}: {exc}); "
            "install it with: pip install -r requirements.txt"
        ) from None
    return helm_python


def require_helm_sdk() -> None:
    """helm_sdk()'s check without loading the SDK here (ChartUnavailable when it is not installed):
    the renders load it in their child process, and its Go runtime costs this process about 50 MiB.
    An SDK that is installed but cannot load is said by the child, in the same words."""
    if importlib.util.find_spec("helm_python") is None:
        raise ChartUnavailable(
            "helm-python-sdk is not available (ModuleNotFoundError: No module named 'helm_python'); "
            "install it with: pip install -r requirements.txt"
        )


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-stack" / "charts"


ENV_REFERENCE = "GPU_STACK_REFERENCE"


def reference_root() -> Path:
    """The reference folder `make reference` fills (the pinned chart and upstream files, each
    checked by sha256): $GPU_STACK_REFERENCE, else $XDG_CACHE_HOME/gpu-stack/reference, else
    ~/.cache/gpu-stack/reference. The test harness (sandbox/reference.py) uses the same one."""
    configured = os.environ.get(ENV_REFERENCE)
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpu-stack" / "reference"


def read_sums(path: Path) -> dict[str, str]:
    """relative path -> sha256, from a `sha256sum` listing (toolchain/reference.sha256)."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        digest, _, rel = line.partition("  ")
        if rel:
            out[rel] = digest
    return out


def _reference_sums() -> dict[str, str] | None:
    """The sums of the reference files (toolchain/reference.sha256), where this code runs from a
    clone; None for an installed package (it carries no sums)."""
    from ..config.package_data import CLONE_ROOT

    sums_file = CLONE_ROOT / "toolchain" / "reference.sha256" if CLONE_ROOT is not None else None
    if sums_file is None or not sums_file.is_file():
        return None
    return read_sums(sums_file)


def _file_sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else None
    except OSError:
        return None


def _reference_folder(ref: ChartRef) -> str | None:
    """The reference folder of `ref`'s chart: NVIDIA's GPU Operator chart from its repository, or
    its DRA driver chart from the project's oci:// registry path (a `v` before its SemVer)."""
    from ..config.dra import DRA_CHART, DRA_REPOSITORY
    from ..config.types import CHART_REPOSITORY

    if not ref.version:
        return None
    if ref.repository.rstrip("/") == CHART_REPOSITORY and ref.chart == "gpu-operator":
        return f"gpu-operator-{ref.version}/chart"
    if not ref.repository and ref.chart == f"{DRA_REPOSITORY}/{DRA_CHART}":
        return f"{DRA_CHART}-v{ref.version.removeprefix('v')}/chart"
    return None


def reference_chart(ref: ChartRef) -> Path | None:
    """NVIDIA's chart at the release's version from the reference folder (the GPU Operator's or the
    DRA driver's), where `make reference` put it and (in a clone) every file of it matches
    toolchain/reference.sha256; else None."""
    folder = _reference_folder(ref)
    if folder is None:
        return None
    path = reference_root() / folder
    if _chart_version(path) != ref.version:
        return None
    sums = _reference_sums()
    if sums is not None:
        mine = {rel: digest for rel, digest in sums.items() if rel.startswith(folder + "/")}
        if not mine or any(_file_sha256(reference_root() / rel) != digest for rel, digest in mine.items()):
            return None
    return path


@dataclass(frozen=True)
class ChartRef:
    """Which chart a release installs: its repository, chart and version.

    `chart` is a name in `repository`, an `oci://` reference (no repository), or the absolute path
    of a local folder or .tgz (no repository), as chart_source.ChartSource gives the release."""

    repository: str
    chart: str
    version: str

    @property
    def local(self) -> Path | None:
        """The local chart the release loads from disk, or None for a remote one."""
        if self.repository or not self.chart.startswith("/"):
            return None
        return Path(self.chart)

    @property
    def name(self) -> str:
        """The chart's own name: the last part of an oci:// reference."""
        return self.chart.rstrip("/").rsplit("/", 1)[-1]

    @classmethod
    def of_release(cls, inputs: dict[str, Any]) -> ChartRef:
        opts = inputs.get("repositoryOpts") or {}
        # Options holding repository credentials are one Pulumi secret in the plan, URL included.
        repo = (opts.get("repo") or "") if isinstance(opts, dict) else SECRET_REPOSITORY
        return cls(repository=str(repo), chart=str(inputs.get("chart") or ""), version=str(inputs.get("version") or ""))

    def cache_dir(self) -> Path:
        digest = hashlib.sha256((self.repository or self.chart).encode()).hexdigest()[:12]
        return cache_root() / digest / f"{self.name}-{self.version}"


def _chart_version(path: Path) -> str | None:
    """The version in a chart folder's Chart.yaml, read like every file the program reads (a FIFO
    or a device there is no chart, never waited on), or None."""
    from ..config.chart_source import MAX_CHART_FILE_BYTES
    from ..config.files import FileRefused, read_regular_file

    try:
        meta = yaml.safe_load(read_regular_file(path / "Chart.yaml", MAX_CHART_FILE_BYTES, "a Chart.yaml"))
    except (FileRefused, yaml.YAMLError, RecursionError):
        return None
    return str(meta.get("version")) if isinstance(meta, dict) else None


def pull_chart(ref: ChartRef, dest: Path) -> Path:
    """Pull `ref` with Helm's SDK and unpack it into dest/<chart>; returns that folder."""
    helm = helm_sdk()
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pull-", dir=dest.parent) as tmp:
        if ref.chart.startswith("oci://"):
            helm.pull(ref.chart, version=ref.version, untar=True, untar_dir=tmp, destination=tmp)
        elif ref.repository.startswith("oci://"):
            helm.pull(f"{ref.repository.rstrip('/')}/{ref.chart}", version=ref.version, untar=True, untar_dir=tmp, destination=tmp)
        else:
            helm.pull(ref.chart, repo_url=ref.repository, version=ref.version, untar=True, untar_dir=tmp, destination=tmp)
        got = Path(tmp) / ref.name
        if not (got / "Chart.yaml").exists():
            raise ChartUnavailable(f"the pulled archive of {ref.chart} {ref.version} holds no {ref.name}/Chart.yaml")
        target = dest / ref.name
        if target.exists():
            shutil.rmtree(target)
        got.rename(target)
    return target


def locate_chart(
    ref: ChartRef,
    chart_dir: Path | str | None = None,
    pull: Callable[[ChartRef, Path], Path] | None = None,
) -> Path:
    """The chart (folder, or .tgz) to render `ref` with.

    A release with a local chart renders that one (what the provider loads). Otherwise
    `chart_dir` (or `$GPU_STACK_CHART_DIR`) wins when its Chart.yaml has the release's version;
    then NVIDIA's chart in the reference folder `make reference` filled (reference_chart);
    otherwise the user cache, filled by one pull the first time. Raises ChartUnavailable.
    """
    if ref.local is not None:
        if not ref.local.exists():
            raise ChartUnavailable(f"the release's local chart {ref.local} does not exist")
        return ref.local
    chart_dir = chart_dir or os.environ.get(ENV_CHART_DIR) or None
    if chart_dir:
        path = Path(chart_dir)
        version = _chart_version(path)
        if version is None:
            raise ChartUnavailable(f"{path} is not a chart folder (no readable Chart.yaml)")
        if version == ref.version:
            return path
    reference = reference_chart(ref)
    if reference is not None:
        return reference
    cached = ref.cache_dir() / ref.name
    if _chart_version(cached) == ref.version:
        return cached
    if os.environ.get(ENV_PULL, "").lower() in ("off", "0", "false", "no"):
        raise ChartUnavailable(
            f"chart {ref.chart} {ref.version} is not in the cache and pulling is off ({ENV_PULL}); "
            "pass --chart-dir DIR for a local copy"
        )
    if ref.repository == SECRET_REPOSITORY:
        raise ChartUnavailable(
            "the release's repository options are a secret (operator.repositoryCredentials): "
            "pass --chart-dir DIR with a local copy of the chart"
        )
    if not (ref.repository or ref.chart.startswith("oci://")) or not ref.chart or not ref.version:
        raise ChartUnavailable("the release names no repository, chart and version to pull")
    try:
        return (pull or pull_chart)(ref, ref.cache_dir())
    except ChartUnavailable:
        raise
    except Exception as exc:
        reason = " ".join(str(exc).split())[:300]
        raise ChartUnavailable(
            f"could not pull chart {ref.chart} {ref.version} from {ref.repository or 'its registry'} ({reason})"
        ) from None
