"""How every Job of the stack is replaced (the validation Jobs and the MIG rollout Job).

- `replace_on_changes=["*"]`: any input change replaces the Job, and so does an init error (a
  create that failed, or an `up` interrupted while the Job ran): the engine's
  `applyReplaceOnChanges` (pulumi/pulumi pkg/resource/deploy/step_generator.go) turns the init
  error into a replacement only when a replaceOnChanges path covers it (`*` does). Without it the
  engine retries the failed create as an in-place update, and the provider's update first reads
  the live Job: once the Job's TTL removed it, every later preview and `up` fails ("unable to get
  cluster state", tests/test_mig_rollout.py pins the option).
- `delete_before_replace=True`: a replacement for an init error keeps the Job's name, and the
  provider asks for delete-first only when one of its own replace keys changed (provider.go,
  `deleteBeforeReplace := len(replaces) > 0 && ...`), not for the engine's init-error or
  replaceOnChanges replacements. Created first, the new Job meets the old one of the same name:
  pulumi-kubernetes 4.29+ (client-side create) answers AlreadyExists; 4.25 with server-side apply
  patches the old Job (upsert) and then the old resource's delete removes the very Job the new
  resource points at. Deleting first avoids both; a Job holds no state worth keeping.
"""

from __future__ import annotations

from typing import Any

JOB_REPLACEMENT: dict[str, Any] = {"replace_on_changes": ["*"], "delete_before_replace": True}
"""Keyword arguments of `pulumi.ResourceOptions` for every Job."""
