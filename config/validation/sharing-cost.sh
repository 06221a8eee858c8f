#!/bin/sh
# shellcheck shell=busybox
# The sharing benchmark's collector: gathers the RESULT lines of every benchmark pod (their logs),
# prints what sharing cost per GPU model, mode and size, and keeps the lines in a ConfigMap that
# the stack reads back (output `sharingCost`; `python -m gpu_stack advise` recommends from it).
#   BENCH_JOBS         the benchmark Jobs' names, space separated (they completed before this runs)
#   NAMESPACE          their namespace
#   RESULTS_CONFIGMAP  the ConfigMap to write (key `results`)
# Per GPU, window and size it adds up the pods that shared that physical GPU (same uuid): K pods
# per GPU, their aggregate rate relative to one pod alone (K=1 of the same run) and the worst p99.
# POSIX sh and busybox awk: it runs on the GPU Operator image, under busybox `sh`
# (config/job-images.yaml).
set -eu
CHECK_NAME=${CHECK_NAME:-sharing-cost}
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"

jobs=${BENCH_JOBS:-}
ns=${NAMESPACE:-}
cm=${RESULTS_CONFIGMAP:-}
require_set BENCH_JOBS "$jobs"
require_set NAMESPACE "$ns"
require_set RESULTS_CONFIGMAP "$cm"
kubectl=${KUBECTL:-kubectl}
out=${TMPDIR:-/tmp}/sharing-cost-results
: >"$out"

for job in $jobs; do
  listing=$("$kubectl" get pods -n "$ns" -l "job-name=$job" -o 'jsonpath={range .items[*]}{.metadata.name}{"\n"}{end}' 2>&1) ||
    fail "cannot list the pods of benchmark Job $job: $listing"
  pods=$(count_words "$listing")
  [ "$pods" -gt 0 ] || fail "benchmark Job $job has no pods left to read (removed after ttlSecondsAfterFinished?)"
  lines=0
  for pod in $listing; do
    log=$("$kubectl" logs -n "$ns" "$pod" 2>&1) || fail "cannot read the log of pod $pod: $log"
    while IFS= read -r line; do
      case $line in
        "RESULT "*)
          printf '%s\n' "$line" >>"$out"
          lines=$(( lines + 1 ))
          ;;
      esac
    done <<LOG
$log
LOG
  done
  [ "$lines" -gt 0 ] || fail "benchmark Job $job left no RESULT line in its $pods pod log(s)"
  info "$job: $lines RESULT line(s) from $pods pod(s)"
done

# The table: one GPU's window first (sum of rates, pods, worst p99), then the mean over GPUs per K,
# sorted by GPU, mode, replicas, size and K. awk's numbers are doubles: exact for these integers.
awk -v check="$CHECK_NAME" '
  {
    split("", f)
    for (i = 2; i <= NF; i++) {
      eq = index($i, "=")
      if (eq) f[substr($i, 1, eq - 1)] = substr($i, eq + 1)
    }
    uuid = (("uuid" in f) && f["uuid"] != "") ? f["uuid"] : "-"
    window = f["gpu"] " " f["mode"] " x" f["replicas"] " " f["size"] " round=" f["k"] " " uuid
    sum[window] += f["rate"]
    count[window]++
    if (f["p99_us"] + 0 > worst[window] + 0) worst[window] = f["p99_us"] + 0
  }
  END {
    for (window in sum) {
      split(window, w, " ")
      cell = w[1] " " w[2] " " w[3] " " w[4] " " count[window]
      cells[cell]++
      rate[cell] += sum[window]
      if (worst[window] > p99[cell] + 0) p99[cell] = worst[window]
    }
    for (cell in cells) {
      split(cell, c, " ")
      mean = int(rate[cell] / cells[cell])
      alone = c[1] " " c[2] " " c[3] " " c[4] " 1"
      relative = "no K=1 window"
      if (alone in cells) {
        base = int(rate[alone] / cells[alone])
        if (base > 0) {
          ratio = int(mean * 100 / base)
          relative = sprintf("%d.%02dx of one pod alone", int(ratio / 100), ratio % 100)
        }
      }
      printf "%s\t%s\t%s\t%s\t%d\t%s: %s %s %s, size %s, %d pod(s) per GPU: %d M interactions/s (%s), worst p99 %d us\n",
        c[1], c[2], c[3], c[4], c[5], check, c[1], c[2], c[3], c[4], c[5], int(mean / 1000000), relative, p99[cell]
    }
  }' "$out" | sort -t "$TAB" -k1,1 -k2,2 -k3,3 -k4,4 -k5,5n | cut -f 6-

text=$("$kubectl" create configmap "$cm" -n "$ns" --from-file="results=$out" --dry-run=client -o yaml)
if "$kubectl" get configmap "$cm" -n "$ns" >/dev/null 2>&1; then
  status=$(printf '%s\n' "$text" | "$kubectl" replace -f - 2>&1) || fail "cannot update ConfigMap $cm: $status"
else
  status=$(printf '%s\n' "$text" | "$kubectl" create -f - 2>&1) || fail "cannot create ConfigMap $cm: $status"
fi
pass "$(grep -c . "$out") RESULT line(s) of $(count_words "$jobs") benchmark Job(s) in ConfigMap $ns/$cm (python -m gpu_stack advise reads them)"
