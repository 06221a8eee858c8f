"""The entry points `__main__.py` uses: read the stack config, fail clearly on a bad one."""

from __future__ import annotations

from pathlib import Path

from ..config import Settings, SettingsError, load_settings
from ..config.pulumi_config import other_keys, read_namespace, secret_keys, secure_paths


def load_settings_from_pulumi() -> Settings:
    """Settings from the running program's `gpu-stack:*` config; nothing is registered on error.

    Under `pulumi up` a SettingsError becomes the program's one error message (pulumi.RunError
    prints without a Python traceback).
    """
    try:
        keys = secret_keys()
        return load_settings(
            read_namespace(),
            secret_keys=keys,
            secret_paths=secure_paths() if keys else None,
            other_keys=other_keys(),
        )
    except SettingsError as exc:
        import pulumi

        raise pulumi.RunError(str(exc)) from None


STACK_FRAMES_KEPT = 8
"""At most this many frames of the program's own code in each resource's stack trace."""


def trim_stack_traces() -> None:
    """Send the engine, with each resource, only the program's own frames of the call stack.

    Pulumi 3.195+ keeps with every resource of the state the Python call stack that registered it
    (`stackTrace`, and `sourcePosition`, its first frame): some 25 frames, mostly the SDK's, the
    asyncio loop's and the language host's threads, 3 KB per resource as `pulumi stack export`
    prints it: half of a node's Lease read. The frames are for tools that jump from a resource to
    the code that made it; the program's own frames (gpu_stack/ and __main__.py) are what they
    need. The SDK has no option for this, so its (pinned, 3.259.0) `_get_stack_trace` is wrapped:
    the innermost STACK_FRAMES_KEPT frames outside site-packages under the program's directory.
    Idempotent; tests/components/test_stack_traces.py pins what is sent."""
    from pulumi.runtime import resource as sdk
    from pulumi.runtime.proto import source_pb2

    original = getattr(sdk, "_get_stack_trace", None)
    if original is None or getattr(original, "gpu_stack_trimmed", False):
        return  # another SDK without the hook: the traces stay whole, nothing else changes
    root = Path(__file__).resolve().parents[2].as_uri() + "/"  # the project: gpu_stack/ and __main__.py

    def own_frames() -> source_pb2.StackTrace:
        frames = [f for f in original().frames
                  if f.HasField("pc") and f.pc.uri.startswith(root) and "/site-packages/" not in f.pc.uri]
        return source_pb2.StackTrace(frames=frames[:STACK_FRAMES_KEPT])

    own_frames.gpu_stack_trimmed = True  # type: ignore[attr-defined]
    sdk._get_stack_trace = own_frames
