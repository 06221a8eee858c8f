#!/usr/bin/env bash
# A real CUDA computation: run the vectorAdd sample and require its "Test PASSED".
#   VECTOR_ADD     the sample binary (default: where NVIDIA's cuda-sample image keeps it)
#   EXPECTED_GPUS  when set, the number of GPUs `nvidia-smi -L` must list first
set -euo pipefail
CHECK_NAME=${CHECK_NAME:-cuda-smoke}
# shellcheck source-path=SCRIPTDIR source=gpu-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/gpu-common.sh"

vector_add=${VECTOR_ADD:-/cuda-samples/vectorAdd}
if [[ -n ${EXPECTED_GPUS:-} ]]; then
  require_int EXPECTED_GPUS "$EXPECTED_GPUS"
  list_devices
  (( ${#GPU_UUIDS[@]} == EXPECTED_GPUS )) ||
    fail "nvidia-smi -L lists ${#GPU_UUIDS[@]} GPU(s), expected $EXPECTED_GPUS"
  info "sees ${GPU_UUIDS[*]}"
fi
[[ -x $vector_add ]] || fail "no CUDA sample at '$vector_add' (is images.cuda the vectorAdd sample?)"

status=0
output=$("$vector_add" 2>&1) || status=$?
printf '%s\n' "$output"
if (( status != 0 )); then
  fail "vectorAdd exited with status $status: $(tail -n 1 <<<"$output")"
fi
grep -q 'Test PASSED' <<<"$output" || fail "vectorAdd did not print 'Test PASSED'"
pass "vectorAdd computed on the GPU and verified its result"
