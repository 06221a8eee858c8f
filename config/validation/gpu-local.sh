#!/usr/bin/env bash
# `make gpu-validate`: the validation payloads that need no Kubernetes, run on this machine's
# GPUs through the same scripts the Jobs run. Kubernetes' part is played locally: the
# vectorAdd binary is built here with nvcc, and the "pods" sharing a GPU are processes whose
# peer lookup (getent hosts <pod>.<service> in the cluster) is answered by marker files.
#   GPUS      GPUs this machine should list (default 1)
#   SHARERS   processes that share GPU 0 at the same time (default 4)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
gpus=${GPUS:-1}
sharers=${SHARERS:-4}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export TERMINATION_LOG="$work/termination-log"

section() { printf '\n== %s\n' "$*"; }

section "nvidia-smi -L"
nvidia-smi -L
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader || true

section "gpu-devices.sh (EXPECTED_GPUS=$gpus)"
EXPECTED_GPUS=$gpus bash "$here/gpu-devices.sh"

section "gpu-devices.sh with a wrong count (EXPECTED_GPUS=$(( gpus + 1 ))) must FAIL"
if EXPECTED_GPUS=$(( gpus + 1 )) bash "$here/gpu-devices.sh"; then
  echo "unexpected PASS"; exit 1
fi
echo "termination message: $(cat "$TERMINATION_LOG")"

section "cuda-smoke.sh (vectorAdd built with $(command -v nvcc))"
nvcc -O2 -o "$work/vector-add" "$here/vector-add.cu"
VECTOR_ADD="$work/vector-add" EXPECTED_GPUS=$gpus bash "$here/cuda-smoke.sh"

section "shared-gpu.sh: $sharers processes on one GPU, barrier, vectorAdd each"
mkdir -p "$work/bin" "$work/started"
cat >"$work/bin/getent" <<STUB
#!/usr/bin/env bash
# getent hosts <pod>.<service>: "resolves" once that process has started
[[ \$1 == hosts && -e "$work/started/\${2%%.*}" ]]
STUB
chmod +x "$work/bin/getent"
pids=()
for (( i = 0; i < sharers; i++ )); do
  (
    touch "$work/started/local-$i"
    exec env PATH="$work/bin:$PATH" CUDA_VISIBLE_DEVICES=0 JOB_COMPLETION_INDEX=$i PEERS=$sharers \
      PEER_PREFIX=local PEER_DOMAIN=local-peers BARRIER_SECONDS=60 HOLD_SECONDS=2 POLL_SECONDS=1 \
      NODE_NAME="$(hostname)" VECTOR_ADD_REPEAT=20000 WORKLOAD="$work/vector-add" \
      TERMINATION_LOG="$work/termination-$i" bash "$here/shared-gpu.sh"
  ) >"$work/sharer-$i.log" 2>&1 &
  pids+=("$!")
done
most=0
while kill -0 "${pids[@]}" 2>/dev/null; do
  n=$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c . || true)
  (( n > most )) && most=$n
  sleep 0.2
done
failed=0
for (( i = 0; i < sharers; i++ )); do
  wait "${pids[$i]}" || failed=$(( failed + 1 ))
  sed "s/^/[process $i] /" "$work/sharer-$i.log"
done
echo "most compute processes nvidia-smi saw on the GPU at once: $most"
(( failed == 0 )) || { echo "FAIL: $failed of $sharers sharers failed"; exit 1; }

section "shared-gpu.sh with a peer that never starts must FAIL"
if env PATH="$work/bin:$PATH" JOB_COMPLETION_INDEX=0 PEERS=$(( sharers + 1 )) PEER_PREFIX=local \
  PEER_DOMAIN=local-peers BARRIER_SECONDS=3 HOLD_SECONDS=0 POLL_SECONDS=1 bash "$here/shared-gpu.sh"; then
  echo "unexpected PASS"; exit 1
fi
echo "termination message: $(cat "$TERMINATION_LOG")"
section "all GPU payloads behaved as expected"
