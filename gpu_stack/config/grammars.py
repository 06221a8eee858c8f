"""Grammars of the values a stack config names things with, parsed rather than pattern-matched.

- image references, by the grammar of the OCI distribution `reference` package (name, tag,
  digest), digests of the length their algorithm has;
- Helm release names, by Helm's own rule (a DNS-1123 subdomain of at most 53 characters);
- SSH user names as the OpenSSH client takes them (`valid_ruser`), and as sshd reads them;
- URLs that carry no credentials (parsed by urllib);
- identity strings (the cluster identifier): visible ASCII, never blank, never a look-alike;
- values the operator chart writes unquoted into YAML, which must read back as the same text.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse

# --------------------------------------------------------------------------- image references
# From the distribution/reference grammar:
#   reference        := name [ ":" tag ] [ "@" digest ]
#   name             := [domain '/'] remote-name
#   domain           := host [':' port-number]
#   host             := domain-name | IPv4address | '[' IPv6address ']'
#   domain-name      := domain-component ['.' domain-component]*
#   domain-component := /([a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])/
#   remote-name      := path-component ['/' path-component]*
#   path-component   := alpha-numeric [separator alpha-numeric]*
#   alpha-numeric    := /[a-z0-9]+/
#   separator        := /[_.]|__|[-]+/
#   tag              := /[\w][\w.-]{0,127}/
#   digest           := algorithm ":" encoded
#   algorithm        := component [ /[+._-]/ component ]*, component := /[A-Za-z][A-Za-z0-9]*/
# The name (domain and path, without tag and digest) is at most 255 characters, as distribution's
# reference.Parse counts it. A first component is a domain only when
# it holds '.' or ':', is `localhost`, or has an uppercase letter (else it is a Docker Hub path).
_DOMAIN_COMPONENT = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?")
PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_ALGORITHM = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[+._-][A-Za-z][A-Za-z0-9]*)*")
DIGEST_LENGTHS = {"sha256": 64, "sha384": 96, "sha512": 128}
"""The digest algorithms a registry and containerd verify, and the hex length of each."""
NAME_LIMIT = 255


def check_registry(domain: str) -> None:
    host, port = domain, None
    if domain.startswith("["):
        end = domain.find("]")
        if end < 0:
            raise ValueError(f"its registry {domain!r} opens '[' without closing it")
        host, rest = domain[1:end], domain[end + 1 :]
        if "%" in host:
            raise ValueError(f"its registry [{host}] has a zone ('%'), which an image reference cannot carry")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"its registry [{host}] is not an IPv6 address") from None
        if rest and not rest.startswith(":"):
            raise ValueError(f"its registry {domain!r} has a bad port (':' and digits)")
        if rest:
            _check_port(rest[1:])
        return
    if ":" in domain:
        host, port = domain.rsplit(":", 1)
        _check_port(port)
    if not all(_DOMAIN_COMPONENT.fullmatch(c) for c in host.split(".")):
        raise ValueError(f"its registry {host!r} is not a host name (letters, digits and '-', dot-separated)")
    if any(len(c) > DNS_LABEL_LIMIT for c in host.split(".")) or len(host) > 253:
        raise ValueError(
            f"its registry {host[:60]!r} is not a DNS name: each dot-separated part at most {DNS_LABEL_LIMIT} characters, "
            "the whole at most 253"
        )


DNS_LABEL_LIMIT = 63


def _check_port(port: str) -> None:
    """A TCP port a registry can listen on: 1 to 65535 (what a runtime dials; 0 and 99999 are no port)."""
    if not (port.isascii() and port.isdigit()):
        raise ValueError(f"its registry port {port[:20]!r} is not a number")
    if not 1 <= int(port[:6]) <= 65535 or len(port) > 5:
        raise ValueError(f"its registry port {port[:20]} is not a TCP port (1 to 65535)")


def is_registry_host(first: str) -> bool:
    """Whether the first part of an image name is a registry host, as a container runtime decides
    (distribution's splitDockerDomain): it holds '.' or ':', is `localhost`, or has an uppercase
    letter. Anything else is the first path part of a Docker Hub image (`team/x` is docker.io/team/x)."""
    return "." in first or ":" in first or first == "localhost" or first != first.lower()


def parse_image(value: str) -> tuple[str | None, str, str | None, str | None]:
    """(domain or None, path, tag or None, digest or None) of an image reference, else ValueError
    naming the part that is wrong."""
    rest, digest = value, None
    if "@" in rest:
        rest, digest = rest.split("@", 1)
        algorithm, sep, encoded = digest.partition(":")
        if not sep or not _ALGORITHM.fullmatch(algorithm):
            raise ValueError(f"its digest {digest!r} is not <algorithm>:<hex> such as sha256:<64 hex digits>")
        if algorithm not in DIGEST_LENGTHS:
            raise ValueError(f"its digest algorithm {algorithm!r} is not one of {', '.join(DIGEST_LENGTHS)}")
        want = DIGEST_LENGTHS[algorithm]
        if not re.fullmatch(rf"[0-9a-f]{{{want}}}", encoded):
            raise ValueError(f"its {algorithm} digest must be {want} lowercase hex digits (it has {len(encoded)} characters)")
    tag = None
    slash = rest.rfind("/")
    colon = rest.rfind(":")
    if colon > slash:
        rest, tag = rest[:colon], rest[colon + 1 :]
        if not _TAG.fullmatch(tag):
            raise ValueError(
                f"its tag {tag[:40]!r} is not a tag: at most 128 letters, digits, '_', '.' and '-', not starting with '.' or '-'"
            )
    if not rest:
        raise ValueError("has no repository name")
    parts = rest.split("/")
    domain = None
    first = parts[0]
    looks_like_domain = len(parts) > 1 and is_registry_host(first)
    # The grammar takes the first component as a domain when it parses as one, and else as a path
    # component (`a_b.c/d` is a two-component path); Docker's rule above says which it means.
    as_path = len(parts) > 1 and PATH_COMPONENT.fullmatch(first) is not None
    if looks_like_domain and not as_path:
        check_registry(first)
    if len(parts) > 1 and (looks_like_domain or not as_path):
        try:
            check_registry(first)
            domain, parts = first, parts[1:]
        except ValueError:
            if not as_path:
                raise
    for part in parts:
        if not PATH_COMPONENT.fullmatch(part):
            raise ValueError(
                f"its repository part {part[:40]!r} is not a path component: lowercase letters and digits, "
                "separated by '.', '_', '__' or dashes"
            )
    path = "/".join(parts)
    name = f"{domain}/{path}" if domain else path
    if len(name) > NAME_LIMIT:
        raise ValueError(f"its name (registry and repository, without tag and digest) is longer than {NAME_LIMIT} characters")
    return domain, path, tag, digest


def image(value: str) -> str:
    try:
        parse_image(value)
    except ValueError as exc:
        raise ValueError(
            f"must be a container image reference such as registry.example.com/team/image:tag or "
            f"image@sha256:<64 hex digits>; {exc}"
        ) from None
    return value


# --------------------------------------------------------------------------- Helm release names
HELM_RELEASE_NAME_LIMIT = 53
"""Helm's limit (chartutil.ValidateReleaseName): names derived from it get suffixes within 63."""
_HELM_RELEASE_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*")


def helm_release_name(value: str) -> str:
    if len(value) > HELM_RELEASE_NAME_LIMIT or not _HELM_RELEASE_NAME.fullmatch(value):
        raise ValueError(
            f"must be a Helm release name: at most {HELM_RELEASE_NAME_LIMIT} lowercase letters, digits, '-' and '.', "
            "beginning and ending with a letter or digit"
        )
    return value


# --------------------------------------------------------------------------- SSH user names
SSH_USER_LIMIT = 255
_OPENSSH_REFUSED = set("'`\";&<>|(){}")


def ssh_user(value: str) -> str:
    """A user name the OpenSSH client passes on (its `valid_ruser`: no leading '-', no control
    character, none of '`";&<>|(){}, no '-' after a space, no trailing backslash) and sshd reads
    whole (it takes what follows ':' as a BSD auth style); domain users (`CORP\\ann`, `ann@corp`),
    dots, digits and uppercase are fine."""
    what = f"must be an SSH user name as OpenSSH takes it (1 to {SSH_USER_LIMIT} characters"
    if not value or len(value) > SSH_USER_LIMIT:
        raise ValueError(what + ")")
    if value[0] == "-":
        raise ValueError(what + "; not beginning with '-', which would read as an option)")
    bad = sorted(set(value) & (_OPENSSH_REFUSED | {":"}))
    if bad:
        raise ValueError(
            what + f"; without {' '.join(bad)}: OpenSSH refuses '`\";&<>|(){{}} in a user name, and sshd reads "
            "what follows ':' as an authentication style)"
        )
    if value != value.strip() or re.search(r"\s-", value):
        raise ValueError(what + "; no space at either end and no ' -', which OpenSSH refuses)")
    if value.endswith("\\"):
        raise ValueError(what + "; not ending with a backslash, which OpenSSH refuses)")
    return value


# --------------------------------------------------------------------------- URLs
_CREDENTIAL_QUERY = re.compile(
    r"(?:^|[_-])(?:token|access[_-]?token|password|passwd|pwd|secret|api[_-]?key|apikey|auth|sig|signature|"
    r"x-amz-signature|x-amz-credential|credential)$",
    re.IGNORECASE,
)


_URL_USERINFO = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^/?#@\s]*@")
"""`scheme://anything@`: a user (or user:password) before the host, found even where urllib cannot
parse the rest."""


def url_credentials(value: str) -> str | None:
    """What in a URL carries credentials (`user:password@` before the host, a query parameter that
    carries a token, a password or a signature), or None: the one check every URL field uses."""
    if _URL_USERINFO.search(value):
        return "user:password@"
    try:
        parts = urllib.parse.urlsplit(value)
    except ValueError:
        return None
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return "user:password@"
    for name, _ in urllib.parse.parse_qsl(parts.query, keep_blank_values=True):
        if _CREDENTIAL_QUERY.search(name):
            return f"a query string (?{name[:40]}=...)"
    # A fragment never reaches the server, but a URL is copied whole into logs, plans and state:
    # `#token=...` (as some download pages hand them out) is a credential as much as `?token=...`.
    for name, _ in urllib.parse.parse_qsl(parts.fragment, keep_blank_values=True):
        if _CREDENTIAL_QUERY.search(name):
            return f"a fragment (#{name[:40]}=...)"
    return None


URL_LIMIT = 2048
"""The longest URL a setting takes (a repository, a mirror, a Prometheus): far above any real one,
far below what a server or a log line copes with."""


def url_host_problem(netloc: str) -> str | None:
    """What is wrong with a URL's `host[:port]` (no user part), or None: a port of 1 to 65535 after
    a ':', a host that is an IPv4 address, a bracketed IPv6 address (no zone) or a DNS name
    (RFC 1123 labels of at most 63 characters, 253 in all)."""
    host, port = netloc, None
    if netloc.startswith("["):
        end = netloc.find("]")
        host, rest = netloc[1:end], netloc[end + 1 :]
        if end < 0 or (rest and not rest.startswith(":")):
            return f"its host {netloc[:60]!r} is not a bracketed IPv6 address ([fd00::1] or [fd00::1]:9090)"
        if "%" in host:
            return f"its host [{host[:60]}] has an IPv6 zone ('%'), which a URL cannot carry this way"
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return f"its host [{host[:60]}] is not an IPv6 address"
        port = rest[1:] if rest else None
    elif ":" in netloc:
        host, port = netloc.rsplit(":", 1)
    if port is not None and (not (port.isascii() and port.isdigit()) or len(port) > 5 or not 1 <= int(port) <= 65535):
        return f"its port {port[:20]!r} is not a TCP port (1 to 65535)"
    if netloc.startswith("["):
        return None
    if re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"its host {host[:60]!r} is not an IPv4 address (four numbers of 0 to 255, no leading zeros)"
        return None
    labels = host[:-1].split(".") if host.endswith(".") else host.split(".")
    if not host or len(host) > 253 or not all(_DOMAIN_COMPONENT.fullmatch(c) and len(c) <= DNS_LABEL_LIMIT for c in labels):
        return (
            f"its host {host[:60]!r} is not a host name: letters, digits and '-' in dot-separated parts of at most "
            f"{DNS_LABEL_LIMIT} characters, not beginning or ending with '-', at most 253 in all"
        )
    return None


def url_without_credentials(
    value: str, schemes: tuple[str, ...], what: str = "URL", remedy: str | None = None, *, query: bool = False,
) -> str:
    """An absolute URL of one of `schemes` with a host in a valid form (url_host_problem), at most
    URL_LIMIT characters, no user or password in it and no query parameter that carries a token, a
    password or a signature; no fragment, and no query at all unless `query` (a URL the program
    appends a path to, such as a Prometheus's `/api/v1/query`, cannot keep one). `remedy`: where the
    credentials go instead (default: secret settings)."""
    kind = f"must be an {' or '.join(s + '://' for s in schemes)} {what}"
    example = f"{schemes[0]}://server.example.internal:8443/path"
    if len(value) > URL_LIMIT:
        raise ValueError(f"{kind} of at most {URL_LIMIT} characters (it has {len(value)})")
    carried = url_credentials(value)
    if carried is not None:
        raise ValueError(
            f"{kind} without credentials; it carries credentials ({carried}); "
            + (remedy or "give them as secret settings (pulumi config set --secret) instead")
        )
    try:
        parts = urllib.parse.urlsplit(value)
    except ValueError:
        raise ValueError(f"{kind} such as {example}") from None
    if parts.scheme not in schemes or not parts.hostname:
        raise ValueError(f"{kind} with a host, such as {example}")
    if "#" in value:
        raise ValueError(f"{kind} without a fragment ('#...'): the client never sends it, so it names nothing")
    if not query and "?" in value:
        raise ValueError(f"{kind} without a query ('?...'): the program appends its own path and query to it")
    if re.search(r"[\s'\"`$;\\<>]", value):
        raise ValueError(f"{kind} without spaces, quotes, '$', ';', '\\', '<' or '>'")
    problem = url_host_problem(parts.netloc)
    if problem is not None:
        raise ValueError(f"{kind} such as {example}; {problem}")
    return value


# --------------------------------------------------------------------------- identity strings
IDENTITY_LIMIT = 253
_IDENTITY = re.compile(r"[!-~](?:[ -~]*[!-~])?")


def identity(value: str) -> str:
    """A name that decides what Pulumi keeps or replaces: one that only looks like another (a
    trailing space, a Cyrillic 'а' for 'a', a fullwidth digit) would silently be another."""  # noqa: RUF002 - the look-alike is the point
    if not value.strip():
        raise ValueError("must not be blank")
    if value != value.strip():
        raise ValueError("must not begin or end with a space")
    if not value.isascii():
        first = next(ch for ch in value if not ch.isascii())
        raise ValueError(
            f"must be plain ASCII (it holds U+{ord(first):04X}, which may look like an ASCII character but is not one)"
        )
    if len(value) > IDENTITY_LIMIT or not _IDENTITY.fullmatch(value):
        raise ValueError(f"must be 1 to {IDENTITY_LIMIT} visible ASCII characters")
    return value


# --------------------------------------------------------------------------- unquoted YAML
# A plain scalar that Helm's YAML library (sigs.k8s.io/yaml on go-yaml v2, YAML 1.1) reads as
# something other than the text: booleans (y, yes, on...), null, ints (0x, 0o, 0b, '_'), floats.
_YAML11_WORDS = frozenset(
    w for base in ("y", "yes", "true", "on", "n", "no", "false", "off", "null")
    for w in (base, base.capitalize(), base.upper())
) | {"~", ""}
_YAML11_NUMBER = re.compile(
    r"[-+]?(?:0b[01_]+|0o?[0-7_]+|0x[0-9a-fA-F_]+|[0-9][0-9_]*|(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?)"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
)


def reads_as_text_unquoted(value: str) -> bool:
    """True when `value`, written unquoted into YAML, reads back as that same string."""
    text = value.strip()
    return text not in _YAML11_WORDS and not _YAML11_NUMBER.fullmatch(text)
