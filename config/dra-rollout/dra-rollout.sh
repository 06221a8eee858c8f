#!/bin/sh
# shellcheck shell=busybox
# Moves GPU nodes between the device plugin and Dynamic Resource Allocation (DRA), in drained
# waves, through the Kubernetes API (kubectl), so that no node ever advertises its GPUs both ways.
#
# Each line of the node table is
#   <node> dra|device-plugin <gpus> <devices> [<resource>=<count> ...]
# <gpus>: the node's physical GPUs (the unit of the capacity floor); <devices>: the devices its
# ResourceSlices show under DRA; the pairs: on a device-plugin line what the device plugin
# advertises there (the capacity table's row), on a dra line its devices per DeviceClass. Every GPU node of the stack has a line, those already in their mode too: they
# count towards the floor. For each node not yet in its mode, in waves of at most WAVE_SIZE
# nodes, a wave only after the previous one succeeded:
#   0. the wave is formed so that the schedulable GPUs of the table's other nodes (uncordoned and
#      advertising, through either path) stay at least MIN_GPUS; a node that offers none now
#      (cordoned, or not advertising yet on a first install) takes none away and may always go;
#      when not even one node can go, nothing is cordoned and the run fails
#   1. refuse a wave with GPU pods a drain cannot evict (a DaemonSet's or a static pod), unless
#      IGNORE_UNEVICTABLE=true
#   2. cordon (a node someone else cordoned stays cordoned afterwards)
#   3. evict its GPU pods (those that request an nvidia.com/ resource or hold a ResourceClaim)
#      through the Eviction API, so PodDisruptionBudgets are respected; refused evictions are
#      retried until EVICTION_TIMEOUT_SECONDS (steps 1-3 and 7 only with EVICT=true)
#   4. switch the old advertiser off and wait (TIMEOUT_SECONDS) until it is gone:
#      to DRA: PLUGIN_LABEL=false (the operator's device plugin off), then no nvidia.com/ resource
#      left in the node's capacity or allocatable (0 or absent; the kubelet keeps a stopped
#      plugin's capacity for a grace period);
#      back: the DRA_LABEL key removed (the DRA kubelet plugin off), then no ResourceSlice of
#      DRIVER left on the node (the kubelet removes a stopped driver's slices after a delay)
#   5. only then place the new one and wait (TIMEOUT_SECONDS):
#      to DRA: DRA_LABEL set, then (where PLUGIN_SELECTOR is set) a ready DRA kubelet plugin pod
#      on the node (PLUGIN_TIMEOUT_SECONDS), then the node's ResourceSlices of DRIVER complete
#      (every slice of the pool's newest generation there) with exactly <devices> devices, and
#      still no nvidia.com/ resource; back: PLUGIN_LABEL=true, then the table's resources in
#      allocatable and still no slice
#   6. validate: the node advertises one way only, as step 5 found it, read again; and, where
#      PROBE_JOB_FILE is set, a node moved to DRA hands out a device: a ResourceClaim for one
#      device of its first DeviceClass with devices (its table line's <class>=<count> pairs) and
#      a Job pinned to the node, tolerating the cordon, whose pod holds the claim and finds its
#      device in its container; both are deleted once it succeeded (TIMEOUT_SECONDS)
#   7. uncordon
# On a refused check, a timeout, a refused drain or an advertiser that comes back no later wave
# starts, and the script ends with one FAIL line (also the termination message `pulumi up`
# prints) naming the node and what it waited for; a node cordoned by then stays cordoned. A node
# already in its mode is left alone (a second run is a no-op); a node a failed run left cordoned
# is taken up again where it stopped.
#
#   NODES_FILE                the node table
#   WAVE_SIZE                 nodes moved at once, at most (default 1)
#   MIN_GPUS                  schedulable GPUs of the table's nodes to keep (default 0)
#   EVICT                     true | false (default true): false, no cordon and no eviction
#   IGNORE_UNEVICTABLE        true | false (default false)
#   EVICTION_TIMEOUT_SECONDS  default 600
#   TIMEOUT_SECONDS           each wait for an advertiser to go or come (default 900)
#   PLUGIN_TIMEOUT_SECONDS    the wait for the DRA kubelet plugin pod (default 600)
#   PLUGIN_NAMESPACE          where that pod runs (default gpu-operator)
#   PLUGIN_SELECTOR           its label selector (empty: not waited for)
#   PROBE_JOB_FILE            the probe Job's template (empty: no probe)
#   PROBE_CLAIM_FILE          the probe ResourceClaim's template
#   PROBE_NAMESPACE           where the probe runs (default gpu-operator)
#   POLL_SECONDS              default 5
#   PLUGIN_LABEL              the operator's device plugin switch (default nvidia.com/gpu.deploy.device-plugin)
#   DRA_LABEL                 <key>=<value> that places the DRA kubelet plugin on a node
#   DRIVER                    the DRA driver's name in ResourceSlices (default gpu.nvidia.com)
# POSIX sh: it runs on the GPU Operator image, under busybox `sh` (config/job-images.yaml). Node
# names, resource=count pairs and label keys have no blank and no glob character: lists of them are
# space-separated words, split without globbing (set -f).
set -eu

CHECK_NAME=${CHECK_NAME:-dra-rollout}
# fail, pass, info, require_int, json_string_field, table_value, scratch, poll_nodes: the
# validation payloads' helpers (the script's ConfigMap holds config/validation/common.sh next to it).
# shellcheck source-path=SCRIPTDIR source=../validation/common.sh
. "$(dirname "$0")/common.sh"
# gpu_pods, unevictable, drain, cordon_and_drain, uncordon, join_lines, advertised: what it shares with
# config/mig-rollout/mig-rollout.sh (config/validation/drain.sh, next to it in the ConfigMap too).
# shellcheck source-path=SCRIPTDIR source=../validation/drain.sh
. "$(dirname "$0")/drain.sh"
DRAIN_CHANGE="the allocation"
DRAIN_IGNORE_KEY=ignoreUnevictable
DRAIN_TIMEOUT_KEY="the eviction timeout"
DRAIN_UNEVICTABLE_EFFECT=""
DRAIN_UNEVICTABLE_HINT="keep those pods off these nodes, e.g. with a nodeSelector on their DaemonSet, or set ignoreUnevictable"
KUBECTL=${KUBECTL:-kubectl}
CORDON_MARK=gpu-stack/dra-rollout-cordoned
SLICES=resourceslices.v1.resource.k8s.io
set -f

file=${NODES_FILE:-}
[ -n "$file" ] || fail "NODES_FILE is not set"
[ -r "$file" ] || fail "cannot read the node table NODES_FILE '$file'"
wave_size=${WAVE_SIZE:-1}
min_gpus=${MIN_GPUS:-0}
ignore_unevictable=${IGNORE_UNEVICTABLE:-false}
eviction_timeout=${EVICTION_TIMEOUT_SECONDS:-600}
timeout=${TIMEOUT_SECONDS:-900}
poll=${POLL_SECONDS:-5}
evict=${EVICT:-true}
plugin_timeout=${PLUGIN_TIMEOUT_SECONDS:-600}
plugin_namespace=${PLUGIN_NAMESPACE:-gpu-operator}
plugin_selector=${PLUGIN_SELECTOR:-}
probe_job=${PROBE_JOB_FILE:-}
probe_claim=${PROBE_CLAIM_FILE:-}
probe_namespace=${PROBE_NAMESPACE:-gpu-operator}
plugin_label=${PLUGIN_LABEL:-nvidia.com/gpu.deploy.device-plugin}
dra_label=${DRA_LABEL:-}
driver=${DRIVER:-gpu.nvidia.com}
for pair in "WAVE_SIZE=$wave_size" "MIN_GPUS=$min_gpus" "EVICTION_TIMEOUT_SECONDS=$eviction_timeout" \
  "TIMEOUT_SECONDS=$timeout" "PLUGIN_TIMEOUT_SECONDS=$plugin_timeout" "POLL_SECONDS=$poll"; do
  require_int "${pair%%=*}" "${pair#*=}"
done
[ "$wave_size" -ge 1 ] || fail "WAVE_SIZE must be at least 1, got '$wave_size'"
case $ignore_unevictable in
  true | false) ;;
  *) fail "IGNORE_UNEVICTABLE must be true or false, got '$ignore_unevictable'" ;;
esac
case $evict in
  true) kept=cordoned ;;
  false) kept="as it is" ;;
  *) fail "EVICT must be true or false, got '$evict'" ;;
esac
case $dra_label in
  ?*=?*) ;;
  *) fail "DRA_LABEL must be <key>=<value>, got '$dra_label'" ;;
esac
if [ -n "$probe_job$probe_claim" ]; then
  [ -r "$probe_job" ] && [ -r "$probe_claim" ] ||
    fail "PROBE_JOB_FILE '$probe_job' and PROBE_CLAIM_FILE '$probe_claim' must both be readable files"
fi
dra_key=${dra_label%%=*}
dra_value=${dra_label#*=}

# The node table, one "<node><TAB><mode><TAB><gpus><TAB><devices><TAB><resource=count ...>" per
# line (the last line of a node wins); order: its nodes, in its order.
table=""
scratch table node-table
# The body of a probe's object the script sends: a file of this run's own.
probe_body=""
scratch probe_body probe
order=""
while read -r node mode gpus devices pairs; do
  [ -n "$node" ] || continue
  case $mode in
    dra | device-plugin) is_int "${gpus:-}" && is_int "${devices:-}" ;;
    *) false ;;
  esac || fail "node table line for node '$node' must be '<node> dra|device-plugin <gpus> <devices> [<resource>=<count> ...]'"
  for pair in ${pairs:-}; do
    is_pair "$pair" || fail "node table entry '$pair' of node '$node' is not resource=count"
  done
  printf '%s\t%s\t%s\t%s\t%s\n' "$node" "$mode" "$gpus" "$devices" "${pairs:-}" >>"$table"
  order="$order $node"
done <"$file"
[ -n "$order" ] || fail "the node table '$file' lists no node"

# target NODE: sets MODE, GPUS, DEVICES and RESOURCES from NODE's line of the node table.
target() {
  local line
  line=$(table_value "$table" "$1") || line=""
  MODE=${line%%"$TAB"*}
  line=${line#*"$TAB"}
  GPUS=${line%%"$TAB"*}
  line=${line#*"$TAB"}
  DEVICES=${line%%"$TAB"*}
  RESOURCES=${line#*"$TAB"}
}

# mode_words MODE: how the log names a mode.
mode_words() {
  case $1 in
    dra) printf 'DRA' ;;
    *) printf 'the device plugin' ;;
  esac
}

# read_node NODE: sets LABELS, UNSCHEDULABLE, CAPACITY, ALLOCATABLE and ANNOTATIONS; fails the
# rollout when the node cannot be read (a node that does not exist is never cordoned or
# labelled). Fields are split on '|'; only the annotations, last, may hold one.
read_node() {
  local out
  if ! out=$("$KUBECTL" get node "$1" -o \
    'jsonpath={.metadata.labels}{"|"}{.spec.unschedulable}{"|"}{.status.capacity}{"|"}{.status.allocatable}{"|"}{.metadata.annotations}' 2>&1); then
    fail "node $1 cannot be read: $(one_line "$out") (is nodes[].name the node's Kubernetes name?)"
  fi
  IFS='|' read -r LABELS UNSCHEDULABLE CAPACITY ALLOCATABLE ANNOTATIONS <<EOF || true
$out
EOF
}

# nvidia_resources JSON: the "<resource>=<count>" of every nvidia.com/ resource of a flat JSON map
# of quantities (a node's capacity or allocatable) whose count is not 0, space-separated.
nvidia_resources() {
  local rest item key value out
  rest=${1#"{"}
  rest=${rest%"}"}
  out=""
  while [ -n "$rest" ]; do
    item=${rest%%,*}
    if [ "$item" = "$rest" ]; then
      rest=""
    else
      rest=${rest#*,}
    fi
    key=${item%%:*}
    key=${key#'"'}
    key=${key%'"'}
    value=${item#*:}
    value=${value#'"'}
    value=${value%'"'}
    case $key in
      nvidia.com/*) [ "$value" = 0 ] || out="$out${out:+ }$key=$value" ;;
    esac
  done
  printf '%s' "$out"
}

# plugin_resources: what the device plugin still advertises on the node read_node read last
# (capacity or allocatable), or nothing.
plugin_resources() {
  local cap alloc
  cap=$(nvidia_resources "$CAPACITY")
  alloc=$(nvidia_resources "$ALLOCATABLE")
  [ -z "$cap$alloc" ] || printf '%s' "capacity {${cap}} allocatable {${alloc}}"
}

# read_slices: the ResourceSlices of DRIVER, one "<node>|<pool>|<generation>|<slices in the
# pool>|<device names>" per line, into the scratch file slice_file.
slice_file=""
scratch slice_file slices
read_slices() {
  local out
  if ! out=$("$KUBECTL" get "$SLICES" --field-selector "spec.driver=$driver" -o \
    'jsonpath={range .items[*]}{.spec.nodeName}{"|"}{.spec.pool.name}{"|"}{.spec.pool.generation}{"|"}{.spec.pool.resourceSliceCount}{"|"}{.spec.devices[*].name}{"\n"}{end}' 2>&1); then
    fail "the ResourceSlices of driver $driver cannot be listed: $(one_line "$out")"
  fi
  printf '%s\n' "$out" >"$slice_file"
}

# slices_of NODE: sets NODE_SLICES (how many slices of DRIVER the node has), NODE_DEVICES (the
# devices in the newest generation of each of its pools) and INCOMPLETE (its pools whose newest
# generation has fewer slices than it says), from what read_slices read last.
slices_of() {
  local out
  out=$(NODE="$1" awk -F '|' '$1 == ENVIRON["NODE"] && $1 != "" {
      slices++
      if (!($2 in gen) || $3 + 0 > gen[$2] + 0) { gen[$2] = $3; seen[$2] = 0; devices[$2] = 0 }
      if ($3 + 0 == gen[$2] + 0) { seen[$2]++; want[$2] = $4; devices[$2] += split($5, names, " ") }
    }
    END {
      total = 0; incomplete = ""
      for (p in gen) { total += devices[p]; if (seen[p] < want[p] + 0) incomplete = incomplete " " p }
      printf "%d|%d|%s", slices, total, incomplete
    }' "$slice_file")
  IFS='|' read -r NODE_SLICES NODE_DEVICES INCOMPLETE <<EOF || true
$out
EOF
  INCOMPLETE=${INCOMPLETE# }
}

# state NODE: reads NODE (read_node; slices_of the last read_slices) and sets STATE to where it
# stands: dra (DRA in place, the device plugin gone), device-plugin (the reverse), both (it
# advertises both ways: never the rollout's doing), or moving; IN_MODE to whether it is switched
# to its target mode; and WHY to what its target mode still lacks, counts included (empty when
# the node is fully in it). PLUGIN_ON, DRA_ON and PLUGIN_ADVERTISES say how.
state() {
  local mismatch
  target "$1"
  read_node "$1"
  slices_of "$1"
  PLUGIN_ON=true
  [ "$(json_string_field "$LABELS" "$plugin_label")" != false ] || PLUGIN_ON=false
  DRA_ON=false
  [ "$(json_string_field "$LABELS" "$dra_key")" != "$dra_value" ] || DRA_ON=true
  PLUGIN_ADVERTISES=$(plugin_resources)
  if [ -n "$PLUGIN_ADVERTISES" ] && [ "$NODE_SLICES" -gt 0 ]; then
    STATE=both
  elif [ "$PLUGIN_ON" = false ] && [ "$DRA_ON" = true ] && [ -z "$PLUGIN_ADVERTISES" ] && [ "$NODE_SLICES" -gt 0 ]; then
    STATE=dra
  elif [ "$PLUGIN_ON" = true ] && [ "$DRA_ON" = false ] && [ "$NODE_SLICES" -eq 0 ] && [ -n "$PLUGIN_ADVERTISES" ]; then
    STATE=device-plugin
  else
    STATE=moving
  fi
  # Switched to its mode, the old advertiser gone (and, for DRA, the new one publishing): nothing
  # for the rollout to do, whatever the counts (a GPU lost since is not the rollout's to fix).
  IN_MODE=false
  if [ "$MODE" = dra ]; then
    [ "$PLUGIN_ON" = false ] && [ "$DRA_ON" = true ] && [ -z "$PLUGIN_ADVERTISES" ] && [ "$NODE_SLICES" -gt 0 ] && IN_MODE=true
  else
    [ "$PLUGIN_ON" = true ] && [ "$DRA_ON" = false ] && [ "$NODE_SLICES" -eq 0 ] && IN_MODE=true
  fi
  WHY=""
  if [ "$MODE" = dra ]; then
    if [ "$PLUGIN_ON" = true ]; then
      WHY="$plugin_label is not false"
    elif [ "$DRA_ON" = false ]; then
      WHY="the DRA kubelet plugin is not placed ($dra_key is not $dra_value)"
    elif [ -n "$PLUGIN_ADVERTISES" ]; then
      WHY="the device plugin still advertises $PLUGIN_ADVERTISES"
    elif [ -n "$INCOMPLETE" ]; then
      WHY="its ResourceSlices of pool(s) $INCOMPLETE are incomplete"
    elif [ "$NODE_DEVICES" -ne "$DEVICES" ]; then
      WHY="its ResourceSlices of $driver show $NODE_DEVICES device(s) (expected $DEVICES)"
    fi
  else
    if [ "$DRA_ON" = true ]; then
      WHY="the DRA kubelet plugin is placed ($dra_key=$dra_value)"
    elif [ "$PLUGIN_ON" = false ]; then
      WHY="$plugin_label is false"
    elif [ "$NODE_SLICES" -gt 0 ]; then
      WHY="$NODE_SLICES ResourceSlice(s) of $driver are still on it"
    else
      mismatch=$(advertised "$1")
      [ -z "$mismatch" ] || WHY="the device plugin advertises $mismatch"
    fi
  fi
}

# label NODE CHANGE...: `kubectl label --overwrite` (a CHANGE is key=value or key-).
label() {
  local node out
  node=$1
  shift
  out=$("$KUBECTL" label node "$node" "$@" --overwrite 2>&1) ||
    fail "node $node: cannot label it ($*): $(one_line "$out"); it stays $kept and no later wave starts"
}

# wait_until WHAT PHASE SECONDS KEY NODE...: waits up to SECONDS (the setting KEY) until
# `step PHASE NODE` leaves NODE_PROBLEM empty for every node (it may fail at once), reading the
# ResourceSlices once a pass (poll_nodes, config/validation/common.sh); WHAT names the wait in the
# log and the failure.
wait_until() {
  local what seconds key
  what=$1
  WAIT_PHASE=$2
  seconds=$3
  key=$4
  shift 4
  poll_nodes "$(( $(elapsed) + seconds ))" read_slices phase_step "waiting until $what: " "" "$@"
  if [ -n "$POLL_PROBLEMS" ]; then
    [ "$WAIT_PHASE" != probe ] || end_probes
    fail "${POLL_PROBLEMS%%"$NL"*} after ${seconds}s ($key), waiting until $what; the node stays $kept and no later wave starts"
  fi
}

# phase_step NODE: wait_until's look at NODE, `step WAIT_PHASE NODE`, its problem named after NODE.
# shellcheck disable=SC2329  # called through poll_nodes, which wait_until hands its name
phase_step() {
  step "$WAIT_PHASE" "$1"
  [ -z "$NODE_PROBLEM" ] || NODE_PROBLEM="node $1: $NODE_PROBLEM"
}

# both_ways NODE: fails at once when NODE (state read it last) advertises its GPUs both ways.
both_ways() {
  if [ "$STATE" = both ]; then
    fail "node $1 advertises its GPUs both ways: the device plugin $PLUGIN_ADVERTISES and $NODE_SLICES ResourceSlice(s) of $driver; something else switched $plugin_label or $dra_key; the node stays $kept and no later wave starts"
  fi
}

# plugin_pod NODE: sets NODE_PROBLEM while no ready DRA kubelet plugin pod (PLUGIN_SELECTOR in
# PLUGIN_NAMESPACE) runs on NODE.
# shellcheck disable=SC2329  # called by step, which phase_step calls
plugin_pod() {
  local out name deleted ready found
  if ! out=$("$KUBECTL" get pods -n "$plugin_namespace" -l "$plugin_selector" --field-selector "spec.nodeName=$1" -o \
    'jsonpath={range .items[*]}{.metadata.name}{"|"}{.metadata.deletionTimestamp}{"|"}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>&1); then
    NODE_PROBLEM="its DRA kubelet plugin pods cannot be listed: $(one_line "$out")"
    return
  fi
  found=""
  while IFS='|' read -r name deleted ready; do
    [ -n "$name" ] || continue
    if [ -z "$deleted" ] && [ "$ready" = True ]; then
      return
    fi
    found="$name"
  done <<EOF
$out
EOF
  if [ -n "$found" ]; then
    NODE_PROBLEM="its DRA kubelet plugin pod $found is not ready"
  else
    NODE_PROBLEM="no DRA kubelet plugin pod ($plugin_selector in namespace $plugin_namespace) runs there"
  fi
}

# step old|plugin|new|probe NODE: one look at NODE during a wave's wait for its old advertiser to
# be gone (old), the DRA kubelet plugin pod to be ready (plugin), the new advertiser to be in place
# (new) or its probe to succeed (probe); sets NODE_PROBLEM while it is not there yet.
# shellcheck disable=SC2329  # called by phase_step, which poll_nodes calls
step() {
  state "$2"
  both_ways "$2"
  case $1.$MODE in
    plugin.*)
      plugin_pod "$2"
      ;;
    probe.*)
      probe_state "$2"
      ;;
    old.dra)
      [ -z "$PLUGIN_ADVERTISES" ] || NODE_PROBLEM="the device plugin still advertises $PLUGIN_ADVERTISES"
      ;;
    old.*)
      [ "$NODE_SLICES" -eq 0 ] || NODE_PROBLEM="$NODE_SLICES ResourceSlice(s) of $driver still on it"
      ;;
    new.dra)
      if [ -n "$PLUGIN_ADVERTISES" ]; then
        fail "node $2: the device plugin advertises again ($PLUGIN_ADVERTISES) although $plugin_label is false; the DRA kubelet plugin stays placed, the node stays $kept and no later wave starts"
      fi
      NODE_PROBLEM=$WHY
      ;;
    *)
      NODE_PROBLEM=$WHY
      ;;
  esac
}

# ------------------------------------------------------------------ the probe
# A node moved to DRA is proven before it is uncordoned: a ResourceClaim for one device of the
# node's first DeviceClass with devices (its table line's <class>=<count>), and a Job whose pod is
# pinned to the node, tolerates the cordon, holds that claim and exits 0 only when the claim's
# device is in its container (the kubelet had the DRA driver prepare it). The templates are
# PROBE_CLAIM_FILE and PROBE_JOB_FILE, with __NODE__, __CLASS__ and __CLAIM__ in place of the
# node, the class and the claim's name; probes: "<node><TAB><claim><TAB><job>" per probe started.
probes=""
scratch probes probes

# create_from TEMPLATE NODE CLASS CLAIM: creates the object TEMPLATE makes for them; prints its name.
create_from() {
  local out
  if ! sed -e "s/__NODE__/$2/g" -e "s/__CLASS__/$3/g" -e "s/__CLAIM__/$4/g" "$1" >"$probe_body"; then
    printf 'cannot write %s' "$probe_body"
    return 1
  fi
  out=$("$KUBECTL" create -f "$probe_body" -o name 2>&1) || {
    printf '%s' "$(one_line "$out")"
    return 1
  }
  printf '%s' "${out#*/}"
}

# start_probe NODE: the probe's claim and Job on NODE (a node moved to DRA).
start_probe() {
  local class pair claim job
  target "$1"
  class=""
  for pair in $RESOURCES; do
    [ "${pair#*=}" = 0 ] || {
      class=${pair%%=*}
      break
    }
  done
  [ -n "$class" ] || fail "node $1: its table line names no DeviceClass with devices to probe; the node stays $kept"
  claim=$(create_from "$probe_claim" "$1" "$class" "") ||
    fail "node $1: the probe's ResourceClaim cannot be created: $claim; the node stays $kept and no later wave starts"
  job=$(create_from "$probe_job" "$1" "$class" "$claim") || {
    "$KUBECTL" delete resourceclaims.v1.resource.k8s.io "$claim" -n "$probe_namespace" --wait=false >/dev/null 2>&1 || true
    fail "node $1: the probe Job cannot be created: $job; the node stays $kept and no later wave starts"
  }
  printf '%s\t%s\t%s\n' "$1" "$claim" "$job" >>"$probes"
  info "node $1: probing one $class device through ResourceClaim $claim (Job $job)"
}

# end_probes: deletes every probe's Job (its pod with it) and claim.
end_probes() {
  local node claim job
  while IFS="$TAB" read -r node claim job; do
    [ -n "$job" ] || continue
    "$KUBECTL" delete job "$job" -n "$probe_namespace" --cascade=background --wait=false >/dev/null 2>&1 || true
    "$KUBECTL" delete resourceclaims.v1.resource.k8s.io "$claim" -n "$probe_namespace" --wait=false >/dev/null 2>&1 || true
  done <"$probes"
  : >"$probes"
}

# probe_state NODE: sets NODE_PROBLEM while NODE's probe Job has not succeeded; fails (the probe
# deleted) when it failed.
# shellcheck disable=SC2329  # called by step, which phase_step calls
probe_state() {
  local row job out succeeded failed why
  row=$(table_value "$probes" "$1") || row=""
  job=${row#*"$TAB"}
  out=$("$KUBECTL" get job "$job" -n "$probe_namespace" -o 'jsonpath={.status.succeeded}{"|"}{.status.failed}' 2>&1) || {
    NODE_PROBLEM="its probe Job $job cannot be read: $(one_line "$out")"
    return
  }
  IFS='|' read -r succeeded failed <<EOF || true
$out
EOF
  [ "${succeeded:-0}" = 0 ] || return 0
  why=$("$KUBECTL" get pods -n "$probe_namespace" -l "batch.kubernetes.io/job-name=$job" -o \
    'jsonpath={range .items[*]}{.status.phase}{" "}{.status.conditions[?(@.type=="PodScheduled")].message}{" "}{.status.containerStatuses[*].state.terminated.message}{"\n"}{end}' 2>/dev/null) || why=""
  why=$(one_line "$why")
  if [ "${failed:-0}" != 0 ]; then
    end_probes
    fail "node $1: its probe (one device through a ResourceClaim, Job $job) failed: ${why:-no reason given}; the DRA driver did not hand out a working device there; the node stays $kept and no later wave starts"
  fi
  NODE_PROBLEM="its probe Job $job has not succeeded yet${why:+: $why}"
}

# ------------------------------------------------------------------ which nodes change
# cordoned_by_others: " <node> ... " of the nodes cordoned by someone else; changing: the nodes
# to move, in the table's order. Every node is read before anything changes.
cordoned_by_others=" "
changing=""
changing_count=0
read_slices
for node in $order; do
  state "$node"
  mark=$(json_string_field "$ANNOTATIONS" "$CORDON_MARK")
  if [ "$UNSCHEDULABLE" = true ] && [ -z "$mark" ]; then
    cordoned_by_others="$cordoned_by_others$node "
  fi
  if [ "$IN_MODE" = true ] && [ -z "$mark" ]; then
    info "node $node already allocates its GPUs through $(mode_words "$MODE"): nothing to do${WHY:+ (though $WHY: a switch would not change that)}"
    continue
  fi
  from=$STATE
  [ "$from" != moving ] || from="between modes: $WHY"
  info "node $node: $from -> $(mode_words "$MODE")"
  changing="$changing $node"
  changing_count=$(( changing_count + 1 ))
done
[ "$changing_count" -gt 0 ] || pass "every node already allocates its GPUs as its table line says"
info "$changing_count node(s) to move, in waves of at most $wave_size, keeping at least $min_gpus schedulable GPU(s)"

# contribution NODE: the GPUs NODE offers the scheduler now (read_node and slices_of read it
# last): its table line's GPUs when it is schedulable and advertises through either path, else 0.
contribution() {
  target "$1"
  if [ "$UNSCHEDULABLE" != true ] && { [ -n "$(nvidia_resources "$ALLOCATABLE")" ] || [ "$NODE_DEVICES" -gt 0 ]; }; then
    printf '%s' "$GPUS"
  else
    printf '0'
  fi
}

# next_wave: sets WAVE to the next nodes of `remaining` (at most WAVE_SIZE) whose going keeps the
# schedulable GPUs of the table's nodes at MIN_GPUS or more (or, where they are fewer already,
# takes none of them away), and SCHEDULABLE to those GPUs now; fails, nothing cordoned, when not
# even the first can go.
contributions=""
scratch contributions contributions
next_wave() {
  local node give taken count first
  read_slices
  : >"$contributions"
  SCHEDULABLE=0
  for node in $order; do
    read_node "$node"
    slices_of "$node"
    give=$(contribution "$node")
    printf '%s\t%s\n' "$node" "$give" >>"$contributions"
    SCHEDULABLE=$(( SCHEDULABLE + give ))
  done
  WAVE=""
  taken=0
  count=0
  first=""
  for node in $remaining; do
    [ "$count" -lt "$wave_size" ] || break
    give=$(table_value "$contributions" "$node")
    [ -n "$first" ] || first="$node ($give GPU(s))"
    # A node that offers nothing now (cordoned, or not advertising yet: a first install) takes
    # nothing away, whatever the count.
    if [ "$give" -gt 0 ] && [ $(( SCHEDULABLE - taken - give )) -lt "$min_gpus" ]; then
      break
    fi
    WAVE="$WAVE $node"
    taken=$(( taken + give ))
    count=$(( count + 1 ))
  done
  WAVE_OUT=$taken
  [ -n "$WAVE" ] ||
    fail "the capacity floor cannot hold: $SCHEDULABLE GPU(s) are schedulable on the table's nodes now and moving node $first would leave fewer than the $min_gpus to keep; nothing was cordoned and no later wave starts (uncordon or repair nodes, or lower the floor)"
}

# ------------------------------------------------------------------ one wave
run_wave() {
  local number node to_dra
  number=$1
  shift
  info "wave $number: $* ($WAVE_OUT schedulable GPU(s) out of $SCHEDULABLE while it runs, floor $min_gpus)"
  if [ "$evict" = true ]; then
    # Checked before anything changes: a refusal leaves the wave's nodes as they were.
    unevictable "nothing was cordoned" "$@"
    cordon_and_drain "$@"
  else
    info "evict is false: not cordoning or evicting $*"
  fi
  # The old advertiser off, and gone, on every node of the wave before any new one is placed.
  to_dra=""
  for node in "$@"; do
    target "$node"
    if [ "$MODE" = dra ]; then
      to_dra="$to_dra $node"
      label "$node" "$plugin_label=false"
      info "node $node: $plugin_label=false (the device plugin off)"
    else
      label "$node" "$dra_key-"
      info "node $node: $dra_key removed (the DRA kubelet plugin off)"
    fi
  done
  wait_until "the old advertiser is gone" old "$timeout" "the rollout's timeout" "$@"
  for node in "$@"; do
    target "$node"
    if [ "$MODE" = dra ]; then
      label "$node" "$dra_label"
      info "node $node: $dra_label (the DRA kubelet plugin placed)"
    else
      label "$node" "$plugin_label=true"
      info "node $node: $plugin_label=true (the device plugin back)"
    fi
  done
  if [ -n "$plugin_selector" ] && [ -n "$to_dra" ]; then
    # shellcheck disable=SC2086  # node names: no blank, no glob character
    wait_until "the DRA kubelet plugin runs" plugin "$plugin_timeout" "the rollout's pluginTimeout" $to_dra
  fi
  wait_until "the new advertiser is in place" new "$timeout" "the rollout's timeout" "$@"
  # Validated: read once more, after the waits, each node in its mode and only in it.
  read_slices
  for node in "$@"; do
    state "$node"
    both_ways "$node"
    [ -z "$WHY" ] && [ "$STATE" = "$MODE" ] ||
      fail "node $node: not in its mode after the switch: ${WHY:-it stands at $STATE}; the node stays $kept and no later wave starts"
    if [ "$MODE" = dra ]; then
      info "node $node allocates its GPUs through DRA: $NODE_DEVICES device(s) in its ResourceSlices of $driver, no nvidia.com/ resource advertised"
    else
      info "node $node allocates its GPUs through the device plugin: ${RESOURCES:-its resources}, no ResourceSlice of $driver"
    fi
  done
  if [ -n "$probe_job" ] && [ -n "$to_dra" ]; then
    for node in $to_dra; do
      start_probe "$node"
    done
    # shellcheck disable=SC2086  # node names: no blank, no glob character
    wait_until "each node's probe succeeded" probe "$timeout" "the rollout's timeout" $to_dra
    end_probes
    for node in $to_dra; do
      info "node $node handed out a device through a ResourceClaim"
    done
  fi
  uncordon "$@"
}

# The waves, in the table's order, each as large as WAVE_SIZE and the floor allow.
remaining=$changing
number=0
while [ -n "$remaining" ]; do
  next_wave
  number=$(( number + 1 ))
  # shellcheck disable=SC2086  # node names: no blank, no glob character
  run_wave "$number" $WAVE
  rest=""
  for node in $remaining; do
    case " $WAVE " in
      *" $node "*) ;;
      *) rest="$rest $node" ;;
    esac
  done
  remaining=${rest# }
done
pass "$changing_count node(s) moved in $number wave(s)"
