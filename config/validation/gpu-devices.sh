#!/usr/bin/env bash
# The GPUs (and MIG devices) this container sees, by UUID, against what it requested.
#   EXPECTED_GPUS         number of full GPUs `nvidia-smi -L` must list (unset: not checked)
#   EXPECTED_MIG_DEVICES  number of MIG devices it must list (unset: not checked)
set -euo pipefail
CHECK_NAME=${CHECK_NAME:-gpu-devices}
# shellcheck source-path=SCRIPTDIR source=gpu-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/gpu-common.sh"

expected_gpus=${EXPECTED_GPUS:-}
expected_mig=${EXPECTED_MIG_DEVICES:-}
[[ -n $expected_gpus || -n $expected_mig ]] || fail "set EXPECTED_GPUS or EXPECTED_MIG_DEVICES"
[[ -z $expected_gpus ]] || require_int EXPECTED_GPUS "$expected_gpus"
[[ -z $expected_mig ]] || require_int EXPECTED_MIG_DEVICES "$expected_mig"

list_devices
for uuid in "${GPU_UUIDS[@]}"; do info "sees GPU $uuid"; done
for uuid in "${MIG_UUIDS[@]}"; do info "sees MIG device $uuid"; done

if [[ -n $expected_gpus ]] && (( ${#GPU_UUIDS[@]} != expected_gpus )); then
  fail "nvidia-smi -L lists ${#GPU_UUIDS[@]} GPU(s), expected $expected_gpus"
fi
if [[ -n $expected_mig ]] && (( ${#MIG_UUIDS[@]} != expected_mig )); then
  fail "nvidia-smi -L lists ${#MIG_UUIDS[@]} MIG device(s), expected $expected_mig"
fi
pass "${#GPU_UUIDS[@]} GPU(s), ${#MIG_UUIDS[@]} MIG device(s): ${GPU_UUIDS[*]} ${MIG_UUIDS[*]}"
