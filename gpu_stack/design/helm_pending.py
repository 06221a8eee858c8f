"""An interrupted Helm operation, read from Helm's own release records before Helm meets it.

Helm 3 keeps one Secret per release revision in the release namespace
(`sh.helm.release.v1.<name>.v<revision>`, labels `owner=helm`, `name`, `version`, `status`). A
`pulumi up` killed while Helm installs or upgrades (a CI job's time limit, an OOM kill, a lost
runner) leaves the newest record `pending-install` / `pending-upgrade` / `pending-rollback`, and
every later install or upgrade of the release fails inside Helm ("cannot re-use a name that is
still in use", "another operation (install/upgrade/rollback) is in progress"), a message that
names neither the cause nor the way out. `pending_release_problem` turns those records into the
one line `pulumi preview` and `pulumi up` fail with instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

RELEASE_RECORD_SELECTOR = "owner=helm,name={name}"
"""The label selector of one release's records (Helm's Secret storage driver)."""

PENDING_STATUSES = ("pending-install", "pending-upgrade", "pending-rollback")

RECOVERY_DOC = "docs/upgrades-and-destroy.md#an-interrupted-helm-install-or-upgrade"


def _revision(labels: Mapping[str, str]) -> int:
    try:
        return int(labels.get("version", "0"))
    except ValueError:
        return 0


def release_records(items: Iterable[Mapping[str, Any]]) -> list[tuple[int, str, str]]:
    """(revision, status, record name) per record, oldest first, from the Secrets' metadata."""
    records = []
    for item in items:
        meta = item.get("metadata") or {}
        labels = meta.get("labels") or {}
        records.append((_revision(labels), str(labels.get("status", "")), str(meta.get("name", ""))))
    return sorted(records)


def pending_release_problem(items: Iterable[Mapping[str, Any]], release: str, namespace: str) -> str | None:
    """The one line to fail with when the release's newest record is pending, else None.

    Helm judges a release by its newest revision only (an older pending record under a newer
    deployed one blocks nothing), so only the newest one counts here."""
    records = release_records(items)
    if not records:
        return None
    revision, status, record = records[-1]
    if status not in PENDING_STATUSES:
        return None
    operation = status.removeprefix("pending-")
    helm = f"helm -n {namespace}"
    if status == "pending-install":
        fix = f"`{helm} uninstall {release}`"
    else:
        earlier = [r for r, s, _ in records[:-1] if s in ("deployed", "superseded")]
        fix = f"`{helm} rollback {release} {earlier[-1]}`" if earlier else f"`{helm} uninstall {release}`"
    return (
        f"the Helm release {namespace}/{release} is {status} (revision {revision}): an earlier `pulumi up` "
        f"stopped during the Helm {operation} and Helm refuses every later operation on it; run {fix} "
        f"(without helm: `kubectl -n {namespace} delete secret {record}`), then `pulumi cancel` if the stack "
        f"is still locked, and `pulumi up` again ({RECOVERY_DOC})"
    )
