#!/bin/sh
# shellcheck shell=busybox
# Every listed node advertises exactly the capacity table's counts (read through the Kubernetes
# API, one `get` per node, no list). POSIX sh: it runs on the GPU Operator image, under busybox
# `sh` (config/job-images.yaml).
#   EXPECTED_FILE     the capacity table, one line per node: "<node> <resource>=<count> ..."
#   DEADLINE_SECONDS  how long to wait for the device plugins to advertise them
#   POLL_SECONDS      pause between reads (default 5)
set -eu
CHECK_NAME=${CHECK_NAME:-node-capacity}
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "$0")/common.sh"

file=${EXPECTED_FILE:-}
require_set EXPECTED_FILE "$file"
read_deadline_and_poll 300 5
[ -r "$file" ] || fail "cannot read the capacity table EXPECTED_FILE '$file'"

order=""
while read -r node pairs; do
  [ -n "$node" ] || continue
  [ -n "${pairs:-}" ] || fail "capacity table line for node '$node' lists no resource=count"
  for pair in $pairs; do
    is_pair "$pair" || fail "capacity table entry '$pair' of node '$node' is not resource=count"
  done
  order="$order $node"
done <"$file"
[ -n "$order" ] || fail "the capacity table '$file' lists no node"

# wanted NODE: the node's resource=count pairs, as the table lists them.
wanted() {
  row_of "$file" "$1"
}

# advertises NODE ALLOCATABLE: NODE_PROBLEM stays empty when the node advertises its table line.
advertises() {
  local node want pair resource count have mismatch
  node=$1
  want=$(wanted "$node")
  mismatch=""
  for pair in $want; do
    resource=${pair%=*}
    count=${pair#*=}
    have=$(json_string_field "$2" "$resource")
    if [ -z "$have" ]; then
      mismatch="${mismatch:+$mismatch, }advertises no $resource, expected $count"
    elif [ "$have" != "$count" ]; then
      mismatch="${mismatch:+$mismatch, }advertises $have $resource, expected $count"
    fi
  done
  if [ -n "$mismatch" ]; then
    # shellcheck disable=SC2034  # read by wait_for_nodes (common.sh)
    NODE_PROBLEM="node $node $mismatch"
  else
    info "node $node advertises $want"
  fi
}

# shellcheck disable=SC2086  # node names: no blank, no glob character
wait_for_nodes .status.allocatable advertises $order
# shellcheck disable=SC2086
set -- $order
if [ "$#" -eq 1 ]; then
  pass "node $1 advertises $(wanted "$1") as the capacity table says"
fi
pass "all $# nodes advertise what the capacity table says"
