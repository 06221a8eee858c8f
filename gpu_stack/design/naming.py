"""Names derived once and passed on: content-addressed ConfigMap names, Job names.

A ConfigMap the operator mounts is only re-read when the ClusterPolicy points at a new name,
so its name carries a short hash of its content: an edit gives a new name, the new name flows
into the Helm values, and one `pulumi up` rolls the DaemonSet.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def content_hash(data: Any, length: int = 10) -> str:
    """A short, stable hash of JSON-serialisable data (key order does not matter)."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:length]


def content_name(prefix: str, data: Any, length: int = 10) -> str:
    """`<prefix>-<hash>`, a valid DNS-1123 name as long as the prefix is one (<= 52 chars)."""
    if len(prefix) > 63 - length - 1:
        raise ValueError(f"prefix {prefix!r} too long for a content name")
    return f"{prefix}-{content_hash(data, length)}"
