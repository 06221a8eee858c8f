"""What each image a Job can run carries (config/job-images.yaml, with its evidence), and what
each kind of Job needs of its image.

The config rules refuse a Job image whose contents are unknown or lack what its Job starts; the
end-to-end tier's pod runner (sandbox/pod_runner.py) runs each Job under exactly the shell and
utilities its row names. A stack may declare an image of its own under `images.jobImages`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import yaml

from .grammars import parse_image
from .package_data import config_path

TABLE_PATH = config_path("job-images.yaml")

Shell = Literal["bash", "busybox", "none"]
Utilities = Literal["gnu", "busybox", "none"]


@dataclass(frozen=True)
class ImageContents:
    """One image's row: its shell, utilities, own programs (name -> path), user and kubectl minor."""

    image: str
    shell: Shell
    utilities: Utilities
    programs: tuple[tuple[str, str], ...]
    user: tuple[int, int]
    kubectl: str | None
    evidence: tuple[str, ...] = ()

    def has(self, program: str) -> bool:
        """Whether a command named `program` starts in this image (the shell's names included)."""
        if program in dict(self.programs):
            return True
        if program == "sh":
            return self.shell in ("bash", "busybox")
        if program == "bash":
            return self.shell == "bash"
        return False


@dataclass(frozen=True)
class JobNeeds:
    """What a kind of Job starts in its image: the shell of its scripts, the programs they call."""

    what: str
    shell: Literal["sh", "bash"]
    programs: tuple[str, ...] = ()

    def missing(self, contents: ImageContents) -> list[str]:
        return [p for p in (self.shell, *self.programs) if not contents.has(p)]


API_JOB = JobNeeds("the Jobs that talk to the API run POSIX sh scripts with kubectl", "sh", ("kubectl",))
"""Node labels, the MIG layout guard and rollout, the capacity, MIG-state and free-capacity checks,
the benchmark's collector: config/mig-rollout/*.sh and the sh payloads of config/validation."""
CUDA_SMOKE_JOB = JobNeeds("the CUDA smoke and shared-GPU pods run bash payloads with the vectorAdd sample", "bash", ("vectorAdd",))
TOOLBOX_JOB = JobNeeds("the MIG-device and metrics pods run bash payloads", "bash")
BENCHMARK_JOB = JobNeeds("the sharing benchmark runs a bash payload with the n-body sample", "bash", ("nbody",))

JOB_IMAGE_KEYS: dict[tuple[str, ...], JobNeeds] = {
    ("validation", "images", "kubectl"): API_JOB,
    ("mig", "rollout", "image"): API_JOB,
    ("dra", "rollout", "image"): API_JOB,
    ("validation", "images", "cuda"): CUDA_SMOKE_JOB,
    ("validation", "images", "toolbox"): TOOLBOX_JOB,
    ("validation", "sharingBenchmark", "image"): BENCHMARK_JOB,
}
"""Each setting that names a Job's image, and what that Job needs of it."""


def parse_user(text: str) -> tuple[int, int]:
    """(uid, gid) of a `uid[:gid]` USER (gid defaults to uid, as a Dockerfile's USER does)."""
    uid, _, gid = str(text).partition(":")
    return int(uid), int(gid or uid)


def _row(raw: dict[str, Any]) -> ImageContents:
    return ImageContents(
        image=raw["image"],
        shell=raw["shell"],
        utilities=raw["utilities"],
        programs=tuple(sorted((raw.get("programs") or {}).items())),
        user=parse_user(raw["user"]),
        kubectl=raw.get("kubectl"),
        evidence=tuple(raw.get("evidence") or ()),
    )


@cache
def table() -> dict[str, ImageContents]:
    """The rows of config/job-images.yaml by image (repository:tag)."""
    raw = yaml.safe_load(TABLE_PATH.read_text())
    rows = [_row(r) for r in raw["images"]]
    return {r.image: r for r in rows}


def image_key(image: str) -> str:
    """`repository:tag` of an image reference (a Docker Hub one with its host; a digest dropped)."""
    domain, path, tag, _digest = parse_image(image)
    return f"{domain or 'docker.io'}/{path}:{tag or 'latest'}"


def contents_of(image: str, declared: dict[str, ImageContents] | None = None) -> ImageContents | None:
    """The row of `image` (as the stack names it, before a mirror): the stack's own declaration
    first, then the table; None when neither knows it."""
    key = image_key(image)
    for rows in (declared or {}, table()):
        for name, row in rows.items():
            if image_key(name) == key:
                return row
    return None


def unknown_image_problem(image: str, needs: JobNeeds) -> str:
    return (
        f"is no image whose contents gpu-stack knows ({needs.what}): declare what it carries under "
        f"images.jobImages[\"{image}\"] (shell, programs, user, kubectl), or leave the default "
        "(config/job-images.yaml lists the known images; a mirror's copy of one comes through images.mirror)"
    )


def lacking_problem(image: str, needs: JobNeeds, contents: ImageContents, missing: list[str]) -> str:
    has = f"shell {contents.shell}" + (f", kubectl {contents.kubectl}" if contents.kubectl else "")
    return f"lacks {', '.join(missing)}: {needs.what}, and {image} has {has} (config/job-images.yaml)"


def contents_by_copy(image: str) -> ImageContents | None:
    """The row of `image` or of the known image it is a mirror's copy of (the same path below the
    registry host, e.g. `<mirror>/nvidia/gpu-operator:v25.10.1`, and the same tag); None when
    there is none. Raises ValueError for a reference that is no image."""
    row = contents_of(image)
    if row is not None:
        return row
    _domain, path, tag, _digest = parse_image(image)
    for name, known in table().items():
        _kd, kpath, ktag, _ = parse_image(name)
        if ktag == tag and (path == kpath or path.endswith("/" + kpath)):
            return known
    return None
