"""Tests of gpu_stack/offline/: the plan document, the runner, the diff, chart rendering, images."""
