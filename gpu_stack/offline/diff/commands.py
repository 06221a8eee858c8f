"""The diff's node command and secret lines: which node commands re-run or are updated in place,
and why; which secret inputs changed and what that means (values never shown). Past
COMMANDS_LISTED the lines are grouped by reason, so a 10,000-node diff stays readable."""

from __future__ import annotations

from .model import COMMAND, CREATE, DELETE, K8S_PROVIDER, REPLACE, UPDATE, PlanDiff, ResourceChange, named

SECRET_MEANING = {
    "connection.host": "the SSH session (as root) goes to another host",
    "connection.port": "the SSH session uses another port",
    "connection.user": "the SSH session logs in as another user",
    "connection.privateKey": "the SSH session uses another private key",
    "connection.hostKey": "another host key is trusted for the node",
    "connection.password": "the SSH session uses another password",
    "kubeconfig": "the provider connects with another kubeconfig (credentials, or another cluster)",
    "context": "the provider uses another kubeconfig context",
}
"""What a changed secret input means, by input path: said without the value."""


def secret_meaning(change: ResourceChange, path: str) -> str:
    meaning = SECRET_MEANING.get(path)
    if meaning is None:
        meaning = "a secret input changed" if change.type != K8S_PROVIDER else "the provider's connection changes"
    if path == "connection.host" and change.type == COMMAND and change.action == REPLACE:
        meaning += "; node preparation runs on the new host (nothing runs on the old one)"
    if path == "connection.hostKey" and change.type == COMMAND and change.action == REPLACE:
        meaning += "; node preparation runs again (a new host key usually means a rebuilt host)"
    return meaning


TRIGGER_MEANING = (
    "the node script changed",
    "the node's values changed",
    "its host changed: it is prepared on the new host",
    "its pinned host key changed (a rebuilt host, or a key pinned or unpinned): it is prepared again",
)
"""What a change of each of a node command's triggers means (design/node_prep.py: script sha256,
values sha256, `user@host:port`, the pinned host key's fingerprint)."""
HOST_KEY_TRIGGER_ADDED = "its triggers now hold the pinned host key (a gpu-stack upgrade): it is prepared again"
"""A plan of a gpu-stack whose node commands had the first three triggers only."""


def trigger_reasons(c: ResourceChange) -> list[str]:
    old = list((c.old or {}).get("triggers") or [])
    new = list((c.new or {}).get("triggers") or [])
    upgraded = len(old) == len(TRIGGER_MEANING) - 1 and len(new) == len(TRIGGER_MEANING)
    if upgraded:
        old = [*old, new[-1]]
    if len(old) != len(new) or len(new) != len(TRIGGER_MEANING):
        return []
    # a trigger holding a secret (a secret user or address) is compared by its fingerprint
    reasons = [
        meaning for i, (meaning, a, b) in enumerate(zip(TRIGGER_MEANING, old, new, strict=True))
        if a != b or f"triggers[{i}]" in c.secret_paths
    ]
    return [*reasons, HOST_KEY_TRIGGER_ADDED] if upgraded else reasons


def command_why(c: ResourceChange) -> str:
    """Why a node command re-runs: new, replaced (the reasons), its script or its connection changed."""
    if c.action != UPDATE:
        if c.action == REPLACE and c.type == COMMAND and trigger_reasons(c):
            return "; ".join(trigger_reasons(c))
        return {CREATE: "new", REPLACE: "; ".join(c.reasons)}[c.action]
    bits = []
    if any(f.path not in c.secret_paths and not f.path.startswith("options.") for f in c.fields):
        bits.append("its script changed")
    if c.secret_paths:
        bits.append("its connection changed: " + ", ".join(c.secret_paths))
    return "; ".join(bits) or "its options changed"


COMMANDS_LISTED = 20
"""Up to this many re-running node commands are listed one by one; more are grouped by reason."""


def command_groups(cmds: list[ResourceChange], why_of=None) -> list[tuple[str, list[ResourceChange]]]:
    """(why, commands): one per command when there are few, else one per reason (`why_of`,
    default command_why)."""
    why_of = why_of or command_why
    if len(cmds) <= COMMANDS_LISTED:
        return [(why_of(c), [c]) for c in cmds]
    groups: dict[str, list[ResourceChange]] = {}
    for c in cmds:
        groups.setdefault(why_of(c), []).append(c)
    return list(groups.items())


def secret_lines(diff: PlanDiff) -> list[str]:
    """The changed secret inputs, counted, each with what it changes (values never shown)."""
    changed = diff.secret_changes
    out: list[str] = []
    if changed:
        count = sum(len(c.secret_paths) for c in changed)
        out.append(
            f"Secret inputs that changed (values not shown): {count} in {len(changed)} resource{'s' if len(changed) != 1 else ''}"
        )
        groups: dict[tuple[str, str], list[ResourceChange]] = {}
        for c in changed:
            for path in c.secret_paths:
                groups.setdefault((c.type, path), []).append(c)
        for (_, path), group in groups.items():
            c = group[0]
            if len(group) <= COMMANDS_LISTED:
                for c in group:
                    where = f" on node {c.node}" if c.type == COMMAND and c.node else ""
                    out.append(f"secret {path} of {c.name}{where} changed: {secret_meaning(c, path)}")
            else:
                out.append(
                    f"secret {path} changed in {len(group)} resources ({named([g.name for g in group])}): "
                    f"{secret_meaning(c, path)}"
                )
    if diff.secrets_unknown:
        out.append(
            f"Secret inputs not compared for {len(diff.secrets_unknown)} resources: one plan records no "
            "fingerprints of its secrets (made by an older version of gpu-stack); a change of a node's address, "
            "key or kubeconfig would not show here"
        )
    return out


RERUNS = "node command re-runs"
UPDATED = "node command updated without a re-run"


def update_why(c: ResourceChange) -> str:
    """Why a node command is updated in place: the inputs that changed (secret ones by name only)."""
    what = ", ".join(sorted({p.split(".")[0].split("[")[0] for p in c.paths if p not in c.secret_paths}))
    bits = [f"{what} changed"] if what else []
    if c.secret_paths:
        bits.append("its connection changed: " + ", ".join(c.secret_paths))
    return "; ".join(bits) + "; it runs its update command"


def node_command_rows(diff: PlanDiff) -> list[tuple[str, str, str, str]]:
    """(what happens, node(s), command(s), why) for the node commands whose `create` runs, then for
    those updated in place (they run their `update` command, which prepares nothing): one row per
    command when there are few, else one per reason (nodes named and counted)."""
    rows = []
    updated = [c for c in diff.changes if c.updates_without_rerun]
    for what, cmds, why_of in ((RERUNS, diff.node_commands, command_why), (UPDATED, updated, update_why)):
        for why, group in command_groups(cmds, why_of):
            if len(group) == 1:
                rows.append((what, group[0].node or "(node unknown)", group[0].name, why))
            else:
                plural = what.replace("node command ", "node commands ").replace("re-runs", "re-run")
                rows.append((plural, f"{len(group)} nodes", named([c.node or c.name for c in group]), why))
    return rows


def node_command_lines(diff: PlanDiff) -> list[str]:
    cmds = diff.node_commands
    head = f"Node commands that re-run: {len(cmds)}" if cmds else "Node commands that re-run: none"
    out = [head]
    for what, node, name, why in node_command_rows(diff):
        if node.endswith(" nodes"):
            out.append(f"{what} on {node} ({why}): {name}")
        else:
            out.append(f"{what} on {node}: {name} ({why})")
    return out


def deleted_commands(diff: PlanDiff) -> list[ResourceChange]:
    return [c for c in diff.changes if c.type == COMMAND and c.action == DELETE]
