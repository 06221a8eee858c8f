"""Several simulated clusters at once, one per stack of a fleet, and one project folder with one
backend for all of them, as a user's repository has: each stack file is its sandbox's, pointed at
that sandbox's cluster by `gpu-stack:kubernetes.kubeconfig`, so `python -m gpu_stack fleet up`
(and a user's `pulumi -s STACK`) reaches each cluster through the stack's own config. Everything
listens on 127.0.0.1; `FleetSandbox` stops all it started (use it as a context manager).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .harness import CHART_DIR, NAMESPACE, Sandbox, Started, stack_document
from .pulumi_cli import PulumiProject, cli_env
from .toolchain import PROJECT_DIR, Toolchain, find


@dataclass
class FleetSandbox(Started):
    stacks: tuple[str, ...]
    workdir: Path
    tools: Toolchain | None = None
    copies: dict[str, str] = field(default_factory=dict)
    """Stack -> the committed (or tests/stacks/) stack whose file it copies under its own name."""
    failing_checks: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Stack -> the validation checks its simulated kubelet fails."""
    config: dict[str, Any] = field(default_factory=dict)
    """Extra `gpu-stack:` config for every stack (the local chart is always added when present)."""
    fleet_file: dict[str, Any] | None = None
    """The fleet file written beside Pulumi.yaml (None: the project's own, if any)."""
    boxes: list[Sandbox] = field(default_factory=list, init=False)
    project: PulumiProject = field(init=False)

    def _source(self) -> Path:
        src = self.workdir / "src"
        src.mkdir(parents=True, exist_ok=True)
        for stack in self.stacks:
            doc = stack_document(self.copies.get(stack, stack))
            (src / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        return src

    def start(self) -> None:
        self.tools = self.tools or find()
        src = self._source()
        config = dict(self.config)
        if CHART_DIR.joinpath("Chart.yaml").exists():
            config.setdefault("operator", {})["chartPath"] = str(CHART_DIR)
        for stack in self.stacks:
            # no project of its own: the fleet's one project (below) holds every stack
            box = Sandbox(stack, workdir=self.workdir / stack, tools=self.tools, source=src, config=config,
                          failing_checks=self.failing_checks.get(stack, ()), pulumi_project=False)
            self.boxes.append(box)
            box.start()
        self.project = PulumiProject(self.tools, self.workdir / "fleet", self.stacks[0], self.boxes[0].cluster.kubeconfig)
        for box in self.boxes:
            assert box.workdir is not None
            doc = yaml.safe_load((box.workdir / f"Pulumi.{box.stack}.yaml").read_text())
            cfg = doc["config"]
            cfg[f"{NAMESPACE}:kubernetes"] = {**(cfg.get(f"{NAMESPACE}:kubernetes") or {}), "kubeconfig": str(box.cluster.kubeconfig)}
            stack_file = self.workdir / f"fleet-Pulumi.{box.stack}.yaml"
            stack_file.write_text(yaml.safe_dump(doc, sort_keys=False))
            project = PulumiProject(self.tools, self.project.workdir, box.stack, box.cluster.kubeconfig)
            project.prepare(stack_file)  # the project's copy and the plugins once, the stack each time
            # the sandbox's SSH key (host-managed stacks), as a secret of the stack
            if box.nodes is not None and box.node_key:
                project.set_secret(f"{NAMESPACE}:ssh.privateKey", box.node_key.rstrip("\n") + "\n")
        if self.fleet_file is not None:
            (self.project.project_dir / "fleet.yaml").write_text(yaml.safe_dump(self.fleet_file, sort_keys=False))
        elif (PROJECT_DIR / "fleet.yaml").exists():
            (self.project.project_dir / "fleet.yaml").write_text((PROJECT_DIR / "fleet.yaml").read_text())

    def stop(self) -> None:
        for box in self.boxes:
            box.stop()

    def env(self) -> dict[str, str]:
        """The fleet's CLI environment; KUBECONFIG points nowhere: each stack names its own."""
        home = self.project.workdir
        return cli_env(home / "pulumi-home", home / "state", home / "no-such-kubeconfig")

    def stack(self, stack: str) -> PulumiProject:
        """The fleet project's CLI for one stack (`pulumi ... --stack STACK`)."""
        box = next(b for b in self.boxes if b.stack == stack)
        return PulumiProject(self.project.tools, self.project.workdir, stack, box.cluster.kubeconfig)

    def exports(self) -> str:
        env = self.env()
        keys = ("PULUMI_HOME", "PULUMI_BACKEND_URL", "PULUMI_CONFIG_PASSPHRASE", "PULUMI_SKIP_UPDATE_CHECK",
                "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION", "PULUMI_DISABLE_REGISTRY_RESOLVE", "PULUMI_IGNORE_AMBIENT_PLUGINS")
        assert self.tools is not None
        cli_dir = self.tools["pulumi"].parent
        return (
            "\n".join(f"export {k}={shlex.quote(env[k])}" for k in keys)
            + f"\nexport PATH={shlex.quote(str(cli_dir))}:\"$PATH\"\n"
            + f"export PYTHONPATH={shlex.quote(str(PROJECT_DIR))}\ncd {shlex.quote(str(self.project.project_dir))}\n"
        )
