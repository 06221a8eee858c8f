"""Tests of gpu_stack/cli/ and gpu_stack/__main__.py: the command line's output, byte for byte."""
