"""Reusable input types and checks for values a user types into a stack config.

Every string a user sets passes `PlainStr` (one line, nothing invisible) or `TextStr` (several
lines allowed); every count or port passes `WholeNumber` (no `true` standing in for 1); every flag
passes `Flag` (no `"yes"`, `1` or `"on"` standing in for true). Addresses and SSH host keys are
parsed, not pattern-matched. `escape` is how any user text is shown in a message.
"""

from __future__ import annotations

import base64
import ipaddress
import re
import struct
import unicodedata
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

# Unicode categories never allowed in a config string: controls (Cc: NUL, ESC, newline, DEL...),
# format characters (Cf: zero-width space/joiner, bidi overrides, BOM), line and paragraph
# separators (Zl, Zp), surrogates, private use and unassigned code points.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
_TEXT_ALLOWED = frozenset("\n\t\r")


def invisible_character(value: str, allowed: frozenset[str] = frozenset()) -> tuple[int, str] | None:
    """(position, char) of the first control, invisible or non-ASCII whitespace character, if any."""
    for i, ch in enumerate(value):
        if ch in allowed or (" " <= ch <= "~"):
            continue
        if unicodedata.category(ch) in _REFUSED_CATEGORIES or (ch.isspace() and ch != " ") or unicodedata.category(ch) == "Zs":
            return i, ch
    return None


def _refuse_invisible(value: str, allowed: frozenset[str]) -> str:
    found = invisible_character(value, allowed)
    if found is not None:
        i, ch = found
        name = unicodedata.name(ch, "control character")
        raise ValueError(
            f"contains an invisible or control character (U+{ord(ch):04X} {name} at position {i}); "
            "retype the value without it"
        )
    return value


def _plain(value: str) -> str:
    return _refuse_invisible(value, frozenset())


def _text(value: str) -> str:
    return _refuse_invisible(value, _TEXT_ALLOWED)


PlainStr = Annotated[str, AfterValidator(_plain)]
"""A one-line string with no control, zero-width, bidi or non-ASCII whitespace character."""
TextStr = Annotated[str, AfterValidator(_text)]
"""Like PlainStr, but newlines and tabs are allowed (CSV text, kubeconfig content)."""

_DECIMAL = re.compile(r"-?[0-9]{1,18}")


def _whole_number(value: Any) -> Any:
    """Ints as typed, or the decimal strings `pulumi config set` stores; never a bool or 2.5."""
    if isinstance(value, bool):
        raise ValueError("must be a whole number, not true or false")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        raise ValueError("must be a whole number")
    if isinstance(value, str):
        if _DECIMAL.fullmatch(value):
            return int(value)
        raise ValueError("must be a whole number")
    raise ValueError("must be a whole number")


WholeNumber = Annotated[int, BeforeValidator(_whole_number)]
"""An int, or a string of ASCII decimal digits (how `pulumi config set` stores `22`); never a bool."""

_TRUE = ("true", "True", "TRUE")
_FALSE = ("false", "False", "FALSE")


def _flag(value: Any) -> Any:
    """true/false as YAML 1.2 and `pulumi config set` write them; not yes/on/1."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value in _TRUE:
        return True
    if isinstance(value, str) and value in _FALSE:
        return False
    raise ValueError("must be true or false")


Flag = Annotated[bool, BeforeValidator(_flag)]

# --------------------------------------------------------------------------- addresses
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def is_dns_name(value: str) -> bool:
    """An RFC 1123 host name: dot-separated labels, at most 253 characters, last label not all digits."""
    if not value or len(value) > 253:
        return False
    labels = value.split(".")
    if not all(_HOST_LABEL.fullmatch(label) for label in labels):
        return False
    return not labels[-1].isdigit()


def check_address(value: str) -> str:
    """An IPv4/IPv6 address or a DNS host name, else ValueError."""
    try:
        ipaddress.ip_address(value)
    except ValueError:
        if not is_dns_name(value):
            raise ValueError(
                "must be a host name or an IP address: a DNS name such as gpu-1.example.com, "
                "or an address such as 10.0.0.5 or fd00::5"
            ) from None
    return value


def address_identity(value: str) -> str:
    """A form in which two spellings of one address compare equal."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return value.lower().rstrip(".")


# --------------------------------------------------------------------------- SSH public keys
# Key type -> number of length-prefixed fields after the type in the wire-format blob.
_SSH_KEY_FIELDS = {
    "ssh-ed25519": 1,
    "ssh-rsa": 2,
    "ecdsa-sha2-nistp256": 2,
    "ecdsa-sha2-nistp384": 2,
    "ecdsa-sha2-nistp521": 2,
}
_B64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")


def _ssh_fields(blob: bytes) -> list[bytes]:
    fields: list[bytes] = []
    at = 0
    while at < len(blob):
        if at + 4 > len(blob):
            raise ValueError("truncated")
        (size,) = struct.unpack(">I", blob[at : at + 4])
        at += 4
        if at + size > len(blob):
            raise ValueError("truncated")
        fields.append(blob[at : at + size])
        at += size
    return fields


def check_ssh_public_key(value: str) -> str:
    """`<type> <base64>` whose base64 decodes to an OpenSSH key blob of that same type."""
    message = (
        "must be an OpenSSH public host key: '<type> <base64>' as in /etc/ssh/ssh_host_ed25519_key.pub "
        f"(types: {', '.join(_SSH_KEY_FIELDS)})"
    )
    parts = value.split(" ")
    if len(parts) != 2 or parts[0] not in _SSH_KEY_FIELDS or not _B64.fullmatch(parts[1]):
        raise ValueError(message)
    kind, data = parts
    try:
        blob = base64.b64decode(data, validate=True)
        if base64.b64encode(blob).decode() != data:
            raise ValueError("not canonical base64")
        fields = _ssh_fields(blob)
    except (ValueError, base64.binascii.Error):
        raise ValueError(message + "; its base64 part is not a key blob") from None
    if not fields or fields[0] != kind.encode():
        raise ValueError(message + f"; its base64 part is not a {kind} key") from None
    if len(fields) != 1 + _SSH_KEY_FIELDS[kind]:
        raise ValueError(message + f"; its base64 part is not a {kind} key") from None
    if kind == "ssh-ed25519" and len(fields[1]) != 32:
        raise ValueError(message + "; an ed25519 key is 32 bytes") from None
    if kind.startswith("ecdsa-") and fields[1] != kind.rsplit("-", 1)[1].encode():
        raise ValueError(message + f"; its curve is not {kind.rsplit('-', 1)[1]}") from None
    return value


# --------------------------------------------------------------------------- showing user text
_KEY_MATERIAL = re.compile(r"-----BEGIN|PRIVATE KEY|[A-Za-z0-9+/]{80,}")


def looks_like_key_material(text: str) -> bool:
    """A PEM block, an OpenSSH private key or a long base64 run: never echoed in a message."""
    return bool(_KEY_MATERIAL.search(text))


def escape(text: str) -> str:
    """`text` with every non-printable character written as an escape (\\n, \\x1b, \\u200b)."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- secrets
SECRET_PLACEHOLDER_PREFIX = "gpu-stack-offline-secret-"
"""Offline, a `secure:` value is never decrypted: it becomes `<prefix><n>`, shown as [secret]."""


_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/?#@\s]*@")
_URL_QUERY = re.compile(r"(?i)(://[^\s?#]*)\?[^\s#'\"]*")


def url_credentials(value: str) -> str | None:
    """What in a URL carries credentials (`user:password@`, a query such as `?token=`), or None."""
    if _URL_USERINFO.search(value):
        return "user:password@"
    if _URL_QUERY.search(value):
        return "a query string (?token=...)"
    return None


def redact_url_credentials(text: str) -> str:
    """`https://u:p@host/x?token=t` -> `https://[credentials hidden]@host/x?[hidden]`: how a URL is shown."""
    text = _URL_USERINFO.sub(lambda m: f"{m.group(1)}[credentials hidden]@", text)
    return _URL_QUERY.sub(lambda m: f"{m.group(1)}?[hidden]", text)
