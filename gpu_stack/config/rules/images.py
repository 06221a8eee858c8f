"""Rules on mirrors: a mirror login needs a mirror; an override names an image the stack pulls; a
toolkit package mirror names its repository and key."""

from __future__ import annotations

from pydantic import SecretStr

from ..errors import Problem, config_key
from ..grammars import NAME_LIMIT
from ..images import CHART_IMAGES, KATA_RUNTIME_CLASSES, mirror_repository
from ..root import Settings


def repository_of(ref: str) -> str:
    """`nvcr.io/nvidia/driver:580.105.08` -> `nvcr.io/nvidia/driver` (a digest or tag dropped)."""
    ref = ref.split("@", 1)[0]
    head, sep, tail = ref.rpartition("/")
    return f"{head}{sep}{tail.split(':', 1)[0]}"


def stack_repositories(s: Settings) -> list[str]:
    """Every repository the stack can make the cluster pull, before any mirror or override."""
    out = [i.repository for i in CHART_IMAGES] + [repository_of(rc.artifacts) for rc in KATA_RUNTIME_CLASSES]
    v = s.validation.images
    out += [repository_of(r) for r in (v.cuda, v.toolbox, v.kubectl, s.validation.sharing_benchmark.image, s.mig.rollout.image)]
    return list(dict.fromkeys(out))


def _mirrored_names(s: Settings) -> list[Problem]:
    """Each repository the stack pulls maps to its own mirrored name, within the name limit."""
    im = s.images
    if im.mirror is None and not im.overrides:
        return []
    out = []
    by_target: dict[str, list[str]] = {}
    for repository in stack_repositories(s):
        by_target.setdefault(mirror_repository(repository, im), []).append(repository)
    for target, sources in by_target.items():
        if len(sources) > 1:
            key = next((("images", "overrides", r) for r in sources if r in im.overrides), ("images", "mirror"))
            out.append(Problem(
                key=config_key(key), value=im.overrides.get(key[-1]) if key[1] == "overrides" else im.mirror,
                message=(
                    f"maps {' and '.join(sources)} onto one mirrored image {target}: one copy would hide the other, "
                    "and a pod would run an image it did not name; map one of them elsewhere with images.overrides"
                ),
            ))
    longest = max(by_target, key=len)
    if len(longest) > NAME_LIMIT:
        over = [t for t in by_target if len(t) > NAME_LIMIT]
        key = ("images", "overrides", by_target[longest][0]) if by_target[longest][0] in im.overrides else ("images", "mirror")
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
