"""One simulated cluster for one stack, with everything a `pulumi up` of it needs: the control
plane, a Node per declared node (GFD's labels), the Prometheus Operator CRDs, the device plugin
and MIG manager stand-ins, a real sshd per node prepared over SSH (sandbox/ssh_nodes.py: the
stack copy points each node's address, host key and the SSH key there), and the real Pulumi CLI
on a copy of the project. `Sandbox` stops all it started, also when a step fails (use it as a
context manager)."""

from __future__ import annotations

import shlex
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import yaml

from . import reference
from .cluster import Cluster
from .dra_slices import DraAgents
from .gpu_nodes import BringUp, NodeAgents, hardware_of, node_manifest
from .pod_runner import PodRunner
from .pulumi_cli import PulumiProject
from .ssh_nodes import SshNodes
from .toolchain import PROJECT_DIR, Toolchain, find

# The reference folder of the tests (sandbox/reference.py: one setting, `make reference` fills it)
REFERENCE = reference.reference_dir()
CHART_DIR = reference.path(reference.CHART)
PROMETHEUS_CRDS = [reference.path(rel) for rel in reference.PROMETHEUS_CRDS]
NAMESPACE = "gpu-stack"
GPU_POOL_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
"""The taint GKE puts on the nodes of a GPU node pool."""


def stack_document(stack: str, source: Path = PROJECT_DIR) -> dict[str, Any]:
    path = source / f"Pulumi.{stack}.yaml"
    if not path.exists():
        path = source / "tests" / "stacks" / f"Pulumi.{stack}.yaml"
    return yaml.safe_load(path.read_text())


def _merged(base: Any, extra: Any) -> Any:
    """`extra` over `base`, mappings merged key by key (as `pulumi config set --path` edits)."""
    if isinstance(base, dict) and isinstance(extra, dict):
        return {**base, **{k: _merged(base.get(k), v) for k, v in extra.items()}}
    return extra


def stack_nodes(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return list((doc.get("config") or {}).get(f"{NAMESPACE}:nodes") or [])


def host_managed(doc: dict[str, Any]) -> bool:
    """The stack prepares its nodes over SSH (the driver or the toolkit on the host)."""
    cfg = doc.get("config") or {}
    return any((cfg.get(f"{NAMESPACE}:{part}") or {}).get("placement") == "host" for part in ("driver", "toolkit"))


def stack_context(doc: dict[str, Any]) -> str:
    return ((doc.get("config") or {}).get(f"{NAMESPACE}:kubernetes") or {}).get("context") or "sandbox"


class Started:
    """A `with` block around `start()` and `stop()`: stopped also when `start` fails half-way."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class Sandbox(Started):
    stack: str
    workdir: Path | None = None
    tools: Toolchain | None = None
    config: dict[str, Any] = field(default_factory=dict)
    """Extra `gpu-stack:` config written into the stack file (e.g. the local chart source)."""
    prometheus_crds: bool = True
    node_agents: bool = True
    """Run the device plugin, MIG manager and DRA kubelet plugin stand-ins (a preview needs none of them)."""
    source: Path = PROJECT_DIR
    """Where the stack file Pulumi.<stack>.yaml is read (or tests/stacks/ below it)."""
    failing_checks: tuple[str, ...] = ()
    """Validation checks (label gpu-stack/check) whose pods the simulated kubelet fails."""
    held_checks: tuple[str, ...] = ()
    """Validation checks whose pods run until the test completes them (Cluster.complete_pod)."""
    ssh_nodes: bool = True
    """Serve every node of a host-managed stack with its own sshd (needs root)."""
    pulumi_project: bool = True
    """Prepare this sandbox's own Pulumi project (a copy of the project, the plugins, the stack):
    FleetSandbox's boxes have one project for all of them instead."""
    node_key: str | None = field(default=None, init=False)
    """The SSH private key of the sshd nodes (host-managed stacks), for a project of its own."""
    gpu_taint: bool = False
    """Every Node carries `nvidia.com/gpu=present:NoSchedule`, as GPU node pools of managed clusters
    do (GKE, AKS); with no control-plane Node (the cluster has none: kwok's control plane runs as
    processes), only pods that tolerate it are scheduled anywhere."""
    bring_up: BringUp = field(default_factory=BringUp.from_env)
    """How long each node's driver and toolkit take after the operator is installed (GFD's labels,
    the device plugin and the MIG manager only after): realistic minutes by default; the
    end-to-end tier sets a few seconds ($GPU_STACK_SANDBOX_BRING_UP_SECONDS) but for the one
    test of a realistic first `up`."""
    cluster: Cluster = field(init=False)
    agents: NodeAgents = field(init=False)
    dra_agents: DraAgents = field(init=False)
    """The DRA kubelet plugin's stand-in: the ResourceSlices of the nodes labelled for DRA."""
    runner: PodRunner = field(init=False)
    pulumi: PulumiProject = field(init=False)
    nodes: SshNodes | None = field(default=None, init=False)
    """The sshd nodes, for a host-managed stack."""
    _own_workdir: bool = field(default=False, init=False)

    def start(self) -> None:
        self.tools = self.tools or find()
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix=f"gpu-stack-sandbox-{self.stack}-"))
            self._own_workdir = True
        doc = stack_document(self.stack, self.source)
        cfg = doc.setdefault("config", {})
        for key, value in self.config.items():
            cfg[f"{NAMESPACE}:{key}"] = _merged(cfg.get(f"{NAMESPACE}:{key}"), value)
        self.workdir.mkdir(parents=True, exist_ok=True)
        node_key = None
        if self.ssh_nodes and host_managed(doc) and stack_nodes(doc):
            # as a user's stack file would say it: each node's address and pinned host key, the
            # login user and port; the key itself only as a secret (below)
            self.nodes = SshNodes(self.workdir / "nodes", real_ctk=self.tools["nvidia-ctk"])
            ssh = cfg.get(f"{NAMESPACE}:ssh") or {}
            served = self.nodes.start(stack_nodes(doc), ssh_port=int(ssh.get("port", 22)))
            node_key = served["ssh"].pop("privateKey")
            cfg[f"{NAMESPACE}:ssh"] = {**ssh, **served["ssh"]}
            cfg[f"{NAMESPACE}:nodes"] = served["nodes"]
        stack_file = self.workdir / f"Pulumi.{self.stack}.yaml"
        stack_file.write_text(yaml.safe_dump(doc, sort_keys=False))
        self.cluster = Cluster(
            name=f"gs-{self.stack}"[:40], workdir=self.workdir / "cluster", tools=self.tools, context=stack_context(doc),
            failing_checks=self.failing_checks,
            held_checks=self.held_checks,
        )
        self.cluster.start()
        self.runner = PodRunner(self.cluster)
        self.runner.start()
        if self.prometheus_crds:
            for crd in PROMETHEUS_CRDS:
                self.cluster.apply(crd.read_text())
        hardware = hardware_of(stack_nodes(doc))
        if hardware:
            manifests = [node_manifest(hw) for hw in hardware]
            if self.gpu_taint:
                for node in manifests:
                    node["spec"]["taints"] = [dict(GPU_POOL_TAINT)]
            self.cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all(manifests), timeout=600)
        self.agents = NodeAgents(self.cluster, hardware, bring_up=self.bring_up, log_dir=self.workdir / "mig-manager-logs")
        self.dra_agents = DraAgents(self.cluster, hardware)
        if self.node_agents:
            self.agents.start()
            self.dra_agents.start()
        self.node_key = node_key
        self.pulumi = PulumiProject(self.tools, self.workdir / "pulumi", self.stack, self.cluster.kubeconfig)
        if not self.pulumi_project:
            return
        self.pulumi.prepare(stack_file)
        if node_key is not None:
            self.pulumi.set_secret(f"{NAMESPACE}:ssh.privateKey", node_key)

    def stop(self) -> None:
        for part in ("runner", "agents", "dra_agents", "nodes"):
            running = getattr(self, part, None)
            if running is not None:
                running.stop()
        cluster = getattr(self, "cluster", None)
        if cluster is not None:
            cluster.stop()
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def exports(self) -> str:
        """The shell lines that point a user's own `pulumi` at this sandbox."""
        env = self.pulumi.env()
        keys = (
            "PULUMI_HOME", "PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "KUBECONFIG", "PULUMI_SKIP_UPDATE_CHECK",
            "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION", "PULUMI_DISABLE_REGISTRY_RESOLVE", "PULUMI_IGNORE_AMBIENT_PLUGINS",
        )
        assert self.tools is not None
        cli_dir = self.tools["pulumi"].parent
        return (
            "\n".join(f"export {k}={shlex.quote(env[k])}" for k in keys)
            # the toolchain's CLI first: its language host is beside it, as in a release
            + f"\nexport PATH={shlex.quote(str(cli_dir))}:\"$PATH\"\ncd {shlex.quote(str(self.pulumi.project_dir))}\n"
        )
