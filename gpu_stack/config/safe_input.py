"""Reusable input types and checks for values a user types into a stack config.

Every string a user sets passes `PlainStr` (one line, nothing invisible) or `TextStr` (several
lines allowed); every count or port passes `WholeNumber` (no `true` standing in for 1); every flag
passes `Flag` (no `"yes"`, `1` or `"on"` standing in for true). Addresses are parsed, not
pattern-matched (SSH host keys: gpu_stack/config/host_keys.py). `escape` is how any user text is
shown in a message.
"""

from __future__ import annotations

import ipaddress
import re
import unicodedata
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, SecretStr

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


def _secret_line(value: SecretStr) -> SecretStr:
    _plain(value.get_secret_value())
    return value


SecretLine = Annotated[SecretStr, AfterValidator(_secret_line)]
"""A one-line secret (a password or token), held to PlainStr's rules; its value is never shown."""

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
"""true or false (or the strings `pulumi config set` stores for them); never yes, on, 1 or y."""

_DECIMAL_FRACTION = re.compile(r"-?[0-9]{1,18}(?:\.[0-9]{1,18})?")


def _number(value: Any) -> Any:
    """A number as typed (85, 0.1), or its decimal string; never a bool, nan, inf or '1e3'."""
    if isinstance(value, bool):
        raise ValueError("must be a number, not true or false")
    if isinstance(value, (int, float)):
        if (isinstance(value, float) and value != value) or value in (float("inf"), float("-inf")):
            raise ValueError("must be a finite number")
        return value
    if isinstance(value, str) and _DECIMAL_FRACTION.fullmatch(value):
        return float(value)
    raise ValueError("must be a number such as 85 or 0.1")


Number = Annotated[float, BeforeValidator(_number)]
"""A finite number (int or decimal), or its decimal string; never a bool."""


def ascii_digits(value: str) -> bool:
    """True for a string of ASCII digits only (str.isdigit also takes '３' and '٣')."""  # noqa: RUF002 - the look-alikes are the point
    return bool(value) and value.isascii() and value.isdigit()

# --------------------------------------------------------------------------- addresses
_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def is_dns_name(value: str) -> bool:
    """An RFC 1123 host name: dot-separated labels, at most 253 characters, last label not all
    digits; one trailing dot (a fully qualified name) is allowed."""
    name = value[:-1] if value.endswith(".") else value
    if not name or len(name) > 253:
        return False
    labels = name.split(".")
    if not all(_HOST_LABEL.fullmatch(label) for label in labels):
        return False
    return not labels[-1].isdigit()


_ZONE = re.compile(r"[A-Za-z0-9_.-]{1,15}")
"""An IPv6 zone: a Linux interface name (at most 15 characters, IFNAMSIZ) or an interface index."""


def check_address(value: str) -> str:
    """An IPv4/IPv6 address (a link-local one with its zone, fe80::1%eth0) or a DNS host name."""
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        if not is_dns_name(value):
            raise ValueError(
                "must be a host name or an IP address: a DNS name such as gpu-1.example.com, "
                "or an address such as 10.0.0.5, fd00::5 or fe80::5%eth0"
            ) from None
        return value
    plain = ipaddress.ip_address(value.split("%", 1)[0])
    if isinstance(plain, ipaddress.IPv6Address) and plain.ipv4_mapped is not None:
        plain = plain.ipv4_mapped  # ::ffff:0.0.0.0 is 0.0.0.0, ::ffff:255.255.255.255 the broadcast address
    never = (
        "the unspecified address" if plain.is_unspecified
        else "a multicast address" if plain.is_multicast
        else "the broadcast address" if plain == ipaddress.IPv4Address("255.255.255.255")
        else None
    )
    if never is not None:
        raise ValueError(f"is {never}, which no SSH connection can reach: give the node's own address")
    zone = getattr(address, "scope_id", None)
    if zone is not None and not _ZONE.fullmatch(zone):
        raise ValueError(
            f"has the IPv6 zone {zone[:40]!r}, which is not an interface name or index "
            "(at most 15 letters, digits, '_', '.' and '-')"
        )
    return value


def address_identity(value: str) -> str:
    """A form in which two spellings of one address compare equal."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return value.lower().rstrip(".")


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
_URL_FRAGMENT = re.compile(r"(?i)(://[^\s#'\"]*)#[^\s'\"]*")


def redact_url_credentials(text: str) -> str:
    """`https://u:p@host/x?token=t#k=v` -> `https://[credentials hidden]@host/x?[hidden]#[hidden]`: how
    a URL is shown in messages (every query and fragment hidden). Which URLs are refused:
    grammars.url_credentials."""
    # Query and fragment first: the userinfo's replacement holds a space, which ends a URL below.
    text = _URL_QUERY.sub(lambda m: f"{m.group(1)}?[hidden]", text)
    text = _URL_FRAGMENT.sub(lambda m: f"{m.group(1)}#[hidden]", text)
    return _URL_USERINFO.sub(lambda m: f"{m.group(1)}[credentials hidden]@", text)
