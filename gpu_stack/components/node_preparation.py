"""One GPU node prepared over SSH: one `remote.Command` running the node script's phases."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_command import remote

from ..node_prep import NodeCommand, preflight_line


@dataclass
class NodePreparationArgs:
    command: NodeCommand
    """The node's rendered command, connection details and triggers (node_prep.node_commands)."""
    private_key: pulumi.Input[str]
    """The SSH private key; pass a Pulumi secret (pulumi.Output.secret)."""


class NodePreparation(pulumi.ComponentResource):
    command: remote.Command
    preflight: pulumi.Output[str | None]
    """The node's `GPU_STACK_PREFLIGHT {json}` line from the last run."""

    def __init__(self, name: str, args: NodePreparationArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-stack:index:NodePreparation", name, None, opts)
        node = args.command
        self.command = remote.Command(
            f"{name}-prepare",
            connection=remote.ConnectionArgs(
                host=node.host,
                port=node.port,
                user=node.user,
                private_key=pulumi.Output.secret(args.private_key),
                host_key=node.host_key,
            ),
            create=node.create,
            delete=node.delete,
            triggers=node.triggers,
            add_previous_output_in_env=False,
            logging=remote.Logging.STDOUT_AND_STDERR,
            # The SDK already marks `connection` (which holds the key) secret in and out; the
            # script prints no secret, so stdout stays readable for the preflight export.
            opts=pulumi.ResourceOptions(
                parent=self,
                custom_timeouts=pulumi.CustomTimeouts(create="20m", update="20m", delete="2m"),
            ),
        )
        self.preflight = self.command.stdout.apply(preflight_line)
        self.register_outputs({"preflight": self.preflight})
