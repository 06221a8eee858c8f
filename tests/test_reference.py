"""`make reference`: the pinned chart and upstream files, each checked by sha256, in the one
reference folder the tests, the harness and the toolchain read (sandbox/reference.py)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import os
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sandbox import harness, reference

from .helpers import CHART_REF, reference_dir, require_reference

PROJECT_DIR = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", reference.ENV)}
    # Helm's own caches and settings in the test's folder; nothing through a proxy
    env |= {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", **extra}
    return env


def _fetch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sandbox.reference", "fetch", *args],
        cwd=PROJECT_DIR, env=env, capture_output=True, text=True, timeout=300,
    )


# --------------------------------------------------------------------------- the one setting
def test_the_tests_and_the_harness_read_the_one_reference_folder():
    root = reference.reference_dir()
    assert reference_dir() == root / "gpu-operator-v25.10.1"
    assert root / "gpu-operator-v25.10.1" / "chart" == harness.CHART_DIR
    assert all(p.is_relative_to(root) for p in harness.PROMETHEUS_CRDS)
    # toolchain/build.sh asks the same module (with the machine's python3, standard library only)
    script = (PROJECT_DIR / "toolchain" / "build.sh").read_text()
    assert "sandbox.reference where" in script and "shared/reference" not in script


def test_the_setting_is_the_environment_variable_else_the_user_cache(monkeypatch, tmp_path: Path):
    monkeypatch.delenv(reference.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert reference.reference_dir() == tmp_path / "xdg" / "gpu-stack" / "reference"
    monkeypatch.setenv(reference.ENV, str(tmp_path / "mine"))
    assert reference.reference_dir() == tmp_path / "mine"
    out = subprocess.run([sys.executable, "-m", "sandbox.reference", "where"], cwd=PROJECT_DIR, capture_output=True,
                         text=True, env={**os.environ, reference.ENV: str(tmp_path / "mine")}, check=True).stdout
    assert out.strip() == str(tmp_path / "mine")


@pytest.mark.parametrize("ci", [False, True])
def test_missing_reference_data_skips_naming_make_reference_and_fails_under_ci(monkeypatch, tmp_path: Path, ci):
    monkeypatch.setenv(reference.ENV, str(tmp_path / "empty"))
    monkeypatch.setenv("CI", "true" if ci else "false")
    with pytest.raises(pytest.fail.Exception if ci else pytest.skip.Exception) as info:
        require_reference(CHART_REF)
    message = str(info.value)
    assert "`make reference`" in message and str(tmp_path / "empty") in message
    assert "gpu-operator-v25.10.1/chart/" in message and "is missing" in message


def test_a_reference_file_that_differs_from_its_sum_is_not_used(monkeypatch, tmp_path: Path):
    root = tmp_path / "ref"
    src = require_reference(CHART_REF)
    for rel, _ in reference.sums().items():
        if rel.startswith(CHART_REF + "/"):
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes((src.parent.parent / rel).read_bytes())
    monkeypatch.setenv(reference.ENV, str(root))
    assert reference.unavailable(CHART_REF) is None
    values = root / CHART_REF / "values.yaml"
    values.write_text(values.read_text().replace("enabled: true", "enabled: false", 1))
    reference._checked.cache_clear()  # checked once per process: forget the first answer
    why = reference.unavailable(CHART_REF)
    assert why is not None and f"{CHART_REF}/values.yaml has sha256 " in why and "not the pinned" in why


def test_the_reference_data_is_there_with_its_pinned_sums():
    """Under CI (which runs `make reference` first) every file the tests and the harness read is
    there and right; elsewhere this skips with the command that gets it."""
    for rel in reference.TEST_DATA:
        require_reference(rel)


def _pytest_in_subprocess(test: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-rs", test],
        cwd=PROJECT_DIR, env=_env(**env), capture_output=True, text=True, timeout=300,
    )


@pytest.mark.parametrize("ci", ["false", "true"])
def test_a_clone_without_reference_data_skips_the_air_gapped_sample_or_fails_under_ci(tmp_path: Path, ci):
    """The air-gapped sample plans with its local chart copy: with no reference data (a fresh
    clone) its test skips naming `make reference`, and under CI fails saying the same."""
    proc = _pytest_in_subprocess(
        "tests/components/test_thin_components.py::test_every_child_is_named_from_its_component[airgap]",
        **{reference.ENV: str(tmp_path / "none"), "CI": ci},
    )
    out = proc.stdout + proc.stderr
    assert "`make reference`" in out, out[-3000:]
    if ci == "true":
        assert proc.returncode == 1 and "1 failed" in out and "CI=true and reference data not usable" in out, out[-3000:]
    else:
        assert proc.returncode == 0 and "1 skipped" in out, out[-3000:]


# --------------------------------------------------------------------------- make reference
def test_make_reference_copies_from_a_shared_copy_checking_every_sum(tmp_path: Path):
    shared = require_reference("").resolve()
    dest = tmp_path / "cache" / "reference"
    proc = _fetch("--dest", str(dest), "--shared", str(shared), env=_env())
    assert proc.returncode == 0, proc.stderr
    assert reference.problems(dest) == []
    assert sorted(str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()) == sorted(reference.sums())
    again = _fetch("--dest", str(dest), "--shared", str(shared), env=_env())
    assert again.returncode == 0 and "is complete" in again.stderr


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """NVIDIA's chart repository (index.yaml and the chart archive, as `helm repo index` writes
    them) and the upstream repositories' files, served on 127.0.0.1 from the reference copy."""
    source = require_reference("")
    site = tmp_path / "site"
    for rel in reference.sums():
        key = next(k for k in reference.SOURCES if rel == k or (k.endswith("/") and rel.startswith(k)))
        url = reference.SOURCES[key]
        if url.startswith("chart"):
            continue
        dest = site / "raw" / (url + (rel.removeprefix(key) if key.endswith("/") else "")).lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes((source / rel).read_bytes())
    (site / "charts").mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", site
    finally:
        server.shutdown()


def _publish_chart(site: Path, chart: Path, edit: tuple[str, bytes] | None = None) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(chart.rglob("*")):
            if path.is_file():
                data = path.read_bytes()
                rel = str(path.relative_to(chart))
                if edit is not None and rel == edit[0]:
                    data = edit[1]
                info = tarfile.TarInfo(f"gpu-operator/{rel}")
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    archive = buffer.getvalue()
    (site / "charts" / "gpu-operator-v25.10.1.tgz").write_bytes(archive)
    meta = yaml.safe_load((chart / "Chart.yaml").read_text())
    index = {
        "apiVersion": "v1",
        "entries": {"gpu-operator": [{**meta, "urls": ["gpu-operator-v25.10.1.tgz"], "digest": hashlib.sha256(archive).hexdigest()}]},
        "generated": "2025-10-21T00:00:00Z",
    }
    (site / "charts" / "index.yaml").write_text(yaml.safe_dump(index))


def test_make_reference_pulls_the_chart_with_helm_and_the_rest_from_upstream(upstream, tmp_path: Path):
    base, site = upstream
    _publish_chart(site, require_reference(CHART_REF))
    dest = tmp_path / "reference"
    proc = _fetch("--dest", str(dest), "--no-shared", "--chart-repository", f"{base}/charts", "--raw-base", f"{base}/raw",
                  env=_env(HELM_CACHE_HOME=str(tmp_path / "helm"), HELM_CONFIG_HOME=str(tmp_path / "helm")))
    assert proc.returncode == 0, proc.stderr
    assert reference.problems(dest) == []
    assert f"{len(reference.sums())} files at {dest}" in proc.stderr


def test_make_reference_refuses_a_chart_whose_file_differs_from_its_sum_and_installs_nothing(upstream, tmp_path: Path):
    base, site = upstream
    chart = require_reference(CHART_REF)
    values = (chart / "values.yaml").read_bytes().replace(b"enabled: true", b"enabled: false", 1)
    _publish_chart(site, chart, edit=("values.yaml", values))
    dest = tmp_path / "reference"
    proc = _fetch("--dest", str(dest), "--no-shared", "--chart-repository", f"{base}/charts", "--raw-base", f"{base}/raw",
                  env=_env(HELM_CACHE_HOME=str(tmp_path / "helm"), HELM_CONFIG_HOME=str(tmp_path / "helm")))
    assert proc.returncode == 1
    assert f"{CHART_REF}/values.yaml has sha256 {hashlib.sha256(values).hexdigest()}, not the pinned" in proc.stderr
    # the chart's values.yaml is also the reference's own values.yaml: both refused
    assert "gpu-operator-v25.10.1/values.yaml has sha256" in proc.stderr
    assert f"nothing installed at {dest}" in proc.stderr and not dest.exists()


def test_make_reference_without_a_route_upstream_says_so_and_installs_nothing(tmp_path: Path):
    dest = tmp_path / "reference"
    proc = _fetch("--dest", str(dest), "--no-shared", "--chart-repository", "http://127.0.0.1:9/charts",
                  "--raw-base", "http://127.0.0.1:9/raw",
                  env=_env(HELM_CACHE_HOME=str(tmp_path / "helm"), HELM_CONFIG_HOME=str(tmp_path / "helm")))
    assert proc.returncode == 1
    assert f"{CHART_REF}/: could not get it from upstream" in proc.stderr
    assert "prometheus-operator-v0.93.0/crd-servicemonitors.yaml: could not get it from upstream" in proc.stderr
    assert not dest.exists()
