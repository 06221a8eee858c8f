"""GPU nodes prepared over SSH: one component, one `remote.Command` per node running the node script."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import pulumi
from pulumi_command import remote

from ..node_prep import NodeCommand, preflight_line


@dataclass
class NodePreparationArgs:
    commands: Sequence[NodeCommand]
    """Every node's rendered command, connection details and triggers (node_prep.node_commands)."""
    private_key: pulumi.Input[str]
    """The SSH private key; pass a Pulumi secret (pulumi.Output.secret)."""


class NodePreparation(pulumi.ComponentResource):
    commands: dict[str, remote.Command]
    """Node name -> its command (`<name>-<node>`)."""
    preflight: dict[str, pulumi.Output[str | None]]
    """Node name -> the node's `GPU_STACK_PREFLIGHT {json}` line from the last run."""

    def __init__(self, name: str, args: NodePreparationArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:NodePreparation", name, None, opts)
        private_key = pulumi.Output.secret(args.private_key)
        # One options object for every command. No customTimeouts: on remote.Command they bound
        # the SSH connection, not the script; the wrapper bounds the script (ssh.timeoutSeconds).
        # replaceOnChanges/additionalSecretOutputs for triggers and connection: the provider's own.
        command_opts = pulumi.ResourceOptions(parent=self)
        self.commands = {}
        self.preflight = {}
        for node in args.commands:
            command = remote.Command(
                f"{name}-{node.node}",
                connection=remote.ConnectionArgs(
                    host=node.host,
                    port=node.port,
                    user=node.user,
                    private_key=private_key,
                    host_key=node.host_key,
                ),
                create=node.create,
                # The script goes on stdin: pulumi-command quotes the whole command in its error.
                stdin=node.stdin,
                delete=node.delete,
                triggers=node.triggers,
                add_previous_output_in_env=False,
                # `logging` is left at the provider's default (stdout and stderr streamed to the log).
                # The SDK already marks `connection` (which holds the key) secret in and out; the
                # script prints no secret, so stdout stays readable for the preflight export.
                opts=command_opts,
            )
            self.commands[node.node] = command
            self.preflight[node.node] = command.stdout.apply(preflight_line)
        self.register_outputs({"preflight": self.preflight})
