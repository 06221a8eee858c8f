"""Rules on mirrors: a mirror login needs a mirror; an override names an image the stack pulls; a
toolkit package mirror names its repository and key."""

from __future__ import annotations

import re

from pydantic import SecretStr

from ..dra import DRA_IMAGE
from ..errors import Problem, config_key
from ..facts import uses_dra
from ..grammars import NAME_LIMIT
from ..images import CHART_IMAGES, KATA_RUNTIME_CLASSES, mirror_repository
from ..root import Settings


def repository_of(ref: str) -> str:
    """`nvcr.io/nvidia/driver:580.105.08` -> `nvcr.io/nvidia/driver` (a digest or tag dropped)."""
    ref = ref.split("@", 1)[0]
    head, sep, tail = ref.rpartition("/")
    return f"{head}{sep}{tail.split(':', 1)[0]}"


def tag_of(ref: str) -> str | None:
    """The tag a reference pulls (`latest` when it names none), or None for a digest reference:
    pulled by content, it can be hidden by no other copy under one name."""
    if "@" in ref:
        return None
    last = ref.rpartition("/")[2]
    return last.partition(":")[2] or "latest"


OS_PART, KERNEL_PART = "<os>", "<kernel>"
"""Parts of a tag the operator completes per node (the driver's `<version>-<os>`)."""


def stack_images(s: Settings) -> list[tuple[str, str | None]]:
    """(repository, tag) of every image the stack can make the cluster pull, before any mirror or
    override; the driver's tag is a family (`580.105.08-<os>`, with usePrecompiled
    `580-<kernel>-<os>`: the operator appends the node's kernel and OS), a digest reference's None."""
    d = s.driver
    driver_tag = f"{d.version}-{KERNEL_PART}-{OS_PART}" if d.use_precompiled else f"{d.version}-{OS_PART}"
    out: list[tuple[str, str | None]] = [(i.repository, driver_tag if i.key == "driver" else i.tag) for i in CHART_IMAGES]
    v = s.validation.images
    refs = (*(rc.artifacts for rc in KATA_RUNTIME_CLASSES), v.cuda, v.toolbox, v.kubectl, s.validation.sharing_benchmark.image, s.mig.rollout.image,
            s.dra.rollout.image)
    if uses_dra(s):
        refs = (*refs, DRA_IMAGE)  # NVIDIA's DRA driver, where a node allocates through DRA
    out += [(repository_of(r), tag_of(r)) for r in refs]
    return list(dict.fromkeys(out))


def stack_repositories(s: Settings) -> list[str]:
    """Every repository the stack can make the cluster pull, before any mirror or override."""
    return list(dict.fromkeys(repository for repository, _ in stack_images(s)))


def _tag_pattern(tag: str) -> re.Pattern[str]:
    parts = re.split(f"({re.escape(OS_PART)}|{re.escape(KERNEL_PART)})", tag)
    return re.compile("".join("[A-Za-z0-9._-]+" if part in (OS_PART, KERNEL_PART) else re.escape(part) for part in parts))


def _same_tag(a: str, b: str) -> bool:
    """Whether tags `a` and `b` (either a family with <os>/<kernel>) can name one image."""
    if _tag_pattern(a).fullmatch(b) or _tag_pattern(b).fullmatch(a):
        return True
    # two families: the same literal start is one that can meet
    head_a, head_b = (t.split("<", 1)[0] for t in (a, b))
    return "<" in a and "<" in b and (head_a.startswith(head_b) or head_b.startswith(head_a))


def _collisions(sources: dict[str, set[str]]) -> list[tuple[str, str, str]]:
    """(source, other source, tag) for each two repositories mapped onto one that pull one tag."""
    found = []
    names = list(sources)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            tag = next((ta for ta in sorted(sources[a]) for tb in sorted(sources[b]) if _same_tag(ta, tb)), None)
            if tag is not None:
                found.append((a, b, tag))
    return found


def _mirrored_names(s: Settings) -> list[Problem]:
    """Two repositories the stack pulls that map onto one mirrored repository never pull one tag
    there (distinct tags live side by side in one repository); every name within the name limit."""
    im = s.images
    if im.mirror is None and not im.overrides:
        return []
    out = []
    by_target: dict[str, dict[str, set[str]]] = {}
    for repository, tag in stack_images(s):
        tags = by_target.setdefault(mirror_repository(repository, im), {}).setdefault(repository, set())
        if tag is not None:
            tags.add(tag)
    for target, sources in by_target.items():
        for a, b, tag in _collisions(sources):
            key = next((("images", "overrides", r) for r in (a, b) if r in im.overrides), ("images", "mirror"))
            out.append(Problem(
                key=config_key(key), value=im.overrides.get(key[-1]) if key[1] == "overrides" else im.mirror,
                message=(
                    f"maps {a}:{tag} and {b}:{tag} onto one mirrored image {target}:{tag}: one copy would hide the "
                    "other, and a pod would run an image it did not name; map one of them elsewhere with images.overrides"
                ),
            ))
    longest = max(by_target, key=len)
    if len(longest) > NAME_LIMIT:
        over = [t for t in by_target if len(t) > NAME_LIMIT]
        first = next(iter(by_target[longest]))
        key = ("images", "overrides", first) if first in im.overrides else ("images", "mirror")
        out.append(Problem(
            key=config_key(key), value=im.overrides.get(key[-1]) if key[1] == "overrides" else im.mirror,
            message=(
                f"makes {len(over)} image name(s) longer than the {NAME_LIMIT} characters a registry and a runtime "
                f"take (the longest, {len(longest)} characters: {longest[:60]}...); use a shorter mirror path"
            ),
        ))
    return out


def image_rules(s: Settings) -> list[Problem]:
    im = s.images
    out = []
    if im.registry_credentials is not None and im.mirror is None:
        out.append(Problem(
            key=config_key(("images", "registryCredentials")), value=SecretStr("hidden"),
            message="is a login to the mirror, and images.mirror is not set: set it (or remove the login)",
        ))
    known = stack_repositories(s)
    for original in im.overrides:
        if original not in known:
            out.append(Problem(
                key=config_key(("images", "overrides", original)), value=im.overrides[original],
                message=f"key is not an image repository this stack pulls (without tag); they are: {', '.join(known)}",
            ))
    return out + _mirrored_names(s)


def toolkit_packages(s: Settings) -> list[Problem]:
    """A mirror needs a repository and its key; mirror settings elsewhere would be ignored."""
    pk = s.toolkit.packages
    key = ("toolkit", "packages")
    out = []
    if s.toolkit.placement == "operator" and "packages" in s.toolkit.model_fields_set and pk.source != "nvidia":
        out.append(Problem(
            key=config_key((*key, "source")), value=pk.source,
            message=(
                "applies to toolkit.placement 'host' only: the operator's toolkit container installs "
                "nothing from a package repository (its image comes from images.mirror)"
            ),
        ))
    if pk.source == "mirror":
        if pk.apt_url is None and pk.rpm_url is None:
            out.append(Problem(
                key=config_key((*key, "aptUrl")), value=None,
                message="source 'mirror' needs the mirror's apt repository (aptUrl), rpm repository (rpmUrl) or both",
            ))
        if pk.gpg_key is None:
            out.append(Problem(
                key=config_key((*key, "gpgKey")), value=None,
                message="source 'mirror' needs the repository's signing key: a URL or the path of a file on the nodes",
            ))
    else:
        for field, value in (("aptUrl", pk.apt_url), ("rpmUrl", pk.rpm_url), ("gpgKey", pk.gpg_key)):
            if value is not None:
                out.append(Problem(
                    key=config_key((*key, field)), value=value,
                    message=f"applies to source 'mirror' only (source is {pk.source!r}); set source: mirror or remove it",
                ))
    return out
