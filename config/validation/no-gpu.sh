#!/usr/bin/env bash
# The negative check: this container requested no GPU, runs under the nvidia runtime class with
# NVIDIA_VISIBLE_DEVICES=all (as every CUDA image sets it), and must see no GPU: no GPU device
# node and no GPU listed by nvidia-smi (which the toolkit injects only with a GPU).
#   NODE_CLASS  the node class this pod speaks for (GPU model / sharing profile / MIG config)
#   DEV_ROOT    where the device nodes are looked for (default /dev; for the tests)
set -euo pipefail
CHECK_NAME=${CHECK_NAME:-no-gpu}
# shellcheck source-path=SCRIPTDIR source=gpu-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/gpu-common.sh"

node_class=${NODE_CLASS:-}
dev_root=${DEV_ROOT:-/dev}
require_set NODE_CLASS "$node_class"
info "NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-<unset>}, no nvidia.com/gpu requested"

shopt -s nullglob
devices=("$dev_root"/nvidia[0-9]*)
visible=()
for d in "${devices[@]}"; do visible+=("${d##*/}"); done
if command -v "$NVIDIA_SMI" >/dev/null 2>&1; then
  out=$("$NVIDIA_SMI" -L 2>&1) || true
  while IFS= read -r line; do
    [[ $line =~ ^GPU\ [0-9]+:.*\(UUID:\ (GPU-[^\)]+)\) ]] && visible+=("${BASH_REMATCH[1]}")
  done <<<"$out"
fi
if (( ${#visible[@]} > 0 )); then
  fail "node class $node_class: a pod that requested no GPU sees ${visible[*]} through NVIDIA_VISIBLE_DEVICES=all; keep gpu-stack:toolkit.acceptEnvvarWhenUnprivileged false and check the node's /etc/nvidia-container-runtime/config.toml (docs/node-preparation.md, \"Only pods that ask get a GPU\")"
fi
pass "node class $node_class: a pod that requested no GPU sees none (NVIDIA_VISIBLE_DEVICES=all ignored)"
