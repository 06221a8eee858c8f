"""Rules on the operator release: one chart source."""

from __future__ import annotations

from ..errors import Problem, config_key
from ..root import Settings


def chart_source(s: Settings) -> list[Problem]:
    """A local chart and a repository at once would leave it unclear which one is installed."""
    op = s.operator
    if op.chart_path is not None and "repository" in op.model_fields_set:
        return [Problem(
            key=config_key(("operator", "chartPath")), value=op.chart_path,
            message="is set together with operator.repository; set one: a local chart (chartPath) or a repository",
        )]
    return []
