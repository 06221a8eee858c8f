#!/usr/bin/env bash
# One of N pods sharing a node's GPUs: report the physical GPU it got, then wait at a
# barrier until all N pods have started, so the Job only passes when all N run at once.
#
# Peers are found by name: pod i of an Indexed Job is "<PEER_PREFIX>-<i>" and resolves
# as "<PEER_PREFIX>-<i>.<PEER_DOMAIN>" once it is running (one headless Service selecting
# every sharing pod, the pods' subdomain, gives each started pod a DNS record). A pod that
# cannot be scheduled never resolves.
#   PEERS               N, the number of pods that must run concurrently
#   PEER_PREFIX         the Job's name
#   PEER_DOMAIN         the headless Service's name (sharing-barrier)
#   JOB_COMPLETION_INDEX  this pod's index (set by Kubernetes)
#   BARRIER_SECONDS     how long to wait for the peers
#   HOLD_SECONDS        how long to keep the GPU after the barrier (so late peers see us)
#   WORKLOAD            optional command run on the shared GPU after the barrier
#   EXPECTED_MIG_DEVICES  when set (1 on a shared MIG node), the MIG devices it must see
set -euo pipefail
CHECK_NAME=${CHECK_NAME:-shared-gpu}
# shellcheck source-path=SCRIPTDIR source=gpu-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/gpu-common.sh"

peers=${PEERS:-}
prefix=${PEER_PREFIX:-}
domain=${PEER_DOMAIN:-}
index=${JOB_COMPLETION_INDEX:-}
barrier=${BARRIER_SECONDS:-300}
hold=${HOLD_SECONDS:-15}
poll=${POLL_SECONDS:-2}
require_int PEERS "$peers"
require_set PEER_PREFIX "$prefix"
require_set PEER_DOMAIN "$domain"
require_int JOB_COMPLETION_INDEX "$index"
require_int BARRIER_SECONDS "$barrier"
require_int HOLD_SECONDS "$hold"
require_int POLL_SECONDS "$poll"

list_devices
(( ${#GPU_UUIDS[@]} == 1 )) ||
  fail "pod $index of $peers sees ${#GPU_UUIDS[@]} GPU(s) through nvidia-smi -L, expected exactly 1 shared GPU"
info "pod $index of $peers on node ${NODE_NAME:-?} sees physical GPU ${GPU_UUIDS[0]}"
if [[ -n ${EXPECTED_MIG_DEVICES:-} ]]; then
  require_int EXPECTED_MIG_DEVICES "$EXPECTED_MIG_DEVICES"
  (( ${#MIG_UUIDS[@]} == EXPECTED_MIG_DEVICES )) ||
    fail "pod $index of $peers sees ${#MIG_UUIDS[@]} MIG device(s) through nvidia-smi -L, expected $EXPECTED_MIG_DEVICES"
  (( ${#MIG_UUIDS[@]} == 0 )) || info "pod $index of $peers sees MIG device ${MIG_UUIDS[*]}"
fi

peer_barrier "$peers" "$prefix" "$domain" "$barrier" "$poll" "pods sharing the GPUs"
info "all $peers pods started; pod $index holds GPU ${GPU_UUIDS[0]} concurrently with them"

if [[ -n ${WORKLOAD:-} ]]; then
  status=0
  output=$($WORKLOAD 2>&1) || status=$?
  (( status == 0 )) || fail "workload '$WORKLOAD' on shared GPU ${GPU_UUIDS[0]} exited with status $status: $(tail -n 1 <<<"$output")"
  info "workload on shared GPU ${GPU_UUIDS[0]}: $(tail -n 1 <<<"$output")"
fi
sleep "$hold"
pass "pod $index of $peers ran concurrently with its peers on GPU ${GPU_UUIDS[0]}"
