"""Tests of gpu_stack/components/: the program under mocks and the real engine and provider."""
