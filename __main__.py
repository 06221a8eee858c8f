"""gpu-stack: a Kubernetes cluster with NVIDIA GPUs made into a shareable, monitored GPU platform."""

import pulumi

from gpu_stack.components.program import load_settings_from_pulumi
from gpu_stack.components.stack import build_stack

settings = load_settings_from_pulumi()
for key, value in build_stack(settings).items():
    pulumi.export(key, value)
