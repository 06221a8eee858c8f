"""Toolkit packages from the site's own mirror, or already in the node image: the real node script
on the fake node roots, with a package mirror the test serves on 127.0.0.1 (the real curl fetches
the signing key, the fake apt-get/dnf read the index of every repository the host's files name).
No step names or reaches any other host; the preflight says which source each node uses."""

from __future__ import annotations

import http.server
import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpu_stack.config import load_settings
from gpu_stack.design import node_prep
from gpu_stack.design.derive import derive
from gpu_stack.design.node_prep import NVIDIA_TOOLKIT_REPO, preflight_report

from ..helpers import assert_refused, dev_config
from ..node_fakes import FakeNode

REAL_CURL = shutil.which("curl", path="/usr/local/bin:/usr/bin:/bin")
needs_curl = pytest.mark.skipif(REAL_CURL is None, reason="needs curl on the test machine (the script downloads the key with it)")
KEY = "-----BEGIN PGP PUBLIC KEY BLOCK-----\nmirror signing key (test)\n-----END PGP PUBLIC KEY BLOCK-----\n"
FILES = {
    "/nvidia/stable/deb/amd64/Packages": "Package: nvidia-container-toolkit\nVersion: 1.18.1-1\n",
    "/nvidia/stable/rpm/x86_64/repodata/repomd.xml": "<repomd/>\n",
    "/keys/mirror.asc": KEY,
}


class _Mirror(http.server.BaseHTTPRequestHandler):
    seen: list[str]

    def do_GET(self) -> None:  # the stdlib's name
        self.seen.append(self.path)
        body = FILES.get(self.path)
        self.send_response(200 if body is not None else 404)
        self.end_headers()
        if body is not None:
            self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def mirror() -> Iterator[tuple[str, list[str]]]:
    """(base URL, paths requested) of a package mirror on 127.0.0.1."""
    seen: list[str] = []
    handler = type("Mirror", (_Mirror,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def _settings(packages: dict[str, Any], placement: str = "host"):
    cfg = dev_config()
    cfg["toolkit"] = {"placement": placement, "packages": packages}
    cfg["nodes"] = cfg["nodes"][:1]
    return load_settings(cfg)


def _report(stdout: str) -> dict[str, Any]:
    """The preflight line's JSON, which every run here prints."""
    report = preflight_report(stdout)
    assert report is not None, stdout
    return report


def _script(packages: dict[str, Any]) -> str:
    (command,) = list(derive(_settings(packages)).commands)
    return node_prep.render_script(command.values)


def _node(tmp_path: Path, os_id: str = "debian") -> FakeNode:
    tool = "apt-get" if os_id in ("debian", "ubuntu") else "dnf"
    node = FakeNode(tmp_path / "n", os_id=os_id, gpus=("NVIDIA L4, 580.105.08, [N/A]",) * 2,
                    stubs=("nvidia-smi", "nvidia-ctk", "systemctl", tool, "apt-mark", "gpg", "containerd"))
    if REAL_CURL:
        (node.sysbin / "curl").symlink_to(REAL_CURL)
        node.set_state("fetch-repos", REAL_CURL)
    node.set_gpus(*(["NVIDIA L4, 580.105.08, [N/A]"] * 2))
    return node


def _mirror_packages(base: str, key: str | None = None) -> dict[str, str]:
    return {
        "source": "mirror",
        "aptUrl": f"{base}/nvidia/stable/deb/$(ARCH)",
        "rpmUrl": f"{base}/nvidia/stable/rpm/$basearch",
        "gpgKey": key or f"{base}/keys/mirror.asc",
    }


def _no_public_host(node: FakeNode, *texts: str) -> None:
    files = "".join(v.decode(errors="replace") for v in node.snapshot().values())
    for text in (files, "\n".join(node.calls()), *texts):
        assert "nvidia.github.io" not in text and "https://" not in text


# --------------------------------------------------------------------------- from the mirror
@needs_curl
def test_apt_node_installs_from_the_mirror_and_reaches_nothing_else(tmp_path: Path, mirror):
    base, seen = mirror
    script = _script(_mirror_packages(base))
    assert NVIDIA_TOOLKIT_REPO not in script
    node = _node(tmp_path)
    result = node.run(script)
    assert result.rc == 0, result.stderr
    assert node.read("etc/apt/sources.list.d/nvidia-container-toolkit.list") == (
        f"deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] {base}/nvidia/stable/deb/$(ARCH) /\n"
    )
    assert "/keys/mirror.asc" in seen and "/nvidia/stable/deb/amd64/Packages" in seen
    assert any("nvidia-container-toolkit=1.18.1-1" in c for c in node.calls("apt-get"))
    assert _report(result.stdout)["toolkitSource"] == f"mirror {base}/nvidia/stable/deb/$(ARCH)"
    _no_public_host(node, result.stdout, result.stderr)
    # A second run changes nothing and downloads nothing.
    seen.clear()
    snap = node.snapshot()
    again = node.run(script)
    assert again.rc == 0 and node.snapshot() == snap and seen == []
    assert _report(again.stdout)["toolkitSource"] == "installed 1.18.1 (nothing to install)"


@needs_curl
def test_rpm_node_installs_from_the_mirror(tmp_path: Path, mirror):
    base, seen = mirror
    node = _node(tmp_path, "rocky")
    result = node.run(_script(_mirror_packages(base)))
    assert result.rc == 0, result.stderr
    repo = node.read("etc/yum.repos.d/nvidia-container-toolkit.repo")
    assert repo is not None
    assert f"baseurl={base}/nvidia/stable/rpm/$basearch\n" in repo and f"gpgkey={base}/keys/mirror.asc\n" in repo
    assert "/nvidia/stable/rpm/x86_64/repodata/repomd.xml" in seen
    _no_public_host(node, result.stdout, result.stderr)


@needs_curl
def test_a_key_file_on_the_node_downloads_nothing_for_the_key(tmp_path: Path, mirror):
    base, seen = mirror
    node = _node(tmp_path)
    node.write("etc/pki/mirror/toolkit.asc", KEY)
    result = node.run(_script(_mirror_packages(base, key="/etc/pki/mirror/toolkit.asc")))
    assert result.rc == 0, result.stderr
    assert "/keys/mirror.asc" not in seen and "/nvidia/stable/deb/amd64/Packages" in seen
    assert node.read("usr/share/keyrings/nvidia-container-toolkit-keyring.gpg.source") == "/etc/pki/mirror/toolkit.asc\n"
    assert node.calls("curl") == []  # the real curl is not a stub: the fetch log is the server's


@needs_curl
def test_switching_to_the_mirror_replaces_nvidias_key_and_list(tmp_path: Path, mirror):
    base, seen = mirror
    node = _node(tmp_path)
    node.write("usr/share/keyrings/nvidia-container-toolkit-keyring.gpg", "nvidia's keyring\n")
    node.write("etc/apt/sources.list.d/nvidia-container-toolkit.list", f"deb [signed-by=x] {NVIDIA_TOOLKIT_REPO}/stable/deb/$(ARCH) /\n")
    node.set_toolkit("1.17.8")
    result = node.run(_script(_mirror_packages(base)))
    assert result.rc == 0, result.stderr
    assert "/keys/mirror.asc" in seen
    sources = node.read("etc/apt/sources.list.d/nvidia-container-toolkit.list")
    assert sources is not None and NVIDIA_TOOLKIT_REPO not in sources


def test_a_mirror_without_a_repository_for_the_nodes_package_manager_fails_in_preflight(tmp_path: Path, mirror):
    base, _ = mirror
    node = _node(tmp_path)
    snap = node.snapshot()
    result = node.run(_script({**_mirror_packages(base), "aptUrl": None}))
    assert result.rc != 0
    assert "names no apt repository (aptUrl)" in result.stderr and "preflight failed" in result.stderr
    assert node.snapshot() == snap and node.calls("apt-get") == []


def test_an_unreachable_mirror_fails_naming_the_step(tmp_path: Path):
    if REAL_CURL is None:
        pytest.skip("needs curl on the test machine")
    node = _node(tmp_path)
    result = node.run(_script(_mirror_packages("http://127.0.0.1:9")))
    assert result.rc != 0 and "downloading the toolkit repository's signing key (http://127.0.0.1:9/keys/mirror.asc)" in result.stderr


# --------------------------------------------------------------------------- already in the image
def test_preinstalled_at_the_pin_installs_nothing_and_reaches_no_host(tmp_path: Path):
    node = _node(tmp_path)
    node.set_toolkit("1.18.1")
    script = _script({"source": "preinstalled"})
    assert "https://" not in script and "http://" not in script
    result = node.run(script)
    assert result.rc == 0, result.stderr
    assert node.calls("apt-get") == [] and node.calls("gpg") == []
    assert _report(result.stdout)["toolkitSource"] == "installed 1.18.1 (nothing to install)"


def test_preinstalled_at_another_version_fails_in_preflight_changing_nothing(tmp_path: Path):
    node = _node(tmp_path)
    node.set_toolkit("1.17.8")
    snap = node.snapshot()
    result = node.run(_script({"source": "preinstalled"}))
    assert result.rc != 0
    assert "toolkit.packages.source is 'preinstalled', but this host has NVIDIA Container Toolkit 1.17.8, not 1.18.1" in result.stderr
    report = _report(result.stdout)
    assert report["ok"] is False and report["toolkitSource"] == "preinstalled, but version 1.17.8"
    assert node.snapshot() == snap and node.calls("apt-get") == [] and node.calls("systemctl") == []


def test_the_default_source_is_nvidias_repository_named_by_the_stack():
    values = derive(_settings({})).commands[0].values
    assert values["GPU_STACK_TOOLKIT_SOURCE"] == "nvidia"
    assert values["GPU_STACK_TOOLKIT_APT_URL"] == f"{NVIDIA_TOOLKIT_REPO}/stable/deb/$(ARCH)"
    assert NVIDIA_TOOLKIT_REPO not in node_prep.script_text()  # the script names no repository itself


# --------------------------------------------------------------------------- refused settings
@pytest.mark.parametrize(
    "packages, message",
    [
        ({"source": "mirror", "gpgKey": "/etc/k.asc"}, "needs the mirror's apt repository (aptUrl), rpm repository (rpmUrl) or both"),
        ({"source": "mirror", "aptUrl": "http://m.example.internal/deb"}, "needs the repository's signing key"),
        ({"aptUrl": "http://m.example.internal/deb"}, "applies to source 'mirror' only"),
        ({"source": "mirror", "aptUrl": "http://u:p@m.example.internal/deb", "gpgKey": "/k"}, "carries credentials"),
        ({"source": "mirror", "aptUrl": "http://m.example.internal/deb;rm -rf /", "gpgKey": "/k"}, "must be an http:// or https:// repository URL"),
        ({"source": "mirror", "aptUrl": "http://m.example.internal/deb", "gpgKey": "keys/k.asc"}, "an absolute path of a file on the node"),
    ],
)
def test_bad_package_settings_are_refused(packages: dict[str, Any], message: str):
    cfg = dev_config()
    cfg["toolkit"] = {"placement": "host", "packages": packages}
    assert_refused(cfg, message)


def test_a_package_source_with_the_operators_toolkit_is_refused():
    cfg = dev_config()
    cfg["toolkit"] = {"placement": "operator", "packages": {"source": "preinstalled"}}
    assert_refused(cfg, "applies to toolkit.placement 'host' only")


def test_the_plan_says_which_source_each_node_uses():
    cfg = dev_config()
    cfg["toolkit"] = {"placement": "host", "packages": {"source": "preinstalled"}}
    from ..helpers import plan_of

    commands = plan_of(cfg).of_type("command:remote:Command")
    assert commands and all("GPU_STACK_TOOLKIT_SOURCE=preinstalled" in json.dumps(c.inputs) for c in commands)
