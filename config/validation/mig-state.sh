#!/usr/bin/env bash
# mig-manager applied the node's MIG config: nvidia.com/mig.config.state=success.
#   NODE              node name
#   MIG_CONFIG        the config the node's nvidia.com/mig.config label selects
#   DEADLINE_SECONDS  how long to wait while the state is pending or rebooting
#   POLL_SECONDS      pause between reads (default 5)
set -euo pipefail
CHECK_NAME=${CHECK_NAME:-mig-state}
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

node=${NODE:-}
config=${MIG_CONFIG:-}
deadline=${DEADLINE_SECONDS:-600}
poll=${POLL_SECONDS:-5}
kubectl=${KUBECTL:-kubectl}
require_set NODE "$node"
require_set MIG_CONFIG "$config"
require_int DEADLINE_SECONDS "$deadline"
require_int POLL_SECONDS "$poll"

last=""
while :; do
  if labels=$("$kubectl" get node "$node" -o 'jsonpath={.metadata.labels}' 2>&1); then
    selected=$(json_string_field "$labels" nvidia.com/mig.config)
    state=$(json_string_field "$labels" nvidia.com/mig.config.state)
    now="nvidia.com/mig.config=${selected:-<unset>} nvidia.com/mig.config.state=${state:-<unset>}"
    if [[ $selected == "$config" && $state == success ]]; then
      pass "node $node applied MIG config '$config'"
    fi
    if [[ $selected == "$config" && $state == failed ]]; then
      fail "mig-manager could not apply MIG config '$config' on node $node (nvidia.com/mig.config.state=failed; is every profile valid for this GPU?)"
    fi
  else
    now="cannot read it: ${labels//$'\n'/ }"
  fi
  if [[ $now != "$last" ]]; then
    info "node $node $now (waiting up to ${deadline}s for '$config' to reach success)"
    last=$now
  fi
  (( SECONDS + poll <= deadline )) || fail "node $node did not reach MIG config '$config' state success within ${deadline}s: $now"
  sleep "$poll"
done
