"""gpu-stack: NVIDIA GPU Operator platform for Kubernetes, as a Pulumi program."""
