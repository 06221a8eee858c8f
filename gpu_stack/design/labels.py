"""The labels every object of the stack carries, defined once.

`BASE_LABELS` marks an object as the stack's own; `part_of()` adds the part of the stack it
belongs to (the validation suite, the MIG rollout, the layout guard); `pod_security()` is a
namespace's Pod Security Admission level (enforced, audited and warned alike). The taint
tolerations the stack's pods share are here too.
"""

from __future__ import annotations

MANAGED_BY = "app.kubernetes.io/managed-by"
PART_OF = "app.kubernetes.io/part-of"
BASE_LABELS: dict[str, str] = {MANAGED_BY: "gpu-stack"}
"""On every object the stack creates (not on the nodes it labels)."""
POD_SECURITY_MODES = ("enforce", "audit", "warn")


def part_of(part: str) -> dict[str, str]:
    """The base labels and `app.kubernetes.io/part-of: <part>`."""
    return {**BASE_LABELS, PART_OF: part}


def pod_security(level: str) -> dict[str, str]:
    """A namespace's `pod-security.kubernetes.io/{enforce,audit,warn}` labels, all at `level`."""
    return {f"pod-security.kubernetes.io/{mode}": level for mode in POD_SECURITY_MODES}


GPU_NODE_TOLERATION: dict[str, str] = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
"""The NoSchedule taint of GPU node pools (GKE and AKS set `nvidia.com/gpu`, many sites do), whatever
its value: tolerated by the pods that use no GPU but must run where only GPU nodes are (a managed
control plane has no Node of its own)."""
CONTROL_PLANE_TOLERATION: dict[str, str] = {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
