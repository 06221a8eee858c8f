"""The pure design: `derive()` (derive.py) turns the settings into a StackDesign through the
builders beside it (sharing, MIG, DCGM, alerts, dashboard, Helm values, node scripts, validation,
rollout, capacity), what the operator and monitoring components register (operator.py,
monitoring.py), the base labels (labels.py), the stack outputs and their table (outputs.py) and
the generated docs (docs.py). derive() computes each shared fact once (node facts, sharing
profiles, pull secrets, the DCGM fields) and gives each builder only the settings parts and facts
it reads; nothing here imports Pulumi or reads the stack files."""
