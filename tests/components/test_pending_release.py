"""An interrupted Helm install or upgrade (E15): the program reads Helm's release records from a real
HTTPS API endpoint on 127.0.0.1 with the kubeconfig's credentials, and fails preview in one line
that says what to run; a cluster it cannot read only warns."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from gpu_stack.components.kube_api import KubeApiError, connect, list_metadata
from gpu_stack.design.helm_pending import pending_release_problem


def _record(revision: int, status: str, release: str = "gpu-operator") -> dict[str, Any]:
    return {"metadata": {"name": f"sh.helm.release.v1.{release}.v{revision}",
                         "labels": {"owner": "helm", "name": release, "version": str(revision), "status": status}}}


# ---------------------------------------------------------------------------- the records -> the line
def test_a_pending_install_says_to_uninstall_the_release_then_up_again():
    line = pending_release_problem([_record(1, "pending-install")], "gpu-operator", "gpu-operator")
    assert line is not None and "\n" not in line
    assert "gpu-operator/gpu-operator is pending-install (revision 1)" in line
    assert "`helm -n gpu-operator uninstall gpu-operator`" in line
    assert "`kubectl -n gpu-operator delete secret sh.helm.release.v1.gpu-operator.v1`" in line
    assert "pulumi cancel" in line and "`pulumi up` again" in line


def test_a_pending_upgrade_says_to_roll_back_to_the_last_deployed_revision():
    records = [_record(1, "superseded"), _record(3, "pending-upgrade"), _record(2, "deployed")]
    line = pending_release_problem(records, "gpu-operator", "gpu-operator")
    assert line is not None
    assert "is pending-upgrade (revision 3)" in line and "Helm upgrade" in line
    assert "`helm -n gpu-operator rollback gpu-operator 2`" in line
    assert "delete secret sh.helm.release.v1.gpu-operator.v3" in line


@pytest.mark.parametrize("records", [
    [],
    [_record(1, "deployed")],
    # Helm judges the newest revision only: an old pending record under a deployed one blocks nothing
    [_record(1, "pending-upgrade"), _record(2, "deployed")],
    # revision 10 sorts after 9 as a number, not as text
    [_record(9, "pending-upgrade"), _record(10, "deployed")],
    [_record(1, "failed")],
])
def test_no_line_when_the_newest_record_is_not_pending(records):
    assert pending_release_problem(records, "gpu-operator", "gpu-operator") is None


# ---------------------------------------------------------------------------- a real HTTPS endpoint
def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made by openssl."""
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=test-ca", cwd=d)
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    for name, subject in (("server", "/CN=127.0.0.1"), ("client", "/CN=deployer")):
        _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "2", *(["-extfile", "san.cnf"] if name == "server" else []), cwd=d)
    return d


class _Api(BaseHTTPRequestHandler):
    records: ClassVar[list[dict[str, Any]]] = []
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_GET(self) -> None:
        peer: Any = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        subject = {key: value for rdn in (peer or {}).get("subject", ()) for key, value in rdn}
        self.seen.append({"path": self.path, "auth": self.headers.get("Authorization"),
                          "accept": self.headers.get("Accept"), "client": subject.get("commonName")})
        if self.headers.get("Authorization") != "Bearer good-token" and subject.get("commonName") != "deployer":
            self.send_response(403)
            self.end_headers()
            return
        body = json.dumps({"kind": "PartialObjectMetadataList", "items": self.records}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def api(pki):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(pki / "server.crt", pki / "server.key")
    tls.load_verify_locations(pki / "ca.crt")
    tls.verify_mode = ssl.CERT_OPTIONAL
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _kubeconfig(server: str, pki: Path, user: dict[str, Any]) -> str:
    ca = base64.b64encode((pki / "ca.crt").read_bytes()).decode()
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": server, "certificate-authority-data": ca}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "me"}}],
        "users": [{"name": "me", "user": user}],
    })


SECRETS = "/api/v1/namespaces/gpu-operator/secrets"


def test_a_token_kubeconfig_lists_the_release_records_metadata_only(api, pki, monkeypatch):
    _Api.records, _Api.seen = [_record(1, "pending-install")], []
    # a proxy in the environment (a CI runner's) is not used for a loopback server, as in Go's client
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    items = list_metadata(connect(_kubeconfig(api, pki, {"token": "good-token"}), None), SECRETS, "owner=helm,name=gpu-operator")
    assert items == _Api.records
    assert _Api.seen[-1]["path"] == f"{SECRETS}?labelSelector=owner%3Dhelm%2Cname%3Dgpu-operator"
    assert _Api.seen[-1]["accept"].startswith("application/json;as=PartialObjectMetadataList")


def test_client_certificate_data_and_files_and_an_exec_plugin_authenticate(api, pki, tmp_path):
    _Api.records = [_record(1, "deployed")]
    cert_data = {"client-certificate-data": base64.b64encode((pki / "client.crt").read_bytes()).decode(),
                 "client-key-data": base64.b64encode((pki / "client.key").read_bytes()).decode()}
    files = {"client-certificate": str(pki / "client.crt"), "client-key": str(pki / "client.key")}
    plugin = tmp_path / "get-token"
    plugin.write_text('#!/bin/sh\necho \'{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",'
                      '"status":{"token":"good-token"}}\'\n')
    plugin.chmod(0o755)
    exec_user = {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin), "args": []}}
    for user in (cert_data, files, exec_user):
        _Api.seen = []
        assert list_metadata(connect(_kubeconfig(api, pki, user), None), SECRETS, "owner=helm") == _Api.records
        assert _Api.seen and (_Api.seen[-1]["client"] == "deployer" or _Api.seen[-1]["auth"] == "Bearer good-token")


def test_a_refused_request_a_wrong_ca_and_an_unknown_context_raise_a_readable_error(api, pki, tmp_path):
    with pytest.raises(KubeApiError, match="answered 403"):
        list_metadata(connect(_kubeconfig(api, pki, {"token": "wrong"}), None), SECRETS, "owner=helm")
    other = tmp_path / "other-ca"
    other.mkdir()
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", "ca.key", "-out", "ca.crt", "-days", "2",
             "-subj", "/CN=other", cwd=other)
    with pytest.raises(KubeApiError, match="CERTIFICATE_VERIFY_FAILED"):
        list_metadata(connect(_kubeconfig(api, other, {"token": "good-token"}), None), SECRETS, "owner=helm")
    with pytest.raises(KubeApiError, match="no context 'elsewhere'"):
        connect(_kubeconfig(api, pki, {"token": "good-token"}), "elsewhere")
    with pytest.raises(KubeApiError, match="auth-provider"):
        connect(_kubeconfig(api, pki, {"auth-provider": {"name": "gcp"}}), None)


def test_a_kubeconfig_path_and_the_kubeconfig_environment_are_read_like_content(api, pki, tmp_path, monkeypatch):
    _Api.records = [_record(1, "deployed")]
    path = tmp_path / "config"
    path.write_text(_kubeconfig(api, pki, {"token": "good-token"}))
    assert list_metadata(connect(str(path), None), SECRETS, "owner=helm") == _Api.records
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{path}")
    assert list_metadata(connect(None, "lab"), SECRETS, "owner=helm") == _Api.records
