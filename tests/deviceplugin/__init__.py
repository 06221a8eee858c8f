"""The real NVIDIA device plugin against a stand-in kubelet: stubs, the stand-in, the cases the
stack generates and the run on a GPU machine (docs/gpu-runs/device-plugin-h200.txt)."""
