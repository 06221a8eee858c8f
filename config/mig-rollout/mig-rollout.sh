#!/bin/sh
# shellcheck shell=busybox
# Rolls a MIG config change out to GPU nodes, in waves, through the Kubernetes API (kubectl).
#
# Each line of the node table is "<node> set <config> [<resource>=<count> ...]" (the node's
# nvidia.com/mig.config is the stack's) or "<node> restore all-disabled [...]" (the node has no
# nodes[i].mig: if the rollout set its MIG config earlier, it goes back to whole GPUs; a config
# set by anyone else is left as it is). For each node whose label differs from its target (or
# whose last change did not succeed), in waves of WAVE_SIZE nodes, a wave only after the previous
# one succeeded:
#   1. check that no GPU pod on it is one the drain cannot evict (a DaemonSet's or a static pod:
#      MIG manager would fail or wait on it), unless IGNORE_UNEVICTABLE=true
#   2. wait until the node's MIG manager pod is ready and mounts MIG_CONFIGMAP (the operator rolls
#      the MIG manager DaemonSet onto a new mig-parted ConfigMap node by node; an old pod would
#      not know a new config and set state=failed: k8s-mig-manager v0.13.1 validates the label
#      against its mounted file first, pkg/mig/reconfigure/reconfigure.go validateMigConfig;
#      pinned by tests/test_mig_rollout_surprises.py) (MANAGER_TIMEOUT_SECONDS)
#   3. cordon (unless EVICT=false; a node someone else cordoned stays cordoned afterwards)
#   4. evict the pods that use GPUs on it (Eviction API, so PodDisruptionBudgets are respected;
#      refused evictions are retried until EVICTION_TIMEOUT_SECONDS)
#   5. check the MIG manager again, then set nvidia.com/mig.config, mig.config.state=pending (so
#      an old `success` is not read as the new one) and the annotation gpu-stack/mig-config (what
#      the rollout set: a later restore touches only such nodes), in one patch
#   6. wait until nvidia.com/mig.config.state=success and the node advertises the table's
#      resources (TIMEOUT_SECONDS)
#   7. uncordon
# On a refused check, `failed`, a timeout or a refused drain no later wave starts and the script
# ends with one FAIL line (also the termination message `pulumi up` prints) naming the node, what
# it waited for and, once relabelled, the last lines of the MIG manager's log on that node. A node
# cordoned by then stays cordoned.
# A MIG manager that gave up (k8s-mig-manager v0.13.1: its reconfiguration returned early, e.g.
# an operand pod not gone within 5 minutes or a reboot that failed, leaving state pending or
# rebooting with the device plugin, GFD and the exporter paused; it then logs "Waiting for change
# to 'nvidia.com/mig.config' label" and acts only on a new value) is read from its own log: in a
# wave it fails the wave at once with the manager's error line, instead of waiting out
# TIMEOUT_SECONDS; found by a later run (label at its target, state pending or rebooting), the
# manager pod is restarted (deleted: its DaemonSet starts a new one, which applies the label).
#
#   NODES_FILE                the node table
#   WAVE_SIZE                 nodes changed at once (default 1)
#   EVICT                     true | false (default true)
#   IGNORE_UNEVICTABLE        true | false (default false)
#   EVICTION_TIMEOUT_SECONDS  default 600
#   MANAGER_TIMEOUT_SECONDS   default 900
#   TIMEOUT_SECONDS           default 1800
#   POLL_SECONDS              default 5
#   OPERATOR_NAMESPACE        where the MIG manager runs (default gpu-operator)
#   MIG_MANAGER_SELECTOR      its pods' label selector (default app=nvidia-mig-manager)
#   MIG_CONFIGMAP             the mig-parted ConfigMap its pods must mount (empty: not checked)
#   LOG_LINES                 MIG manager log lines in a failure message (default 10)
# POSIX sh: it runs on the GPU Operator image, under busybox `sh` (config/job-images.yaml). Node
# names, pod names, config names and resource=count pairs have no blank and no glob character:
# lists of them are space-separated words, split without globbing (set -f); the node table and the
# nodes' actions are scratch files under TMPDIR (the pod's writable /tmp), read with table_value.
set -eu

CHECK_NAME=${CHECK_NAME:-mig-rollout}
# fail, pass, info, require_int, json_string_field, table_value: the helpers the validation
# payloads use (the script's ConfigMap holds config/validation/common.sh next to it).
# shellcheck source-path=SCRIPTDIR source=../validation/common.sh
. "$(dirname "$0")/common.sh"
# gpu_pods, unevictable, drain, cordon_and_drain, uncordon, join_lines, advertised: what it shares with
# config/dra-rollout/dra-rollout.sh (config/validation/drain.sh, next to it in the ConfigMap too).
# shellcheck source-path=SCRIPTDIR source=../validation/drain.sh
. "$(dirname "$0")/drain.sh"
DRAIN_CHANGE="the MIG config"
DRAIN_IGNORE_KEY=mig.rollout.ignoreUnevictable
DRAIN_TIMEOUT_KEY=mig.rollout.evictionTimeout
DRAIN_UNEVICTABLE_EFFECT=", and MIG manager would fail or wait on them"
DRAIN_UNEVICTABLE_HINT="stop those pods there, e.g. with a nodeSelector or affinity on their DaemonSet, or set mig.rollout.ignoreUnevictable true"
KUBECTL=${KUBECTL:-kubectl}
CONFIG_LABEL=nvidia.com/mig.config
STATE_LABEL=nvidia.com/mig.config.state
CORDON_MARK=gpu-stack/mig-rollout-cordoned
SET_MARK=gpu-stack/mig-config
ALL_DISABLED=all-disabled
MIG_MANAGER_CONTAINER=nvidia-mig-manager
# The MIG manager DaemonSet's volume that holds the mig-parted config (the operator's asset).
CONFIG_VOLUME=mig-parted-config
# The MIG manager's idle line (cmd/nvidia-mig-manager/main.go:305), logged when it starts, after
# each success and after each error; and how much of its log is read to find its last attempt.
WAITING_LINE="Waiting for change to '$CONFIG_LABEL' label"
ATTEMPT_LINES=500
set -f

file=${NODES_FILE:-}
[ -n "$file" ] || fail "NODES_FILE is not set"
[ -r "$file" ] || fail "cannot read the node table NODES_FILE '$file'"
wave_size=${WAVE_SIZE:-1}
evict=${EVICT:-true}
ignore_unevictable=${IGNORE_UNEVICTABLE:-false}
eviction_timeout=${EVICTION_TIMEOUT_SECONDS:-600}
manager_timeout=${MANAGER_TIMEOUT_SECONDS:-900}
timeout=${TIMEOUT_SECONDS:-1800}
poll=${POLL_SECONDS:-5}
namespace=${OPERATOR_NAMESPACE:-gpu-operator}
selector=${MIG_MANAGER_SELECTOR:-app=nvidia-mig-manager}
configmap=${MIG_CONFIGMAP:-}
log_lines=${LOG_LINES:-10}
for pair in "WAVE_SIZE=$wave_size" "EVICTION_TIMEOUT_SECONDS=$eviction_timeout" \
  "MANAGER_TIMEOUT_SECONDS=$manager_timeout" "TIMEOUT_SECONDS=$timeout" "POLL_SECONDS=$poll" \
  "LOG_LINES=$log_lines"; do
  require_int "${pair%%=*}" "${pair#*=}"
done
[ "$wave_size" -ge 1 ] || fail "WAVE_SIZE must be at least 1, got '$wave_size'"
case $evict in
  true | false) ;;
  *) fail "EVICT must be true or false, got '$evict'" ;;
esac
case $ignore_unevictable in
  true | false) ;;
  *) fail "IGNORE_UNEVICTABLE must be true or false, got '$ignore_unevictable'" ;;
esac

# The node table, one "<node><TAB><set|restore><TAB><config><TAB><resource=count ...>" per line
# (the last line of a node wins); order: its nodes, in its order.
table=""
scratch table node-table
order=""
while read -r node how config pairs; do
  [ -n "$node" ] || continue
  case $how in
    set | restore) [ -n "${config:-}" ] ;;
    *) false ;;
  esac || fail "node table line for node '$node' must be '<node> set|restore <config> [<resource>=<count> ...]'"
  [ "$how" = set ] || [ "$config" = "$ALL_DISABLED" ] || fail "node '$node' can only be restored to $ALL_DISABLED, not '$config'"
  for pair in ${pairs:-}; do
    is_pair "$pair" || fail "node table entry '$pair' of node '$node' is not resource=count"
  done
  printf '%s\t%s\t%s\t%s\n' "$node" "$how" "$config" "${pairs:-}" >>"$table"
  order="$order $node"
done <"$file"
[ -n "$order" ] || fail "the node table '$file' lists no node"

# target NODE: sets HOW (set or restore), WANT (the MIG config) and RESOURCES (the resource=count
# pairs) from NODE's line of the node table.
target() {
  local line
  line=$(table_value "$table" "$1") || line=""
  HOW=${line%%"$TAB"*}
  line=${line#*"$TAB"}
  WANT=${line%%"$TAB"*}
  RESOURCES=${line#*"$TAB"}
}

# read_node NODE: sets LABELS, UNSCHEDULABLE, ALLOCATABLE and ANNOTATIONS; fails the rollout when
# the node cannot be read (a node that does not exist is never cordoned or labelled). Fields are
# split on '|' (a tab is IFS whitespace: an empty field would vanish); only the annotations, last,
# may hold one.
read_node() {
  local out
  if ! out=$("$KUBECTL" get node "$1" -o \
    'jsonpath={.metadata.labels}{"|"}{.spec.unschedulable}{"|"}{.status.allocatable}{"|"}{.metadata.annotations}' 2>&1); then
    fail "node $1 cannot be read: $(one_line "$out") (is nodes[].name the node's Kubernetes name?)"
  fi
  IFS='|' read -r LABELS UNSCHEDULABLE ALLOCATABLE ANNOTATIONS <<EOF || true
$out
EOF
}

# manager_log NODE: the last LOG_LINES lines of the MIG manager's log on NODE, on one line.
manager_log() {
  local pod out
  if ! pod=$("$KUBECTL" get pods -n "$namespace" -l "$selector" --field-selector "spec.nodeName=$1" \
    -o 'jsonpath={.items[0].metadata.name}' 2>&1) || [ -z "$pod" ]; then
    printf 'no MIG manager pod found on node %s (%s)' "$1" "${pod:-none in namespace $namespace with $selector}"
    return
  fi
  if ! out=$("$KUBECTL" logs -n "$namespace" "$pod" -c "$MIG_MANAGER_CONTAINER" --tail="$log_lines" 2>&1); then
    printf 'log of %s unavailable: %s' "$pod" "$(one_line "$out")"
    return
  fi
  printf '%s' "$pod: $(replace_newlines ' | ' "$out")"
}

# log_message LINE: the msg="..." of a logrus line (the MIG manager's format), else the line.
log_message() {
  local text
  text=$1
  case $text in
    *'msg="'*)
      text=${text#*'msg="'}
      text=${text%'"'*}
      ;;
  esac
  printf '%s' "$text"
}

# manager_gave_up NODE CONFIG STATE: true when NODE's MIG manager gave up on CONFIG: the last
# attempt in its log (ATTEMPT_LINES lines) is "Updating to MIG config: CONFIG" and its log ends
# with WAITING_LINE, while the node's state (STATE, read before the log, and read again after it:
# a success is labelled before its last lines are logged) is pending or rebooting. Sets
# GAVE_UP_POD and GAVE_UP_WHY (the attempt's last error or warning line). False when its log
# cannot be read: the manager is then waited for.
manager_gave_up() {
  local node config state out name deleted pod line last attempt why now
  node=$1
  config=$2
  state=$3
  pod=""
  last=""
  attempt=""
  why=""
  GAVE_UP_POD=""
  GAVE_UP_WHY=""
  case $state in
    pending | rebooting) ;;
    *) return 1 ;;
  esac
  out=$("$KUBECTL" get pods -n "$namespace" -l "$selector" --field-selector "spec.nodeName=$node" \
    -o 'jsonpath={range .items[*]}{.metadata.name}{"|"}{.metadata.deletionTimestamp}{"\n"}{end}' 2>/dev/null) || return 1
  while IFS='|' read -r name deleted; do
    if [ -n "$name" ] && [ -z "$deleted" ]; then
      pod=$name
      break
    fi
  done <<EOF
$out
EOF
  [ -n "$pod" ] || return 1
  out=$("$KUBECTL" logs -n "$namespace" "$pod" -c "$MIG_MANAGER_CONTAINER" --tail="$ATTEMPT_LINES" 2>/dev/null) || return 1
  while IFS= read -r line; do
    [ -n "$line" ] || continue
    last=$line
    case $line in
      *'msg="Updating to MIG config: '*)
        attempt=${line#*'msg="Updating to MIG config: '}
        attempt=${attempt%%'"'*}
        why=""
        ;;
      *level=error* | *level=warning*)
        why=$line
        ;;
    esac
  done <<EOF
$out
EOF
  [ "$attempt" = "$config" ] || return 1
  case $last in
    *"$WAITING_LINE"*) ;;
    *) return 1 ;;
  esac
  read_node "$node"
  now=$(json_string_field "$LABELS" "$STATE_LABEL")
  case $now in
    pending | rebooting) ;;
    *) return 1 ;;
  esac
  GAVE_UP_POD=$pod
  GAVE_UP_WHY=$(log_message "${why:-$last}")
}

# manager_problem NODE: sets MANAGER_PROBLEM to why NODE's MIG manager may not see a new label
# yet, or empty when exactly the pods that mount MIG_CONFIGMAP run there, none terminating, and
# one is ready. During the operator's roll of the DaemonSet an old pod (old ConfigMap) or none
# runs on the node; a terminating old pod still watches the label until it is gone.
manager_problem() {
  local out name deleted ready mounted ready_pods count unready
  ready_pods=0
  count=0
  unready=""
  MANAGER_PROBLEM=""
  if ! out=$("$KUBECTL" get pods -n "$namespace" -l "$selector" --field-selector "spec.nodeName=$1" -o \
    'jsonpath={range .items[*]}{.metadata.name}{"|"}{.metadata.deletionTimestamp}{"|"}{.status.conditions[?(@.type=="Ready")].status}{"|"}{.spec.volumes[?(@.name=="'"$CONFIG_VOLUME"'")].configMap.name}{"\n"}{end}' 2>&1); then
    MANAGER_PROBLEM="node $1: its MIG manager pods cannot be listed: $(one_line "$out")"
    return
  fi
  while IFS='|' read -r name deleted ready mounted; do
    [ -n "$name" ] || continue
    count=$(( count + 1 ))
    if [ -n "$deleted" ]; then
      MANAGER_PROBLEM="node $1: MIG manager pod $name is terminating"
      return
    fi
    if [ -n "$configmap" ] && [ "$mounted" != "$configmap" ]; then
      MANAGER_PROBLEM="node $1: MIG manager pod $name mounts ConfigMap '${mounted:-<none>}', not '$configmap' (the operator has not rolled the MIG manager onto the new mig-parted config there yet)"
      return
    fi
    if [ "$ready" = True ]; then
      ready_pods=$(( ready_pods + 1 ))
    else
      unready=$name
    fi
  done <<EOF
$out
EOF
  if [ "$count" -eq 0 ]; then
    MANAGER_PROBLEM="node $1: no MIG manager pod ($selector in namespace $namespace) runs there yet"
  elif [ "$ready_pods" -eq 0 ]; then
    MANAGER_PROBLEM="node $1: MIG manager pod $unready is not ready yet"
  fi
}

# wait_for_managers WHEN NODE...: waits (MANAGER_TIMEOUT_SECONDS) until every node's MIG manager
# would apply a new label with MIG_CONFIGMAP; WHEN says in the failure what was done already.
wait_for_managers() {
  local when node summary last deadline mounting pending still problems
  when=$1
  shift
  last=""
  deadline=$(( $(elapsed) + manager_timeout ))
  mounting=""
  [ -z "$configmap" ] || mounting=" and mount ConfigMap '$configmap'"
  pending=$*
  while :; do
    still=""
    problems=""
    for node in $pending; do
      manager_problem "$node"
      if [ -n "$MANAGER_PROBLEM" ]; then
        still="$still $node"
        problems="$problems$MANAGER_PROBLEM$NL"
      fi
    done
    pending=$still
    [ -n "$pending" ] || return 0
    summary=$(join_lines "$problems")
    if [ "$summary" != "$last" ]; then
      info "waiting for the MIG manager: $summary"
      last=$summary
    fi
    if [ $(( $(elapsed) + poll )) -gt "$deadline" ]; then
      fail "${problems%%"$NL"*} after ${manager_timeout}s (mig.rollout.managerTimeout): waited for the node's MIG manager pod to be ready$mounting before changing its MIG config, so the MIG config was not changed, $when and no later wave starts"
    fi
    sleep "$poll"
  done
}

# select_config NODE: sets the node's MIG config, state pending and the rollout's mark in one
# merge patch (config names and label values are [A-Za-z0-9._-]: nothing to escape in JSON).
select_config() {
  target "$1"
  "$KUBECTL" patch node "$1" --type=merge -p \
    "{\"metadata\":{\"labels\":{\"$CONFIG_LABEL\":\"$WANT\",\"$STATE_LABEL\":\"pending\"},\"annotations\":{\"$SET_MARK\":\"$WANT\"}}}" >/dev/null
}

# ------------------------------------------------------------------ which nodes change
# A node's action (the file actions, "<node><TAB><action>"): label (select the new config),
# restart (same config, its last try failed or its MIG manager gave up on it: restart the MIG
# manager, which only acts on a change of the label or when it starts) or wait (mig-manager is at
# it, or it succeeded and only the resources or the uncordon are left from an earlier run).
# cordoned_by_others: " <node> ... " of the nodes cordoned by someone else; changing: the nodes
# to reconfigure, in the table's order.
cordoned_by_others=" "
actions=""
scratch actions node-actions
changing=""
changing_count=0
for node in $order; do
  target "$node"
  read_node "$node"
  selected=$(json_string_field "$LABELS" "$CONFIG_LABEL")
  state=$(json_string_field "$LABELS" "$STATE_LABEL")
  mark=$(json_string_field "$ANNOTATIONS" "$CORDON_MARK")
  set_by_us=$(json_string_field "$ANNOTATIONS" "$SET_MARK")
  if [ "$HOW" = restore ] && { [ -z "$selected" ] || [ "$selected" != "$set_by_us" ]; }; then
    info "node $node has no nodes[].mig and its MIG config '${selected:-<unset>}' was not set by the rollout: left as it is"
    continue
  fi
  if [ "$UNSCHEDULABLE" = true ] && [ -z "$mark" ]; then
    cordoned_by_others="$cordoned_by_others$node "
  fi
  if [ "$selected" = "$WANT" ] && [ "$state" = success ] && [ -z "$mark" ]; then
    if [ "$set_by_us" != "$selected" ]; then
      # Set by an earlier version of the rollout (or by hand, to the stack's value): marked now,
      # so removing nodes[].mig later rolls the node back to whole GPUs.
      "$KUBECTL" annotate node "$node" "$SET_MARK=$selected" --overwrite >/dev/null
    fi
    info "node $node already applies MIG config '$WANT': nothing to do"
    continue
  fi
  if [ "$selected" != "$WANT" ]; then
    action="label"
  elif [ -z "$state" ] || [ "$state" = failed ]; then
    action="restart"
  elif manager_gave_up "$node" "$WANT" "$state"; then
    # It acts only on a new label value: without a restart it would wait for ever.
    info "node $node: its MIG manager $GAVE_UP_POD gave up on '$WANT' (state $state: $GAVE_UP_WHY) and waits for a label change: restarting it"
    action="restart"
  else
    action="wait"
  fi
  printf '%s\t%s\n' "$node" "$action" >>"$actions"
  if [ "$HOW" = restore ]; then
    info "node $node: no nodes[].mig: MIG config '${selected:-<unset>}' (set by the rollout, state ${state:-<unset>}) -> '$WANT' (whole GPUs)"
  else
    info "node $node: MIG config '${selected:-<unset>}' (state ${state:-<unset>}) -> '$WANT'"
  fi
  changing="$changing $node"
  changing_count=$(( changing_count + 1 ))
done
[ "$changing_count" -gt 0 ] || pass "every node already applies its MIG config"
waves=$(( (changing_count + wave_size - 1) / wave_size ))
info "$changing_count node(s) to reconfigure in $waves wave(s) of at most $wave_size"

# ------------------------------------------------------------------ one wave
run_wave() {
  local number node selected state problem deadline pending still problems summary last action first
  number=$1
  shift
  info "wave $number/$waves: $*"
  # Checked before anything changes: a refusal leaves the wave's nodes as they were.
  [ "$evict" = false ] || unevictable "nothing was cordoned" "$@"
  wait_for_managers "nothing was cordoned" "$@"
  if [ "$evict" = true ]; then
    cordon_and_drain "$@"
  else
    info "mig.rollout.evict is false: not cordoning or evicting $*"
  fi
  # The drain may have taken minutes: the MIG manager is checked again right before the label.
  wait_for_managers "the nodes stay cordoned" "$@"
  for node in "$@"; do
    target "$node"
    action=$(table_value "$actions" "$node") || action=""
    case $action in
      label)
        read_node "$node"
        selected=$(json_string_field "$LABELS" "$CONFIG_LABEL")
        state=$(json_string_field "$LABELS" "$STATE_LABEL")
        if [ "$selected" != "$WANT" ]; then
          select_config "$node"
          info "node $node: $CONFIG_LABEL=$WANT"
        else
          # Set meanwhile, e.g. the operator's default all-disabled once GFD labels a new node on
          # a first install: the MIG manager acts on that value itself. Relabelling it with
          # state=pending would change nothing it watches, and `pending` would stay for good.
          "$KUBECTL" annotate node "$node" "$SET_MARK=$WANT" --overwrite >/dev/null
          if [ -z "$state" ] || [ "$state" = failed ]; then
            "$KUBECTL" label node "$node" "$STATE_LABEL=pending" --overwrite >/dev/null
            "$KUBECTL" delete pods -n "$namespace" -l "$selector" --field-selector "spec.nodeName=$node" >/dev/null
            info "node $node: $CONFIG_LABEL became '$WANT' meanwhile (state ${state:-<unset>}): restarted the MIG manager to apply it"
          else
            info "node $node: $CONFIG_LABEL became '$WANT' meanwhile (state $state): waiting for the MIG manager"
          fi
        fi
        ;;
      restart)
        # pending, so that an old `failed` is not read as the new answer; a `rebooting` is kept:
        # the new manager checks with it that the reboot took effect (reconfigure.go).
        read_node "$node"
        if [ "$(json_string_field "$LABELS" "$STATE_LABEL")" != rebooting ]; then
          "$KUBECTL" label node "$node" "$STATE_LABEL=pending" --overwrite >/dev/null
        fi
        "$KUBECTL" delete pods -n "$namespace" -l "$selector" --field-selector "spec.nodeName=$node" >/dev/null
        info "node $node: restarted the MIG manager to apply '$WANT' again"
        ;;
      *)
        info "node $node: waiting for the MIG manager to finish '$WANT'"
        ;;
    esac
  done
  deadline=$(( $(elapsed) + timeout ))
  pending=$*
  last=""
  while :; do
    still=""
    problems=""
    for node in $pending; do
      target "$node"
      read_node "$node"
      selected=$(json_string_field "$LABELS" "$CONFIG_LABEL")
      state=$(json_string_field "$LABELS" "$STATE_LABEL")
      if [ "$state" = failed ]; then
        fail "node $node: mig-manager could not apply MIG config '$WANT' ($STATE_LABEL=failed); the node stays cordoned and no later wave starts; MIG manager log: $(manager_log "$node")"
      fi
      if [ "$selected" != "$WANT" ]; then
        fail "node $node: $CONFIG_LABEL changed to '${selected:-<unset>}' while the rollout waited for '$WANT' (something else manages this label)"
      fi
      if manager_gave_up "$node" "$WANT" "$state"; then
        fail "node $node: its MIG manager gave up applying MIG config '$WANT' ($STATE_LABEL=$state, the device plugin, GFD and the exporter left paused): $GAVE_UP_WHY; the node stays cordoned and no later wave starts; fix the cause and run \`pulumi up\` again (the rollout restarts a MIG manager that gave up); MIG manager log: $(manager_log "$node")"
      fi
      problem=""
      if [ "$state" != success ]; then
        problem="node $node: $STATE_LABEL=${state:-<unset>}"
      else
        problem=$(advertised "$node")
        [ -z "$problem" ] || problem="node $node: state success but advertises $problem"
      fi
      if [ -n "$problem" ]; then
        still="$still $node"
        problems="$problems$problem$NL"
      else
        info "node $node applied MIG config '$WANT'${RESOURCES:+ and advertises $RESOURCES}"
      fi
    done
    pending=$still
    [ -n "$pending" ] || break
    summary=$(join_lines "$problems")
    if [ "$summary" != "$last" ]; then
      info "waiting: $summary"
      last=$summary
    fi
    if [ $(( $(elapsed) + poll )) -gt "$deadline" ]; then
      first=${pending# }
      first=${first%% *}
      fail "${problems%%"$NL"*} after ${timeout}s (mig.rollout.timeout); the node stays cordoned and no later wave starts; MIG manager log: $(manager_log "$first")"
    fi
    sleep "$poll"
  done
  uncordon "$@"
}

# The waves: wave_size nodes at a time, in the table's order.
wave=""
in_wave=0
number=0
for node in $changing; do
  wave="$wave $node"
  in_wave=$(( in_wave + 1 ))
  if [ "$in_wave" -eq "$wave_size" ]; then
    number=$(( number + 1 ))
    # shellcheck disable=SC2086  # node names: no blank, no glob character
    run_wave "$number" $wave
    wave=""
    in_wave=0
  fi
done
# shellcheck disable=SC2086
[ -z "$wave" ] || run_wave $(( number + 1 )) $wave
if [ "$changing_count" -eq 1 ]; then
  node=${changing# }
  target "$node"
  pass "node $node reconfigured to MIG config '$WANT'"
fi
pass "$changing_count nodes reconfigured in $waves wave(s)"
