#!/bin/sh
# shellcheck shell=busybox
# free-capacity: the gate before the validation pods that are pinned to nodes. Each listed node
# must have free what those pods will request: its allocatable GPU resource minus what the
# non-terminated pods bound to it already request. A busy node is waited for (pods finish, device
# plugins restart) until DEADLINE_SECONDS; then FAIL names each node that is short and by how much.
# POSIX sh: it runs on the GPU Operator image, under busybox `sh` (config/job-images.yaml).
#
# EXPECTED_FILE: one line per node: "<node> <resource>=<pods> ..."
# Reads nodes with `get` (by name) and, per sampled node, the pods bound to it (one `list` with a
# spec.nodeName field selector, which the API server filters): what it holds in memory is bounded
# by the pods of one node, never the cluster's (a list of every pod of a large cluster every poll
# would exhaust the container's memory limit). Only requests are read.
set -eu
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"

require_set EXPECTED_FILE "${EXPECTED_FILE:-}"
read_deadline_and_poll 300 10
KUBECTL=${KUBECTL:-kubectl}

nodes=""
while read -r node rest; do
  [ -n "${node:-}" ] || continue
  nodes="$nodes $node"
done <"$EXPECTED_FILE"
[ -n "$nodes" ] || fail "$EXPECTED_FILE lists no node"

# needs NODE: the node's "<resource>=<pods>" pairs.
needs() {
  row_of "$EXPECTED_FILE" "$1"
}

# list_requests NODE: sets REQUESTS to the requests of the non-terminated pods bound to NODE, one
# line per pod, one JSON map per container, tab-separated.
list_requests() {
  REQUESTS=$("$KUBECTL" get pods --all-namespaces \
    "--field-selector=spec.nodeName=$1,status.phase!=Succeeded,status.phase!=Failed" \
    -o 'jsonpath={range .items[*]}{range .spec.containers[*]}{.resources.requests}{"\t"}{end}{"\n"}{end}' 2>&1) \
    || fail "cannot list the pods of node $1 to read what they request: $(one_line "$REQUESTS")"
}

# requested RESOURCE: what the pods of REQUESTS request of RESOURCE in all.
requested() {
  local map amount total
  total=0
  set -f
  local IFS="$TAB$NL"
  for map in $REQUESTS; do
    amount=$(json_string_field "$map" "$1")
    is_int "$amount" || continue
    total=$(( total + amount ))
  done
  set +f
  echo "$total"
}

while :; do
  # shellcheck disable=SC2086  # node names: no blank, no glob character
  read_nodes .status.allocatable $nodes
  problems=""
  for node in $nodes; do
    if ! status=$(node_field "$node"); then
      problems="${problems}node $node cannot be read: $(node_error "$node")$NL"
      continue
    fi
    list_requests "$node"
    for pair in $(needs "$node"); do
      resource=${pair%%=*}
      need=${pair#*=}
      allocatable=$(json_string_field "$status" "$resource")
      allocatable=${allocatable:-0}
      used=$(requested "$resource")
      free=$(( allocatable - used ))
      if [ "$free" -lt "$need" ]; then
        problems="${problems}node $node has $free of $allocatable $resource free ($used requested by other pods), the validation sample needs $need$NL"
      fi
    done
  done
  if [ -z "$problems" ]; then
    pass "every sampled node has the GPU capacity its validation pods need free ($(count_words "$nodes") node(s))"
  fi
  info "waiting: $(summarize_lines 5 "$problems")"
  poll_again "$(summarize_lines 5 "$problems"); free that capacity (or lower gpu-stack:validation.podBudget) and run pulumi up again"
done
