"""A node's pinned SSH host key (`nodes[i].hostKey`), parsed rather than pattern-matched.

A line is taken as users copy it: the line of an ssh_host_*_key.pub (its comment dropped) or the
line ssh-keyscan prints (its host field checked against the node, then dropped), kept as
`<type> <base64>`. Refused: a type the stack cannot pin, a blob that is not a whole key of the type
the line names or that the command provider's SSH library refuses to parse (an ECDSA point off its
curve), a second key on the line, another host's keyscan line, and a line over HOST_KEY_LIMIT
characters.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import struct

from .safe_input import SECRET_PLACEHOLDER_PREFIX, address_identity, escape

# Key type -> number of length-prefixed fields after the type in the wire-format blob.
_SSH_KEY_FIELDS = {
    "ssh-ed25519": 1,
    "ssh-rsa": 2,
    "ecdsa-sha2-nistp256": 2,
    "ecdsa-sha2-nistp384": 2,
    "ecdsa-sha2-nistp521": 2,
}
_B64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
HOST_KEY_LIMIT = 4096
"""The longest hostKey line: a key is at most ~200 characters; the rest is a comment or host names."""
KEYSCAN_COMMAND = "ssh-keyscan -t ed25519 <host>"
"""The command that prints the host key line to pin (its host field is dropped)."""
UNPINNABLE_KEY_TYPES = {
    "ssh-rsa": (
        "is an ssh-rsa key: pinned, pulumi-command 1.2.1 offers only SHA-1 ssh-rsa, which OpenSSH 8.8+ refuses, so "
        f"every connection would fail; pin the node's ed25519 key (`{KEYSCAN_COMMAND}`) or an ECDSA key"
    ),
}
"""Key types parsed (so the message can say why) but refused as a pin, whatever their size.
pulumi-command v1.2.1 provider/pkg/provider/remote/connection.go SSHConfig: `HostKeyAlgorithms =
[]string{publicKey.Type()}`; x/crypto's Type() of an RSA key is `ssh-rsa` (ssh/keys.go KeyAlgoRSA),
the SHA-1 signature; an OpenSSH >= 8.8 sshd offers only rsa-sha2-256/512 for it, and the handshake
ends in `ssh: no common algorithm for host key; we offered: [ssh-rsa]`
(tests/e2e/test_node_prep_flow.py shows it)."""

# The NIST curves of the ECDSA host keys, y^2 = x^3 - 3x + b over GF(p) (FIPS 186-4 D.1.2; the
# values as `openssl ecparam -name <curve> -param_enc explicit -text` prints them).
_CURVES = {
    "nistp256": (
        0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF,
        0x5AC635D8AA3A93E7B3EBBD55769886BC651D06B0CC53B0F63BCE3C3E27D2604B,
    ),
    "nistp384": (
        2**384 - 2**128 - 2**96 + 2**32 - 1,
        0xB3312FA7E23EE7E4988E056BE3F82D19181D9C6EFE8141120314088F5013875AC656398D8A2ED19D2A85C8EDD3EC2AEF,
    ),
    "nistp521": (
        2**521 - 1,
        0x0051953EB9618E1C9A1F929A21A0B68540EEA2DA725B99B315F3B8B489918EF109E156193951EC7E937B1652C0BD3BB1BF073573DF883D2C34F1EF451FD46B503F00,
    ),
}


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


_HOST_PATTERN = re.compile(r"\[[^\]\s,]+\]:[0-9]{1,5}|[A-Za-z0-9._:%*?!-]+|\|1\|[A-Za-z0-9+/=]+\|[A-Za-z0-9+/=]+")
HOST_KEY_FORMS = (
    "'<type> <base64>' with or without the comment /etc/ssh/ssh_host_ed25519_key.pub ends with, "
    "or the line ssh-keyscan prints ('<host> <type> <base64>')"
)


def _on_curve(curve: str, point: bytes) -> bool:
    """An uncompressed point (0x04 | X | Y) of `curve` that lies on it (x/crypto ssh parseECDSA
    refuses any other with `ssh: invalid curve point`)."""
    p, b = _CURVES[curve]
    size = (p.bit_length() + 7) // 8
    if len(point) != 1 + 2 * size or point[0] != 4:
        return False
    x, y = int.from_bytes(point[1 : 1 + size], "big"), int.from_bytes(point[1 + size :], "big")
    return x < p and y < p and (y * y - (x * x * x - 3 * x + b)) % p == 0


def _key_blob_problem(kind: str, data: str) -> str | None:
    """What is wrong with the base64 part of a `kind` key, or None."""
    if not _B64.fullmatch(data):
        return "its base64 part holds characters base64 does not use"
    try:
        blob = base64.b64decode(data, validate=True)
        if base64.b64encode(blob).decode() != data:
            return "its base64 part is cut short or padded wrongly"
        fields = _ssh_fields(blob)
    except (ValueError, binascii.Error):
        return "its base64 part is not an OpenSSH key blob (cut short, or not a key)"
    if not fields or fields[0] != kind.encode():
        inner = fields[0].decode("ascii", "replace") if fields else "nothing"
        return f"its base64 part is a {escape(inner)[:40]} key, but the line says {kind}"
    if len(fields) != 1 + _SSH_KEY_FIELDS[kind] or (kind == "ssh-ed25519" and len(fields[1]) != 32):
        return f"its base64 part is not a whole {kind} key"
    if kind.startswith("ecdsa-"):
        curve = kind.rsplit("-", 1)[1]
        if fields[1] != curve.encode():
            return f"its base64 part's curve is not {curve}"
        if not _on_curve(curve, fields[2]):
            return (f"its base64 part's point is not on {curve}: the SSH library of the command provider "
                    "refuses it (`ssh: invalid curve point`), so every connection would fail")
    return None


def _names_node(entry: str, hosts: tuple[str, ...], ports: tuple[int, ...]) -> bool:
    """Whether one host field entry (host, [host]:port, |1|salt|hash) names one of `hosts`."""
    if entry.startswith("|1|"):
        try:
            salt, digest = (base64.b64decode(part, validate=True) for part in entry[3:].split("|", 1))
        except (binascii.Error, ValueError):
            return False
        names = [*hosts, *(f"[{h}]:{p}" for h in hosts for p in ports)]
        return any(hmac.compare_digest(hmac.new(salt, n.encode(), hashlib.sha1).digest(), digest) for n in names)
    if entry.startswith("["):
        entry = entry[1:].split("]", 1)[0]
    wanted = {address_identity(h) for h in hosts}
    return address_identity(entry) in wanted


def _host_field_problem(field: str, hosts: tuple[str, ...], ports: tuple[int, ...]) -> str | None:
    """Why a keyscan line's host field is not this node's (None when it names the node)."""
    entries = field.split(",")
    negated = [e for e in entries if e.startswith("!") and _names_node(e[1:], hosts, ports)]
    if negated:
        return (f"its host field excludes this node ({escape(negated[0])[:60]}): run `ssh-keyscan -t ed25519 "
                f"{escape(hosts[0])[:60]}`, or give the key without the host field")
    if any(not e.startswith("!") and _names_node(e, hosts, ports) for e in entries):
        return None
    shown = "a hashed field" if field.startswith("|1|") else repr(escape(field)[:40])
    return (
        f"its host field {shown} names another host than this node ({escape(hosts[0])[:60]}), so the key is another "
        f"machine's: run `ssh-keyscan -t ed25519 {escape(hosts[0])[:60]}`, or give the key without the host field"
    )


def check_ssh_public_key(value: str, hosts: tuple[str, ...] = (), ports: tuple[int, ...] = (22,)) -> str:
    """A host key line as users copy it, normalised to `<type> <base64>`: the line of an
    ssh_host_*_key.pub (its comment dropped) or of ssh-keyscan / known_hosts (its host field must
    name one of `hosts`, the node's address and name, when given; `ports`: the node's SSH ports,
    for a hashed field). A wrong line is refused saying which part is wrong."""
    if len(value) > HOST_KEY_LIMIT:
        raise ValueError(f"must be an OpenSSH public host key line of at most {HOST_KEY_LIMIT} characters (it has {len(value)})")
    fields = value.split()
    types = ", ".join(k for k in _SSH_KEY_FIELDS if k not in UNPINNABLE_KEY_TYPES)
    if not fields:
        raise ValueError(f"must be an OpenSSH public host key: {HOST_KEY_FORMS}")
    if fields[0].startswith("@"):
        raise ValueError(
            f"must be an OpenSSH public host key, but this is a known_hosts line marked {escape(fields[0])[:20]}, "
            "not a key to trust; copy the key line itself"
        )
    at = next((i for i, f in enumerate(fields[:2]) if f in _SSH_KEY_FIELDS), None)
    if at is None:
        named = next((f for f in fields[:2] if f.startswith(("ssh-", "ecdsa-", "sk-"))), None)
        if named is not None:
            raise ValueError(
                f"must be an OpenSSH public host key of a type this stack pins ({types}), not {escape(named)[:60]!r}"
            )
        raise ValueError(f"must be an OpenSSH public host key: {HOST_KEY_FORMS} (types: {types})")
    if at == 1:
        bad = [h for h in fields[0].split(",") if not _HOST_PATTERN.fullmatch(h)]
        if bad or not fields[0]:
            raise ValueError(
                f"must be an OpenSSH public host key; its host field {escape(fields[0])[:60]!r} is not host names "
                "or addresses as ssh-keyscan prints them (host, [host]:port, comma-separated)"
            )
    if len(fields) < at + 2:
        raise ValueError(f"must be an OpenSSH public host key; it has the key type {fields[at]} but no base64 part after it")
    kind, data = fields[at], fields[at + 1]
    problem = _key_blob_problem(kind, data)
    if problem is not None:
        raise ValueError(f"must be an OpenSSH public host key ({kind}); {problem}")
    if kind in UNPINNABLE_KEY_TYPES:
        raise ValueError(UNPINNABLE_KEY_TYPES[kind])
    rest = fields[at + 2 :]
    if len(rest) >= 2 and (rest[0] in _SSH_KEY_FIELDS or rest[0].startswith(("ssh-", "ecdsa-", "sk-"))) and _B64.fullmatch(rest[1]):
        raise ValueError(
            f"must be one OpenSSH public host key, but a second key ({escape(rest[0])[:40]}) follows the first: "
            "the stack pins one key per node; give the line of one key"
        )
    known = tuple(h for h in hosts if h and not h.startswith(SECRET_PLACEHOLDER_PREFIX))
    if at == 1 and known and len(known) == len(hosts):
        wrong = _host_field_problem(fields[0], known, ports)
        if wrong is not None:
            raise ValueError(f"must be this node's host key; {wrong}")
    return f"{kind} {data}"
