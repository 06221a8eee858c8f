"""Every image from the user's mirror: the chart's values, the Jobs' images and the pull secrets.

`mirror_ref` maps one image reference: an override of its repository first, else
`<mirror>/<path without the registry host>` with its tag or digest kept, else unchanged.
`chart_image_values` sets every image of the chart (CHART_IMAGES, enabled or not, so the
ClusterPolicy names no image outside the mirror) and its pull secrets; `mirrored_settings` is the
settings with the validation, benchmark and MIG rollout images mapped, so every builder downstream uses them.
`pull_secret_names` is derived once per derive() and handed to every builder that writes a pod.
With no mirror, override or pull secret, nothing changes at all.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from ..config import CHART_IMAGES, ImageSettings, Settings
from ..config.images import KATA_RUNTIME_CLASSES, mirror_repository
from .labels import BASE_LABELS

MIRROR_PULL_SECRET = "gpu-stack-mirror-pull"
"""The pull Secret the stack creates from images.registryCredentials, in each namespace it pulls into."""


def split_ref(ref: str) -> tuple[str, str]:
    """`nvcr.io/nvidia/driver:580` -> (`nvcr.io/nvidia/driver`, `:580`); a digest stays `@sha256:...`."""
    name, at, digest = ref.partition("@")
    head, slash, last = name.rpartition("/")
    last, colon, tag = last.partition(":")
    return f"{head}{slash}{last}", (f"{colon}{tag}" if colon else "") + (f"{at}{digest}" if at else "")


def mirror_ref(ref: str, images: ImageSettings) -> str:
    repository, suffix = split_ref(ref)
    return mirror_repository(repository, images) + suffix


def pull_secret_names(images: ImageSettings) -> tuple[str, ...]:
    """The Secrets every pod of the stack pulls with (the stack's own first, when it makes one)."""
    own = [MIRROR_PULL_SECRET] if images.registry_credentials is not None else []
    return (*own, *(n for n in images.pull_secrets if n != MIRROR_PULL_SECRET))


def docker_config_json(settings: Settings) -> str | None:
    """The `.dockerconfigjson` of the mirror login (a secret), or None without one."""
    creds, mirror = settings.images.registry_credentials, settings.images.mirror
    if creds is None or mirror is None:
        return None
    host = mirror.split("/", 1)[0]
    password = creds.password.get_secret_value()
    auth = base64.b64encode(f"{creds.username}:{password}".encode()).decode()
    return json.dumps({"auths": {host: {"username": creds.username, "password": password, "auth": auth}}}, sort_keys=True)


PULL_SECRET_TYPE = "kubernetes.io/dockerconfigjson"
PULL_SECRET_KEY = ".dockerconfigjson"


def pull_secret(config_json: str | None, namespace: str) -> dict[str, Any] | None:
    """The mirror login's pull Secret in `namespace` for its `.dockerconfigjson` (docker_config_json;
    `stringData` holds the secret the component keeps a Pulumi secret), or None without a login."""
    if config_json is None:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": MIRROR_PULL_SECRET, "namespace": namespace, "labels": dict(BASE_LABELS)},
        "type": PULL_SECRET_TYPE,
        "stringData": {PULL_SECRET_KEY: config_json},
    }


def _at(values: dict[str, Any], key: str) -> dict[str, Any]:
    node = values
    for part in key.split("."):
        node = node.setdefault(part, {})
    return node


def chart_image_values(images: ImageSettings, secrets: Sequence[str]) -> dict[str, Any]:
    """The chart values that point each of its images at the mirror and add the pull secrets
    (`secrets`: pull_secret_names, derived once)."""
    out: dict[str, Any] = {}
    for image in CHART_IMAGES:
        target = mirror_repository(image.repository, images)
        if target != image.repository:
            if image.key == "node-feature-discovery":
                _at(out, image.key)["image"] = {"repository": target}
            else:
                head, _, name = target.rpartition("/")
                _at(out, image.key).update({"repository": head, "image": name})
    # The pods of each component pull with the secrets of the key its templates read (an init
    # container with its parent's: the driver manager with the driver's).
    for key in dict.fromkeys(i.pull_secrets for i in CHART_IMAGES if i.pull_secrets) if secrets else ():
        if key == "node-feature-discovery":
            _at(out, key)["imagePullSecrets"] = [{"name": n} for n in secrets]
        else:
            _at(out, key)["imagePullSecrets"] = list(secrets)
    classes = kata_runtime_classes(images, secrets)
    if classes is not None:
        _at(out, "kataManager.config")["runtimeClasses"] = classes
    return out


def kata_runtime_classes(images: ImageSettings, secrets: Sequence[str]) -> list[dict[str, Any]] | None:
    """The chart's kata runtime classes with each artifact from the mirror (and pulled with the
    first pull secret: the kata manager takes one Secret per class), or None without a mirror or
    override for them. A list value replaces the chart's whole list, so every class is sent, as the
    chart has it."""
    mapped = [mirror_ref(rc.artifacts, images) for rc in KATA_RUNTIME_CLASSES]
    if mapped == [rc.artifacts for rc in KATA_RUNTIME_CLASSES]:
        return None
    return [
        {
            "name": rc.name,
            "nodeSelector": dict(rc.node_selector),
            "artifacts": {"url": url, "pullSecret": secrets[0] if secrets else ""},
        }
        for rc, url in zip(KATA_RUNTIME_CLASSES, mapped, strict=True)
    ]


def merge_values(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """`base` with `extra` merged in, mapping by mapping (extra wins on a leaf)."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_values(out[key], value)
        else:
            out[key] = value
    return out


def mirrored_settings(settings: Settings) -> Settings:
    """The settings with the images of every Job of the stack (validation, sharing benchmark, MIG
    and DRA rollouts and node labels) mapped to the mirror."""
    im = settings.images
    if im.mirror is None and not im.overrides:
        return settings
    v = settings.validation
    images = v.images.model_copy(update={k: mirror_ref(getattr(v.images, k), im) for k in ("cuda", "toolbox", "kubectl")})
    bench = v.sharing_benchmark.model_copy(update={"image": mirror_ref(v.sharing_benchmark.image, im)})
    rollout = settings.mig.rollout.model_copy(update={"image": mirror_ref(settings.mig.rollout.image, im)})
    dra_rollout = settings.dra.rollout.model_copy(update={"image": mirror_ref(settings.dra.rollout.image, im)})
    mirrored = settings.model_copy(update={
        "validation": v.model_copy(update={"images": images, "sharing_benchmark": bench}),
        "mig": settings.mig.model_copy(update={"rollout": rollout}),
        "dra": settings.dra.model_copy(update={"rollout": dra_rollout}),
    })
    mirrored._secret_shapes = settings._secret_shapes
    return mirrored
