# shellcheck shell=bash
# Helpers of the payloads that run on the CUDA images (bash is there: config/job-images.yaml), on
# top of the POSIX helpers of common.sh; sourced, never run on its own.

# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# list_devices: fills GPU_UUIDS and MIG_UUIDS from `nvidia-smi -L`.
#   GPU 0: NVIDIA H200 (UUID: GPU-...)
#     MIG 1g.18gb     Device  0: (UUID: MIG-...)
list_devices() {
  local out line
  GPU_UUIDS=()
  MIG_UUIDS=()
  if ! out=$("$NVIDIA_SMI" -L 2>&1); then
    fail "'nvidia-smi -L' failed: ${out//$'\n'/ }"
  fi
  while IFS= read -r line; do
    if [[ $line =~ ^GPU\ [0-9]+:.*\(UUID:\ (GPU-[^\)]+)\) ]]; then
      GPU_UUIDS+=("${BASH_REMATCH[1]}")
    elif [[ $line =~ ^[[:space:]]+MIG\ .*Device\ +[0-9]+:.*\(UUID:\ (MIG-[^\)]+)\) ]]; then
      MIG_UUIDS+=("${BASH_REMATCH[1]}")
    fi
  done <<<"$out"
}

# peer_barrier PEERS PREFIX DOMAIN SECONDS POLL WHAT: waits until pods 0..PEERS-1 of an Indexed Job
# ("<PREFIX>-<i>", each resolving as "<PREFIX>-<i>.<DOMAIN>" once it runs: one headless Service
# gives every started pod a DNS record) have all started; fails after SECONDS naming the pods that
# never started. WHAT names the pods in that message ("pods sharing the GPUs").
peer_barrier() {
  local peers=$1 prefix=$2 domain=$3 limit=$4 step=$5 what=$6 i
  local -A seen=()
  local -a missing
  while :; do
    for (( i = 0; i < peers; i++ )); do
      [[ -n ${seen[$i]:-} ]] && continue
      if getent hosts "${prefix}-${i}.${domain}" >/dev/null 2>&1; then
        seen[$i]=1
      fi
    done
    (( ${#seen[@]} == peers )) && return 0
    if (( SECONDS + step > limit )); then
      missing=()
      for (( i = 0; i < peers; i++ )); do
        [[ -n ${seen[$i]:-} ]] || missing+=("$i")
      done
      fail "only ${#seen[@]} of $peers $what started within ${limit}s (never started: ${missing[*]}); they cannot run concurrently"
    fi
    sleep "$step"
  done
}
