"""One read-only request to the cluster from the program itself, with the kubeconfig the provider uses.

The provider reads the cluster for the program's resources, but offers no way to list objects, and
one check before Helm runs needs that (helm_pending.py: Helm's release records). This reads the
same kubeconfig the provider is given (`kubernetes.kubeconfig`, a path or the content, else
KUBECONFIG or ~/.kube/config; `kubernetes.context`, else the current context) and supports what
kubeconfigs of managed and self-run clusters hold: a CA (file or data) or
`insecure-skip-tls-verify`, `tls-server-name`, a bearer token (or token file), a client
certificate and key (files or data), basic auth, and an `exec` credential plugin. Anything else
(a legacy `auth-provider`) raises KubeApiError, which the caller turns into a warning.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..config.files import FileRefused, read_regular_file

METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
"""Ask for the objects' metadata only (a Helm release record's data is the whole chart, gzipped)."""


class KubeApiError(RuntimeError):
    """The request could not be made or was refused; the message says which and why, `status` the
    API server's HTTP status where it answered one."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


READ_FAILURES = (KubeApiError, OSError, ValueError, KeyError, TypeError, AttributeError, yaml.YAMLError)
"""What `connect` and a GET can raise for a cluster the program cannot read (an unreachable server,
a kubeconfig that does not parse or lacks a key): the checks before a preview warn on these and
leave the connection's problem to the provider."""


KUBECONFIG_LIMIT = 16 * 1024 * 1024
"""A kubeconfig larger than this is refused unread (kubectl's own merged configs stay far below)."""
CREDENTIAL_LIMIT = 1024 * 1024
"""The bound on a file a kubeconfig names: a CA bundle, a client certificate or key, a token."""


def _read(path: Path, what: str, limit: int = CREDENTIAL_LIMIT) -> str:
    """The text of a regular file of at most `limit` bytes: a FIFO, a device or a huge file a
    kubeconfig names is refused in one line, never waited on or read without end."""
    try:
        return read_regular_file(path, limit, what).decode()
    except FileRefused as exc:
        raise KubeApiError(str(exc)) from None


def _load_documents(kubeconfig: str | None) -> list[tuple[dict[str, Any], Path | None]]:
    """The kubeconfig documents in kubectl's order, each with the folder its relative paths use."""
    if kubeconfig is not None:
        candidate = Path(os.path.expanduser(kubeconfig.strip())) if "\n" not in kubeconfig.strip() else None
        if candidate is not None and candidate.is_file():
            return [(yaml.safe_load(_read(candidate, "a kubeconfig", KUBECONFIG_LIMIT)) or {}, candidate.parent)]
        return [(yaml.safe_load(kubeconfig) or {}, None)]
    paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p] or ["~/.kube/config"]
    docs: list[tuple[dict[str, Any], Path | None]] = []
    for raw in paths:
        path = Path(os.path.expanduser(raw))
        if path.is_file():
            docs.append((yaml.safe_load(_read(path, "a kubeconfig", KUBECONFIG_LIMIT)) or {}, path.parent))
    if not docs:
        raise KubeApiError(f"no kubeconfig found ({', '.join(paths)})")
    return docs


def _named(docs: list[tuple[dict[str, Any], Path | None]], kind: str, name: str) -> tuple[dict[str, Any], Path | None]:
    """The first entry called `name` among the documents' `kind` lists (kubectl's merge rule)."""
    for doc, base in docs:
        for entry in doc.get(kind) or []:
            if entry.get("name") == name:
                return entry.get(kind.removesuffix("s")) or {}, base
    raise KubeApiError(f"the kubeconfig has no {kind.removesuffix('s')} {name!r}")


def _file(value: str, base: Path | None) -> Path:
    path = Path(os.path.expanduser(value))
    return path if path.is_absolute() or base is None else base / path


@dataclass
class Connection:
    """Where and how to send requests: the server URL, a TLS context and the request headers."""

    server: str
    tls: ssl.SSLContext | None
    headers: dict[str, str]
    proxies: dict[str, str] | None = None
    """The proxies to use; None: the environment's (HTTPS_PROXY, NO_PROXY), as kubectl does."""


def _exec_credential(spec: dict[str, Any], base: Path | None, server: str) -> dict[str, Any]:
    """Runs an exec credential plugin (client.authentication.k8s.io) and returns its status."""
    command = spec.get("command")
    if not command:
        raise KubeApiError("the kubeconfig's exec plugin names no command")
    if "/" in command and not Path(command).is_absolute() and base is not None:
        command = str(base / command)
    env = dict(os.environ)
    env.update({e["name"]: e["value"] for e in spec.get("env") or []})
    api_version = spec.get("apiVersion", "client.authentication.k8s.io/v1")
    cluster_info = {"server": server} if spec.get("provideClusterInfo") else {}
    env["KUBERNETES_EXEC_INFO"] = json.dumps({
        "apiVersion": api_version, "kind": "ExecCredential",
        "spec": {"interactive": False, **({"cluster": cluster_info} if cluster_info else {})},
    })
    try:
        done = subprocess.run([command, *(spec.get("args") or [])], env=env, capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise KubeApiError(f"the kubeconfig's exec plugin {command!r} did not run: {exc}") from None
    if done.returncode != 0:
        raise KubeApiError(f"the kubeconfig's exec plugin {command!r} failed: {done.stderr.strip()[-300:]}")
    try:
        status = json.loads(done.stdout).get("status") or {}
    except json.JSONDecodeError:
        raise KubeApiError(f"the kubeconfig's exec plugin {command!r} printed no ExecCredential") from None
    if not isinstance(status, dict):
        raise KubeApiError(f"the kubeconfig's exec plugin {command!r} printed no ExecCredential status")
    return status


def connect(kubeconfig: str | None, context: str | None) -> Connection:
    """The connection the kubeconfig describes for `context` (None: its current context)."""
    docs = _load_documents(kubeconfig)
    if context is None:
        context = next((d.get("current-context") for d, _ in docs if d.get("current-context")), None)
        if not context:
            raise KubeApiError("the kubeconfig has no current context and gpu-stack:kubernetes.context is not set")
    ctx, _ = _named(docs, "contexts", context)
    cluster, cluster_base = _named(docs, "clusters", ctx.get("cluster", ""))
    user, user_base = _named(docs, "users", ctx.get("user", "")) if ctx.get("user") else ({}, None)
    server = str(cluster.get("server", "")).rstrip("/")
    if not server:
        raise KubeApiError(f"the kubeconfig's cluster {ctx.get('cluster')!r} has no server")
    headers: dict[str, str] = {}
    tls: ssl.SSLContext | None = None
    if server.startswith("https://"):
        tls = ssl.create_default_context()
        if cluster.get("insecure-skip-tls-verify"):
            tls.check_hostname = False
            tls.verify_mode = ssl.CERT_NONE
        elif cluster.get("certificate-authority-data"):
            tls.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
        elif cluster.get("certificate-authority"):
            tls.load_verify_locations(cadata=_read(_file(cluster["certificate-authority"], cluster_base), "a CA file"))
    if "auth-provider" in user:
        raise KubeApiError("the kubeconfig's user uses an auth-provider, which this check does not support")
    cert_data = key_data = None
    if "exec" in user:
        status = _exec_credential(user["exec"], user_base, server)
        if status.get("token"):
            headers["Authorization"] = f"Bearer {status['token']}"
        cert_data, key_data = status.get("clientCertificateData"), status.get("clientKeyData")
    elif user.get("token"):
        headers["Authorization"] = f"Bearer {user['token']}"
    elif user.get("tokenFile"):
        headers["Authorization"] = f"Bearer {_read(_file(user['tokenFile'], user_base), 'a token file').strip()}"
    elif user.get("username") is not None and user.get("password") is not None:
        basic = base64.b64encode(f"{user['username']}:{user['password']}".encode()).decode()
        headers["Authorization"] = f"Basic {basic}"
    if user.get("client-certificate-data"):
        cert_data = base64.b64decode(user["client-certificate-data"]).decode()
        key_data = base64.b64decode(user.get("client-key-data", "")).decode()
    elif tls is not None and user.get("client-certificate") and user.get("client-key") and not (cert_data and key_data):
        cert_data = _read(_file(user["client-certificate"], user_base), "a client certificate")
        key_data = _read(_file(user["client-key"], user_base), "a client key")
    if tls is not None and cert_data and key_data:
        # The ssl module loads a client key from files only: a private folder, removed at once.
        with tempfile.TemporaryDirectory(prefix="gpu-stack-kube-") as folder:
            cert, key = Path(folder) / "cert.pem", Path(folder) / "key.pem"
            cert.write_text(cert_data)
            key.touch(mode=0o600)
            key.write_text(key_data)
            tls.load_cert_chain(str(cert), str(key))
    if tls is not None and cluster.get("tls-server-name"):
        # Verify the certificate against this name while connecting to the server's address.
        name = cluster["tls-server-name"]
        original = tls.wrap_socket

        def wrap_socket(*args: Any, **kwargs: Any) -> ssl.SSLSocket:
            kwargs["server_hostname"] = name
            return original(*args, **kwargs)

        tls.wrap_socket = wrap_socket  # type: ignore[method-assign]
    host = urllib.parse.urlsplit(server).hostname or ""
    proxies: dict[str, str] | None = None
    if cluster.get("proxy-url"):
        proxies = {"https": cluster["proxy-url"], "http": cluster["proxy-url"]}
    elif host in ("localhost", "::1") or host.startswith("127."):
        proxies = {}  # as Go's client: loopback is never sent through a proxy
    return Connection(server=server, tls=tls, headers=headers, proxies=proxies)


def list_metadata(connection: Connection, path: str, label_selector: str, timeout: float = 15) -> list[dict[str, Any]]:
    """GET `path` (a collection, e.g. /api/v1/namespaces/x/secrets) with the selector: the items'
    metadata. A namespace that does not exist holds nothing (an empty list)."""
    query = urllib.parse.urlencode({"labelSelector": label_selector})
    body = get_json(connection, f"{path}?{query}", timeout, accept=METADATA_ONLY)
    items = body.get("items") if isinstance(body, dict) else None
    return [i for i in items or [] if isinstance(i, dict)]


def get_json(connection: Connection, path: str, timeout: float = 15, accept: str = "application/json") -> Any:
    """GET `path` (with its query): the answer's JSON. An HTTP error is a KubeApiError naming its
    status code (`the API server answered 404 Not Found to GET ...`)."""
    request = urllib.request.Request(f"{connection.server}{path}", headers={**connection.headers, "Accept": accept})
    handlers: list[urllib.request.BaseHandler] = [urllib.request.HTTPSHandler(context=connection.tls)]
    if connection.proxies is not None:
        handlers.append(urllib.request.ProxyHandler(connection.proxies))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(request, timeout=timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        raise KubeApiError(f"the API server answered {exc.code} {exc.reason} to GET {path.split('?', 1)[0]}", exc.code) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise KubeApiError(f"GET {connection.server}{path} failed: {exc}") from None
