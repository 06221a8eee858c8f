"""GPU nodes prepared over SSH: one component; per node a `remote.CopyToRemote` of the node script
and a `remote.Command` that runs it (gpu_stack/design/node_prep.py says what each gets)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_command import remote

from ..design.node_prep import NodeCommand, agent_auth, mixed_os_problem, preflight_line


@dataclass
class NodePreparationArgs:
    commands: Sequence[NodeCommand]
    """Every node's command, copy, connection details and triggers (node_prep.node_commands)."""
    private_key: pulumi.Input[str] | None
    """The SSH private key; pass a Pulumi secret (pulumi.Output.secret). None with an agent."""
    agent_socket_path: str | None = None
    """ssh.agentSocketPath: the agent's socket, or `$SSH_AUTH_SOCK` (the connection names no path)."""
    one_driver_os: bool = False
    """The nodes must all report one OS (the operator's driver: node_prep.one_driver_os)."""


class NodePreparation(pulumi.ComponentResource):
    commands: dict[str, remote.Command]
    """Node name -> its command (`<name>-<node>`)."""
    copies: dict[str, remote.CopyToRemote]
    """Node name -> the copy of the script on it (`<name>-<node>-script`)."""
    preflight: dict[str, pulumi.Output[str | None]]
    """Node name -> the node's `GPU_STACK_PREFLIGHT {json}` line from the last run."""
    ready: list[pulumi.Input[pulumi.Resource]]
    """What the release waits for: every command, and with `one_driver_os` the check of their
    preflight reports: an Output that resolves to the first command, or fails with the refusal
    when the nodes report different OSes (design/node_prep.py, mixed_os_problem). Its dependencies
    are the commands, so the release's dependencies are the same in a preview and in the plan."""

    def __init__(self, name: str, args: NodePreparationArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:NodePreparation", name, None, opts)
        # With an agent the connection holds no key: `agentSocketPath`, or nothing at all for
        # $SSH_AUTH_SOCK (pulumi-command then reads SSH_AUTH_SOCK where it runs).
        agent = agent_auth(args.agent_socket_path)
        auth: dict[str, Any] = {"private_key": pulumi.Output.secret(args.private_key)} if agent is None else agent
        # No customTimeouts: on remote.Command they bound the SSH connection, not the script; the
        # launcher bounds the script (ssh.timeoutSeconds). replaceOnChanges (`triggers[*]`) and
        # additionalSecretOutputs (`connection`) are the SDK's own, on both resources.
        self.commands = {}
        self.copies = {}
        self.preflight = {}
        for node in args.commands:
            connection = remote.ConnectionArgs(
                host=node.host, port=node.port, user=node.user, host_key=node.host_key, **auth
            )
            # The script once per node as a file asset: the state holds its hash, not its 29 KB.
            copy = remote.CopyToRemote(
                f"{name}-{node.node}-script",
                connection=connection,
                source=pulumi.FileAsset(node.source),
                remote_path=node.remote_path,
                triggers=node.copy_triggers,
                opts=pulumi.ResourceOptions(parent=self),
            )
            command = remote.Command(
                f"{name}-{node.node}",
                connection=connection,
                create=node.create,
                # Set, so that an update (the connection or the time limit changed) prepares nothing:
                # pulumi-command runs `create` again on update when `update` is unset.
                update=node.update,
                # No `delete`: leaving the stack (a node removed, moved to another host, destroy)
                # runs nothing on the host and needs no connection, so a host that is gone never
                # blocks `up`; the toolkit and the runtime entry stay (docs/node-preparation.md).
                triggers=node.triggers,
                add_previous_output_in_env=False,
                # stdout is the preflight report line (exported), stderr one summary line: the
                # whole log stays on the node. The summary line is what `pulumi up` shows.
                logging=remote.Logging.STDERR,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[copy]),
            )
            self.copies[node.node] = copy
            self.commands[node.node] = command
            self.preflight[node.node] = command.stdout.apply(preflight_line)
        self.ready = list(self.commands.values())
        if args.one_driver_os and len(self.commands) > 1:
            names, first = list(self.preflight), next(iter(self.commands.values()))

            def one_os(lines: list[str | None]) -> pulumi.Resource:
                problem = mixed_os_problem(dict(zip(names, lines, strict=True)))
                if problem is not None:
                    raise pulumi.RunError(problem)
                return first

            self.ready.append(pulumi.Output.all(*self.preflight.values()).apply(one_os))
        self.register_outputs({"preflight": self.preflight})
