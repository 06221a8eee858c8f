"""The validation plan: which nodes run GPU pods (the sample), the pod budget, the free-capacity
gate, and every check family's Jobs with the RBAC they need.

`build_validation` takes `validation.*`, the node facts, the derived sharing, MIG and DCGM configs,
the pull secrets and the few settings the Jobs record (driver, toolkit, operator, exporter, MIG
strategy); each shared piece (the Jobs' context, each node's shared resource, the MIG nodes) is
computed once here and handed to the check families."""

from __future__ import annotations

from collections.abc import Sequence

from ...config.cluster import DriverSettings, OperatorSettings, ToolkitSettings
from ...config.monitoring import DcgmExporterSettings
from ...config.validation import ValidationSettings
from ..capacity import NodeFacts
from ..dcgm import DcgmMetricsConfig
from ..mig import MigConfig
from ..naming import content_name
from ..sharing import SharingConfig
from .benchmark import (
    RESULTS_CONFIGMAP,
    benchmark_job,
    benchmark_nodes,
    collector_job,
    collector_rbac,
    replicas_per_gpu,
)
from .cuda import cuda_smoke
from .dcgm import dcgm_metrics
from .dra import dra_claim_job
from .isolation import no_gpu_job
from .manifests import (
    NODE_READER,
    RESTRICTED_NAMESPACE_LABELS,
    VALIDATION_LABELS,
    JobContext,
    ValidationJob,
    ValidationPlan,
    cluster_job,
    final_name,
    payload_data,
)
from .mig import mig_device_job, mig_state_job
from .sharing import barrier_service, capacity_expected, shared_resource, sharing_capacity, sharing_pods


def node_class(facts: NodeFacts) -> tuple[str, ...]:
    """What makes two nodes interchangeable for validation: GPU model, sharing profile, MIG config,
    and `dra` for a node whose GPUs are allocated through DRA."""
    return (facts.node.gpu.model, facts.profile_key or "-", facts.node.mig or "-", *(("dra",) if facts.uses_dra else ()))


def sample_nodes(coverage: str, nodes: Sequence[NodeFacts]) -> dict[str, tuple[str, ...]]:
    """Node name -> class of the nodes whose GPU pods run: the first declared node of each class
    (`coverage: sample`), or every node (`coverage: full`)."""
    out: dict[str, tuple[str, ...]] = {}
    seen: set[tuple[str, ...]] = set()
    for facts in nodes:
        cls = node_class(facts)
        if coverage == "full" or cls not in seen:
            seen.add(cls)
            out[facts.name] = cls
    return out


def _physical_of(facts: NodeFacts, resource: str) -> int:
    """Physical devices behind a shared resource on the node (GPUs, or MIG instances)."""
    return facts.physical.get(resource.removesuffix(".shared")) or facts.node.gpu.count


def free_capacity(ctx: JobContext, configmap: str, needs: dict[str, dict[str, int]], after: tuple[str, ...]) -> ValidationJob:
    """The gate before the pinned GPU pods: each node has what its pods request free."""
    validates = {"check": "free-capacity", "needs": needs, "image": ctx.validation.images.kubectl}
    lines = [f"{node} " + " ".join(f"{r}={n}" for r, n in sorted(res.items())) for node, res in needs.items()]
    job = cluster_job(ctx, configmap, "free-capacity", "free-capacity.sh", validates, lines)
    return ValidationJob(**{**job.__dict__, "after": after})


def build_validation(
    v: ValidationSettings,
    nodes: Sequence[NodeFacts],
    sharing: SharingConfig,
    mig: MigConfig,
    dcgm: DcgmMetricsConfig,
    *,
    pull_secrets: Sequence[str],
    mig_strategy: str,
    driver: DriverSettings,
    toolkit: ToolkitSettings,
    operator: OperatorSettings,
    exporter: DcgmExporterSettings,
) -> ValidationPlan | None:
    """Every validation resource as a manifest; None when `validation.enabled` is false.

    `v`: `validation.*` with its images mirrored; `nodes`, `sharing`, `mig` and `dcgm` are the
    stack's derived node facts and configs, `pull_secrets` its pull secrets (design.derive).
    """
    if not v.enabled:
        return None
    ctx = JobContext(v, tuple(pull_secrets))
    data = payload_data()
    configmap_name = content_name("validation-payloads", data)
    files = sharing.files
    document = mig.document
    mig_nodes = [f for f in nodes if f.node.mig is not None]
    sampled = sample_nodes(v.coverage, nodes)
    # Sampled shared node -> the resource its sharing pods (and benchmark) request, once per node.
    shared = {f.name: shared_resource(f) for f in nodes if f.shares and f.name in sampled}
    # The smoke pod runs on the first sampled node that advertises a GPU resource, behind the
    # free-capacity gate with the other pinned pods (so a full cluster fails the gate with a
    # message, not the smoke Job at its deadline); unpinned when no node is declared.
    smoke_on = next((f for f in nodes if f.name in sampled and f.advertised), None)
    smoke = cuda_smoke(ctx, configmap_name, nodes, on=smoke_on, driver=driver, toolkit=toolkit, operator=operator)
    # Where every node is a DRA node no node advertises nvidia.com/gpu: its dra-claim Jobs run the payload instead.
    all_dra = bool(nodes) and all(f.uses_dra for f in nodes)
    jobs: list[ValidationJob] = [] if smoke_on is not None or all_dra else [smoke]
    capacity_table = capacity_expected(nodes)
    capacity = sharing_capacity(ctx, configmap_name, capacity_table)
    mig_state = mig_state_job(ctx, configmap_name, document, mig_nodes, mig_strategy)
    jobs += [j for j in (capacity, mig_state) if j is not None]
    cluster_keys = tuple(j.key for j in (capacity, mig_state) if j is not None)

    # The pinned GPU pods: sharing samples, then MIG devices not proven by a sharing sample.
    sharing_samples = [f for f in nodes if f.shares and f.name in sampled]
    mig_candidates = [f for f in nodes if f.name in sampled and f.mig_resource is not None]
    budget = None if v.coverage == "full" else v.pod_budget
    notes: list[str] = []
    pinned: list[ValidationJob] = [smoke] if smoke_on is not None else []
    mig_proven = set()  # nodes whose sharing pods request (and so prove) the MIG resource
    left = None if budget is None else budget - 1  # the smoke pod
    for facts in sharing_samples:
        node = facts.node
        cap = None
        if budget is not None:
            cap = _physical_of(facts, shared[facts.name]) + 1
        job = sharing_pods(
            ctx, facts, shared[facts.name], configmap_name, files, ("free-capacity",), cap, mig_strategy=mig_strategy
        )
        if left is not None:
            if job.pods > left:
                notes.append(f"{node.name} ({', '.join(sampled[node.name])}): {job.pods} sharing pods")
                continue
            left -= job.pods
        if "mig" in job.validates:
            mig_proven.add(node.name)
        pinned.append(job)
    for facts in mig_candidates:
        node = facts.node
        if node.name in mig_proven:
            continue
        if left is not None:
            if left < 1:
                notes.append(f"{node.name} ({', '.join(sampled[node.name])}): 1 MIG-device pod")
                continue
            left -= 1
        job = mig_device_job(ctx, node, configmap_name, document, facts.mig_resource or "", mig_strategy)
        pinned.append(ValidationJob(**{**job.__dict__, "after": ("free-capacity",)}))
    # Each sampled DRA node: a pod that claims a device through a ResourceClaimTemplate.
    for facts in nodes:
        if not facts.uses_dra or facts.name not in sampled or not facts.dra_devices:
            continue
        if left is not None:
            if left < 1:
                notes.append(f"{facts.name} ({', '.join(sampled[facts.name])}): 1 DRA claim pod")
                continue
            left -= 1
        pinned.append(dra_claim_job(ctx, configmap_name, facts))
    # The negative check, from what the budget leaves: a pod that asked for no GPU sees none. Once
    # per node class under `coverage: sample` (it proves the class's configuration); on every node
    # under `full` (a host toolkit's config is written on each node: one edited by hand or whose
    # preparation went wrong is checked on an acceptance run too).
    unchecked: list[str] = []
    classes: set[tuple[str, ...]] = set()
    # With toolkit.acceptEnvvarWhenUnprivileged true the toolkit gives every pod under the nvidia
    # runtime the GPUs NVIDIA_VISIBLE_DEVICES names, by the user's choice: the check would fail every
    # `up` by design, so it is not planned (and the plan says so).
    isolating = not toolkit.accept_envvar_when_unprivileged
    for facts in nodes if isolating else ():
        cls = sampled.get(facts.name)
        if cls is None or (cls in classes and v.coverage != "full") or not facts.advertised:
            continue
        classes.add(cls)
        if left is not None:
            if left < 1:
                unchecked.append(f"{facts.name} ({', '.join(cls)})")
                continue
            left -= 1
        pinned.append(no_gpu_job(ctx, facts, configmap_name, cls, toolkit))
    benches: list[ValidationJob] = []
    skipped: list[str] = []
    if v.sharing_benchmark.enabled:
        for facts in benchmark_nodes(nodes, sampled, lambda f: shared[f.name]):
            resource = shared[facts.name]
            pods = replicas_per_gpu(facts, resource) * facts.node.gpu.count
            if left is not None:
                if pods > left:
                    skipped.append(f"{facts.name} ({facts.node.gpu.model}, {facts.profile.mode if facts.profile else '-'}): {pods} pods")
                    continue
                left -= pods
            # It fills the node: after every other pinned Job there (their pods would hold replicas).
            before = tuple(j.key for j in pinned if j.node == facts.name) or ("free-capacity",)
            benches.append(final_name(benchmark_job(ctx, facts, configmap_name, resource, before)))
    if pinned or benches:
        # What must be free at once on each node: the pods of a barrier Job (sharing pods) all run
        # together; a Job without a barrier (the smoke pod, a MIG-device pod) can wait on the node
        # until those finish, so it needs only its own pods free, not on top of theirs.
        # A benchmark Job runs after the rest of its node's pinned Jobs: it needs its own pods only.
        needs: dict[str, dict[str, int]] = {}
        for job in sorted(pinned, key=lambda j: not j.barrier):  # barrier Jobs first: they add up
            if job.gpu_resource is None:
                continue  # the no-GPU pod holds no GPU
            assert job.node is not None
            held = needs.setdefault(job.node, {}).get(job.gpu_resource, 0)
            needs[job.node][job.gpu_resource] = held + job.pods if job.barrier else max(held, job.pods)
        for job in benches:
            assert job.node is not None and job.gpu_resource is not None
            held = needs.setdefault(job.node, {}).get(job.gpu_resource, 0)
            needs[job.node][job.gpu_resource] = max(held, job.pods)
        # No gate where no pinned pod requests an extended resource (DRA nodes' claims only): it
        # would check an empty table.
        if needs:
            jobs.append(free_capacity(ctx, configmap_name, needs, cluster_keys))
        jobs += pinned + benches
    if benches:
        jobs.append(collector_job(ctx, configmap_name, benches))
    dcgm_job = dcgm_metrics(ctx, configmap_name, exporter, dcgm, nodes, operator.namespace)
    if dcgm_job is not None:
        jobs.append(dcgm_job)
    jobs = [final_name(j) for j in jobs]
    if notes:
        notes = [
            f"validation.podBudget ({budget}) leaves {len(notes)} node class(es) without GPU pods: "
            + "; ".join(notes[:5])
            + (f"; and {len(notes) - 5} more" if len(notes) > 5 else "")
            + " (their capacity and MIG state are still read through the API; raise "
            "gpu-stack:validation.podBudget, or set validation.coverage full for an acceptance run)"
        ]
    if unchecked:
        notes.append(
            f"validation.podBudget ({budget}) leaves {len(unchecked)} node class(es) without the no-GPU check "
            "(a pod that requests no GPU must see none): " + "; ".join(unchecked[:5])
            + (f"; and {len(unchecked) - 5} more" if len(unchecked) > 5 else "") + " (raise gpu-stack:validation.podBudget)"
        )
    if not isolating:
        notes.append(
            "toolkit.acceptEnvvarWhenUnprivileged is true: a pod that requests no GPU may see every GPU of its node "
            "through NVIDIA_VISIBLE_DEVICES, so the no-GPU check is not planned (set it false to have GPUs only "
            "for pods that request them, and the check back)"
        )
    if skipped:
        notes.append(
            f"validation.podBudget ({budget}) leaves no room for the sharing benchmark on {len(skipped)} node(s), "
            "which fills a node's GPUs (replicas x GPUs pods): " + "; ".join(skipped[:5])
            + " (raise gpu-stack:validation.podBudget to measure them)"
        )

    ns_meta = {"labels": {**RESTRICTED_NAMESPACE_LABELS, **VALIDATION_LABELS}}
    plan = ValidationPlan(
        namespace={"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": v.namespace, **ns_meta}},
        configmap={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": configmap_name, "namespace": v.namespace, "labels": dict(VALIDATION_LABELS)},
            "data": data,
            "immutable": True,
        },
        jobs=tuple(jobs),
        timeout_seconds=v.timeout_seconds + 60,
        barrier_service=barrier_service(v.namespace) if any(j.barrier for j in jobs) else None,
        notes=tuple(notes),
        collector=collector_rbac(v.namespace) if benches else None,
        results_configmap=RESULTS_CONFIGMAP if benches else None,
    )
    readers = sorted(
        set(capacity_table if capacity is not None else ())
        | ({f.name for f in mig_nodes} if mig_state else set())
        | {j.node for j in jobs if j.node is not None}
    )
    if not readers:
        return plan
    role_name = f"{v.namespace}-{NODE_READER}"
    return ValidationPlan(
        namespace=plan.namespace,
        configmap=plan.configmap,
        jobs=plan.jobs,
        timeout_seconds=plan.timeout_seconds,
        barrier_service=plan.barrier_service,
        notes=plan.notes,
        collector=plan.collector,
        results_configmap=plan.results_configmap,
        service_account={
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": NODE_READER, "namespace": v.namespace, "labels": dict(VALIDATION_LABELS)},
            "automountServiceAccountToken": False,
        },
        cluster_role={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role_name, "labels": dict(VALIDATION_LABELS)},
            # Only `get`, only on the nodes the checks read: no list, no watch, no other object;
            # and, for the free-capacity gate, `list` of pods (their requests per node).
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"], "resourceNames": readers}]
            + ([{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}] if any(j.check == "free-capacity" for j in jobs) else []),
        },
        cluster_role_binding={
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role_name, "labels": dict(VALIDATION_LABELS)},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": NODE_READER, "namespace": v.namespace}],
        },
    )
