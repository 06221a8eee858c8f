#!/bin/sh
# shellcheck shell=busybox
# mig-manager applied each listed node's MIG config: nvidia.com/mig.config.state=success
# (read through the Kubernetes API, one `get` per node, no list). Fails at once on `failed`.
# POSIX sh: it runs on the GPU Operator image, under busybox `sh` (config/job-images.yaml).
#   EXPECTED_FILE     one line per node: "<node> <MIG config its nvidia.com/mig.config selects>"
#   DEADLINE_SECONDS  how long to wait while a state is pending or rebooting
#   POLL_SECONDS      pause between reads (default 5)
set -eu
CHECK_NAME=${CHECK_NAME:-mig-state}
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"

file=${EXPECTED_FILE:-}
require_set EXPECTED_FILE "$file"
read_deadline_and_poll 600 5
[ -r "$file" ] || fail "cannot read the MIG table EXPECTED_FILE '$file'"

order=""
while read -r node config rest; do
  [ -n "$node" ] || continue
  [ -n "${config:-}" ] && [ -z "${rest:-}" ] || fail "MIG table line for node '$node' must be '<node> <config>'"
  order="$order $node"
done <"$file"
[ -n "$order" ] || fail "the MIG table '$file' lists no node"

# wanted NODE: the MIG config the table selects for NODE (its lines were checked to hold one).
wanted() {
  row_of "$file" "$1"
}

# applied NODE LABELS: NODE_PROBLEM stays empty once mig-manager applied the node's MIG config.
applied() {
  local node config selected state
  node=$1
  config=$(wanted "$node")
  selected=$(json_string_field "$2" nvidia.com/mig.config)
  state=$(json_string_field "$2" nvidia.com/mig.config.state)
  if [ "$selected" = "$config" ] && [ "$state" = success ]; then
    info "node $node applied MIG config '$config'"
    return
  fi
  if [ "$selected" = "$config" ] && [ "$state" = failed ]; then
    fail "mig-manager could not apply MIG config '$config' on node $node (nvidia.com/mig.config.state=failed; is every profile valid for this GPU?)"
  fi
  # shellcheck disable=SC2034  # read by wait_for_nodes (common.sh)
  NODE_PROBLEM="node $node did not reach MIG config '$config' state success: nvidia.com/mig.config=${selected:-<unset>} nvidia.com/mig.config.state=${state:-<unset>}"
}

# shellcheck disable=SC2086  # node names: no blank, no glob character
wait_for_nodes .metadata.labels applied $order
# shellcheck disable=SC2086
set -- $order
if [ "$#" -eq 1 ]; then
  pass "node $1 applied MIG config '$(wanted "$1")'"
fi
pass "all $# nodes applied their MIG configs"
