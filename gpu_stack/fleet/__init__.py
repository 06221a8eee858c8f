"""The fleet: many stacks of the project, one change, planned together and rolled out in waves.

Sits between offline/ and cli/: it plans with the offline code and drives the real engine through
Pulumi's Automation API; only its `automation` module imports Pulumi.

  group       a change across stacks grouped: config edits and resource changes shared by stacks
  plan        `fleet plan`: every stack's offline diff against one git revision, in worker processes
  report      text, Markdown (one pull-request comment) and JSON of the fleet plan
  waves       the wave scheduler: previews, then `up` wave by wave with gates (no Pulumi in it)
  state       the resume file: stacks already done for this change
  rollup      progress lines and the roll-up at the end of `fleet up`
  automation  the StackRunner over `pulumi.automation` (LocalWorkspace on the project folder)
"""
