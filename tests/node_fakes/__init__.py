"""The fake GPU nodes of sandbox/node_roots for the unit tests: the real nvidia-ctk comes from the
toolchain (tests/toolchain.py: a node that needs it skips the test when it is not built, and fails
under CI=true)."""

from __future__ import annotations

from pathlib import Path

from sandbox.node_roots import (
    CONTAINERD_V2,
    FAKE_CTK,
    FAKE_TOOL,
    OS_RELEASE,
    REAL_CONTAINERD,
    STUBS,
    FakeNode as _FakeNode,
    Result,
)

from ..toolchain import tool

__all__ = ["CONTAINERD_V2", "FAKE_CTK", "FAKE_TOOL", "OS_RELEASE", "REAL_CONTAINERD", "STUBS", "FakeNode", "Result"]


class FakeNode(_FakeNode):
    def __init__(self, base: Path, *, stubs: tuple[str, ...] = STUBS, **kwargs: object):
        if "nvidia-ctk" in stubs:
            kwargs.setdefault("real_ctk", tool("nvidia-ctk"))
        super().__init__(base, stubs=stubs, **kwargs)  # type: ignore[arg-type]
