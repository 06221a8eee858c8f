"""The real Pulumi CLI on a copy of the project, run as a user runs it: the CLI starts the Python
language host beside it (the released CLI's layout, sandbox/toolchain.py), which reads
Pulumi.yaml's runtime options and runs `__main__.py` in the project's virtualenv. A local file
backend and passphrase secrets in a work folder; both provider plugins installed from the
toolchain (never downloaded).

Every command is what a user types (`pulumi preview --json`, `pulumi up --yes`, `pulumi config
set --path ...`), run with the environment below; nothing here reaches a network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .toolchain import PROJECT_DIR, Toolchain

PASSPHRASE = "gpu-stack-sandbox"
COPIED = ("Pulumi.yaml", "__main__.py", "gpu_stack", "config", "requirements.txt")


class PulumiError(RuntimeError):
    def __init__(self, args: list[str], proc: subprocess.CompletedProcess):
        self.proc = proc
        super().__init__(f"pulumi {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}")


def cli_env(home: Path, backend: Path, kubeconfig: Path) -> dict[str, str]:
    """The environment of every CLI command: no update check, no plugin download or registry
    look-up, no plugin from PATH (the kubernetes and command plugins are installed in `home`)."""
    return {
        **{k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")},
        "PULUMI_HOME": str(home),
        "PULUMI_BACKEND_URL": f"file://{backend}",
        "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_DISABLE_REGISTRY_RESOLVE": "true",
        "PULUMI_IGNORE_AMBIENT_PLUGINS": "true",
        "PULUMI_SKIP_CONFIRMATIONS": "true",
        "PULUMI_DIY_BACKEND_NO_LEGACY_WARNING": "true",
        "KUBECONFIG": str(kubeconfig),
        "NO_COLOR": "1",
    }


@dataclass
class PulumiProject:
    tools: Toolchain
    workdir: Path
    stack: str
    kubeconfig: Path
    source: Path = PROJECT_DIR

    @property
    def project_dir(self) -> Path:
        return self.workdir / "project"

    @property
    def stack_file(self) -> Path:
        return self.project_dir / f"Pulumi.{self.stack}.yaml"

    def env(self) -> dict[str, str]:
        return cli_env(self.workdir / "pulumi-home", self.workdir / "state", self.kubeconfig)

    def prepare(self, stack_file: Path | None = None) -> None:
        """Copy the project, install the provider plugin, create the stack with the stack file.
        Several stacks of one workdir (a fleet's) share the copy and the plugins: done once."""
        prepared = self.workdir / ".project-prepared"
        if not prepared.exists():
            self.project_dir.mkdir(parents=True, exist_ok=True)
            for name in COPIED:
                src = self.source / name
                dst = self.project_dir / name
                if src.is_dir():
                    shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy2(src, dst)
            venv = self.source / ".venv"
            if venv.exists() and not (self.project_dir / ".venv").exists():
                # a released `pulumi` runs the program in Pulumi.yaml's virtualenv: the project's own
                (self.project_dir / ".venv").symlink_to(venv)
            (self.workdir / "state").mkdir(exist_ok=True)
            for name, version in (
                ("kubernetes", self.tools.kubernetes_provider_version),
                ("command", self.tools.command_provider_version),
            ):
                self.run("plugin", "install", "resource", name, version, "--file", str(self.tools[f"pulumi-resource-{name}"]), stack=False)
            prepared.touch()
        self.run("stack", "init", self.stack, "--secrets-provider", "passphrase", stack=False)
        src = stack_file or self.source / f"Pulumi.{self.stack}.yaml"
        # the CLI wrote the encryption salt into the new stack file: keep it, add the stack's config
        salt = [line for line in self.stack_file.read_text().splitlines() if line.startswith("encryptionsalt:")]
        config = [line for line in src.read_text().splitlines() if not line.startswith("encryptionsalt:")]
        self.stack_file.write_text("\n".join(salt + config) + "\n")

    def run(
        self, *args: str, check: bool = True, timeout: float = 900, stack: bool = True, input: str | None = None
    ) -> subprocess.CompletedProcess:
        """`pulumi ARGS --non-interactive [--stack S]` in the project copy (`input`: its stdin)."""
        argv = list(args) + ["--non-interactive"] + (["--stack", self.stack] if stack else [])
        proc = subprocess.run(
            [str(self.tools["pulumi"]), *argv], cwd=self.project_dir, env=self.env(), capture_output=True, text=True,
            timeout=timeout, input=input,
        )
        if check and proc.returncode != 0:
            raise PulumiError(argv, proc)
        return proc

    def start(self, *args: str) -> subprocess.Popen[str]:
        """`pulumi ARGS --non-interactive --stack S` in the background (to interrupt it), in a
        process group of its own: `os.killpg(proc.pid, ...)` reaches the CLI, the language host, the
        program and the providers at once, as a CI runner's kill of the job does."""
        argv = [str(self.tools["pulumi"]), *args, "--non-interactive", "--stack", self.stack]
        return subprocess.Popen(
            argv, cwd=self.project_dir, env=self.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,
        )

    def set_secret(self, path: str, value: str) -> None:
        """`pulumi config set --secret --path PATH --raw < value`, as a user sets a key from a file."""
        self.run("config", "set", "--secret", "--path", "--raw", path, input=value)

    def config_set(self, path: str, value: str, *, secret: bool = False, type_: str | None = None) -> None:
        args = ["config", "set", "--path", path, value]
        if secret:
            args.append("--secret")
        if type_:
            args += ["--type", type_]
        self.run(*args)

    def run_offline_plan(self) -> str:
        """`python -m gpu_stack plan --format json` of the same project copy and stack file."""
        proc = subprocess.run(
            [sys.executable, "-m", "gpu_stack", "--project-dir", str(self.project_dir), "plan", "--stack", self.stack, "--format", "json"],
            capture_output=True, text=True, cwd=str(PROJECT_DIR), env={**os.environ, "PYTHONPATH": str(PROJECT_DIR)},
        )
        if proc.returncode != 0:
            raise RuntimeError(f"offline plan failed: {proc.stderr.strip()}")
        return proc.stdout

    def preview_json(self, *extra: str) -> dict[str, Any]:
        proc = self.run("preview", "--json", *extra)
        return json.loads(proc.stdout)

    def preview_with_plan(self, *extra: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """`pulumi preview --json --save-plan FILE`: the steps, and the update plan's goals (the
        one place the engine shows each resource's deleteBeforeReplace)."""
        plan_file = self.workdir / "preview-plan.json"
        proc = self.run("preview", "--json", "--save-plan", str(plan_file), *extra)
        return json.loads(proc.stdout), json.loads(plan_file.read_text())

    def up(self, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
        return self.run("up", "--yes", "--skip-preview", *extra, check=check)

    def outputs(self) -> dict[str, Any]:
        return json.loads(self.run("stack", "output", "--json", "--show-secrets").stdout)

    def export(self) -> dict[str, Any]:
        return json.loads(self.run("stack", "export").stdout)
