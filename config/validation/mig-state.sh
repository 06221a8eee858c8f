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
require_set EXPECTED_FILE "$file"
read_deadline_and_poll 600 5
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

# applied NODE LABELS: NODE_PROBLEM stays empty once mig-manager applied the node's MIG config.
applied() {
  local node=$1 config=${want[$1]} selected state
  selected=$(json_string_field "$2" nvidia.com/mig.config)
  state=$(json_string_field "$2" nvidia.com/mig.config.state)
  if [[ $selected == "$config" && $state == success ]]; then
    info "node $node applied MIG config '$config'"
    return
  fi
  if [[ $selected == "$config" && $state == failed ]]; then
    fail "mig-manager could not apply MIG config '$config' on node $node (nvidia.com/mig.config.state=failed; is every profile valid for this GPU?)"
  fi
  NODE_PROBLEM="node $node did not reach MIG config '$config' state success: nvidia.com/mig.config=${selected:-<unset>} nvidia.com/mig.config.state=${state:-<unset>}"
}

wait_for_nodes .metadata.labels applied "${order[@]}"
if (( ${#order[@]} == 1 )); then
  pass "node ${order[0]} applied MIG config '${want[${order[0]}]}'"
fi
pass "all ${#order[@]} nodes applied their MIG configs"
