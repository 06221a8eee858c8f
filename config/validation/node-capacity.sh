#!/usr/bin/env bash
# The node advertises exactly the capacity table's counts (read through the Kubernetes API).
#   NODE              node name
#   EXPECTED          "resource=count ..." e.g. "nvidia.com/gpu=8"
#   DEADLINE_SECONDS  how long to wait for the device plugin to advertise them
#   POLL_SECONDS      pause between reads (default 5)
set -euo pipefail
CHECK_NAME=${CHECK_NAME:-node-capacity}
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"

node=${NODE:-}
expected=${EXPECTED:-}
deadline=${DEADLINE_SECONDS:-300}
poll=${POLL_SECONDS:-5}
kubectl=${KUBECTL:-kubectl}
require_set NODE "$node"
require_set EXPECTED "$expected"
require_int DEADLINE_SECONDS "$deadline"
require_int POLL_SECONDS "$poll"

read -r -a wanted <<<"$expected"
for pair in "${wanted[@]}"; do
  [[ $pair =~ ^[a-z0-9./-]+=[0-9]+$ ]] || fail "EXPECTED entry '$pair' is not resource=count"
done

last=""
while :; do
  mismatch=""
  if allocatable=$("$kubectl" get node "$node" -o 'jsonpath={.status.allocatable}' 2>&1); then
    for pair in "${wanted[@]}"; do
      resource=${pair%=*}
      want=${pair#*=}
      have=$(json_string_field "$allocatable" "$resource")
      if [[ -z $have ]]; then
        mismatch+="${mismatch:+; }advertises no $resource, expected $want"
      elif [[ $have != "$want" ]]; then
        mismatch+="${mismatch:+; }advertises $have $resource, expected $want"
      fi
    done
  else
    mismatch="cannot read it: ${allocatable//$'\n'/ }"
  fi
  if [[ -z $mismatch ]]; then
    pass "node $node advertises $expected as the capacity table says"
  fi
  if [[ $mismatch != "$last" ]]; then
    info "node $node $mismatch (waiting up to ${deadline}s)"
    last=$mismatch
  fi
  (( SECONDS + poll <= deadline )) || fail "node $node $mismatch (waited ${deadline}s)"
  sleep "$poll"
done
