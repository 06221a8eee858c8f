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
require_set EXPECTED_FILE "$file"
read_deadline_and_poll 300 5
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

# advertises NODE ALLOCATABLE: NODE_PROBLEM stays empty when the node advertises its table line.
advertises() {
  local node=$1 pair resource count have mismatch=""
  for pair in ${want[$node]}; do
    resource=${pair%=*}
    count=${pair#*=}
    have=$(json_string_field "$2" "$resource")
    if [[ -z $have ]]; then
      mismatch+="${mismatch:+, }advertises no $resource, expected $count"
    elif [[ $have != "$count" ]]; then
      mismatch+="${mismatch:+, }advertises $have $resource, expected $count"
    fi
  done
  if [[ -n $mismatch ]]; then
    NODE_PROBLEM="node $node $mismatch"
  else
    info "node $node advertises ${want[$node]}"
  fi
}

wait_for_nodes .status.allocatable advertises "${order[@]}"
if (( ${#order[@]} == 1 )); then
  pass "node ${order[0]} advertises ${want[${order[0]}]} as the capacity table says"
fi
pass "all ${#order[@]} nodes advertise what the capacity table says"
