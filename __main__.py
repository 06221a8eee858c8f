"""gpu-stack: a Kubernetes cluster with NVIDIA GPUs made into a shareable, monitored GPU platform."""

import pulumi

from gpu_stack import GpuPlatform
from gpu_stack.components.program import load_settings_from_pulumi

platform = GpuPlatform("gpu-stack", load_settings_from_pulumi())
for key, value in platform.outputs.items():
    pulumi.export(key, value)
