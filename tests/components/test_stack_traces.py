"""Each resource's stack trace, which the engine keeps in the state (`stackTrace`,
`sourcePosition`), holds only the program's own frames (gpu_stack/components/program.py trim_stack_traces)."""

from __future__ import annotations

from pathlib import Path

from pulumi.runtime import resource as sdk

from gpu_stack.components import program as engine

ROOT = Path(__file__).resolve().parents[2]


class _Resource:
    def __init__(self) -> None:
        self.trace = sdk._get_stack_trace()


class _Custom(_Resource):
    def __init__(self) -> None:
        super().__init__()


class _Concrete(_Custom):
    """The SDK's shape: Resource < CustomResource < the concrete type, called from program code."""

    def __init__(self) -> None:
        super().__init__()


def _register() -> _Concrete:
    return _Concrete()


def test_only_the_programs_own_frames_are_sent(monkeypatch):
    monkeypatch.setattr(sdk, "_get_stack_trace", sdk._get_stack_trace)  # restored after the test
    full = _register().trace.frames
    assert any("/site-packages/" in f.pc.uri for f in full), "pytest's frames are on the stack"
    engine.trim_stack_traces()
    engine.trim_stack_traces()  # idempotent: wraps once
    kept = _register().trace.frames
    uris = [f.pc.uri for f in kept]
    assert uris and all(u.startswith(ROOT.as_uri() + "/") and "/site-packages/" not in u for u in uris), uris
    # The innermost frame is the program line that made the resource (what sourcePosition names).
    assert uris[0] == Path(__file__).resolve().as_uri() and kept[0].pc.line == _register.__code__.co_firstlineno + 1
    assert len(kept) <= engine.STACK_FRAMES_KEPT < len(full)
