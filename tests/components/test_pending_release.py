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
from gpu_stack.components.operator import refuse_pending_release
from gpu_stack.config import load_settings
from gpu_stack.design.derive import derive
from gpu_stack.design.helm_pending import (
    HELM_DRIVER_ENV,
    LIVE_MARGIN_SECONDS,
    live_limit_seconds,
    pending_release_problem,
    record_store,
)

from ..helpers import dev_config

NOW = 1_780_000_000
"""The check's clock in these tests (unix seconds)."""
TIMEOUT = 900
LONG_AGO = NOW - 86_400


def _record(revision: int, status: str, release: str = "gpu-operator", written: int | None = LONG_AGO,
            label: str = "createdAt") -> dict[str, Any]:
    labels = {"owner": "helm", "name": release, "version": str(revision), "status": status}
    if written is not None:
        labels[label] = str(written)
    return {"metadata": {"name": f"sh.helm.release.v1.{release}.v{revision}", "labels": labels}}


def _problem(records, kind: str = "secret", now: float = NOW) -> str | None:
    return pending_release_problem(records, "gpu-operator", "gpu-operator", timeout_seconds=TIMEOUT, now=now, kind=kind)


# ---------------------------------------------------------------------------- the records -> the line
def test_a_pending_install_says_to_uninstall_the_release_then_up_again():
    line = _problem([_record(1, "pending-install")])
    assert line is not None and "\n" not in line
    assert "gpu-operator/gpu-operator is pending-install (revision 1)" in line
    assert "`helm -n gpu-operator uninstall gpu-operator`" in line
    assert "`kubectl -n gpu-operator delete secret sh.helm.release.v1.gpu-operator.v1`" in line
    assert "pulumi cancel" in line and "`pulumi up` again" in line


def test_a_pending_upgrade_says_to_roll_back_to_the_last_deployed_revision():
    records = [_record(1, "superseded"), _record(3, "pending-upgrade"), _record(2, "deployed")]
    line = _problem(records)
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
    assert _problem(records) is None


# ---------------------------------------------------------------------------- stuck, or still under way
def test_a_record_older_than_a_live_operation_keeps_it_pending_is_called_stuck():
    # an install keeps its record pending for at most the wait (one timeout), an upgrade for the
    # chart's pre-upgrade hook Job and the wait (two): helm 3.18.6 install.go, upgrade.go
    for status, timeouts in (("pending-install", 1), ("pending-upgrade", 2), ("pending-rollback", 1)):
        limit = live_limit_seconds(status, TIMEOUT)
        assert limit == timeouts * TIMEOUT + LIVE_MARGIN_SECONDS
        stuck = _problem([_record(1, "deployed"), _record(2, status, written=NOW - limit - 1)])
        assert stuck is not None and "an earlier `pulumi up` stopped during the Helm" in stuck, stuck
        assert f"longer than a Helm {status.removeprefix('pending-')} of it can run" in stuck
        assert "may still be under way" not in stuck
        live = _problem([_record(1, "deployed"), _record(2, status, written=NOW - limit + 1)])
        assert live is not None and "may still be under way" in live and "wait for it to end" in live, live


def test_a_fresh_pending_record_is_said_to_be_maybe_under_way_with_the_fix_if_none_is():
    line = _problem([_record(1, "pending-install", written=NOW - 42)])
    assert line is not None and "\n" not in line
    assert line.startswith("the Helm release gpu-operator/gpu-operator is pending-install (revision 1), written 42 s ago")
    assert "a Helm operation may still be under way" in line and "wait for it to end and run `pulumi up` again" in line
    # what the e2e interrupted install runs next: the fix is still named, for when nothing runs
    assert "if none is running (an earlier `pulumi up` was killed), run `helm -n gpu-operator uninstall gpu-operator`" in line
    assert "`kubectl -n gpu-operator delete secret sh.helm.release.v1.gpu-operator.v1`" in line


def test_the_later_of_created_and_modified_counts_and_a_record_without_either_is_not_called_stuck():
    record = _record(1, "pending-upgrade", written=LONG_AGO)
    record["metadata"]["labels"]["modifiedAt"] = str(NOW - 10)
    assert "written 10 s ago" in (_problem([record]) or "")
    bare = _problem([_record(1, "pending-install", written=None)])
    assert bare is not None and "at a time Helm did not record" in bare and "may still be under way" in bare
    junk = _record(1, "pending-install", written=None)
    junk["metadata"]["labels"]["createdAt"] = "soon"
    assert "at a time Helm did not record" in (_problem([junk]) or "")


def test_configmap_records_are_deleted_as_configmaps():
    line = _problem([_record(1, "pending-install")], kind="configmap")
    assert line is not None and "`kubectl -n gpu-operator delete configmap sh.helm.release.v1.gpu-operator.v1`" in line


@pytest.mark.parametrize("environ,kind,warns", [
    ({}, "secret", False),
    ({HELM_DRIVER_ENV: "secret"}, "secret", False),
    ({HELM_DRIVER_ENV: "secrets"}, "secret", False),
    ({HELM_DRIVER_ENV: ""}, "secret", False),  # set but empty: the provider passes "", Helm takes Secrets
    ({HELM_DRIVER_ENV: "configmap"}, "configmap", False),
    ({HELM_DRIVER_ENV: "configmaps"}, "configmap", False),
    ({HELM_DRIVER_ENV: "memory"}, None, False),  # records die with the provider process: nothing can be stuck
    ({HELM_DRIVER_ENV: "sql"}, None, True),
    ({HELM_DRIVER_ENV: "etcd"}, None, True),
])
def test_the_storage_driver_is_read_as_pulumi_kubernetes_and_helm_read_it(environ, kind, warns):
    store = record_store(environ)
    assert store.kind == kind and (store.why_not is not None) == warns


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


def test_files_a_kubeconfig_names_are_read_only_when_regular_and_small(api, pki, tmp_path):
    """A FIFO named as the CA, token or client key would hang the preview's checks on open; a
    device would be read without end: each is refused in one line naming the file instead."""
    import os

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    ca_file = {"server": api, "certificate-authority": str(pki / "ca.crt")}
    config = yaml.safe_load(_kubeconfig(api, pki, {"tokenFile": str(fifo)}))
    with pytest.raises(KubeApiError, match="not a regular file; a token file"):
        connect(yaml.safe_dump(config), None)
    config = yaml.safe_load(_kubeconfig(api, pki, {"token": "good-token"}))
    config["clusters"][0]["cluster"] = {**ca_file, "certificate-authority": str(fifo)}
    with pytest.raises(KubeApiError, match="not a regular file; a CA file"):
        connect(yaml.safe_dump(config), None)
    config = yaml.safe_load(_kubeconfig(api, pki, {"client-certificate": str(pki / "client.crt"), "client-key": "/dev/zero"}))
    with pytest.raises(KubeApiError, match="/dev/zero"):
        connect(yaml.safe_dump(config), None)
    # the same CA as a regular file connects
    config = yaml.safe_load(_kubeconfig(api, pki, {"token": "good-token"}))
    config["clusters"][0]["cluster"] = ca_file
    _Api.records = [_record(1, "deployed")]
    assert list_metadata(connect(yaml.safe_dump(config), None), SECRETS, "owner=helm") == _Api.records


# ---------------------------------------------------------------------------- the check where the driver keeps them
def _operator_plan():
    return derive(load_settings(dev_config())).operator


@pytest.mark.parametrize("driver,path", [(None, SECRETS), ("configmap", "/api/v1/namespaces/gpu-operator/configmaps")])
def test_the_check_lists_the_records_where_the_drivers_keeps_them(api, pki, driver, path):
    import pulumi

    _Api.records, _Api.seen = [_record(1, "pending-install")], []
    environ = {} if driver is None else {HELM_DRIVER_ENV: driver}
    with pytest.raises(pulumi.RunError) as info:
        refuse_pending_release(_kubeconfig(api, pki, {"token": "good-token"}), None, _operator_plan(), environ=environ, now=NOW)
    assert [s["path"].split("?", 1)[0] for s in _Api.seen] == [path]
    kind = "secret" if driver is None else "configmap"
    assert f"delete {kind} sh.helm.release.v1.gpu-operator.v1" in str(info.value)
    assert f"its {_operator_plan().release['timeout']} s timeout" in str(info.value)


def test_with_the_memory_driver_nothing_is_read_and_with_sql_the_check_says_it_is_off(api, pki, monkeypatch):
    # pulumi.log.warn writes to stderr only while no Pulumi runtime is set up in this process (an
    # earlier test's mocks send it to their monitor instead): the warnings are read where they are made.
    import pulumi

    warned: list[str] = []
    monkeypatch.setattr(pulumi.log, "warn", lambda message, *args, **kwargs: warned.append(message))
    _Api.records, _Api.seen = [_record(1, "pending-install")], []
    kubeconfig = _kubeconfig(api, pki, {"token": "good-token"})
    refuse_pending_release(kubeconfig, None, _operator_plan(), environ={HELM_DRIVER_ENV: "memory"}, now=NOW)
    refuse_pending_release(kubeconfig, None, _operator_plan(), environ={HELM_DRIVER_ENV: "sql"}, now=NOW)
    assert _Api.seen == []
    assert any("PULUMI_K8S_HELM_DRIVER=sql keeps them in a database" in w for w in warned), warned
