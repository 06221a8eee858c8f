"""The rule on the Jobs' images: each carries what its Job starts (config/job-images.yaml, or the
stack's own declaration under images.jobImages)."""

from __future__ import annotations

from pydantic.alias_generators import to_snake

from ..errors import Problem, config_key
from ..job_images import JOB_IMAGE_KEYS, ImageContents, contents_of, lacking_problem, parse_user, unknown_image_problem
from ..root import Settings


def declared(s: Settings) -> dict[str, ImageContents]:
    """The stack's own declarations (images.jobImages) as rows."""
    out = {}
    for name, d in s.images.job_images.items():
        out[name] = ImageContents(name, d.shell, "busybox" if d.shell == "busybox" else "gnu",
                                  tuple(sorted(d.programs.items())), parse_user(d.user), d.kubectl)
    return out


def _value(s: Settings, key: tuple[str, ...]) -> str:
    node: object = s
    for part in key:
        node = getattr(node, to_snake(part))  # the models' fields under their camelCase config keys
    assert isinstance(node, str)
    return node


def job_image_rules(s: Settings) -> list[Problem]:
    own = declared(s)
    problems = []
    for key, needs in JOB_IMAGE_KEYS.items():
        image = _value(s, key)
        contents = contents_of(image, own)
        if contents is None:
            problems.append(Problem(key=config_key(key), value=image, message=unknown_image_problem(image, needs)))
        elif missing := needs.missing(contents):
            problems.append(Problem(key=config_key(key), value=image, message=lacking_problem(image, needs, contents, missing)))
    return problems


__all__ = ["declared", "job_image_rules"]
