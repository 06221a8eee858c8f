#!/bin/sh
# shellcheck shell=busybox
# Refuses a MIG layout edit under an old config name while a node uses that name, before the
# operator release changes (the release waits for this Job).
#
# MIG manager re-applies its node's current nvidia.com/mig.config when its pod starts (k8s-mig-manager
# v0.13.1, cmd/nvidia-mig-manager/main.go: the node informer's AddFunc), and the operator restarts
# every MIG manager pod (node by node) when the ClusterPolicy names a new mig-parted ConfigMap
# (gpu-operator v25.10.1 controllers/object_controls.go sets the DaemonSet's mig-parted-config
# volume from it). So a config whose layout changes under the same name would re-partition
# every node that selects it, at the DaemonSet's pace, without cordon or drain, on busy GPUs.
# This script compares the layout fingerprints of the ConfigMap the MIG manager mounts now (the
# annotation gpu-stack/mig-layouts, "<config>=<hash> ...") with the new ones and fails, naming
# the configs and the nodes, when a changed layout is in use by one of the stack's nodes. A config
# that is new, removed or unchanged passes (a removed one is relabelled by the rollout Job).
#
#   NEW_CONFIGMAP        the mig-parted ConfigMap the release is about to name
#   NEW_LAYOUTS          its fingerprints, "<config>=<hash> ..."
#   NODES                the stack's MIG-capable nodes, space-separated: those whose label counts
#   OPERATOR_NAMESPACE   default gpu-operator
#   MIG_MANAGER_DAEMONSET default nvidia-mig-manager
# POSIX sh: it runs on the GPU Operator image, under busybox `sh` (config/job-images.yaml).
set -eu

CHECK_NAME=${CHECK_NAME:-mig-layout-guard}
# The Job's ConfigMap holds common.sh (config/validation/common.sh) next to this script.
# shellcheck source-path=SCRIPTDIR source=../validation/common.sh
. "$(dirname "$0")/common.sh"
KUBECTL=${KUBECTL:-kubectl}
CONFIG_LABEL=nvidia.com/mig.config
LAYOUTS_MARK=gpu-stack/mig-layouts
CONFIG_VOLUME=mig-parted-config
ALL_DISABLED=all-disabled

new_configmap=${NEW_CONFIGMAP:-}
new_layouts=${NEW_LAYOUTS:-}
nodes=${NODES:-}
namespace=${OPERATOR_NAMESPACE:-gpu-operator}
daemonset=${MIG_MANAGER_DAEMONSET:-nvidia-mig-manager}
require_set NEW_CONFIGMAP "$new_configmap"
require_set NEW_LAYOUTS "$new_layouts"
require_set NODES "$nodes"
# Config names, fingerprints and node names have no blank and no glob character: the lists below
# are split on blanks.
set -f

if ! mounted=$("$KUBECTL" get daemonset "$daemonset" -n "$namespace" -o \
  'jsonpath={.spec.template.spec.volumes[?(@.name=="'"$CONFIG_VOLUME"'")].configMap.name}' 2>&1); then
  case $mounted in
    *NotFound*) ;;
    *) fail "cannot read the MIG manager DaemonSet $namespace/$daemonset: $(one_line "$mounted")" ;;
  esac
  pass "no MIG manager DaemonSet $namespace/$daemonset yet (first install): no node can be re-partitioned"
fi
[ -n "$mounted" ] || fail "the MIG manager DaemonSet $namespace/$daemonset has no '$CONFIG_VOLUME' ConfigMap volume: cannot tell which layouts its pods apply"
[ "$mounted" != "$new_configmap" ] || pass "the MIG manager already mounts $new_configmap: no layout changes"

known=true
if ! annotations=$("$KUBECTL" get configmap "$mounted" -n "$namespace" -o 'jsonpath={.metadata.annotations}' 2>&1); then
  case $annotations in
    *NotFound*) ;;
    *) fail "cannot read the ConfigMap $namespace/$mounted the MIG manager mounts: $(one_line "$annotations")" ;;
  esac
  annotations=""
fi
fingerprints=$(json_string_field "$annotations" "$LAYOUTS_MARK")
[ -n "$fingerprints" ] || known=false

# fingerprint NAME PAIRS...: the hash of the last "NAME=<hash>" of PAIRS; status 1 when none.
fingerprint() {
  local name pair found hash
  name=$1
  shift
  found=false
  hash=""
  for pair in "$@"; do
    if [ "${pair%%=*}" = "$name" ]; then
      found=true
      hash=${pair#*=}
    fi
  done
  printf '%s' "$hash"
  [ "$found" = true ]
}

# The configs whose layout changes (or, without fingerprints, may change) under the same name, in
# NEW_LAYOUTS order.
changed=""
for pair in $new_layouts; do
  name=${pair%%=*}
  if [ "$known" = true ]; then
    # shellcheck disable=SC2086  # split on blanks, no globbing (set -f)
    old=$(fingerprint "$name" $fingerprints) || continue
    # shellcheck disable=SC2086
    new=$(fingerprint "$name" $new_layouts)
    [ -n "$old" ] && [ "$old" != "$new" ] || continue
  else
    [ "$name" != "$ALL_DISABLED" ] || continue
  fi
  changed="$changed $name"
done
[ -n "$changed" ] || pass "no MIG config changes its layout under the same name ($mounted -> $new_configmap)"

list=""
for name in $changed; do
  list="${list:+$list,}$name"
done
# The stack's MIG-capable nodes, by name (its RBAC reads no other node).
# shellcheck disable=SC2086  # node names: no blank, no glob character
read_nodes .metadata.labels $nodes
# selected: " <node>=<config> ..." of every node read whose label selects a config (NODE_TABLE read
# once: a lookup per node would read it once per node).
selected=" "
while IFS="$TAB" read -r node labels; do
  config=$(json_string_field "$labels" "$CONFIG_LABEL")
  [ -z "$config" ] || selected="$selected$node=$config "
done <"$NODE_TABLE"
refused=""
example=""
for name in $changed; do
  users=""
  for node in $nodes; do
    case $selected in
      *" $node=$name "*) users="${users:+$users, }$node" ;;
    esac
  done
  [ -n "$users" ] || continue
  refused="${refused:+$refused; }'$name' (node(s) $users)"
  example=${example:-$name}
done
[ -n "$refused" ] || pass "MIG config(s) $list change their layout, but no node of the stack selects them"

what="changes its layout under the same name"
[ "$known" = true ] || what="may change its layout under the same name (the ConfigMap $mounted the MIG manager mounts carries no $LAYOUTS_MARK, so its layouts cannot be compared: it is the operator's built-in config, or one an earlier gpu-stack wrote, in which case apply the new gpu-stack version once without editing mig.profiles first)"
fail "MIG config $refused $what while nodes select it: the MIG manager would re-partition those nodes as soon as it restarts with the new ConfigMap, without cordon or drain, so the operator release was not changed. Give the new layout a new name in mig.profiles (e.g. $example-v2) and point nodes[].mig at it: the rollout Job then drains and relabels the nodes wave by wave"
