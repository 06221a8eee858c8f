#!/usr/bin/env bash
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
set -euo pipefail

CHECK_NAME=${CHECK_NAME:-mig-rollout}
# fail, pass, info, require_int, json_string_field: the helpers the validation payloads use (the
# script's ConfigMap holds common.sh next to it; in the repository it is a link to
# config/validation/common.sh).
# shellcheck source-path=SCRIPTDIR source=common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh"
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

file=${NODES_FILE:-}
[[ -n $file ]] || fail "NODES_FILE is not set"
[[ -r $file ]] || fail "cannot read the node table NODES_FILE '$file'"
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
(( wave_size >= 1 )) || fail "WAVE_SIZE must be at least 1, got '$wave_size'"
[[ $evict == true || $evict == false ]] || fail "EVICT must be true or false, got '$evict'"
[[ $ignore_unevictable == true || $ignore_unevictable == false ]] ||
  fail "IGNORE_UNEVICTABLE must be true or false, got '$ignore_unevictable'"

declare -A want=() resources=() mode=()
order=()
while read -r node how config pairs; do
  [[ -n $node ]] || continue
  [[ ( $how == set || $how == restore ) && -n ${config:-} ]] ||
    fail "node table line for node '$node' must be '<node> set|restore <config> [<resource>=<count> ...]'"
  [[ $how == set || $config == "$ALL_DISABLED" ]] || fail "node '$node' can only be restored to $ALL_DISABLED, not '$config'"
  for pair in ${pairs:-}; do
    [[ $pair =~ ^[a-z0-9./-]+=[0-9]+$ ]] || fail "node table entry '$pair' of node '$node' is not resource=count"
  done
  want[$node]=$config
  mode[$node]=$how
  resources[$node]=${pairs:-}
  order+=("$node")
done <"$file"
(( ${#order[@]} > 0 )) || fail "the node table '$file' lists no node"

# read_node NODE: sets LABELS, UNSCHEDULABLE, ALLOCATABLE and ANNOTATIONS; fails the rollout when
# the node cannot be read (a node that does not exist is never cordoned or labelled). Fields are
# split on '|' (a tab is IFS whitespace: an empty field would vanish); only the annotations, last,
# may hold one.
read_node() {
  local out
  if ! out=$("$KUBECTL" get node "$1" -o \
    'jsonpath={.metadata.labels}{"|"}{.spec.unschedulable}{"|"}{.status.allocatable}{"|"}{.metadata.annotations}' 2>&1); then
    fail "node $1 cannot be read: ${out//$'\n'/ } (is nodes[].name the node's Kubernetes name?)"
  fi
  IFS='|' read -r LABELS UNSCHEDULABLE ALLOCATABLE ANNOTATIONS <<<"$out" || true
}

# manager_log NODE: the last LOG_LINES lines of the MIG manager's log on NODE, on one line.
manager_log() {
  local pod out
  if ! pod=$("$KUBECTL" get pods -n "$namespace" -l "$selector" --field-selector "spec.nodeName=$1" \
    -o 'jsonpath={.items[0].metadata.name}' 2>&1) || [[ -z $pod ]]; then
    printf 'no MIG manager pod found on node %s (%s)' "$1" "${pod:-none in namespace $namespace with $selector}"
    return
  fi
  if ! out=$("$KUBECTL" logs -n "$namespace" "$pod" -c "$MIG_MANAGER_CONTAINER" --tail="$log_lines" 2>&1); then
    printf 'log of %s unavailable: %s' "$pod" "${out//$'\n'/ }"
    return
  fi
  printf '%s' "$pod: ${out//$'\n'/ | }"
}

# log_message LINE: the msg="..." of a logrus line (the MIG manager's format), else the line.
log_message() {
  local text=$1
  if [[ $text == *'msg="'* ]]; then
    text=${text#*msg=\"}
    text=${text%\"*}
  fi
  printf '%s' "$text"
}

# manager_gave_up NODE CONFIG STATE: true when NODE's MIG manager gave up on CONFIG: the last
# attempt in its log (ATTEMPT_LINES lines) is "Updating to MIG config: CONFIG" and its log ends
# with WAITING_LINE, while the node's state (STATE, read before the log, and read again after it:
# a success is labelled before its last lines are logged) is pending or rebooting. Sets
# GAVE_UP_POD and GAVE_UP_WHY (the attempt's last error or warning line). False when its log
# cannot be read: the manager is then waited for.
manager_gave_up() {
  local node=$1 config=$2 state=$3 out name deleted pod="" line last="" attempt="" why="" now
  GAVE_UP_POD=""
  GAVE_UP_WHY=""
  [[ $state == pending || $state == rebooting ]] || return 1
  out=$("$KUBECTL" get pods -n "$namespace" -l "$selector" --field-selector "spec.nodeName=$node" \
    -o 'jsonpath={range .items[*]}{.metadata.name}{"|"}{.metadata.deletionTimestamp}{"\n"}{end}' 2>/dev/null) || return 1
  while IFS='|' read -r name deleted; do
    if [[ -n $name && -z $deleted ]]; then
      pod=$name
      break
    fi
  done <<<"$out"
  [[ -n $pod ]] || return 1
  out=$("$KUBECTL" logs -n "$namespace" "$pod" -c "$MIG_MANAGER_CONTAINER" --tail="$ATTEMPT_LINES" 2>/dev/null) || return 1
  while IFS= read -r line; do
    [[ -n $line ]] || continue
    last=$line
    if [[ $line == *'msg="Updating to MIG config: '* ]]; then
      attempt=${line#*msg=\"Updating to MIG config: }
      attempt=${attempt%%\"*}
      why=""
    elif [[ $line == *level=error* || $line == *level=warning* ]]; then
      why=$line
    fi
  done <<<"$out"
  [[ $attempt == "$config" && $last == *"$WAITING_LINE"* ]] || return 1
  read_node "$node"
  now=$(json_string_field "$LABELS" "$STATE_LABEL")
  [[ $now == pending || $now == rebooting ]] || return 1
  GAVE_UP_POD=$pod
  GAVE_UP_WHY=$(log_message "${why:-$last}")
}

# manager_problem NODE: sets MANAGER_PROBLEM to why NODE's MIG manager may not see a new label
# yet, or empty when exactly the pods that mount MIG_CONFIGMAP run there, none terminating, and
# one is ready. During the operator's roll of the DaemonSet an old pod (old ConfigMap) or none
# runs on the node; a terminating old pod still watches the label until it is gone.
manager_problem() {
  local out name deleted ready mounted ready_pods=0 count=0 unready=""
  MANAGER_PROBLEM=""
  if ! out=$("$KUBECTL" get pods -n "$namespace" -l "$selector" --field-selector "spec.nodeName=$1" -o \
    'jsonpath={range .items[*]}{.metadata.name}{"|"}{.metadata.deletionTimestamp}{"|"}{.status.conditions[?(@.type=="Ready")].status}{"|"}{.spec.volumes[?(@.name=="'"$CONFIG_VOLUME"'")].configMap.name}{"\n"}{end}' 2>&1); then
    MANAGER_PROBLEM="node $1: its MIG manager pods cannot be listed: ${out//$'\n'/ }"
    return
  fi
  while IFS='|' read -r name deleted ready mounted; do
    [[ -n $name ]] || continue
    count=$(( count + 1 ))
    if [[ -n $deleted ]]; then
      MANAGER_PROBLEM="node $1: MIG manager pod $name is terminating"
      return
    fi
    if [[ -n $configmap && $mounted != "$configmap" ]]; then
      MANAGER_PROBLEM="node $1: MIG manager pod $name mounts ConfigMap '${mounted:-<none>}', not '$configmap' (the operator has not rolled the MIG manager onto the new mig-parted config there yet)"
      return
    fi
    if [[ $ready == True ]]; then
      ready_pods=$(( ready_pods + 1 ))
    else
      unready=$name
    fi
  done <<<"$out"
  if (( count == 0 )); then
    MANAGER_PROBLEM="node $1: no MIG manager pod ($selector in namespace $namespace) runs there yet"
  elif (( ready_pods == 0 )); then
    MANAGER_PROBLEM="node $1: MIG manager pod $unready is not ready yet"
  fi
}

# wait_for_managers WHEN NODE...: waits (MANAGER_TIMEOUT_SECONDS) until every node's MIG manager
# would apply a new label with MIG_CONFIGMAP; WHEN says in the failure what was done already.
wait_for_managers() {
  local when=$1 node summary last="" deadline=$(( SECONDS + manager_timeout )) mounting=""
  shift
  [[ -z $configmap ]] || mounting=" and mount ConfigMap '$configmap'"
  local -a pending=("$@") still problems
  while :; do
    still=()
    problems=()
    for node in "${pending[@]}"; do
      manager_problem "$node"
      if [[ -n $MANAGER_PROBLEM ]]; then
        still+=("$node")
        problems+=("$MANAGER_PROBLEM")
      fi
    done
    pending=("${still[@]}")
    (( ${#pending[@]} > 0 )) || return 0
    summary=$(join_lines "${problems[@]}")
    if [[ $summary != "$last" ]]; then
      info "waiting for the MIG manager: $summary"
      last=$summary
    fi
    if (( SECONDS + poll > deadline )); then
      fail "${problems[0]} after ${manager_timeout}s (mig.rollout.managerTimeout): waited for the node's MIG manager pod to be ready$mounting before changing its MIG config, so the MIG config was not changed, $when and no later wave starts"
    fi
    sleep "$poll"
  done
}

# gpu_pods NODE: fills PODS with "<namespace>/<name>" of the pods on NODE that request an
# nvidia.com/* resource and still run, TERMINATING with the ones already on their way out, and
# UNEVICTABLE with those a drain cannot remove (a DaemonSet's or a static pod: it comes back on
# its node, or is not the API's to delete), as "<namespace>/<name> (<owner>)".
gpu_pods() {
  local out ns name deleted phase owners res
  PODS=()
  TERMINATING=()
  UNEVICTABLE=()
  out=$("$KUBECTL" get pods --all-namespaces --field-selector "spec.nodeName=$1" -o \
    'jsonpath={range .items[*]}{.metadata.namespace}{"|"}{.metadata.name}{"|"}{.metadata.deletionTimestamp}{"|"}{.status.phase}{"|"}{.metadata.ownerReferences[*].kind}{"|"}{.spec.containers[*].resources.limits} {.spec.initContainers[*].resources.limits}{"\n"}{end}' 2>&1) ||
    fail "cannot list the pods on node $1: ${out//$'\n'/ }"
  while IFS='|' read -r ns name deleted phase owners res; do
    [[ -n $name && $res == *'"nvidia.com/'* ]] || continue
    [[ $phase != Succeeded && $phase != Failed ]] || continue
    if [[ " $owners " == *" DaemonSet "* ]]; then
      UNEVICTABLE+=("$ns/$name (DaemonSet)")
    elif [[ " $owners " == *" Node "* ]]; then
      UNEVICTABLE+=("$ns/$name (static pod)")
    elif [[ -n $deleted ]]; then
      TERMINATING+=("$ns/$name")
    else
      PODS+=("$ns/$name")
    fi
  done <<<"$out"
}

# unevictable WHEN NODE...: fails (unless IGNORE_UNEVICTABLE) when a GPU pod the drain cannot
# evict runs on one of the nodes; WHEN says in the failure what was done already.
unevictable() {
  local when=$1 node pod
  shift
  local -a found=()
  for node in "$@"; do
    gpu_pods "$node"
    for pod in "${UNEVICTABLE[@]}"; do
      if [[ $ignore_unevictable == true ]]; then
        info "node $node: not evicting $pod (mig.rollout.ignoreUnevictable is true: it must release its GPUs itself)"
      else
        found+=("node $node: $pod")
      fi
    done
  done
  (( ${#found[@]} == 0 )) ||
    fail "GPU pods the drain cannot evict hold GPUs on the wave's nodes, and MIG manager would fail or wait on them: $(join_lines "${found[@]}"); so the MIG config was not changed, $when and no later wave starts (stop those pods there, e.g. with a nodeSelector or affinity on their DaemonSet, or set mig.rollout.ignoreUnevictable true)"
}

# evict NAMESPACE/NAME: asks the Eviction API; returns 0 when accepted or the pod is gone,
# else 1 with the API's answer in EVICT_ERROR (429 when a PodDisruptionBudget refuses).
evict() {
  local ns=${1%%/*} name=${1#*/} body out
  body="${TMPDIR:-/tmp}/eviction.json"
  printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"%s","namespace":"%s"}}\n' "$name" "$ns" >"$body"
  if out=$("$KUBECTL" create --raw "/api/v1/namespaces/$ns/pods/$name/eviction" -f "$body" 2>&1); then
    return 0
  fi
  [[ $out != *NotFound* ]] || return 0
  EVICT_ERROR=${out//$'\n'/ }
  return 1
}

# drain WAVE_NODE...: evicts every GPU pod of the nodes and waits until they are gone.
drain() {
  local node pod deadline=$(( SECONDS + eviction_timeout )) left first=1
  local -A refused=()
  while :; do
    left=()
    for node in "$@"; do
      gpu_pods "$node"
      if [[ $ignore_unevictable == false ]] && (( ${#UNEVICTABLE[@]} > 0 )); then
        # One that came after the check (a DaemonSet's pod tolerates the cordon).
        unevictable "the nodes stay cordoned" "$node"
      fi
      if (( first )) && (( ${#PODS[@]} + ${#TERMINATING[@]} == 0 )); then
        info "node $node: no GPU pods, nothing to drain"
      fi
      for pod in "${PODS[@]}"; do
        if evict "$pod"; then
          info "node $node: evicting $pod"
          unset "refused[$pod]"
        else
          refused[$pod]=$EVICT_ERROR
        fi
        left+=("node $node: $pod${refused[$pod]:+ (eviction refused: ${refused[$pod]})}")
      done
      for pod in "${TERMINATING[@]}"; do
        left+=("node $node: $pod (terminating)")
      done
    done
    first=0
    (( ${#left[@]} > 0 )) || return 0
    if (( SECONDS + poll > deadline )); then
      fail "GPU pods still on the wave's nodes after ${eviction_timeout}s (mig.rollout.evictionTimeout), so the MIG config was not changed, the nodes stay cordoned and no later wave starts: $(join_lines "${left[@]}")"
    fi
    sleep "$poll"
  done
}

# join_lines ITEM...: the items joined by "; ".
join_lines() {
  local text="" item
  for item in "$@"; do
    text+="${text:+; }$item"
  done
  printf '%s' "$text"
}

# advertised NODE: empty when ALLOCATABLE has every resource=count of the node's table line,
# else what differs.
advertised() {
  local pair resource count have mismatch=""
  for pair in ${resources[$1]}; do
    resource=${pair%=*}
    count=${pair#*=}
    have=$(json_string_field "$ALLOCATABLE" "$resource")
    [[ $have == "$count" ]] || mismatch+="${mismatch:+, }$resource=${have:-0} (expected $count)"
  done
  printf '%s' "$mismatch"
}

# select_config NODE: sets the node's MIG config, state pending and the rollout's mark in one
# merge patch (config names and label values are [A-Za-z0-9._-]: nothing to escape in JSON).
select_config() {
  "$KUBECTL" patch node "$1" --type=merge -p \
    "{\"metadata\":{\"labels\":{\"$CONFIG_LABEL\":\"${want[$1]}\",\"$STATE_LABEL\":\"pending\"},\"annotations\":{\"$SET_MARK\":\"${want[$1]}\"}}}" >/dev/null
}

# ------------------------------------------------------------------ which nodes change
# action[node]: label (select the new config), restart (same config, its last try failed or its
# MIG manager gave up on it: restart the MIG manager, which only acts on a change of the label or
# when it starts) or wait (mig-manager is at it, or it
# succeeded and only the resources or the uncordon are left from an earlier run).
declare -A cordoned_by_others=() action=()
changing=()
for node in "${order[@]}"; do
  read_node "$node"
  selected=$(json_string_field "$LABELS" "$CONFIG_LABEL")
  state=$(json_string_field "$LABELS" "$STATE_LABEL")
  mark=$(json_string_field "$ANNOTATIONS" "$CORDON_MARK")
  set_by_us=$(json_string_field "$ANNOTATIONS" "$SET_MARK")
  if [[ ${mode[$node]} == restore && ( -z $selected || $selected != "$set_by_us" ) ]]; then
    info "node $node has no nodes[].mig and its MIG config '${selected:-<unset>}' was not set by the rollout: left as it is"
    continue
  fi
  if [[ $UNSCHEDULABLE == true && -z $mark ]]; then
    cordoned_by_others[$node]=1
  fi
  if [[ $selected == "${want[$node]}" && $state == success && -z $mark ]]; then
    if [[ $set_by_us != "$selected" ]]; then
      # Set by an earlier version of the rollout (or by hand, to the stack's value): marked now,
      # so removing nodes[].mig later rolls the node back to whole GPUs.
      "$KUBECTL" annotate node "$node" "$SET_MARK=$selected" --overwrite >/dev/null
    fi
    info "node $node already applies MIG config '${want[$node]}': nothing to do"
    continue
  fi
  if [[ $selected != "${want[$node]}" ]]; then
    action[$node]="label"
  elif [[ -z $state || $state == failed ]]; then
    action[$node]="restart"
  elif manager_gave_up "$node" "${want[$node]}" "$state"; then
    # It acts only on a new label value: without a restart it would wait for ever.
    info "node $node: its MIG manager $GAVE_UP_POD gave up on '${want[$node]}' (state $state: $GAVE_UP_WHY) and waits for a label change: restarting it"
    action[$node]="restart"
  else
    action[$node]="wait"
  fi
  if [[ ${mode[$node]} == restore ]]; then
    info "node $node: no nodes[].mig: MIG config '${selected:-<unset>}' (set by the rollout, state ${state:-<unset>}) -> '${want[$node]}' (whole GPUs)"
  else
    info "node $node: MIG config '${selected:-<unset>}' (state ${state:-<unset>}) -> '${want[$node]}'"
  fi
  changing+=("$node")
done
(( ${#changing[@]} > 0 )) || pass "every node already applies its MIG config"
waves=$(( (${#changing[@]} + wave_size - 1) / wave_size ))
info "${#changing[@]} node(s) to reconfigure in $waves wave(s) of at most $wave_size"

# ------------------------------------------------------------------ one wave
run_wave() {
  local number=$1 node selected state problem deadline
  shift
  local -a nodes=("$@") pending still problems
  info "wave $number/$waves: ${nodes[*]}"
  # Checked before anything changes: a refusal leaves the wave's nodes as they were.
  [[ $evict == false ]] || unevictable "nothing was cordoned" "${nodes[@]}"
  wait_for_managers "nothing was cordoned" "${nodes[@]}"
  if [[ $evict == true ]]; then
    for node in "${nodes[@]}"; do
      if [[ -n ${cordoned_by_others[$node]:-} ]]; then
        info "node $node was already cordoned: it stays cordoned afterwards"
        continue
      fi
      "$KUBECTL" annotate node "$node" "$CORDON_MARK=true" --overwrite >/dev/null
      "$KUBECTL" cordon "$node" >/dev/null
      info "node $node cordoned"
    done
    drain "${nodes[@]}"
  else
    info "mig.rollout.evict is false: not cordoning or evicting ${nodes[*]}"
  fi
  # The drain may have taken minutes: the MIG manager is checked again right before the label.
  wait_for_managers "the nodes stay cordoned" "${nodes[@]}"
  for node in "${nodes[@]}"; do
    case ${action[$node]} in
      label)
        read_node "$node"
        selected=$(json_string_field "$LABELS" "$CONFIG_LABEL")
        state=$(json_string_field "$LABELS" "$STATE_LABEL")
        if [[ $selected != "${want[$node]}" ]]; then
          select_config "$node"
          info "node $node: $CONFIG_LABEL=${want[$node]}"
        else
          # Set meanwhile, e.g. the operator's default all-disabled once GFD labels a new node on
          # a first install: the MIG manager acts on that value itself. Relabelling it with
          # state=pending would change nothing it watches, and `pending` would stay for good.
          "$KUBECTL" annotate node "$node" "$SET_MARK=${want[$node]}" --overwrite >/dev/null
          if [[ -z $state || $state == failed ]]; then
            "$KUBECTL" label node "$node" "$STATE_LABEL=pending" --overwrite >/dev/null
            "$KUBECTL" delete pods -n "$namespace" -l "$selector" --field-selector "spec.nodeName=$node" >/dev/null
            info "node $node: $CONFIG_LABEL became '${want[$node]}' meanwhile (state ${state:-<unset>}): restarted the MIG manager to apply it"
          else
            info "node $node: $CONFIG_LABEL became '${want[$node]}' meanwhile (state $state): waiting for the MIG manager"
          fi
        fi
        ;;
      restart)
        # pending, so that an old `failed` is not read as the new answer; a `rebooting` is kept:
        # the new manager checks with it that the reboot took effect (reconfigure.go).
        read_node "$node"
        if [[ $(json_string_field "$LABELS" "$STATE_LABEL") != rebooting ]]; then
          "$KUBECTL" label node "$node" "$STATE_LABEL=pending" --overwrite >/dev/null
        fi
        "$KUBECTL" delete pods -n "$namespace" -l "$selector" --field-selector "spec.nodeName=$node" >/dev/null
        info "node $node: restarted the MIG manager to apply '${want[$node]}' again"
        ;;
      *)
        info "node $node: waiting for the MIG manager to finish '${want[$node]}'"
        ;;
    esac
  done
  deadline=$(( SECONDS + timeout ))
  pending=("${nodes[@]}")
  local summary last=""
  while :; do
    still=()
    problems=()
    for node in "${pending[@]}"; do
      read_node "$node"
      selected=$(json_string_field "$LABELS" "$CONFIG_LABEL")
      state=$(json_string_field "$LABELS" "$STATE_LABEL")
      if [[ $state == failed ]]; then
        fail "node $node: mig-manager could not apply MIG config '${want[$node]}' ($STATE_LABEL=failed); the node stays cordoned and no later wave starts; MIG manager log: $(manager_log "$node")"
      fi
      if [[ $selected != "${want[$node]}" ]]; then
        fail "node $node: $CONFIG_LABEL changed to '${selected:-<unset>}' while the rollout waited for '${want[$node]}' (something else manages this label)"
      fi
      if manager_gave_up "$node" "${want[$node]}" "$state"; then
        fail "node $node: its MIG manager gave up applying MIG config '${want[$node]}' ($STATE_LABEL=$state, the device plugin, GFD and the exporter left paused): $GAVE_UP_WHY; the node stays cordoned and no later wave starts; fix the cause and run \`pulumi up\` again (the rollout restarts a MIG manager that gave up); MIG manager log: $(manager_log "$node")"
      fi
      problem=""
      if [[ $state != success ]]; then
        problem="node $node: $STATE_LABEL=${state:-<unset>}"
      else
        problem=$(advertised "$node")
        [[ -z $problem ]] || problem="node $node: state success but advertises $problem"
      fi
      if [[ -n $problem ]]; then
        still+=("$node")
        problems+=("$problem")
      else
        info "node $node applied MIG config '${want[$node]}'${resources[$node]:+ and advertises ${resources[$node]}}"
      fi
    done
    pending=("${still[@]}")
    (( ${#pending[@]} > 0 )) || break
    summary=$(join_lines "${problems[@]}")
    if [[ $summary != "$last" ]]; then
      info "waiting: $summary"
      last=$summary
    fi
    if (( SECONDS + poll > deadline )); then
      node=${pending[0]}
      fail "${problems[0]} after ${timeout}s (mig.rollout.timeout); the node stays cordoned and no later wave starts; MIG manager log: $(manager_log "$node")"
    fi
    sleep "$poll"
  done
  for node in "${nodes[@]}"; do
    [[ $evict == true && -z ${cordoned_by_others[$node]:-} ]] || continue
    "$KUBECTL" uncordon "$node" >/dev/null
    "$KUBECTL" annotate node "$node" "$CORDON_MARK-" >/dev/null
    info "node $node uncordoned"
  done
}

for (( w = 0; w < waves; w++ )); do
  run_wave $(( w + 1 )) "${changing[@]:w * wave_size:wave_size}"
done
if (( ${#changing[@]} == 1 )); then
  pass "node ${changing[0]} reconfigured to MIG config '${want[${changing[0]}]}'"
fi
pass "${#changing[@]} nodes reconfigured in $waves wave(s)"
