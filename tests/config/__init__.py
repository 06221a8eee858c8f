"""Tests of gpu_stack/config/: the settings models, their rules and messages, the stack files, secrets."""
