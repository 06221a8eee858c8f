#!/usr/bin/env bash
# The sharing benchmark's collector: gathers the RESULT lines of every benchmark pod (their logs),
# prints what sharing cost per GPU model, mode and size, and keeps the lines in a ConfigMap that
# the stack reads back (output `sharingCost`; `python -m gpu_stack advise` recommends from it).
#   BENCH_JOBS         the benchmark Jobs' names, space separated (they completed before this runs)
#   NAMESPACE          their namespace
#   RESULTS_CONFIGMAP  the ConfigMap to write (key `results`)
# Per GPU, window and size it adds up the pods that shared that physical GPU (same uuid): K pods
# per GPU, their aggregate rate relative to one pod alone (K=1 of the same run) and the worst p99.
set -euo pipefail
CHECK_NAME=${CHECK_NAME:-sharing-cost}
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

jobs=${BENCH_JOBS:-}
ns=${NAMESPACE:-}
cm=${RESULTS_CONFIGMAP:-}
require_set BENCH_JOBS "$jobs"
require_set NAMESPACE "$ns"
require_set RESULTS_CONFIGMAP "$cm"
kubectl=${KUBECTL:-kubectl}
out=${TMPDIR:-/tmp}/sharing-cost-results
: >"$out"

read -r -a names <<<"$jobs"
for job in "${names[@]}"; do
  listing=$("$kubectl" get pods -n "$ns" -l "job-name=$job" -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}' 2>&1) ||
    fail "cannot list the pods of benchmark Job $job: $listing"
  mapfile -t pods < <(grep . <<<"$listing" || true)
  (( ${#pods[@]} > 0 )) || fail "benchmark Job $job has no pods left to read (removed after ttlSecondsAfterFinished?)"
  lines=0
  for pod in "${pods[@]}"; do
    log=$("$kubectl" logs -n "$ns" "$pod" 2>&1) || fail "cannot read the log of pod $pod: $log"
    while IFS= read -r line; do
      if [[ $line == "RESULT "* ]]; then
        printf '%s\n' "$line" >>"$out"
        lines=$(( lines + 1 ))
      fi
    done <<<"$log"
  done
  (( lines > 0 )) || fail "benchmark Job $job left no RESULT line in its ${#pods[@]} pod log(s)"
  info "$job: $lines RESULT line(s) from ${#pods[@]} pod(s)"
done

# The table: one GPU's window first (sum of rates, pods, worst p99), then the mean over GPUs per K.
declare -A sum=() count=() worst=() cells=() cell_rate=() cell_p99=()
while IFS= read -r line; do
  declare -A f=()
  for token in $line; do
    [[ $token == *=* ]] && f[${token%%=*}]=${token#*=}
  done
  window="${f[gpu]} ${f[mode]} x${f[replicas]} ${f[size]} round=${f[k]} ${f[uuid]:--}"
  sum[$window]=$(( ${sum[$window]:-0} + f[rate] ))
  count[$window]=$(( ${count[$window]:-0} + 1 ))
  if (( f[p99_us] > ${worst[$window]:-0} )); then worst[$window]=${f[p99_us]}; fi
  unset f
done <"$out"
for window in "${!sum[@]}"; do
  read -r gpu mode replicas size _ _ <<<"$window"
  cell="$gpu $mode $replicas $size ${count[$window]}"
  cells[$cell]=$(( ${cells[$cell]:-0} + 1 ))
  cell_rate[$cell]=$(( ${cell_rate[$cell]:-0} + sum[$window] ))
  if (( ${worst[$window]:-0} > ${cell_p99[$cell]:-0} )); then cell_p99[$cell]=${worst[$window]}; fi
done
mapfile -t order < <(printf '%s\n' "${!cells[@]}" | sort -k1,4 -k5n)
for cell in "${order[@]}"; do
  read -r gpu mode replicas size k <<<"$cell"
  rate=$(( cell_rate[$cell] / cells[$cell] ))
  alone="$gpu $mode $replicas $size 1"
  relative="no K=1 window"
  if [[ -n ${cells[$alone]:-} ]]; then
    base=$(( cell_rate[$alone] / cells[$alone] ))
    (( base <= 0 )) || relative=$(printf '%d.%02dx of one pod alone' $(( rate * 100 / base / 100 )) $(( rate * 100 / base % 100 )))
  fi
  info "$gpu $mode $replicas, size $size, $k pod(s) per GPU: $(( rate / 1000000 )) M interactions/s ($relative), worst p99 ${cell_p99[$cell]} us"
done

text=$("$kubectl" create configmap "$cm" -n "$ns" --from-file="results=$out" --dry-run=client -o yaml)
if "$kubectl" get configmap "$cm" -n "$ns" >/dev/null 2>&1; then
  status=$("$kubectl" replace -f - <<<"$text" 2>&1) || fail "cannot update ConfigMap $cm: $status"
else
  status=$("$kubectl" create -f - <<<"$text" 2>&1) || fail "cannot create ConfigMap $cm: $status"
fi
pass "$(grep -c . "$out") RESULT line(s) of ${#names[@]} benchmark Job(s) in ConfigMap $ns/$cm (python -m gpu_stack advise reads them)"
