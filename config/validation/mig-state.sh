#!/usr/bin/env bash
# mig-manager applied each listed node's MIG config: nvidia.com/mig.config.state=success
# (read through the Kubernetes API, one `get` per node, no list). Fails at once on `failed`.
#   EXPECTED_FILE     one line per node: "<node> <MIG config its nvidia.com/mig.config selects>"
#   DEADLINE_SECONDS  how long to wait while a state is pending or rebooting
#   POLL_SECONDS      pause between reads (default 5)
set -euo pipefail
CHECK_NAME=${CHECK_NAME:-mig-state}
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

file=${EXPECTED_FILE:-}
deadline=${DEADLINE_SECONDS:-600}
poll=${POLL_SECONDS:-5}
require_set EXPECTED_FILE "$file"
require_int DEADLINE_SECONDS "$deadline"
require_int POLL_SECONDS "$poll"
[[ -r $file ]] || fail "cannot read the MIG table EXPECTED_FILE '$file'"

declare -A want=()
order=()
while read -r node config rest; do
  [[ -n $node ]] || continue
  [[ -n ${config:-} && -z ${rest:-} ]] || fail "MIG table line for node '$node' must be '<node> <config>'"
  want[$node]=$config
  order+=("$node")
done <"$file"
(( ${#order[@]} > 0 )) || fail "the MIG table '$file' lists no node"

pending=("${order[@]}")
last=""
while :; do
  read_nodes .metadata.labels "${pending[@]}"
  still=()
  problems=()
  for node in "${pending[@]}"; do
    config=${want[$node]}
    if [[ -z ${NODE_FIELD[$node]+set} ]]; then
      still+=("$node")
      problems+=("node $node cannot be read: $(node_error "$node")")
      continue
    fi
    labels=${NODE_FIELD[$node]}
    selected=$(json_string_field "$labels" nvidia.com/mig.config)
    state=$(json_string_field "$labels" nvidia.com/mig.config.state)
    if [[ $selected == "$config" && $state == success ]]; then
      info "node $node applied MIG config '$config'"
      continue
    fi
    if [[ $selected == "$config" && $state == failed ]]; then
      fail "mig-manager could not apply MIG config '$config' on node $node (nvidia.com/mig.config.state=failed; is every profile valid for this GPU?)"
    fi
    still+=("$node")
    problems+=("node $node did not reach MIG config '$config' state success: nvidia.com/mig.config=${selected:-<unset>} nvidia.com/mig.config.state=${state:-<unset>}")
  done
  pending=("${still[@]}")
  if (( ${#pending[@]} == 0 )); then
    if (( ${#order[@]} == 1 )); then
      pass "node ${order[0]} applied MIG config '${want[${order[0]}]}'"
    fi
    pass "all ${#order[@]} nodes applied their MIG configs"
  fi
  summary=$(summarize 5 "${problems[@]}")
  if [[ $summary != "$last" ]]; then
    info "$summary (waiting up to ${deadline}s)"
    last=$summary
  fi
  (( SECONDS + poll <= deadline )) || fail "$summary (waited ${deadline}s)"
  sleep "$poll"
done
