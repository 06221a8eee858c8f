#!/usr/bin/env bash
# One of the R x G pods that fill a shared node's G GPUs (R replicas each: the device plugin spreads
# replicas evenly over the GPUs, so filling the node is what puts R pods on every GPU), measuring
# what sharing costs: after the barrier (all pods run), a schedule of windows that every pod
# computes from the barrier: for each round K of ROUNDS and each size of SIZES, one window of
# SECONDS_PER_WINDOW in which pods 0..K x G - 1 run the n-body benchmark back to back (K per GPU
# on average) and the others hold their replica idle. Each computing pod prints one line per
# window, with the GPU it got (the collector counts the pods that really shared each GPU):
#   RESULT gpu=H200 mode=mps replicas=8 k=2 pod=1 size=small bodies=4096 batches=12 rate=123 p50_us=45 p99_us=51 uuid=GPU-...
# rate: interactions per second over the window's batches (N^2 x iterations / the sample's own
# timed milliseconds); p50_us/p99_us: the batches' iteration time (batch time / iterations),
# nearest rank.
#   PEERS PEER_PREFIX PEER_DOMAIN JOB_COMPLETION_INDEX BARRIER_SECONDS POLL_SECONDS  as shared-gpu.sh
#   NBODY        the n-body sample (NVIDIA's cuda-sample image: /tmp/nbody)
#   GPU_MODEL    the node's GPU model as the stack names it (H200)
#   SHARING_MODE time-slicing or mps: under mps the device plugin's MPS pipe must be in the env
#   REPLICAS     replicas of each GPU (the configured count)
#   GPUS         physical GPUs of the node (PEERS = REPLICAS x GPUS; default 1)
#   ROUNDS       K values, each at most REPLICAS (default "1 2 REPLICAS")
#   SIZES        name:bodies:iterations, space separated (iterations per batch)
#   SECONDS_PER_WINDOW  length of one window; SETTLE_SECONDS  pause after the barrier
set -euo pipefail
CHECK_NAME=${CHECK_NAME:-sharing-bench}
# shellcheck source-path=SCRIPTDIR source=gpu-common.sh
. "$(dirname "${BASH_SOURCE[0]}")/gpu-common.sh"

peers=${PEERS:-}
index=${JOB_COMPLETION_INDEX:-}
nbody=${NBODY:-/tmp/nbody}
gpu=${GPU_MODEL:-}
mode=${SHARING_MODE:-}
replicas=${REPLICAS:-}
gpus=${GPUS:-1}
window=${SECONDS_PER_WINDOW:-20}
settle=${SETTLE_SECONDS:-3}
sizes=${SIZES:-small:4096:5000 medium:32768:600 large:262144:14}
poll=${POLL_SECONDS:-1}
require_int PEERS "$peers"
require_int JOB_COMPLETION_INDEX "$index"
require_int REPLICAS "$replicas"
require_int GPUS "$gpus"
(( gpus >= 1 && replicas * gpus >= peers )) || fail "PEERS ($peers) must be at most REPLICAS x GPUS ($replicas x $gpus)"
require_int SECONDS_PER_WINDOW "$window"
require_int SETTLE_SECONDS "$settle"
require_int POLL_SECONDS "$poll"
require_set GPU_MODEL "$gpu"
[[ $gpu =~ ^[A-Za-z0-9._-]+$ ]] || fail "GPU_MODEL '$gpu' must be letters, digits, '.', '_' or '-'"
[[ $mode == time-slicing || $mode == mps ]] || fail "SHARING_MODE must be time-slicing or mps, got '$mode'"
read -r -a wanted <<<"${ROUNDS:-1 2 $replicas}"
rounds=()
for k in "${wanted[@]}"; do
  [[ " ${rounds[*]} " == *" $k "* ]] || rounds+=("$k")
done
read -r -a size_specs <<<"$sizes"
for k in "${rounds[@]}"; do
  require_int ROUNDS "$k"
  (( k >= 1 && k <= replicas && k * gpus <= peers )) || fail "round K=$k is outside 1..$replicas (replicas of a GPU) or needs more than the $peers pods"
done
for spec in "${size_specs[@]}"; do
  [[ $spec =~ ^[a-z]+:[0-9]+:[0-9]+$ ]] || fail "SIZES entry '$spec' is not name:bodies:iterations"
done
[[ -x $nbody ]] || fail "no n-body sample at '$nbody' (is sharingBenchmark.image NVIDIA's nbody cuda-sample?)"
list_devices
(( ${#GPU_UUIDS[@]} == 1 )) || fail "pod $index sees ${#GPU_UUIDS[@]} GPU(s) through nvidia-smi -L, expected exactly 1 shared GPU"
uuid=${GPU_UUIDS[0]}
if [[ $mode == mps && -z ${CUDA_MPS_PIPE_DIRECTORY:-} ]]; then
  fail "the node shares its GPU through MPS but this pod has no CUDA_MPS_PIPE_DIRECTORY: the device plugin's MPS daemon did not serve it"
fi

# The barrier (only in a Job: PEER_PREFIX set), then one clock for every pod's schedule.
if [[ -n ${PEER_PREFIX:-} ]]; then
  peer_barrier "$peers" "$PEER_PREFIX" "${PEER_DOMAIN:?}" "${BARRIER_SECONDS:-300}" "$poll" "benchmark pods"
fi
now_ms() { date +%s%3N; }
start=$(( $(now_ms) + settle * 1000 ))
info "pod $index of $peers on $uuid ($gpu, $mode, $replicas replicas): ${#rounds[@]} round(s) K=${rounds[*]} x ${#size_specs[@]} size(s), ${window}s each"

# ms_to_us "12.345": the sample prints milliseconds with three decimals.
ms_to_us() {
  local whole=${1%%.*} frac=000
  [[ $1 == *.* ]] && frac="${1#*.}000"
  printf '%d' "$(( 10#$whole * 1000 + 10#${frac:0:3} ))"
}

# nearest_rank PERCENT VALUE...: the nearest-rank percentile of the values.
nearest_rank() {
  local p=$1 n rank
  shift
  mapfile -t sorted < <(printf '%s\n' "$@" | sort -n)
  n=${#sorted[@]}
  rank=$(( (p * n + 99) / 100 ))
  (( rank >= 1 )) || rank=1
  printf '%s' "${sorted[rank - 1]}"
}

slot=0
for k in "${rounds[@]}"; do
  for spec in "${size_specs[@]}"; do
    IFS=: read -r name bodies iterations <<<"$spec"
    begin=$(( start + slot * window * 1000 ))
    end=$(( begin + window * 1000 ))
    slot=$(( slot + 1 ))
    wait_ms=$(( begin - $(now_ms) ))
    (( wait_ms <= 0 )) || sleep "$(( wait_ms / 1000 )).$(printf '%03d' $(( wait_ms % 1000 )))"
    (( index < k * gpus )) || continue
    times=()
    work=0
    spent_us=0
    last=0
    # A batch starts only when one as long as the last fits in the window, and counts only when it
    # ends inside it (a later one overlapped the next window).
    while (( $(now_ms) + last < end )); do
      t0=$(now_ms)
      status=0
      output=$("$nbody" -benchmark "-numbodies=$bodies" "-i=$iterations" 2>&1) || status=$?
      (( status == 0 )) || fail "n-body ($name, $bodies bodies) exited with status $status: $(tail -n 1 <<<"$output")"
      [[ $output =~ total\ time\ for\ ([0-9]+)\ iterations:\ ([0-9.]+)\ ms ]] ||
        fail "n-body ($name) printed no 'total time for N iterations: T ms' line: $(tail -n 1 <<<"$output")"
      done_iterations=${BASH_REMATCH[1]}
      us=$(ms_to_us "${BASH_REMATCH[2]}")
      (( us > 0 )) || us=1
      t1=$(now_ms)
      last=$(( t1 - t0 ))
      (( t1 <= end )) || break
      times+=("$(( us / done_iterations ))")
      work=$(( work + bodies * bodies * done_iterations ))
      spent_us=$(( spent_us + us ))
    done
    (( ${#times[@]} > 0 )) ||
      fail "round K=$k, size $name: no batch of $iterations iterations finished within ${window}s (raise sharingBenchmark.secondsPerWindow or lower the iterations)"
    # Interactions per second without overflowing 64 bits: the whole part, then the remainder.
    whole=$(( work / spent_us ))
    rest=$(( work % spent_us ))
    rate=$(( whole * 1000000 + rest * 1000000 / spent_us ))
    printf 'RESULT gpu=%s mode=%s replicas=%s k=%s pod=%s size=%s bodies=%s batches=%s rate=%s p50_us=%s p99_us=%s uuid=%s\n' \
      "$gpu" "$mode" "$replicas" "$k" "$index" "$name" "$bodies" "${#times[@]}" "$rate" \
      "$(nearest_rank 50 "${times[@]}")" "$(nearest_rank 99 "${times[@]}")" "$uuid"
  done
done
pass "pod $index of $peers measured ${#rounds[@]} round(s) x ${#size_specs[@]} size(s) on its shared GPU"
