"""The pure design: `derive()` (derive.py) turns the settings into a StackDesign through the
builders beside it (sharing, MIG, DCGM, alerts, dashboard, Helm values, node scripts, validation,
rollout, capacity). derive() computes each shared fact once (node facts, sharing profiles, pull
secrets, the DCGM fields) and gives each builder only the settings parts and facts it reads;
nothing here imports Pulumi or reads the stack files."""
