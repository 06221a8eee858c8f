#!/bin/sh
# shellcheck shell=busybox
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
# POSIX sh: it runs on the GPU Operator image, under busybox `sh` (config/job-images.yaml).
#
#   NODES_FILE     the table (the ConfigMap mounted by the Job)
#   FIELD_MANAGER  default gpu-stack-node-labels
set -eu

CHECK_NAME=${CHECK_NAME:-node-labels}
# The Job's ConfigMap holds common.sh (config/validation/common.sh) next to this script.
# shellcheck source-path=SCRIPTDIR source=../validation/common.sh
. "$(dirname "$0")/common.sh"
KUBECTL=${KUBECTL:-kubectl}

nodes_file=${NODES_FILE:-}
manager=${FIELD_MANAGER:-gpu-stack-node-labels}
require_set NODES_FILE "$nodes_file"
[ -r "$nodes_file" ] || fail "cannot read the node table $nodes_file"

# names: the table's nodes in its order; rows: "<node><TAB><labels>" per line (the last line of a
# node wins).
names=""
count=0
rows=""
scratch rows node-rows
while read -r node labels; do
  [ -n "$node" ] || continue
  names="$names $node"
  count=$(( count + 1 ))
  printf '%s\t%s\n' "$node" "$labels" >>"$rows"
done <"$nodes_file"
[ "$count" -gt 0 ] || pass "the node table is empty: nothing to label"

# shellcheck disable=SC2086  # node names: no blank, no glob character
read_nodes .metadata.name $names
# The nodes read, " <name> ... " (NODE_TABLE read once: a lookup per node would read it N times).
found=" "
while IFS="$TAB" read -r name rest; do
  found="$found$name "
done <"$NODE_TABLE"
manifest=""
scratch manifest node-manifest
missing=""
applied=0
for node in $names; do
  case $found in
    *" $node "*) ;;
    *)
      missing="$missing$node ($(node_error "$node"))$NL"
      continue
      ;;
  esac
  # Label keys and values are checked by the stack's config (no quotes, no spaces): quoted as they are.
  printf -- '---\napiVersion: v1\nkind: Node\nmetadata:\n  name: "%s"\n' "$node" >>"$manifest"
  labels=$(table_value "$rows" "$node")
  # (read trims the blanks around a line's labels: none left, no label.)
  if [ -n "$labels" ]; then
    printf '  labels:\n' >>"$manifest"
    set -f
    for pair in $labels; do
      printf '    "%s": "%s"\n' "${pair%%=*}" "${pair#*=}" >>"$manifest"
    done
    set +f
  fi
  applied=$((applied + 1))
done
if [ "$applied" -gt 0 ]; then
  if ! out=$("$KUBECTL" apply --server-side --force-conflicts --field-manager="$manager" -f "$manifest" 2>&1); then
    fail "kubectl apply of the labels of $applied node(s) failed: $(one_line "$out")"
  fi
fi
[ -z "$missing" ] || fail "not labelled, not read from the cluster (is the name right, has the node left?): $(summarize_lines 5 "$missing"); the other $applied node(s) are labelled"
pass "labels of $count node(s) applied as field manager $manager (a label the table no longer sets is removed)"
