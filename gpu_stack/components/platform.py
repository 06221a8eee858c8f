"""`GpuPlatform`: the whole GPU platform as one Pulumi component, for this project's own
`__main__.py` and for any other Pulumi program (one that already creates the cluster, say).

    import pulumi_kubernetes as k8s
    from gpu_stack import GpuPlatform

    cluster = k8s.Provider("gpus", kubeconfig=eks_cluster.kubeconfig)
    platform = GpuPlatform("gpus", {"nodes": [...], "sharing": {"mode": "time-slicing", "replicas": 4}},
                           provider=cluster)
    pulumi.export("gpuCapacity", platform.outputs["capacity"])

It takes the `gpu-stack:` namespace of a stack file as a mapping (the same keys, the same models,
the same one-line errors: a bad mapping registers nothing, the component included) and registers
every resource the stack registers, under itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ..config import Settings, SettingsError, load_settings
from .stack import build_stack, check_stack

TYPE = "gpu-stack:index:GpuPlatform"


def platform_settings(settings: Settings | Mapping[str, Any], secret_keys: Iterable[str] = ()) -> Settings:
    """`settings` validated (a Settings passes as it is); a bad mapping raises pulumi.RunError with
    the problems, one line each, naming the keys as a stack file names them (`gpu-stack:nodes[0].name`)."""
    if isinstance(settings, Settings):
        return settings
    try:
        return load_settings(dict(settings), secret_keys=list(secret_keys) or None)
    except SettingsError as exc:
        raise pulumi.RunError(str(exc)) from None


class GpuPlatform(pulumi.ComponentResource):
    """Node preparation, the GPU Operator release, GPU sharing and MIG, monitoring and the
    validation Jobs of one cluster, from the settings of a stack file's `gpu-stack:` namespace.

    `settings`: that namespace as a mapping (keys camelCase, as in the stack file), or Settings.
    `provider`: the Kubernetes provider of the cluster (None: one of its own, from
    `kubernetes.context` / `kubernetes.kubeconfig`; with one of yours, the pending-release check of
    `pulumi preview` is off, since its connection is yours). `secret_keys`: top-level keys whose
    values are secret (`ssh`), shown as `[secret]` in errors. The outputs are the stack outputs
    of docs/configuration.md#outputs, in `outputs`.

    One per program: the children keep the names the stack gives them (so stacks made before this
    component keep their resources, through aliases)."""

    outputs: dict[str, Any]
    """The stack outputs (design/outputs.py): capacity, node preflight, release name, and the rest."""

    def __init__(
        self,
        name: str,
        settings: Settings | Mapping[str, Any],
        provider: k8s.Provider | None = None,
        secret_keys: Iterable[str] = (),
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        # Validated and checked before the component itself is registered: a bad config, a missing
        # chart or SSH key registers nothing.
        valid = platform_settings(settings, secret_keys)
        checked = check_stack(valid)
        super().__init__(TYPE, name, None, opts)
        self.outputs = build_stack(valid, parent=self, provider=provider, checked=checked)
        self.register_outputs(self.outputs)
