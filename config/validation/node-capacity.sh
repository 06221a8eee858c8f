#!/usr/bin/env bash
# Every listed node advertises exactly the capacity table's counts (read through the Kubernetes
# API, one `get` per node, no list).
#   EXPECTED_FILE     the capacity table, one line per node: "<node> <resource>=<count> ..."
#   DEADLINE_SECONDS  how long to wait for the device plugins to advertise them
#   POLL_SECONDS      pause between reads (default 5)
set -euo pipefail
CHECK_NAME=${CHECK_NAME:-node-capacity}
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

file=${EXPECTED_FILE:-}
deadline=${DEADLINE_SECONDS:-300}
poll=${POLL_SECONDS:-5}
require_set EXPECTED_FILE "$file"
require_int DEADLINE_SECONDS "$deadline"
require_int POLL_SECONDS "$poll"
[[ -r $file ]] || fail "cannot read the capacity table EXPECTED_FILE '$file'"

declare -A want=()
order=()
while read -r node pairs; do
  [[ -n $node ]] || continue
  read -r -a list <<<"${pairs:-}"
  (( ${#list[@]} > 0 )) || fail "capacity table line for node '$node' lists no resource=count"
  for pair in "${list[@]}"; do
    [[ $pair =~ ^[a-z0-9./-]+=[0-9]+$ ]] || fail "capacity table entry '$pair' of node '$node' is not resource=count"
  done
  want[$node]=$pairs
  order+=("$node")
done <"$file"
(( ${#order[@]} > 0 )) || fail "the capacity table '$file' lists no node"

pending=("${order[@]}")
last=""
while :; do
  read_nodes .status.allocatable "${pending[@]}"
  still=()
  problems=()
  for node in "${pending[@]}"; do
    if [[ -z ${NODE_FIELD[$node]+set} ]]; then
      still+=("$node")
      problems+=("node $node cannot be read: $(node_error "$node")")
      continue
    fi
    allocatable=${NODE_FIELD[$node]}
    mismatch=""
    for pair in ${want[$node]}; do
      resource=${pair%=*}
      count=${pair#*=}
      have=$(json_string_field "$allocatable" "$resource")
      if [[ -z $have ]]; then
        mismatch+="${mismatch:+, }advertises no $resource, expected $count"
      elif [[ $have != "$count" ]]; then
        mismatch+="${mismatch:+, }advertises $have $resource, expected $count"
      fi
    done
    if [[ -n $mismatch ]]; then
      still+=("$node")
      problems+=("node $node $mismatch")
    else
      info "node $node advertises ${want[$node]}"
    fi
  done
  pending=("${still[@]}")
  if (( ${#pending[@]} == 0 )); then
    if (( ${#order[@]} == 1 )); then
      pass "node ${order[0]} advertises ${want[${order[0]}]} as the capacity table says"
    fi
    pass "all ${#order[@]} nodes advertise what the capacity table says"
  fi
  summary=$(summarize 5 "${problems[@]}")
  if [[ $summary != "$last" ]]; then
    info "$summary (waiting up to ${deadline}s)"
    last=$summary
  fi
  (( SECONDS + poll <= deadline )) || fail "$summary (waited ${deadline}s)"
  sleep "$poll"
done
