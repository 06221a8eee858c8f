"""Where the GPU Operator chart comes from: an https repository, an oci:// registry, or a local copy.

`chart_source(operator, project_dir)` says what the Helm release is given (`chart`, `version`,
`repository_opts`) in the form pulumi-kubernetes 4.25's `helm.v3.Release` loads it:

- https repository: `chart: gpu-operator`, `repositoryOpts.repo: <url>`;
- oci:// registry: `chart: oci://<registry path>/gpu-operator`, no `repo` (Helm resolves an OCI
  reference itself; a `repo` that is not an index URL makes the provider look for an index.yaml);
- local folder or `.tgz`: `chart: <absolute path>` and no repository options at all, so the
  provider stats the path and loads it from disk without any network.

A relative local path is resolved against the project folder (where Pulumi.yaml is), never the
working directory, so the plan is the same wherever the command runs. A local copy is checked
here, before anything is registered: it must exist, be this chart at the pinned version, and carry
its NFD subchart (the chart lists it as a dependency, and Helm refuses a chart whose dependency is
missing from charts/ whether or not `nfd.enabled`).
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml
from pydantic import SecretStr

from . import OperatorSettings, Problem, config_key
from .driver_files import CERT_FILE_LIMIT, certificates
from .files import FileRefused, file_kind, read_regular_file
from .safe_input import escape

CHART_NAME = "gpu-operator"
NFD_SUBCHART = "node-feature-discovery"
CHART_PATH_KEY = config_key(("operator", "chartPath"))
CA_FILE_KEY = config_key(("operator", "repositoryCaFile"))


@dataclass(frozen=True)
class ChartSource:
    """The chart inputs of the operator's Helm release."""

    chart: str
    """`gpu-operator`, `oci://.../gpu-operator`, or the absolute path of a local folder or .tgz."""
    version: str
    repository: str | None = None
    """The https repository URL; None for oci:// and local charts."""
    local: Path | None = None
    """The local chart (folder or .tgz), absolute; None for a remote chart."""
    username: str | None = None
    password: SecretStr | None = None
    ca_file: Path | None = None
    """The https repository's CA bundle, absolute."""

    def release_inputs(self, secret: Callable[[str], Any] = lambda v: v) -> dict[str, Any]:
        """`chart`, `version` and (for an https repository) `repository_opts` of helm.v3.Release;
        `secret` wraps the username and password (pulumi.Output.secret in the component)."""
        out: dict[str, Any] = {"chart": self.chart, "version": self.version}
        if self.repository is not None:
            opts: dict[str, Any] = {"repo": self.repository}
            if self.username is not None and self.password is not None:
                opts["username"] = secret(self.username)
                opts["password"] = secret(self.password.get_secret_value())
            if self.ca_file is not None:
                opts["ca_file"] = str(self.ca_file)
            out["repository_opts"] = opts
        return out


def resolve_local(path: str, project_dir: Path | str) -> Path:
    """`path` as an absolute path: `~` expanded, a relative one taken from `project_dir`."""
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = Path(project_dir).resolve() / p
    # Cleaned lexically (`a/../b` -> `b`), as the provider's filepath.Abs does before it loads the path.
    return Path(os.path.normpath(p))


def chart_source(operator: OperatorSettings, project_dir: Path | str) -> tuple[ChartSource, list[Problem]]:
    """The release's chart source and, for a local copy, what is wrong with it (empty when usable)."""
    version = operator.chart_version
    if operator.chart_path is not None:
        local = resolve_local(operator.chart_path, project_dir)
        source = ChartSource(chart=str(local), version=version, local=local)
        return source, [
            Problem(key=CHART_PATH_KEY, value=operator.chart_path, message=m) for m in local_chart_problems(local, version)
        ]
    repo = operator.repository
    if repo.startswith("oci://"):
        return ChartSource(chart=f"{repo.rstrip('/')}/{CHART_NAME}", version=version), []
    creds = operator.repository_credentials
    problems: list[Problem] = []
    ca_file = None
    if operator.repository_ca_file is not None:
        ca_file = resolve_local(operator.repository_ca_file, project_dir)
        unreadable = _unreadable(ca_file)
        if unreadable or not ca_file.is_file():
            problems.append(Problem(
                key=CA_FILE_KEY, value=operator.repository_ca_file,
                message=unreadable
                or f"{ca_file} is not a file (a relative path is taken from the project folder, where Pulumi.yaml is)",
            ))
        else:
            bad = _ca_bundle_problem(ca_file)
            if bad is not None:
                problems.append(Problem(key=CA_FILE_KEY, value=operator.repository_ca_file, message=bad))
    return ChartSource(
        chart=CHART_NAME, version=version, repository=repo, ca_file=ca_file,
        username=creds.username if creds else None, password=creds.password if creds else None,
    ), problems


def _ca_bundle_problem(path: Path) -> str | None:
    """Why the CA file the provider will read is no CA bundle: read as every file is (a regular file,
    no FIFO or device, at most CERT_FILE_LIMIT), then each PEM block parsed as X.509 (driver_files)."""
    try:
        text = read_regular_file(path, CERT_FILE_LIMIT, "a CA bundle (PEM)").decode("utf-8")
        certificates(text)
    except FileRefused as exc:
        return str(exc)
    except UnicodeDecodeError:
        return f"{escape(str(path))} is not text; a CA bundle is PEM certificates"
    except ValueError as exc:
        return f"{escape(str(path))} {exc}"
    return None


# --------------------------------------------------------------------------- local copies
def _folder_meta(path: Path) -> tuple[dict[str, Any] | None, bool]:
    """(Chart.yaml of a chart folder, whether its NFD subchart is vendored)."""
    try:
        meta = yaml.safe_load((path / "Chart.yaml").read_text())
    except (OSError, yaml.YAMLError, UnicodeDecodeError):
        return None, False
    charts = path / "charts"
    vendored = (charts / NFD_SUBCHART / "Chart.yaml").is_file() or any(charts.glob(f"{NFD_SUBCHART}-*.tgz"))
    return (meta if isinstance(meta, dict) else None), vendored


# Helm's own bounds on a chart it loads (pkg/chart/loader: MaxDecompressedChartSize 100 MiB,
# MaxDecompressedFileSize 5 MiB), checked here before Helm reads a byte, with a bound on files.
MAX_CHART_BYTES = 100 * 1024 * 1024
MAX_CHART_FILE_BYTES = 5 * 1024 * 1024
MAX_CHART_FILES = 10_000


def folder_problems(root: Path) -> list[str]:
    """Why Helm must not load the chart folder `root` (empty when it may): a link whose target is
    outside the chart (Helm follows links, and would make a file of this machine chart content),
    a FIFO or a device (Helm would wait on it or read it without end), more than Helm's size
    bounds. The walk follows no link; a link inside the chart to a file inside it is fine."""
    try:
        real_root = root.resolve(strict=True)
    except (OSError, RuntimeError) as exc:
        return [f"{root} cannot be read ({getattr(exc, 'strerror', None) or exc})"]
    files = total = 0
    for dirpath, dirnames, filenames in os.walk(real_root, onerror=None):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = path.relative_to(real_root)
            try:
                mode = os.lstat(path).st_mode
                if stat.S_ISLNK(mode):
                    target = path.resolve(strict=True)
                    if not target.is_relative_to(real_root):
                        return [(
                            f"{rel} in the chart is a link to {target}, outside the chart: Helm would read a file of "
                            "this machine as chart content; copy what it needs into the chart instead"
                        )]
                    mode = os.stat(target).st_mode
                size = os.stat(path).st_size if stat.S_ISREG(mode) else 0
            except FileNotFoundError:
                return [f"{rel} in the chart is a link to nothing (a dangling link)"]
            except (OSError, RuntimeError) as exc:
                return [f"{rel} in the chart cannot be read ({getattr(exc, 'strerror', None) or 'a link loop'})"]
            kind = file_kind(mode)
            if kind is not None:
                return [f"{rel} in the chart is {kind}, not a file: Helm would wait on it or read it without end"]
            if stat.S_ISREG(mode):
                files, total = files + 1, total + size
                if size > MAX_CHART_FILE_BYTES:
                    return [f"{rel} in the chart is larger than {MAX_CHART_FILE_BYTES // 2**20} MiB, Helm's bound on one file"]
        if files > MAX_CHART_FILES or total > MAX_CHART_BYTES:
            return [f"{root} holds more than {MAX_CHART_FILES} files or {MAX_CHART_BYTES // 2**20} MiB, Helm's bound on a chart"]
    return []


class _Capped(io.RawIOBase):
    """A readable stream that refuses to give more than `limit` bytes (a gzip bomb stops there)."""

    def __init__(self, inner: Any, limit: int) -> None:
        self.inner, self.left = inner, limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.inner.read(min(len(buffer), self.left + 1))
        if len(data) > self.left:
            raise _TooLarge
        self.left -= len(data)
        buffer[: len(data)] = data
        return len(data)


class _TooLarge(Exception):
    pass


def _archive_meta(path: Path) -> tuple[dict[str, Any] | None, bool, list[str]]:
    """(Chart.yaml of a packaged chart `<name>/Chart.yaml`, whether `<name>/charts/` holds NFD, why
    Helm must not load it): read once as a stream, within Helm's bounds on what it unpacks to,
    every member a file or folder under the chart's own folder (no `../`, no absolute path, no
    link, no device)."""
    meta: dict[str, Any] | None = None
    vendored = False
    files = 0
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
        with os.fdopen(fd, "rb") as raw:
            kind = file_kind(os.fstat(raw.fileno()).st_mode)
            if kind is not None:
                return None, False, [f"{path} is {kind}, not a packaged chart"]
            capped = _Capped(gzip.GzipFile(fileobj=raw), MAX_CHART_BYTES + 1024 * 1024)
            with tarfile.open(fileobj=io.BufferedReader(capped), mode="r|") as tar:
                for member in tar:
                    parts = PurePosixPath(member.name).parts
                    if member.name.startswith("/") or ".." in parts or not parts:
                        return meta, vendored, [
                            f"{path} holds {member.name[:80]!r}, outside the chart's folder: Helm refuses such an archive"
                        ]
                    if not (member.isfile() or member.isdir()):
                        what = "a link" if member.issym() or member.islnk() else "a device or FIFO"
                        return meta, vendored, [
                            f"{path} holds {member.name[:80]!r}, {what}: a packaged chart holds files and folders only"
                        ]
                    if member.size > MAX_CHART_FILE_BYTES:
                        return meta, vendored, [
                            f"{path} holds {member.name[:80]!r} of more than {MAX_CHART_FILE_BYTES // 2**20} MiB, Helm's bound on one file"
                        ]
                    files += 1
                    if files > MAX_CHART_FILES:
                        return meta, vendored, [f"{path} holds more than {MAX_CHART_FILES} files"]
                    if len(parts) == 2 and parts[1] == "Chart.yaml" and member.isfile():
                        handle = tar.extractfile(member)
                        loaded = yaml.safe_load(handle.read()) if handle is not None else None
                        meta = loaded if isinstance(loaded, dict) else None
                    elif len(parts) >= 3 and parts[1] == "charts" and (
                        parts[2] == NFD_SUBCHART or (parts[2].startswith(f"{NFD_SUBCHART}-") and parts[2].endswith(".tgz"))
                    ):
                        vendored = True
            return meta, vendored, []
    except _TooLarge:
        return None, False, [f"{path} unpacks to more than {MAX_CHART_BYTES // 2**20} MiB, Helm's bound on a chart"]
    except (OSError, EOFError, tarfile.TarError, yaml.YAMLError, UnicodeDecodeError, zlib.error):
        return None, False, []


def _unreadable(path: Path) -> str | None:
    """Why a path's kind cannot even be asked (a name longer than the file system allows, a
    permission): pathlib's is_file/is_dir raise then instead of answering False."""
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror})"
    return None


def local_chart_problems(path: Path, version: str, name: str = CHART_NAME, subchart: str | None = NFD_SUBCHART) -> list[str]:
    """Why `path` cannot be the release's chart `name` at `version`, with its `subchart` vendored
    (None: it has none), as the operator's (the default) or the DRA driver's (none when it can)."""
    unreadable = _unreadable(path)
    if unreadable:
        return [unreadable]
    try:
        mode: int | None = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        mode = None
    except (OSError, RuntimeError):
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        unsafe = folder_problems(path)  # before reading a byte of it (a Chart.yaml may be a FIFO)
        if unsafe:
            return unsafe
        meta, vendored = _folder_meta(path)
        if meta is None:
            return [f"{path} is a folder but not a chart (no readable Chart.yaml in it)"]
    elif mode is not None and file_kind(mode) is not None:
        return [f"{path} is {file_kind(mode)}, not a chart folder or a packaged chart (.tgz)"]
    elif mode is not None:
        meta, vendored, unsafe = _archive_meta(path)
        if unsafe:
            return unsafe
        if meta is None:
            return [f"{path} is not a packaged chart (a .tgz holding {name}/Chart.yaml, as `helm pull` writes)"]
    else:
        return [f"{path} does not exist (a relative path is taken from the project folder, where Pulumi.yaml is)"]
    problems = []
    if meta.get("name") != name or str(meta.get("version")) != version:
        problems.append(
            f"{path} holds chart {meta.get('name')!r} version {meta.get('version')!r}; the stack needs {name} {version}"
        )
    if subchart is not None and not vendored:
        problems.append(
            f"{path} lacks its {subchart} subchart under charts/ (Helm refuses the chart without it, even "
            f"with NFD off): copy the chart as `helm pull` writes it, or run `helm dependency build` on the folder"
        )
    return problems
