"""The files the operator's driver container reads besides its image: `driver.repoConfig` (the
site's package sources) and `driver.certConfig` (CA certificates).

They are the content itself, written in the stack file (read only through its bounded reader,
gpu_stack/config/stack_files.py); the program opens no file for them. Each is held to what the
driver container's package manager reads: a bounded size, a package source parsed as apt (`*.list`,
`*.sources`) or dnf (`*.repo`) reads it with no login anywhere in it, certificates parsed as X.509
by OpenSSL (the `ssl` module). A problem names the file's key and the line, never its content
(errors.FILE_CONTENT_KEYS). Their ConfigMaps are bounded as every generated one is
(gpu_stack/design/generated_limits.py: 1 MiB together).
"""

from __future__ import annotations

import base64
import binascii
import re
import ssl
from typing import Annotated

from pydantic import AfterValidator, Field

from .grammars import url_credentials
from .safe_input import PlainStr, TextStr
from .types import ConfigModel

_CONFIGMAP_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
REPO_FILE_SUFFIXES = (".list", ".sources", ".repo")
"""What the driver container's package manager reads in the folder the operator mounts the files
into: apt `*.list` / `*.sources` in /etc/apt/sources.list.d (Ubuntu), dnf/yum `*.repo` in
/etc/yum.repos.d (RHEL family); any other name is ignored there."""
RHEL_CA_BUNDLE = "tls-ca-bundle.pem"
"""The one file dnf and curl read in /etc/pki/ca-trust/extracted/pem, where the operator mounts
certConfig on RHEL-family nodes (a file of this name replaces the image's bundle there)."""
REPO_FILE_LIMIT = 64 * 1024
"""A package source file's size bound: a sources list of hundreds of lines is a few KiB."""
CERT_FILE_LIMIT = 256 * 1024
"""A certificate file's size bound: a whole CA bundle (tls-ca-bundle.pem, ~150 CAs) is ~220 KiB."""
FILES_LIMIT = 64
"""Files of one setting: the operator mounts each as a volume of its own into every driver pod."""
CREDENTIALS_REFUSED = (
    "the ConfigMap this file becomes is readable by anyone who may read ConfigMaps in the operator "
    "namespace and the plan shows it, so a login cannot stay secret there: let the mirror serve the GPU "
    "nodes without one (an allow-list by address, or a proxy in the air gap that adds the login)"
)


def _file_name(value: str, suffixes: tuple[str, ...], what: str) -> str:
    if not _CONFIGMAP_KEY_RE.fullmatch(value) or value in (".", ".."):
        raise ValueError(f"is not a file name the ConfigMap can hold: letters, digits, '-', '_' and '.' only ({what})")
    if not value.endswith(suffixes) or value in suffixes:
        raise ValueError(f"must end in {', '.join(suffixes)}, after a name: {what}")
    return value


def _repo_file(value: str) -> str:
    return _file_name(value, REPO_FILE_SUFFIXES, "apt reads *.list and *.sources, dnf and yum *.repo; other names are ignored")


def _cert_file(value: str) -> str:
    if value == RHEL_CA_BUNDLE:
        return value
    return _file_name(
        value, (".crt",),
        f"Ubuntu's update-ca-certificates adds *.crt files; on RHEL-family nodes name the whole bundle {RHEL_CA_BUNDLE}",
    )


def _bounded(value: str, limit: int, what: str) -> str:
    if not value.strip():
        raise ValueError("is empty: give the file's content (the stack reads no file: the content goes here)")
    size = len(value.encode())
    if size > limit:
        raise ValueError(f"is {size // 1024} KiB; {what} is at most {limit // 1024} KiB")
    return value


# --------------------------------------------------------------------------- package sources
_URL_TOKEN = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s\"'<>]*")
_DNF_LOGIN_KEYS = frozenset({"username", "password", "proxy_username", "proxy_password"})
_DNF_SOURCE_KEYS = ("baseurl", "mirrorlist", "metalink")
_DEB822_NEEDED = ("types", "uris", "suites")


def _logins(text: str) -> str | None:
    """Where the file carries a login: a URL with `user:password@` or a token in its query, on any
    line (comments included, the file is shown whole), or a dnf `username=`/`password=` option."""
    for number, line in enumerate(text.splitlines(), 1):
        for url in _URL_TOKEN.findall(line):
            carried = url_credentials(url)
            if carried is not None:
                return f"{carried} in a URL on line {number}"
        key = line.split("=", 1)[0].strip().lower() if "=" in line and not line.lstrip().startswith(("#", ";")) else ""
        if key in _DNF_LOGIN_KEYS:
            return f"dnf's {key}= on line {number}"
    return None


def _apt_list_problem(text: str) -> str | None:
    """A one-line-style apt source: `deb|deb-src [options] URI suite [components]` per line."""
    entries = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        if words[0] not in ("deb", "deb-src"):
            return f"line {number} is not a package source: apt's lines begin with deb or deb-src"
        rest = words[1:]
        if rest and rest[0].startswith("["):
            end = next((i for i, w in enumerate(rest) if w.endswith("]")), None)
            if end is None:
                return f"line {number} opens '[' for options without closing it"
            rest = rest[end + 1 :]
        if len(rest) < 2 or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*:\S*", rest[0]):
            return f"line {number} lacks what apt needs after {words[0]}: a URI (http://...) and a suite (jammy)"
        entries += 1
    return None if entries else "holds no deb line"


def _deb822_problem(text: str) -> str | None:
    """apt's deb822 sources: paragraphs of `Field: value` with Types, URIs and Suites each."""
    paragraphs: list[tuple[int, set[str]]] = []
    fields: set[str] = set()
    start = 0
    for number, raw in enumerate([*text.splitlines(), ""], 1):
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if fields:
                paragraphs.append((start, fields))
            fields = set()
            continue
        if raw[0] in " \t":
            if not fields:
                return f"line {number} continues a field that no line before it opened"
            continue
        name, colon, _ = raw.partition(":")
        if not colon or not re.fullmatch(r"[A-Za-z0-9-]+", name):
            return f"line {number} is not a deb822 field ('Name: value')"
        start = start if fields else number
        fields.add(name.lower())
    if not paragraphs:
        return "holds no deb822 paragraph (Types:, URIs:, Suites:)"
    for begins, names in paragraphs:
        missing = [f for f in _DEB822_NEEDED if f not in names]
        if missing and "enabled" not in names:
            return f"the paragraph on line {begins} lacks {', '.join(m.capitalize() for m in missing)}:"
    return None


def _dnf_problem(text: str) -> str | None:
    """A dnf/yum repository file: `[id]` sections of `key=value`, each with a baseurl, mirrorlist or metalink."""
    sections: list[tuple[int, set[str]]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            if not re.fullmatch(r"\[[^\[\]\s]+\]", line):
                return f"line {number} is not a repository section ('[id]')"
            sections.append((number, set()))
            continue
        if raw[0] in " \t" and sections:
            continue  # a continuation line (a second baseurl)
        key, equals, _ = line.partition("=")
        if not equals or not sections:
            return f"line {number} is not 'key=value' inside a '[id]' section"
        sections[-1][1].add(key.strip().lower())
    if not sections:
        return "holds no repository section ('[id]' with a baseurl)"
    for begins, keys in sections:
        if not keys & set(_DNF_SOURCE_KEYS):
            return f"the section on line {begins} has no baseurl, mirrorlist or metalink"
    return None


def check_repo_file(name: str, text: str) -> None:
    """ValueError when `text` is no package source of its kind (by `name`'s suffix), or carries a
    login (a rule, gpu_stack/config/rules/driver.py, since the kind comes from the file's name)."""
    carried = _logins(text)
    if carried is not None:
        raise ValueError(f"carries credentials ({carried}); {CREDENTIALS_REFUSED}")
    kind = "dnf" if name.endswith(".repo") else "deb822" if name.endswith(".sources") else "apt"
    problem = {"apt": _apt_list_problem, "deb822": _deb822_problem, "dnf": _dnf_problem}[kind](text)
    if problem is not None:
        raise ValueError(f"is not {'an apt sources list' if kind == 'apt' else 'an apt deb822 sources file' if kind == 'deb822' else 'a dnf repository file'}: {problem}")


def _repo_text(value: str) -> str:
    return _bounded(value, REPO_FILE_LIMIT, "a package source file")


# --------------------------------------------------------------------------- certificates
_PEM_LINE = re.compile(r"-----(BEGIN|END) ([A-Z0-9 ]+)-----")


def certificates(text: str) -> int:
    """How many PEM certificates `text` holds, each parsed as X.509 by OpenSSL; ValueError saying
    which block (by line) is not one. Text outside the blocks is ignored, as OpenSSL ignores it."""
    count = 0
    opened: tuple[int, list[str]] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        marker = _PEM_LINE.search(raw)
        if marker is None:
            if opened is not None:
                opened[1].append(raw.strip())
            continue
        edge, label = marker.groups()
        if "PRIVATE KEY" in label:
            raise ValueError("holds a private key: give the CA certificate only (the ConfigMap is readable in the namespace)")
        if edge == "BEGIN":
            if opened is not None:
                raise ValueError(f"opens a block on line {number} inside the one opened on line {opened[0]}")
            if label != "CERTIFICATE":
                raise ValueError(f"holds a {label[:30]} block (line {number}); only CERTIFICATE blocks are CA certificates")
            opened = (number, [])
            continue
        if opened is None or label != "CERTIFICATE":
            raise ValueError(f"ends a block on line {number} that no BEGIN CERTIFICATE line opened")
        _parse_certificate("".join(opened[1]), opened[0])
        count += 1
        opened = None
    if opened is not None:
        raise ValueError(f"opens a certificate on line {opened[0]} that no END CERTIFICATE line closes")
    if not count:
        raise ValueError("holds no PEM certificate (a '-----BEGIN CERTIFICATE-----' block)")
    return count


def _parse_certificate(body: str, line: int) -> None:
    try:
        der = base64.b64decode(body, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"holds a certificate (line {line}) whose text is not base64") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cadata=der)
    except (ssl.SSLError, ValueError):
        raise ValueError(f"holds a block (line {line}) that is not an X.509 certificate (OpenSSL cannot read it)") from None
    if context.cert_store_stats().get("x509") != 1:
        raise ValueError(f"holds a block (line {line}) that is not one X.509 certificate")


def _pem(value: str) -> str:
    _bounded(value, CERT_FILE_LIMIT, "a CA certificate file (a whole bundle included)")
    certificates(value)
    return value


RepoFileName = Annotated[PlainStr, AfterValidator(_repo_file)]
CertFileName = Annotated[PlainStr, AfterValidator(_cert_file)]
RepoFileText = Annotated[TextStr, AfterValidator(_repo_text)]
PemText = Annotated[TextStr, AfterValidator(_pem)]


class DriverRepoConfig(ConfigModel):
    """Chart value `driver.repoConfig`: the site's OS package sources for the operator's driver container."""

    files: dict[RepoFileName, RepoFileText] = Field(min_length=1, max_length=FILES_LIMIT)
    """File name -> content of each package source file, as the driver container's package manager
    reads it (e.g. `mirror.list`: `deb [arch=amd64] http://packages.example.internal/ubuntu jammy main
    universe`, and `-updates`, `-security` lines). The stack puts them in a ConfigMap in the operator
    namespace, named from its content, and passes its name to the chart; the operator mounts each
    file into /etc/apt/sources.list.d (Ubuntu) or /etc/yum.repos.d (RHEL family). The repositories
    must hold the kernel headers and modules of every GPU node's kernel (docs/air-gapped.md). Each
    file is at most 64 KiB and parsed as its package manager reads it (deb lines, deb822 paragraphs,
    dnf sections); a login anywhere in it (`https://user:token@...`, a token in a query, dnf's
    `username=`/`password=`) is refused, since the ConfigMap is readable in the namespace."""


class DriverCertConfig(ConfigModel):
    """Chart value `driver.certConfig`: CA certificates the driver container trusts (an https package mirror)."""

    files: dict[CertFileName, PemText] = Field(min_length=1, max_length=FILES_LIMIT)
    """File name -> PEM content: `*.crt` files on Ubuntu nodes (added by update-ca-certificates),
    or `tls-ca-bundle.pem` (the whole bundle) on RHEL-family nodes. Put in a ConfigMap in the
    operator namespace, named from its content, whose name the chart gets. Each file is at most
    256 KiB of CERTIFICATE blocks, each parsed as an X.509 certificate; a private key is refused."""
