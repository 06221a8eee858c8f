"""Offline plan and diff: the real program under Pulumi's mock runtime, no CLI or cluster."""
