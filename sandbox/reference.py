"""The reference data the tests, the harness and the toolchain read: the GPU Operator chart
v25.10.1 with its values, CRDs and NVIDIA's default configs, NVIDIA's DRA driver chart 0.4.1, the
Prometheus Operator CRDs, and the two upstream sources the Go module proxy does not serve (pulumi's Python language host, the
command provider). One setting says where it is, for all of them:

    GPU_STACK_REFERENCE   (default: $XDG_CACHE_HOME/gpu-stack/reference, else ~/.cache/gpu-stack/reference)

laid out as `<upstream>-<version>/...`. `make reference` (`python -m sandbox.reference fetch`)
fills it: every file is checked against its sha256 in toolchain/reference.sha256 (committed), a
file taken from a copy beside the checkout (`../shared/reference`, where there is one) as much as
one pulled the way a user would (Helm's pull of the chart from NVIDIA's chart repository; the
other files from their upstream repositories at the pinned tag or commit). A wrong sum installs
nothing. This module imports only the standard library at its top (toolchain/build.sh asks it
where the folder is with the machine's own python3).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from gpu_stack.offline.chart_files import ENV_REFERENCE, read_sums, reference_root

PROJECT_DIR = Path(__file__).resolve().parents[1]
SUMS_FILE = PROJECT_DIR / "toolchain" / "reference.sha256"
ENV = ENV_REFERENCE
SHARED = PROJECT_DIR.parent / "shared" / "reference"
"""A read-only copy beside the checkout (this workplace's shared/): taken from first, still checked."""
HINT = "run `make reference` (the pinned chart and files, each checked by sha256, into the user cache)"

CHART_DIR = "gpu-operator-v25.10.1"
DRA_CHART_DIR = "dra-driver-nvidia-gpu-v0.4.1"
CHART_NAME, CHART_VERSION = "gpu-operator", "v25.10.1"
RAW = "https://raw.githubusercontent.com"
"""Upstream files at a tag or commit, byte for byte as committed (what the sums are of)."""

# folder or file under the reference folder -> where it comes from upstream: `chart:` the chart's
# own folder (Helm's pull), `chart-file:PATH` a file of the pulled chart, else a URL path under RAW
# (a folder's files keep their names below it).
SOURCES: dict[str, str] = {
    f"{CHART_DIR}/chart/": "chart:",
    f"{CHART_DIR}/values.yaml": "chart-file:values.yaml",
    f"{CHART_DIR}/crd-clusterpolicies.yaml": "chart-file:crds/nvidia.com_clusterpolicies.yaml",
    f"{CHART_DIR}/default-mig-parted-config.yaml": "/NVIDIA/gpu-operator/v25.10.1/assets/state-mig-manager/0400_configmap.yaml",
    # dcgm-exporter at the chart's pin (values.yaml: dcgmExporter.version 4.4.2-4.7.0)
    f"{CHART_DIR}/default-counters.csv": "/NVIDIA/dcgm-exporter/4.4.2-4.7.0/etc/default-counters.csv",
    f"{CHART_DIR}/dcp-metrics-included.csv": "/NVIDIA/dcgm-exporter/4.4.2-4.7.0/etc/dcp-metrics-included.csv",
    # NVIDIA's documented examples (the GPU Operator docs' manifests at the commit of their 25.10 pages)
    f"{CHART_DIR}/doc-examples/": "/NVIDIA/cloud-native-docs/284e8eddae0232516ff3cccc6b5af40bf37d03e4/gpu-operator/manifests/input/",
    # the full-schema CRDs of the Prometheus Operator release kube-prometheus-stack installs
    "prometheus-operator-v0.93.0/crd-prometheusrules.yaml":
        "/prometheus-operator/prometheus-operator/v0.93.0/example/prometheus-operator-crd-full/monitoring.coreos.com_prometheusrules.yaml",
    "prometheus-operator-v0.93.0/crd-servicemonitors.yaml":
        "/prometheus-operator/prometheus-operator/v0.93.0/example/prometheus-operator-crd-full/monitoring.coreos.com_servicemonitors.yaml",
    # NVIDIA's DRA driver chart 0.4.1 from its repository at the tag, byte for byte as committed
    # (a pulled package would not do: `helm package` writes Chart.yaml anew, without its comments)
    f"{DRA_CHART_DIR}/chart/": "/kubernetes-sigs/dra-driver-nvidia-gpu/v0.4.1/deployments/helm/dra-driver-nvidia-gpu/",
    f"{DRA_CHART_DIR}/LICENSE": "/kubernetes-sigs/dra-driver-nvidia-gpu/v0.4.1/LICENSE",
    # sources the Go module proxy does not serve (toolchain/build.sh builds them)
    "pulumi-v3.259.0/": "/pulumi/pulumi/v3.259.0/",
    "pulumi-command-v1.2.1/": "/pulumi/pulumi-command/v1.2.1/",
}

CHART = f"{CHART_DIR}/chart"
DRA_CHART = f"{DRA_CHART_DIR}/chart"
PROMETHEUS_CRDS = ("prometheus-operator-v0.93.0/crd-prometheusrules.yaml", "prometheus-operator-v0.93.0/crd-servicemonitors.yaml")
TEST_DATA = (CHART_DIR, DRA_CHART_DIR, "prometheus-operator-v0.93.0")
"""What the tests and the harness read (the toolchain's sources are build.sh's)."""


def in_ci() -> bool:
    return os.environ.get("CI") == "true"


def reference_dir() -> Path:
    """The reference folder: the program's own (gpu_stack/offline/chart_files.py reference_root:
    $GPU_STACK_REFERENCE, else the user cache), so the plan finds the chart this fills."""
    return reference_root()


def sums(path: Path = SUMS_FILE) -> dict[str, str]:
    """relative path -> sha256, from a `sha256sum` listing (the program's own reader)."""
    return read_sums(path)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _under(rel: str, prefixes: Iterable[str]) -> bool:
    return any(rel == p.rstrip("/") or rel.startswith(p.rstrip("/") + "/") for p in prefixes)


def problems(root: Path, prefixes: Iterable[str] = ("",), expected: dict[str, str] | None = None) -> list[str]:
    """What is wrong with the files of `root` under `prefixes` (all: "") against their sums: a file
    missing, or one whose sha256 differs. Empty when they are all there and right."""
    prefixes = tuple(prefixes)
    expected = sums() if expected is None else expected
    out = []
    for rel, digest in sorted(expected.items()):
        if prefixes != ("",) and not _under(rel, prefixes):
            continue
        path = root / rel
        if not path.is_file():
            out.append(f"{rel} is missing")
        elif _sha256(path) != digest:
            out.append(f"{rel} has sha256 {_sha256(path)}, not the pinned {digest}")
    return out


@cache
def _checked(root: str, prefixes: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(problems(Path(root), prefixes))


def unavailable(*prefixes: str) -> str | None:
    """Why the reference files under `prefixes` cannot be used here (one line naming
    `make reference`), or None when they are all there with their pinned sums (checked once per
    process)."""
    root = reference_dir()
    found = _checked(str(root), tuple(prefixes) or ("",))
    if not found:
        return None
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"reference data not usable at {root} ({ENV}): {found[0]}{more}; {HINT}"


def path(rel: str) -> Path:
    """The path of a reference file or folder (whether or not it is there)."""
    return reference_dir() / rel


# --------------------------------------------------------------------------- fetch
@dataclass
class Fetcher:
    """Fills a reference folder: from `shared` where it holds a file, else from upstream
    (`chart_repository` with Helm's pull, `raw_base` for the other files). Every file is checked
    against `expected` before anything is installed; a wrong sum installs nothing."""

    dest: Path
    shared: Path | None = SHARED
    chart_repository: str = ""
    raw_base: str = RAW
    expected: dict[str, str] | None = None
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr)

    def run(self) -> list[str]:
        expected = sums() if self.expected is None else self.expected
        if not problems(self.dest, expected=expected):
            self.log(f"reference: {self.dest} is complete (every file matches its sha256)")
            return []
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".reference-", dir=self.dest.parent) as tmp:
            stage = Path(tmp) / "stage"
            errors = self._fill(stage, expected)
            # a source that could not be had leaves its files missing: said once, by the source
            errors += [line for line in problems(stage, expected=expected) if not (errors and line.endswith(" is missing"))]
            if errors:
                for line in errors:
                    self.log(f"reference: {line}")
                self.log(f"reference: nothing installed at {self.dest}")
                return errors
            old = Path(tmp) / "old"
            if self.dest.exists():
                self.dest.rename(old)
            stage.rename(self.dest)
        self.log(f"reference: {len(expected)} files at {self.dest}, each matching its sha256 (toolchain/reference.sha256)")
        return []

    def _fill(self, stage: Path, expected: dict[str, str]) -> list[str]:
        errors: list[str] = []
        chart: Path | None = None
        chart_failed = False
        by_source: dict[str, list[str]] = {}
        for rel in expected:
            key = next((k for k in SOURCES if rel == k or (k.endswith("/") and rel.startswith(k))), None)
            if key is None:
                errors.append(f"{rel}: no upstream source known for it (sandbox/reference.py SOURCES)")
                continue
            by_source.setdefault(key, []).append(rel)
        for key, rels in by_source.items():
            source = SOURCES[key]
            todo = [rel for rel in rels if not self._copy_shared(rel, stage)]
            if not todo:
                continue
            try:
                if source.startswith("chart"):
                    if chart_failed:
                        errors.append(f"{key}: not in the reference copy, and the chart could not be pulled (above)")
                        continue
                    if chart is None:
                        chart_failed = True
                        chart = self._pull_chart(stage.parent)
                        chart_failed = False
                    for rel in todo:
                        inside = rel.removeprefix(key) if source == "chart:" else source.removeprefix("chart-file:")
                        self._place(chart / inside, stage / rel)
                else:
                    for rel in todo:
                        url = self.raw_base.rstrip("/") + source + (rel.removeprefix(key) if key.endswith("/") else "")
                        self._download(url, stage / rel)
            except Exception as exc:  # one line per source: the network, a missing file upstream
                errors.append(f"{key}: could not get it from upstream ({' '.join(str(exc).split())[:300]})")
        return errors

    def _copy_shared(self, rel: str, stage: Path) -> bool:
        if self.shared is None or not (self.shared / rel).is_file():
            return False
        self._place(self.shared / rel, stage / rel)
        return True

    @staticmethod
    def _place(src: Path, dest: Path) -> None:
        if not src.is_file():
            raise FileNotFoundError(f"{src.name} is not in the pulled chart")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
        dest.chmod(0o644)

    @staticmethod
    def _download(url: str, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            with urllib.request.urlopen(url, timeout=60) as response, dest.open("wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as exc:  # URLError, HTTPError, a reset: name the URL
            raise OSError(f"{url}: {getattr(exc, 'reason', None) or exc}") from None

    def _pull_chart(self, work: Path) -> Path:
        """`helm pull gpu-operator --repo REPO --version v25.10.1 --untar` with Helm's Go SDK."""
        import helm_python

        repository = self.chart_repository
        if not repository:
            from gpu_stack.config.types import CHART_REPOSITORY

            repository = CHART_REPOSITORY
        target = work / "pulled"
        target.mkdir()
        helm_python.pull(CHART_NAME, repo_url=repository, version=CHART_VERSION, untar=True, untar_dir=target, destination=target)
        chart = target / CHART_NAME
        if not (chart / "Chart.yaml").is_file():
            raise FileNotFoundError(f"the pulled archive holds no {CHART_NAME}/Chart.yaml")
        return chart


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.reference", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("where", help="print the reference folder")
    check = sub.add_parser("check", help="exit 1 (one line per problem) unless every file matches its sha256")
    check.add_argument("prefix", nargs="*", default=[""])
    fetch = sub.add_parser("fetch", help="fill the reference folder (make reference)")
    fetch.add_argument("--dest", type=Path, default=None, help="default: the reference folder")
    fetch.add_argument("--shared", type=Path, default=SHARED, help="a copy to take files from first (default ../shared/reference)")
    fetch.add_argument("--no-shared", action="store_true", help="pull everything from upstream")
    fetch.add_argument("--chart-repository", default="", help="default: NVIDIA's chart repository (the stack's default)")
    fetch.add_argument("--raw-base", default=RAW, help="where the other upstream files are served (tests: 127.0.0.1)")
    args = parser.parse_args(argv)
    if args.command == "where":
        print(reference_dir())
        return 0
    if args.command == "check":
        found = problems(reference_dir(), args.prefix)
        for line in found:
            print(f"reference: {line}", file=sys.stderr)
        return 1 if found else 0
    fetcher = Fetcher(
        dest=args.dest or reference_dir(),
        shared=None if args.no_shared else args.shared,
        chart_repository=args.chart_repository,
        raw_base=args.raw_base,
    )
    return 1 if fetcher.run() else 0


if __name__ == "__main__":
    sys.exit(main())
