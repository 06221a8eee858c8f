"""Object-level view of the Helm releases in a plan: what each release creates, object by object.

A `helm.v3.Release` shows in a Pulumi diff as one `values` input. Here each release of a plan is
rendered with the real chart (gpu_stack.offline.chart) at both sides of a diff, and the objects are
compared: added, removed, and for each changed object the fields that change
(`spec.devicePlugin.config.name` on the ClusterPolicy when the sharing replicas change).
When the chart cannot be had, `ReleaseObjects.unavailable` holds the one line that says why.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .chart import (
    ChartRef,
    ChartRenderError,
    ChartUnavailable,
    RenderedObject,
    RenderServer,
    locate_chart,
    render_release,
    require_helm_sdk,
)
from .diff.compute import field_changes
from .diff.model import CREATE, DELETE, RELEASE, UPDATE, FieldChange

# Bookkeeping every chart version changes on every object: shown once, not per object.
NOISE_PATHS = ("metadata.labels.helm.sh/chart", "metadata.labels.app.kubernetes.io/version")


@dataclass
class ObjectChange:
    action: str
    key: str
    """`ClusterPolicy cluster-policy`, `DaemonSet gpu-operator/name`."""
    kind: str
    hook: str | None = None
    fields: list[FieldChange] = field(default_factory=list)
    effects: list[str] = field(default_factory=list)

    @property
    def paths(self) -> list[str]:
        return [f.path for f in self.fields]


@dataclass
class ReleaseObjects:
    """The object diff of one Release resource of the plan."""

    release: str
    """The Pulumi resource name of the release."""
    changes: list[ObjectChange] = field(default_factory=list)
    counts: tuple[int, int] = (0, 0)
    """Objects rendered at base and at head."""
    unavailable: str | None = None
    """Why there is no object view (one line), or None."""
    chart: str = ""
    """Where the chart came from (folder), for the header."""

    def get(self, key: str) -> ObjectChange | None:
        return next((c for c in self.changes if c.key == key), None)


Renderer = Callable[[Mapping[str, Any]], list[RenderedObject]]


def release_renderer(
    chart_dir: Path | str | None = None, pull: Callable | None = None, server: RenderServer | None = None,
) -> Renderer:
    """A function from a Release's inputs to its rendered objects (ChartUnavailable when it cannot);
    `server`: render in that long-lived Helm child instead of one child per render."""
    located: dict[ChartRef, Path] = {}

    def render(inputs: Mapping[str, Any]) -> list[RenderedObject]:
        ref = ChartRef.of_release(dict(inputs))
        if not located:
            require_helm_sdk()  # what is missing first: without the SDK no chart helps
        if ref not in located:
            located[ref] = locate_chart(ref, chart_dir, pull=pull)
        render.last_chart = str(located[ref])  # type: ignore[attr-defined]
        return render_release(
            located[ref], dict(inputs.get("values") or {}), str(inputs.get("name") or ""), str(inputs.get("namespace") or "default"),
            server=server,
        )

    render.last_chart = ""  # type: ignore[attr-defined]
    return render


def memo_renderer(render: Renderer) -> Renderer:
    """`render`, called once per distinct release (chart, values, name, namespace): a fleet whose
    stacks share a values set renders the chart once for all of them. `render.calls` counts the
    real renders."""
    seen: dict[str, tuple[list[RenderedObject], str]] = {}

    def cached(inputs: Mapping[str, Any]) -> list[RenderedObject]:
        key = json.dumps(inputs, sort_keys=True, default=str)
        if key not in seen:
            seen[key] = (render(inputs), getattr(render, "last_chart", ""))
            cached.calls += 1  # type: ignore[attr-defined]
        objects, cached.last_chart = seen[key]  # type: ignore[attr-defined]
        return objects

    cached.calls = 0  # type: ignore[attr-defined]
    cached.last_chart = ""  # type: ignore[attr-defined]
    return cached


def _releases(doc: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {r["name"]: r.get("inputs") or {} for r in doc.get("resources") or [] if r.get("type") == RELEASE}


def _body(obj: RenderedObject) -> dict[str, Any]:
    return obj.body


def diff_objects(old: list[RenderedObject], new: list[RenderedObject]) -> list[ObjectChange]:
    """Objects added, removed and changed (field by field), in the head render's order."""
    old_by = {o.key: o for o in old}
    new_by = {o.key: o for o in new}
    out: list[ObjectChange] = []
    for key in list(new_by) + [k for k in old_by if k not in new_by]:
        o, n = old_by.get(key), new_by.get(key)
        if o is None:
            assert n is not None
            out.append(ObjectChange(CREATE, key, n.kind, n.hook))
        elif n is None:
            out.append(ObjectChange(DELETE, key, o.kind, o.hook))
        else:
            fields = [f for f in field_changes(o.body, n.body) if f.path not in NOISE_PATHS]
            if fields:
                out.append(ObjectChange(UPDATE, key, n.kind, n.hook, fields))
    return out


def release_objects(base: Mapping[str, Any], head: Mapping[str, Any], render: Renderer) -> list[ReleaseObjects]:
    """For each Release in either plan, its object diff (or the one line why there is none)."""
    old_rel, new_rel = _releases(base), _releases(head)
    out: list[ReleaseObjects] = []
    for name in list(new_rel) + [n for n in old_rel if n not in new_rel]:
        result = ReleaseObjects(release=name)
        try:
            try:
                old_objs = render(old_rel[name]) if name in old_rel else []
            except ChartUnavailable:
                raise
            except Exception as exc:  # the base's chart: the change may be what fixes it
                raise ChartUnavailable(f"the base's chart did not render: {' '.join(str(exc).split())[:300]}") from None
            new_objs = render(new_rel[name]) if name in new_rel else []
        except ChartUnavailable as exc:
            result.unavailable = str(exc)
        except ChartRenderError:
            raise
        except Exception as exc:  # a template error of the chart with these values: `up` would fail
            raise ChartRenderError(f"the chart did not render: {' '.join(str(exc).split())[:300]}") from None
        else:
            result.changes = diff_objects(old_objs, new_objs)
            result.counts = (len(old_objs), len(new_objs))
            result.chart = getattr(render, "last_chart", "")
        out.append(result)
    return out


def plan_objects(plan: Mapping[str, Any], render: Renderer) -> list[tuple[str, list[RenderedObject] | str]]:
    """For `plan --chart-dir`: each release's rendered objects, or the one line why the chart cannot
    be had here (ChartUnavailable). A chart that Helm cannot load or render with the release's
    values raises ChartRenderError: `pulumi up` would fail on it, so the plan does too."""
    out: list[tuple[str, list[RenderedObject] | str]] = []
    for name, inputs in _releases(plan).items():
        try:
            out.append((name, render(inputs)))
        except ChartUnavailable as exc:
            out.append((name, str(exc)))
        except ChartRenderError as exc:
            raise ChartRenderError(f"release {name}: {exc}") from None
        except Exception as exc:
            raise ChartRenderError(f"release {name}: the chart did not render: {' '.join(str(exc).split())[:300]}") from None
    return out
