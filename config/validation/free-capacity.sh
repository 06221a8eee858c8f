#!/usr/bin/env bash
# free-capacity: the gate before the validation pods that are pinned to nodes. Each listed node
# must have free what those pods will request: its allocatable GPU resource minus what the
# non-terminated pods bound to it already request. A busy node is waited for (pods finish, device
# plugins restart) until DEADLINE_SECONDS; then FAIL names each node that is short and by how much.
#
# EXPECTED_FILE: one line per node: "<node> <resource>=<pods> ..."
# Reads nodes with `get` (by name) and, per sampled node, the pods bound to it (one `list` with a
# spec.nodeName field selector, which the API server filters): what it holds in memory is bounded
# by the pods of one node, never the cluster's (a list of every pod of a large cluster every poll
# would exhaust the container's memory limit). Only requests are read.
set -euo pipefail
# shellcheck source=common.sh
source "$(dirname "$0")/common.sh"

require_set EXPECTED_FILE "${EXPECTED_FILE:-}"
read_deadline_and_poll 300 10
KUBECTL=${KUBECTL:-kubectl}

declare -A NEED=()
nodes=()
while read -r node rest; do
  [[ -n ${node:-} ]] || continue
  nodes+=("$node")
  NEED[$node]=$rest
done <"$EXPECTED_FILE"
(( ${#nodes[@]} > 0 )) || fail "$EXPECTED_FILE lists no node"

# read_requests: REQUESTED["<node> <resource>"] = what non-terminated pods on the node request.
read_requests() {
  local out line node map pair resource amount containers
  declare -gA REQUESTED=()
  for node in "${nodes[@]}"; do
    out=$("$KUBECTL" get pods --all-namespaces \
      "--field-selector=spec.nodeName=$node,status.phase!=Succeeded,status.phase!=Failed" \
      -o 'jsonpath={range .items[*]}{range .spec.containers[*]}{.resources.requests}{"\t"}{end}{"\n"}{end}' 2>&1) \
      || fail "cannot list the pods of node $node to read what they request: ${out//$'\n'/ }"
    while IFS= read -r line; do
      [[ -n $line ]] || continue
      IFS=$'\t' read -r -a containers <<<"$line"
      for map in "${containers[@]}"; do
        for pair in ${NEED[$node]}; do
          resource=${pair%%=*}
          amount=$(json_string_field "$map" "$resource")
          [[ $amount =~ ^[0-9]+$ ]] || continue
          REQUESTED["$node $resource"]=$(( ${REQUESTED["$node $resource"]:-0} + amount ))
        done
      done
    done <<<"$out"
  done
}

while :; do
  read_nodes .status.allocatable "${nodes[@]}"
  read_requests
  problems=()
  for node in "${nodes[@]}"; do
    if [[ -z ${NODE_FIELD[$node]+set} ]]; then
      problems+=("node $node cannot be read: $(node_error "$node")")
      continue
    fi
    for pair in ${NEED[$node]}; do
      resource=${pair%%=*}
      need=${pair#*=}
      allocatable=$(json_string_field "${NODE_FIELD[$node]}" "$resource")
      allocatable=${allocatable:-0}
      used=${REQUESTED["$node $resource"]:-0}
      free=$(( allocatable - used ))
      if (( free < need )); then
        problems+=("node $node has $free of $allocatable $resource free ($used requested by other pods), the validation sample needs $need")
      fi
    done
  done
  if (( ${#problems[@]} == 0 )); then
    pass "every sampled node has the GPU capacity its validation pods need free (${#nodes[@]} node(s))"
  fi
  info "waiting: $(summarize 5 "${problems[@]}")"
  poll_again "$(summarize 5 "${problems[@]}"); free that capacity (or lower gpu-stack:validation.podBudget) and run pulumi up again"
done
