"""Tests of gpu_stack/design/: derive() and the pure builders, and the scripts they ship run for real."""
