"""NVIDIA's DRA driver: its Helm release, registered from the design's DraPlan (gpu_stack/design/dra.py
decides the chart, the values and the nodes), only when a node's GPUs are allocated through DRA."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from ..design.dra import DraPlan


@dataclass
class DraDriverArgs:
    plan: DraPlan
    chart: str
    """The chart the release installs: the plan's, or its local copy's absolute path (the provider
    then loads it from disk, no network)."""
    depends_on: Sequence[pulumi.Input[pulumi.Resource]] = ()
    """What the release waits for: the operator's release (its namespace, the driver and toolkit
    the kubelet plugin uses, and the label Job that turned the device plugin off)."""


class DraDriver(pulumi.ComponentResource):
    release: k8s.helm.v3.Release

    def __init__(self, name: str, args: DraDriverArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:DraDriver", name, None, opts)
        plan = args.plan
        release: dict[str, Any] = {**plan.release, "chart": args.chart, "version": plan.version}
        if plan.repository is not None:
            release["repository_opts"] = {"repo": plan.repository}
        self.release = k8s.helm.v3.Release(
            f"{name}-release",
            **release,
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(args.depends_on), delete_before_replace=True),
        )
        self.register_outputs({"release": self.release.status})
