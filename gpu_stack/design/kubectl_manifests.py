"""The manifests every kubectl Job of the stack shares (the MIG rollout, the MIG layout guard, the
node label Job): its metadata, ServiceAccount, RBAC bindings, immutable ConfigMaps and the Job
itself. Each Job's own part (its pod, rules, deadline) stays with its builder. No Pulumi here."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RBAC = "rbac.authorization.k8s.io/v1"


def meta(name: str, labels: Mapping[str, str], namespace: str | None = None) -> dict[str, Any]:
    """`metadata` with a copy of `labels`, namespaced when `namespace` is given."""
    out: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if namespace is not None:
        out["namespace"] = namespace
    return out


def service_account(account: str, labels: Mapping[str, str], namespace: str) -> dict[str, Any]:
    """The Job's ServiceAccount; its token is mounted by the pod alone (automountServiceAccountToken)."""
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(account, labels, namespace),
            "automountServiceAccountToken": False}


def role(kind: str, account: str, labels: Mapping[str, str], namespace: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    """A `Role` (in `namespace`) or `ClusterRole` named for `account`, with `rules`."""
    return {"apiVersion": RBAC, "kind": kind, "metadata": meta(account, labels, namespace if kind == "Role" else None),
            "rules": rules}


def binding(kind: str, account: str, labels: Mapping[str, str], namespace: str) -> dict[str, Any]:
    """The `RoleBinding` or `ClusterRoleBinding` (`kind` is the role's) of `account`'s role to its ServiceAccount."""
    return {
        "apiVersion": RBAC,
        "kind": f"{kind}Binding",
        "metadata": meta(account, labels, namespace if kind == "Role" else None),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": account},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }


def config_map(name: str, labels: Mapping[str, str], namespace: str, data: dict[str, str]) -> dict[str, Any]:
    """An immutable ConfigMap (its name carries a hash of `data`, so an edit is a new one)."""
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta(name, labels, namespace), "data": data, "immutable": True}


def job(
    name: str, labels: Mapping[str, str], namespace: str, pod: dict[str, Any], *,
    backoff_limit: int, deadline: int, ttl: int,
) -> dict[str, Any]:
    """The Job running `pod`. `pulumi.com/replaceUnready`: a failed run is replaced (re-run) by the
    next `pulumi up`, after the cause is fixed."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {**meta(name, labels, namespace), "annotations": {"pulumi.com/replaceUnready": "true"}},
        "spec": {
            "backoffLimit": backoff_limit,
            "activeDeadlineSeconds": deadline,
            "ttlSecondsAfterFinished": ttl,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod},
        },
    }
