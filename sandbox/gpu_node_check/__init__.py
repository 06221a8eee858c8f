"""gpu-node-check: the node script and GPU containers on one real GPU machine, no cluster needed.

    make gpu-node-check          # on a GPU machine with network: bundle, then run (as root)

or, for a GPU machine without network (docs/node-preparation.md, "One real GPU node"):

    python -m sandbox.gpu_node_check.bundle .gpu-node-check     # where the toolchain is built
    sudo python3 -m sandbox.gpu_node_check.run --bundle .gpu-node-check --out OUT   # on the GPU machine

`bundle` (here, with the project's virtualenv) gathers what the machine lacks: Debian's containerd
and runc packages, the toolchain's NVIDIA Container Toolkit binaries, crictl, and for the kubelet
stage the kubelet and the device plugin; it renders the node command from the stack's own offline
plan and the device plugin's config for its sharing. `run` (the machine's python3, standard
library only) installs, starts containerd, runs the node script twice, builds OCI images from
local files, and runs containers through containerd's CRI. See run.py for the stages.
"""
