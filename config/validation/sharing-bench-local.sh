#!/usr/bin/env bash
# `make gpu-sharing-bench`: what sharing GPU 0 costs, measured on this machine with the payload the
# sharing-benchmark Jobs run (sharing-bench.sh). The pods are processes started together (no
# barrier: PEER_PREFIX unset) and the n-body sample is nbody-bench.cu built here with nvcc.
#   time-slicing: plain concurrent processes on one GPU (what the device plugin's time-slicing
#                 gives pods: no daemon, no limit)
#   mps:          an MPS control daemon started as root the way the device plugin starts it:
#                 compute mode EXCLUSIVE_PROCESS, `nvidia-cuda-mps-control -d` with its own pipe
#                 and log directories, then per client a pinned-memory limit of total/R MiB and
#                 an active thread percentage of 100/R; quit and compute mode DEFAULT afterwards
# Then memory: R sharers, one asking for 80% of the GPU first, the others for 85% of a 1/R share.
#   RUNS     mode:replicas:rounds, space separated (default below)
#   SIZES SECONDS_PER_WINDOW  passed to sharing-bench.sh (windows of 10 s by default here)
#   MEMORY_REPLICAS           sharers in the memory part (default 4; 0 skips it)
# Prints every payload line; RESULT and MEMORY lines are what `python -m gpu_stack advise --results`
# reads.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
runs=${RUNS:-time-slicing:8:1,2,4,8 mps:4:1,2,4 mps:8:1,2,4,8}
memory_replicas=${MEMORY_REPLICAS:-4}
export SECONDS_PER_WINDOW=${SECONDS_PER_WINDOW:-10}
work=$(mktemp -d)
mps_dir=$work/mps
mps_up=""
uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0)
model=${GPU_MODEL:-$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 | sed 's/^NVIDIA //; s/ /-/g')}
total_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0)

section() { printf '\n== %s\n' "$*"; }

mps_vars=(CUDA_MPS_PIPE_DIRECTORY="$mps_dir/pipe" CUDA_MPS_LOG_DIRECTORY="$mps_dir/log")
mps_env() { env "${mps_vars[@]}" "$@"; }

mps_start() { # REPLICAS
  local r=$1
  mkdir -p "$mps_dir/pipe" "$mps_dir/log"
  nvidia-smi -i "$uuid" -c EXCLUSIVE_PROCESS || echo "compute mode EXCLUSIVE_PROCESS refused here: MPS runs in DEFAULT mode"
  mps_env nvidia-cuda-mps-control -d
  mps_up=1
  echo "set_default_device_pinned_mem_limit 0 $(( total_mib / r ))M" | mps_env nvidia-cuda-mps-control
  echo "set_default_active_thread_percentage $(( 100 / r ))" | mps_env nvidia-cuda-mps-control
  echo "MPS control daemon up: pinned memory limit $(echo 'get_default_device_pinned_mem_limit 0' | mps_env nvidia-cuda-mps-control)," \
    "active thread percentage $(echo get_default_active_thread_percentage | mps_env nvidia-cuda-mps-control)"
}

mps_stop() {
  [[ -n $mps_up ]] || return 0
  echo quit | mps_env nvidia-cuda-mps-control || true
  sleep 2
  nvidia-smi -i "$uuid" -c DEFAULT || true
  mps_up=""
  echo "MPS control daemon stopped; compute mode $(nvidia-smi --query-gpu=compute_mode --format=csv,noheader -i 0)"
}

trap 'mps_stop; rm -rf "$work"' EXIT

section "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,compute_mode,mig.mode.current --format=csv,noheader
nvcc --version | tail -n 1
nvcc -O3 -o "$work/nbody" "$here/nbody-bench.cu"
nvcc -O2 -o "$work/gpu-alloc" "$here/gpu-alloc.cu"

for run in $runs; do
  IFS=: read -r mode replicas rounds <<<"$run"
  section "sharing-bench.sh: $mode, $replicas replicas of GPU 0, rounds K=${rounds//,/ }"
  wrap=(env)
  if [[ $mode == mps ]]; then
    mps_start "$replicas"
    wrap=(env "${mps_vars[@]}")
  fi
  pids=()
  for (( i = 0; i < replicas; i++ )); do
    "${wrap[@]}" CUDA_VISIBLE_DEVICES=0 JOB_COMPLETION_INDEX=$i PEERS="$replicas" NBODY="$work/nbody" \
      GPU_MODEL="$model" SHARING_MODE="$mode" REPLICAS="$replicas" ROUNDS="${rounds//,/ }" \
      TERMINATION_LOG="$work/term-$i" bash "$here/sharing-bench.sh" >"$work/bench-$i.log" 2>&1 &
    pids+=("$!")
  done
  failed=0
  for (( i = 0; i < replicas; i++ )); do
    wait "${pids[$i]}" || failed=$(( failed + 1 ))
    sed "s/^/[process $i] /" "$work/bench-$i.log"
  done
  mps_stop
  (( failed == 0 )) || { echo "FAIL: $failed of $replicas benchmark processes failed"; exit 1; }
done

if (( memory_replicas > 0 )); then
  r=$memory_replicas
  share=$(( total_mib / r ))
  greedy=$(( total_mib * 8 / 10 ))
  modest=$(( share * 85 / 100 ))
  for mode in time-slicing mps; do
    section "memory: $r sharers of $total_mib MiB ($mode): one asks for $greedy MiB first, $(( r - 1 )) ask for $modest MiB (85% of a 1/$r share)"
    wrap=(env)
    if [[ $mode == mps ]]; then
      mps_start "$r"
      wrap=(env "${mps_vars[@]}")
    fi
    "${wrap[@]}" "$work/gpu-alloc" "$greedy" 20 >"$work/mem-0.log" 2>&1 &
    first=$!
    sleep 6
    pids=()
    for (( i = 1; i < r; i++ )); do
      "${wrap[@]}" "$work/gpu-alloc" "$modest" 6 >"$work/mem-$i.log" 2>&1 &
      pids+=("$!")
      sleep 1
    done
    wait "${pids[@]}" 2>/dev/null || true
    wait "$first" 2>/dev/null || true
    for (( i = 0; i < r; i++ )); do
      asked=$modest
      (( i == 0 )) && asked=$greedy
      result=refused
      grep -q '^allocated' "$work/mem-$i.log" && result=allocated
      printf 'MEMORY gpu=%s mode=%s replicas=%s pod=%s asked_mib=%s share_mib=%s result=%s  # %s\n' \
        "$model" "$mode" "$r" "$i" "$asked" "$share" "$result" "$(head -n 1 "$work/mem-$i.log")"
    done
    mps_stop
  done
fi
section "done"
