"""Rules on the operator release: one chart source, and repository options only where they apply."""

from __future__ import annotations

from pydantic import SecretStr

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


def repository_options(s: Settings) -> list[Problem]:
    """Credentials and a CA reach only an https repository: the provider loads a local chart from
    disk, and pulls an oci:// chart with Helm's own registry client (its login, the system CAs)."""
    op = s.operator
    out = []
    for field, value in (("repositoryCredentials", op.repository_credentials), ("repositoryCaFile", op.repository_ca_file)):
        if value is None:
            continue
        shown = SecretStr("hidden") if field == "repositoryCredentials" else value
        if op.chart_path is not None:
            out.append(Problem(
                key=config_key(("operator", field)), value=shown,
                message="applies to an https repository only; operator.chartPath loads the chart from disk: remove it",
            ))
        elif op.repository.startswith("oci://"):
            out.append(Problem(
                key=config_key(("operator", field)), value=shown,
                message=(
                    "applies to an https repository only: the provider pulls an oci:// chart with Helm's registry "
                    "client, which reads `helm registry login <registry>` (run it on the machine that runs pulumi) "
                    "and the system's CA certificates"
                ),
            ))
    return out
