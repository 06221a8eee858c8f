"""Every image a `pulumi up` of a stack makes the cluster pull, read from what it creates.

Three sources, each read as the cluster reads it:
- the objects the Helm release renders (the operator Deployment, NFD, the chart's hook Jobs):
  every container, init container and ephemeral container of every pod template;
- the ClusterPolicy's component specs, from which the operator builds its DaemonSets: the image is
  `<repository>/<image>:<version>` (`@<version>` for a sha256 digest, `image` alone when neither
  repository nor version is set), as the operator's ImagePath does; the driver's tag gets `-<os>`
  appended (the osTag of the first GPU node, such as `ubuntu22.04`: one OS per cluster), and with
  `usePrecompiled` `-<kernel>-<os>`, one image per kernel of the GPU nodes (resolveDriverTag), so
  its image is listed per OS and kernel given; the kata manager's artifacts (OCI images) too;
- the stack's own pods: the validation Jobs and the MIG rollout Job of the plan.

`ImageUse.runs` says whether the cluster pulls it with these settings (a component switched on,
or always); `all_images` keeps the ones switched off too (the mirror test checks those as well).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import CHART_IMAGES
from .chart import RenderedObject

POD_CONTAINER_KEYS = ("containers", "initContainers", "ephemeralContainers")
DRIVER_OS_PLACEHOLDER = "<os>"
DRIVER_KERNEL_PLACEHOLDER = "<kernel>"


@dataclass(frozen=True)
class ImageUse:
    image: str
    source: str
    """`DaemonSet gpu-operator/x`, `ClusterPolicy spec.devicePlugin`, `Job gpu-validation/cuda-smoke-...`."""
    runs: bool = True
    """False for a component the ClusterPolicy carries but switches off."""
    note: str = ""


def pod_images(body: Any) -> list[str]:
    """The image of every container under any pod spec in an object (templates of templates too)."""
    out: list[str] = []
    if isinstance(body, dict):
        for key, value in body.items():
            if key in POD_CONTAINER_KEYS and isinstance(value, list):
                out.extend(str(c["image"]) for c in value if isinstance(c, dict) and c.get("image"))
            else:
                out.extend(pod_images(value))
    elif isinstance(body, list):
        for value in body:
            out.extend(pod_images(value))
    return out


def image_path(spec: Mapping[str, Any]) -> str | None:
    """The operator's image of one component spec, or None when it names none."""
    repository, image, version = (str(spec.get(k) or "") for k in ("repository", "image", "version"))
    if not repository and not version:
        return image or None
    if not image:
        return None
    sep = "@" if version.startswith("sha256:") else ":"
    return f"{repository}/{image}{sep}{version}" if version else f"{repository}/{image}"


def _at(spec: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    node: Any = spec
    for part in key.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node if isinstance(node, Mapping) else None


def _switched_on(spec: Mapping[str, Any], when: str) -> bool:
    if when == "always":
        return True
    if when == "openshift":
        return False  # the stack does not target OpenShift (config/images.py, ChartImage.when)
    parent = _at(spec, when.rsplit(".", 1)[0]) or {}
    # The operator's defaults where the ClusterPolicy leaves a switch out: a component is on unless
    # told off; sandbox workloads are off unless told on.
    default = when != "sandboxWorkloads.enabled"
    value = parent.get("enabled")
    return default if value is None else bool(value)


def _driver_images(
    component: Mapping[str, Any], image: str, source: str, runs: bool, driver_os: Iterable[str], kernels: Iterable[str]
) -> list[ImageUse]:
    """The driver's images: `<image>-<os>`, or with usePrecompiled `<image>-<kernel>-<os>` per kernel
    (gpu-operator v25.10.1 resolveDriverTag); placeholders where no OS or kernel is given."""
    os_tags = list(driver_os) or [DRIVER_OS_PLACEHOLDER]
    if not component.get("usePrecompiled"):
        return [ImageUse(f"{image}-{os_tag}", source, runs, "the tag gets the GPU nodes' OS appended") for os_tag in os_tags]
    note = "precompiled: one image per kernel of the GPU nodes, the tag gets the kernel and the OS appended"
    return [
        ImageUse(f"{image}-{kernel}-{os_tag}", source, runs, note)
        for os_tag in os_tags for kernel in (list(kernels) or [DRIVER_KERNEL_PLACEHOLDER])
    ]


def kata_artifacts(spec: Mapping[str, Any]) -> list[ImageUse]:
    """The OCI artifacts the kata manager pulls for each runtime class (with sandbox workloads)."""
    manager = _at(spec, "kataManager") or {}
    classes = (manager.get("config") or {}).get("runtimeClasses") if isinstance(manager.get("config"), Mapping) else None
    runs = _switched_on(spec, "sandboxWorkloads.enabled") and bool(manager.get("enabled", False))
    out = []
    for rc in classes if isinstance(classes, list) else []:
        url = ((rc.get("artifacts") or {}) if isinstance(rc, Mapping) else {}).get("url")
        if url:
            source = f"ClusterPolicy spec.kataManager.config.runtimeClasses[{rc.get('name')}].artifacts"
            out.append(ImageUse(str(url), source, runs, "kata artifacts (an OCI image the kata manager pulls)"))
    return out


def clusterpolicy_images(
    spec: Mapping[str, Any], driver_os: Iterable[str] = (), kernels: Iterable[str] = ()
) -> list[ImageUse]:
    """The component images of a ClusterPolicy spec (every component of CHART_IMAGES it carries,
    and the kata artifacts)."""
    out: list[ImageUse] = []
    for row in CHART_IMAGES:
        if row.key in ("operator", "node-feature-discovery"):
            continue  # rendered objects of the chart, not ClusterPolicy components
        component = _at(spec, row.key)
        image = image_path(component) if component is not None else None
        if component is None or image is None:
            continue
        runs = _switched_on(spec, row.when)
        note = "OpenShift only: the operator adds it to the DCGM exporter there" if row.when == "openshift" else ""
        source = f"ClusterPolicy spec.{row.key}"
        if row.key == "driver" and "sha256:" not in image:
            out.extend(_driver_images(component, image, source, runs, driver_os, kernels))
        else:
            out.append(ImageUse(image, source, runs, note))
    return out + kata_artifacts(spec)


def release_images(
    objects: Iterable[RenderedObject], driver_os: Iterable[str] = (), kernels: Iterable[str] = ()
) -> list[ImageUse]:
    out: list[ImageUse] = []
    for obj in objects:
        if obj.kind == "ClusterPolicy":
            out.extend(clusterpolicy_images(obj.body.get("spec") or {}, driver_os, kernels))
            continue
        note = f"Helm hook {obj.hook}" if obj.hook else ""
        out.extend(ImageUse(image, obj.key, True, note) for image in pod_images(obj.body))
    return out


def plan_images(plan: Mapping[str, Any]) -> list[ImageUse]:
    """The images of the stack's own pods (validation and MIG rollout Jobs) in a plan document."""
    out: list[ImageUse] = []
    for r in plan.get("resources") or []:
        if not str(r.get("type", "")).startswith("kubernetes:") or r.get("type") == "kubernetes:helm.sh/v3:Release":
            continue
        inputs = r.get("inputs") or {}
        meta = inputs.get("metadata") or {}
        kind = str(r["type"]).rsplit(":", 1)[-1]
        where = f"{meta.get('namespace')}/{meta.get('name')}" if meta.get("namespace") else str(meta.get("name") or r["name"])
        out.extend(ImageUse(image, f"{kind} {where}") for image in pod_images(inputs.get("spec") or {}))
    return out


def pulled(uses: Iterable[ImageUse]) -> list[str]:
    """The distinct images the cluster pulls, sorted."""
    return sorted({u.image for u in uses if u.runs})
