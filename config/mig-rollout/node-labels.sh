#!/usr/bin/env bash
# Sets the labels the stack decides for each of its nodes (the sharing profile's
# nvidia.com/device-plugin.config, a MIG config the rollout does not set) from one table, instead
# of one Pulumi resource per node. The operator release waits for this Job.
#
# NODES_FILE holds one line per node of the stack:
#   <node> [<key>=<value> ...]
# Every node is applied server-side (`kubectl apply --server-side`) as a Node holding only its
# name and those labels, under the field manager FIELD_MANAGER: a label the manager applied
# before and the line no longer sets (a profile removed from the node) is removed by the API
# server itself; a label set by anyone else is left alone; --force-conflicts makes the table's
# value win over a hand-set one, as the stack's NodePatch did. Nodes are read first, by name (the
# ServiceAccount may only get and patch the table's nodes): a node that is not in the cluster is
# never applied (a server-side apply would create it), and fails the Job, named.
#
#   NODES_FILE     the table (the ConfigMap mounted by the Job)
#   FIELD_MANAGER  default gpu-stack-node-labels
set -euo pipefail

CHECK_NAME=${CHECK_NAME:-node-labels}
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
KUBECTL=${KUBECTL:-kubectl}

nodes_file=${NODES_FILE:-}
manager=${FIELD_MANAGER:-gpu-stack-node-labels}
require_set NODES_FILE "$nodes_file"
[[ -r $nodes_file ]] || fail "cannot read the node table $nodes_file"

names=()
declare -A row=()
while read -r node labels; do
  [[ -n $node ]] || continue
  names+=("$node")
  row[$node]=$labels
done <"$nodes_file"
(( ${#names[@]} > 0 )) || pass "the node table is empty: nothing to label"

read_nodes .metadata.name "${names[@]}"
manifest=$(mktemp)
missing=()
applied=0
for node in "${names[@]}"; do
  if [[ -z ${NODE_FIELD[$node]+set} ]]; then
    missing+=("$node ($(node_error "$node"))")
    continue
  fi
  # Label keys and values are checked by the stack's config (no quotes, no spaces): quoted as they are.
  printf -- '---\napiVersion: v1\nkind: Node\nmetadata:\n  name: "%s"\n' "$node" >>"$manifest"
  read -r -a pairs <<<"${row[$node]}"
  if (( ${#pairs[@]} > 0 )); then
    printf '  labels:\n' >>"$manifest"
    for pair in "${pairs[@]}"; do
      printf '    "%s": "%s"\n' "${pair%%=*}" "${pair#*=}" >>"$manifest"
    done
  fi
  applied=$((applied + 1))
done
if (( applied > 0 )); then
  if ! out=$("$KUBECTL" apply --server-side --force-conflicts --field-manager="$manager" -f "$manifest" 2>&1); then
    fail "kubectl apply of the labels of $applied node(s) failed: ${out//$'\n'/ }"
  fi
fi
(( ${#missing[@]} == 0 )) || fail "not labelled, not read from the cluster (is the name right, has the node left?): $(summarize 5 "${missing[@]}"); the other $applied node(s) are labelled"
pass "labels of ${#names[@]} node(s) applied as field manager $manager (a label the table no longer sets is removed)"
