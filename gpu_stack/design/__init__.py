"""The pure design: `derive()` (derive.py) turns the settings into a StackDesign through the
builders beside it (sharing, MIG, DCGM, alerts, dashboard, Helm values, node scripts, validation,
rollout, capacity); nothing here imports Pulumi or reads the stack files."""
