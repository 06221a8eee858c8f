"""Validation Jobs ("checks") as plain manifests: what `pulumi up` runs after the release to prove the platform.

Each Job runs a payload from config/validation/ (mounted from a ConfigMap). At most one Job
per node; what can be checked through the API for all nodes at once is one Job for the cluster:
  cuda-smoke        one pod, one GPU, NVIDIA's vectorAdd sample must print "Test PASSED"
  sharing-capacity  cluster: every node's allocatable equals the capacity table (API read)
  sharing-pods      per shared node: R x G pods, one shared GPU each, all running at once
                    (on a shared MIG node each pod also must see one MIG device)
  mig-state         cluster: every MIG node's nvidia.com/mig.config.state reaches success
  mig-device        per MIG node not shared: a pod requesting the MIG resource sees one MIG device
  dcgm-metrics      the exporter serves DCGM_FI_DEV_GPU_UTIL for every watched GPU (framebuffer use
                    on an all-MIG cluster, whose GPUs report no utilisation)
  free-capacity     cluster: before any pod pinned to a node starts, that node has the GPU
                    resources the sample needs free (allocatable minus what pods there request)

Footprint (`validation.coverage`): `sample` (default) runs the GPU pods on one node of each class
(GPU model x sharing profile x MIG config), at most `podBudget` GPU pods in all, whatever the node
count; each sharing sample has one pod more than the node's physical devices of that resource, so
at least two pods share one device at once. `full` runs them on every node, R x G pods each (at
most `maxSharingPods`), for an acceptance run on an idle cluster. The capacity and MIG-state Jobs
read every node through the API either way.

The cluster Jobs read their per-node table from a ConfigMap of their own. The sharing pods of
all nodes find their peers through one headless Service (`sharing-barrier`). A Job's name ends
in a hash of the config it validates and of its whole manifest (TTL, labels, annotations
included), so any edit renames (replaces, re-runs) that Job and no other. Nothing here imports Pulumi.


Modules: manifests (shared pieces, names), cuda, sharing, mig, dcgm (one per check family) and
plan (the sample, the pod budget, the free-capacity gate, RBAC: `build_validation`).
"""

from __future__ import annotations

from .dcgm import dcgm_expected_gpus, dcgm_metric
from .manifests import (
    PAYLOAD_DIR,
    PAYLOAD_FILES,
    VALIDATION_LABELS,
    ValidationJob,
    ValidationPlan,
    footprint,
    job_name,
    job_names,
    node_slug,
    payload_data,
    payload_deadline,
)
from .plan import build_validation, node_class, sample_nodes

__all__ = [
    "PAYLOAD_DIR",
    "PAYLOAD_FILES",
    "VALIDATION_LABELS",
    "ValidationJob",
    "ValidationPlan",
    "build_validation",
    "dcgm_expected_gpus",
    "dcgm_metric",
    "footprint",
    "job_name",
    "job_names",
    "node_class",
    "node_slug",
    "payload_data",
    "payload_deadline",
    "sample_nodes",
]
