"""Rules on the operator's driver: what its container fetches, and from where.

The driver container (NVIDIA/gpu-driver-container, `nvidia-driver init`) updates the OS package
index and installs the node kernel's headers and modules from the distribution's repositories
unless it runs a precompiled image; the operator mounts `driver.repoConfig` (and `certConfig`)
into it only then (gpu-operator v25.10.1 controllers/object_controls.go, transformDriverContainer:
with usePrecompiled it returns before the repo and cert mounts). So a cluster whose nodes do not
reach those repositories (`driver.publicOsRepositories: false`) needs one of the two, and a
precompiled driver takes neither. A registry mirror is no such statement: many clusters with one
(a pull-through cache, a corporate registry) reach their OS repositories; there the plan says what
the driver container will fetch (`driver_fetches`), and nothing is refused.
"""

from __future__ import annotations

from ..cluster import DRIVER_BRANCH_RE
from ..driver_files import check_repo_file
from ..errors import MISSING, Problem, config_key
from ..root import Settings
from ..types import NAMESPACE


def repo_files(s: Settings) -> list[Problem]:
    """Each package source parsed as its package manager reads it, with no login in it."""
    out: list[Problem] = []
    for name, text in (s.driver.repo_config.files.items() if s.driver.repo_config is not None else ()):
        try:
            check_repo_file(name, text)
        except ValueError as exc:
            out.append(Problem(key=config_key(("driver", "repoConfig", "files", name)), value=text, message=str(exc)))
    return out


def driver_sources(s: Settings) -> list[Problem]:
    d = s.driver
    out: list[Problem] = repo_files(s)
    set_here = [
        name for name, given in (
            ("usePrecompiled", d.use_precompiled), ("repoConfig", d.repo_config is not None),
            ("certConfig", d.cert_config is not None),
        ) if given
    ]
    if d.placement == "host":
        if set_here:
            # Named at the placement: each of them is a valid value, wrong only beside a host driver.
            out.append(Problem(
                key=config_key(("driver", "placement")), value=d.placement,
                message=(
                    f"is 'host', and driver.{', driver.'.join(set_here)} applies to the operator's "
                    "driver container only (placement 'operator'); the host's driver is already installed: remove it"
                ),
            ))
        return out
    if d.use_precompiled:
        if not DRIVER_BRANCH_RE.fullmatch(d.version):
            out.append(Problem(
                key=config_key(("driver", "version")), value=d.version,
                message=(
                    "must be a driver branch such as 580 with driver.usePrecompiled: the operator pulls "
                    "<driver image>:<branch>-<kernel>-<os> (580-5.15.0-1048-aws-ubuntu22.04), and the "
                    "precompiled images are tagged by branch, not by full version"
                ),
            ))
        for field in set_here:
            if field != "usePrecompiled":
                out.append(Problem(
                    key=config_key(("driver", field)), value=MISSING,
                    message=(
                        "is not used with driver.usePrecompiled: true (the operator mounts it only into the "
                        "driver container that installs packages, and a precompiled one installs none); remove it"
                    ),
                ))
        return out
    if DRIVER_BRANCH_RE.fullmatch(d.version):
        out.append(Problem(
            key=config_key(("driver", "version")), value=d.version,
            message=(
                "is a driver branch, which only the precompiled images are tagged with: give the full "
                "version (580.105.08), or set driver.usePrecompiled: true"
            ),
        ))
    if not d.public_os_repositories and d.repo_config is None:
        out.append(Problem(
            key=config_key(("driver", "repoConfig")), value=MISSING,
            message=(
                "is not set while driver.publicOsRepositories is false: the operator's driver container would fetch "
                "each node's kernel headers with apt-get or dnf from repositories the nodes cannot reach; set "
                "driver.repoConfig.files (your mirror of them), or driver.usePrecompiled: true with driver.version a "
                "branch (580), or driver.placement: 'host'"
            ),
        ))
    return out


DRIVER_FETCHES = (
    "apt-get update, then linux-headers-<kernel> installed and linux-image-<kernel> and linux-modules-<kernel> "
    "downloaded (Ubuntu); dnf makecache, then elfutils-libelf-devel, kernel-headers-<kernel>, kernel-devel-<kernel>, "
    "kernel-<kernel> and the kernel's gcc (RHEL)"
)
"""What the driver container's `nvidia-driver init` fetches from the node OS's package repositories
before it builds the modules (gpu-driver-container 514eaf3 ubuntu22.04/nvidia-driver
_update_package_cache, _resolve_kernel_version, _install_prerequisites; rhel9/nvidia-driver
_install_prerequisites), each for the kernel of the node it runs on."""


def driver_fetches(s: Settings) -> list[str]:
    """The plan's warning for a mirrored stack whose operator driver still installs from the
    distribution's public repositories: what it fetches, and the setting for nodes that cannot."""
    d = s.driver
    if s.images.mirror is None or d.placement != "operator" or d.use_precompiled or d.repo_config is not None:
        return []
    return [
        (f"{NAMESPACE}:images.mirror is set, but the operator's driver container still installs packages (no "
        "driver.repoConfig, no driver.usePrecompiled): on each GPU node it fetches from the distribution's public "
        f"package repositories: {DRIVER_FETCHES}; a registry mirror does not serve these. If the nodes cannot reach "
        "them, set driver.publicOsRepositories: false, then driver.repoConfig (your mirror of them) or "
        "driver.usePrecompiled (docs/air-gapped.md)")
    ]
