"""An interrupted Helm operation, read from Helm's own release records before Helm meets it.

Helm 3 keeps one Secret per release revision in the release namespace
(`sh.helm.release.v1.<name>.v<revision>`, labels `owner=helm`, `name`, `version`, `status`). A
`pulumi up` killed while Helm installs or upgrades (a CI job's time limit, an OOM kill, a lost
runner) leaves the newest record `pending-install` / `pending-upgrade` / `pending-rollback`, and
every later install or upgrade of the release fails inside Helm ("cannot re-use a name that is
still in use", "another operation (install/upgrade/rollback) is in progress"), a message that
names neither the cause nor the way out. `pending_release_problem` turns those records into the
one line `pulumi preview` and `pulumi up` fail with instead.

Where the records are: Helm's storage driver, which pulumi-kubernetes 4.25.0 takes from the
provider's `helmReleaseSettings.driver` (the stack sets none), else `PULUMI_K8S_HELM_DRIVER`, else
`secret` (provider/pkg/provider/provider.go); Helm 3.18.6 (pkg/action/action.go Init) reads
`secret`/`secrets`/"" as Secrets, `configmap`/`configmaps` as ConfigMaps (the same name and
labels), `memory` as records that die with the provider process, `sql` as a database. Stuck or
still running: each record's labels carry when Helm wrote it (`createdAt` on create, `modifiedAt`
on update, unix seconds: pkg/storage/driver/secrets.go and cfgmaps.go); a pending record younger
than the longest a live operation keeps it pending (`live_limit_seconds`) may belong to a Helm
operation still under way, and the line says so.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

RELEASE_RECORD_SELECTOR = "owner=helm,name={name}"
"""The label selector of one release's records (Helm's Secret and ConfigMap storage drivers)."""

HELM_DRIVER_ENV = "PULUMI_K8S_HELM_DRIVER"


@dataclass(frozen=True)
class RecordStore:
    """Where Helm keeps the release's records for the provider."""

    kind: str | None
    """`secret` or `configmap`: the Kubernetes kind to list; None: nothing this check can read."""
    why_not: str | None = None
    """Why the records cannot be read here (kind None); None for the memory driver, whose records
    never outlive the provider process, so there is nothing to be stuck."""

    @property
    def resource(self) -> str:
        return f"{self.kind}s"


def record_store(environ: Mapping[str, str]) -> RecordStore:
    """The storage driver as pulumi-kubernetes 4.25.0 passes it to Helm 3.18.6 (set but empty counts
    as set: the provider's os.LookupEnv, then Helm's "" = secret)."""
    driver = environ.get(HELM_DRIVER_ENV, "secret")
    if driver in ("secret", "secrets", ""):
        return RecordStore("secret")
    if driver in ("configmap", "configmaps"):
        return RecordStore("configmap")
    if driver == "memory":
        return RecordStore(None)
    if driver == "sql":
        return RecordStore(None, f"{HELM_DRIVER_ENV}=sql keeps them in a database (HELM_DRIVER_SQL_CONNECTION_STRING), which this check does not read")
    return RecordStore(None, f"{HELM_DRIVER_ENV}={driver[:40]!r} is not a Helm storage driver (secret, configmap, memory, sql): Helm will refuse it")


LIVE_TIMEOUTS = {"pending-install": 1, "pending-upgrade": 2, "pending-rollback": 1}
"""How many of the release's `timeout` a live operation of this chart keeps its record pending:
Helm 3.18.6 gives each phase that waits the whole timeout (pkg/action/install.go performInstall:
pre-install hooks, the wait for the objects, post-install hooks; upgrade.go releasingUpgrade the
same for upgrade hooks; rollback.go likewise), pulumi-kubernetes 4.25.0 passes the release's
`timeout` to each (helm_release.go). The GPU Operator chart v25.10.1 has one hooked Job, pre-upgrade
(templates/upgrade_crd.yaml), and no install or rollback hooks. With `atomic`, a failed install
marks its record failed before uninstalling, a failed upgrade before rolling back (a new,
pending-rollback record)."""
LIVE_MARGIN_SECONDS = 120
"""Beyond the waits: rendering, creating the objects and CRDs, and the clocks of two machines."""


def live_limit_seconds(status: str, timeout_seconds: int) -> int:
    return LIVE_TIMEOUTS.get(status, 2) * timeout_seconds + LIVE_MARGIN_SECONDS


def written_at(labels: Mapping[str, str]) -> int | None:
    """When Helm last wrote the record (the later of `createdAt` and `modifiedAt`), or None."""
    times = []
    for key in ("createdAt", "modifiedAt"):
        value = str(labels.get(key, ""))
        if value.isascii() and value.isdigit():
            times.append(int(value))
    return max(times) if times else None

PENDING_STATUSES = ("pending-install", "pending-upgrade", "pending-rollback")

RECOVERY_DOC = "docs/upgrades-and-destroy.md#an-interrupted-helm-install-or-upgrade"


def _revision(labels: Mapping[str, str]) -> int:
    try:
        return int(labels.get("version", "0"))
    except ValueError:
        return 0


def release_records(items: Iterable[Mapping[str, Any]]) -> list[tuple[int, str, str, int | None]]:
    """(revision, status, record name, written at) per record, oldest first, from their metadata."""
    records = []
    for item in items:
        meta = item.get("metadata") or {}
        labels = meta.get("labels") or {}
        records.append((_revision(labels), str(labels.get("status", "")), str(meta.get("name", "")), written_at(labels)))
    return sorted(records, key=lambda r: r[:3])


def _ago(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} s"
    return f"{seconds // 60} min" if seconds < 7200 else f"{seconds // 3600} h"


def pending_release_problem(
    items: Iterable[Mapping[str, Any]], release: str, namespace: str, *,
    timeout_seconds: int, now: float, kind: str = "secret",
) -> str | None:
    """The one line to fail with when the release's newest record is pending, else None.

    Helm judges a release by its newest revision only (an older pending record under a newer
    deployed one blocks nothing), so only the newest one counts here. A record older than a live
    operation stays pending (`live_limit_seconds` of the release's `timeout_seconds`) is stuck: an
    earlier `pulumi up` stopped during it. A younger one, or one without a time, may be a Helm
    operation still under way (another `pulumi up` of a stack that names this release, a `helm`
    run by hand): the line says to wait for it first. `kind`: the records' kind (record_store)."""
    records = release_records(items)
    if not records:
        return None
    revision, status, record, written = records[-1]
    if status not in PENDING_STATUSES:
        return None
    operation = status.removeprefix("pending-")
    helm = f"helm -n {namespace}"
    if status == "pending-install":
        fix = f"`{helm} uninstall {release}`"
    else:
        earlier = [r for r, s, _, _ in records[:-1] if s in ("deployed", "superseded")]
        fix = f"`{helm} rollback {release} {earlier[-1]}`" if earlier else f"`{helm} uninstall {release}`"
    remedy = (
        f"run {fix} (without helm: `kubectl -n {namespace} delete {kind} {record}`), then `pulumi cancel` if the stack "
        f"is still locked, and `pulumi up` again ({RECOVERY_DOC})"
    )
    head = f"the Helm release {namespace}/{release} is {status} (revision {revision})"
    limit = live_limit_seconds(status, timeout_seconds)
    age = None if written is None else max(0, int(now) - written)
    if age is not None and age > limit:
        return (
            f"{head}, written {_ago(age)} ago, longer than a Helm {operation} of it can run ({_ago(limit)} with its "
            f"{timeout_seconds} s timeout): an earlier `pulumi up` stopped during the Helm {operation} and Helm "
            f"refuses every later operation on it; {remedy}"
        )
    when = "at a time Helm did not record" if age is None else f"{_ago(age)} ago"
    return (
        f"{head}, written {when}, within the {_ago(limit)} a Helm {operation} of it can run: a Helm operation may "
        f"still be under way (another `pulumi up` naming this release, a `helm` command); wait for it to end and run "
        f"`pulumi up` again; if none is running (an earlier `pulumi up` was killed), {remedy}"
    )
