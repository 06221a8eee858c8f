"""Every cross-field rule of the stack config, listed in one place: `RULES`.

Per-field checks live on the models (and their annotated types); what needs two fields at once,
or a field and the GPU catalog, is a rule here. Each rule takes validated Settings and returns
Problems naming the config key; `check_settings` runs them all, in this order, so one run reports
every problem at once. Rules read the settings and data below the config (the GPU catalog, the
DCGM field list), never a builder.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import Problem
from ..root import Settings
from .advisories import advisories
from .dra import dra_rules
from .dra_rollout import dra_rollout_rules
from .driver import driver_sources
from .images import image_rules, toolkit_packages
from .job_images import job_image_rules
from .mig import mig_rules
from .monitoring import dcgm_rules, validation_rules
from .nodes import addresses_unique, nodes_unique, placement, ssh
from .operator import chart_source, repository_options
from .sharing import sharing_rules

Rule = Callable[[Settings], list[Problem]]

RULES: tuple[Rule, ...] = (
    nodes_unique,
    addresses_unique,
    placement,
    ssh,
    chart_source,
    repository_options,
    mig_rules,
    sharing_rules,
    dra_rules,
    dra_rollout_rules,
    dcgm_rules,
    validation_rules,
    image_rules,
    job_image_rules,
    toolkit_packages,
    driver_sources,
)
"""The rules, in the order their problems are reported."""

__all__ = ["RULES", "Rule", "advisories", "check_settings"]


def check_settings(settings: Settings) -> list[Problem]:
    """Every cross-field problem of the config, in a stable order."""
    problems: list[Problem] = []
    for rule in RULES:
        problems.extend(rule(settings))
    return problems
