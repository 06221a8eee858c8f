# shellcheck shell=busybox
# shellcheck disable=SC2154  # the caller's settings, named below
# The drain the wave rollouts share (config/mig-rollout/mig-rollout.sh and
# config/dra-rollout/dra-rollout.sh): find a node's GPU pods, refuse the ones a drain cannot evict,
# cordon, evict through the Eviction API and wait until they are gone, uncordon; and the check that
# a node advertises its table line's resources (advertised). Sourced after
# config/validation/common.sh (fail, info, elapsed, one_line, scratch), never run on its own; each
# script's ConfigMap holds it next to the script. POSIX sh for busybox `sh`.
#
# The caller sets, before it calls these:
#   KUBECTL, CORDON_MARK (the annotation that says the rollout cordoned a node)
#   target NODE (sets RESOURCES from the node's table line) and ALLOCATABLE (its read_node), for
#     advertised
#   evict, ignore_unevictable, eviction_timeout, poll: its settings (EVICT, IGNORE_UNEVICTABLE,
#     EVICTION_TIMEOUT_SECONDS, POLL_SECONDS)
#   cordoned_by_others: " <node> ... " of the nodes someone else cordoned
#   DRAIN_CHANGE             what a refused or timed-out drain leaves unchanged ("the MIG config")
#   DRAIN_IGNORE_KEY         the setting that lets unevictable pods stay, as the user writes it
#   DRAIN_TIMEOUT_KEY        how a timed-out drain names the eviction timeout setting
#   DRAIN_UNEVICTABLE_EFFECT what an unevictable pod would do to the change (", and ..."; may be empty)
#   DRAIN_UNEVICTABLE_HINT   how to get rid of the unevictable pods

# replace_newlines SEP TEXT: TEXT with each of its newlines replaced by SEP.
replace_newlines() {
  local rest text
  rest=$2
  text=""
  while :; do
    case $rest in
      *"$NL"*)
        text="$text${rest%%"$NL"*}$1"
        rest=${rest#*"$NL"}
        ;;
      *)
        printf '%s' "$text$rest"
        return
        ;;
    esac
  done
}

# join_lines LINES: the lines (each ended by a newline) joined by "; ".
join_lines() {
  replace_newlines '; ' "${1%"$NL"}"
}

# gpu_pods NODE: sets PODS to the "<namespace>/<name>" of the pods on NODE that hold GPUs (request
# an nvidia.com/* resource or hold a ResourceClaim: a DRA node's GPUs, its MIG devices among them)
# and still run (space-separated), TERMINATING to the ones already on their way out, and
# UNEVICTABLE to those a drain cannot remove (a DaemonSet's or a static pod: it comes back on its
# node, or is not the API's to delete), one "<namespace>/<name> (<owner>)" per line.
gpu_pods() {
  local out ns name deleted phase owners claims res
  PODS=""
  TERMINATING=""
  UNEVICTABLE=""
  out=$("$KUBECTL" get pods --all-namespaces --field-selector "spec.nodeName=$1" -o \
    'jsonpath={range .items[*]}{.metadata.namespace}{"|"}{.metadata.name}{"|"}{.metadata.deletionTimestamp}{"|"}{.status.phase}{"|"}{.metadata.ownerReferences[*].kind}{"|"}{.spec.resourceClaims[*].name}{"|"}{.spec.containers[*].resources.limits} {.spec.initContainers[*].resources.limits}{"\n"}{end}' 2>&1) ||
    fail "cannot list the pods on node $1: $(one_line "$out")"
  while IFS='|' read -r ns name deleted phase owners claims res; do
    [ -n "$name" ] || continue
    case $res in
      *'"nvidia.com/'*) ;;
      *) [ -n "$claims" ] || continue ;;
    esac
    case $phase in
      Succeeded | Failed) continue ;;
    esac
    case " $owners " in
      *" DaemonSet "*) UNEVICTABLE="$UNEVICTABLE$ns/$name (DaemonSet)$NL" ;;
      *" Node "*) UNEVICTABLE="$UNEVICTABLE$ns/$name (static pod)$NL" ;;
      *)
        if [ -n "$deleted" ]; then
          TERMINATING="$TERMINATING $ns/$name"
        else
          PODS="$PODS $ns/$name"
        fi
        ;;
    esac
  done <<EOF
$out
EOF
}

# unevictable WHEN NODE...: fails (unless ignore_unevictable) when a GPU pod the drain cannot
# evict runs on one of the nodes; WHEN says in the failure what was done already.
unevictable() {
  local when node pod found
  when=$1
  shift
  found=""
  for node in "$@"; do
    gpu_pods "$node"
    while IFS= read -r pod; do
      [ -n "$pod" ] || continue
      if [ "$ignore_unevictable" = true ]; then
        info "node $node: not evicting $pod ($DRAIN_IGNORE_KEY is true: it must release its GPUs itself)"
      else
        found="${found}node $node: $pod$NL"
      fi
    done <<EOF
$UNEVICTABLE
EOF
  done
  [ -z "$found" ] ||
    fail "GPU pods the drain cannot evict hold GPUs on the wave's nodes$DRAIN_UNEVICTABLE_EFFECT: $(join_lines "$found"); so $DRAIN_CHANGE was not changed, $when and no later wave starts ($DRAIN_UNEVICTABLE_HINT)"
}

# evict NAMESPACE/NAME: asks the Eviction API; returns 0 when accepted or the pod is gone,
# else 1 with the API's answer in EVICT_ERROR (429 when a PodDisruptionBudget refuses).
evict() {
  local ns name body out
  ns=${1%%/*}
  name=${1#*/}
  # A file of this call's own: a fixed name could be another run's (or user's) file, sent as the
  # eviction of some other pod when this write fails.
  body=$(mktemp "${TMPDIR:-/tmp}/eviction.XXXXXX") || fail "cannot write the eviction of $1 under ${TMPDIR:-/tmp}"
  printf '{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"%s","namespace":"%s"}}\n' "$name" "$ns" >"$body" ||
    fail "cannot write the eviction of $1 to $body"
  if out=$("$KUBECTL" create --raw "/api/v1/namespaces/$ns/pods/$name/eviction" -f "$body" 2>&1); then
    rm -f "$body"
    return 0
  fi
  rm -f "$body"
  case $out in
    *NotFound*) return 0 ;;
  esac
  EVICT_ERROR=$(one_line "$out")
  return 1
}

# drain NODE...: evicts every GPU pod of the nodes and waits until they are gone. A pod still
# there is listed with the API's answer when its latest eviction was refused.
drain() {
  local node pod deadline left first refused
  deadline=$(( $(elapsed) + eviction_timeout ))
  first=1
  while :; do
    left=""
    for node in "$@"; do
      gpu_pods "$node"
      if [ "$ignore_unevictable" = false ] && [ -n "$UNEVICTABLE" ]; then
        # One that came after the check (a DaemonSet's pod tolerates the cordon).
        unevictable "the nodes stay cordoned" "$node"
      fi
      if [ "$first" -eq 1 ] && [ -z "$PODS$TERMINATING" ]; then
        info "node $node: no GPU pods, nothing to drain"
      fi
      for pod in $PODS; do
        if evict "$pod"; then
          info "node $node: evicting $pod"
          refused=""
        else
          refused=$EVICT_ERROR
        fi
        left="${left}node $node: $pod${refused:+ (eviction refused: $refused)}$NL"
      done
      for pod in $TERMINATING; do
        left="${left}node $node: $pod (terminating)$NL"
      done
    done
    first=0
    [ -n "$left" ] || return 0
    if [ $(( $(elapsed) + poll )) -gt "$deadline" ]; then
      fail "GPU pods still on the wave's nodes after ${eviction_timeout}s ($DRAIN_TIMEOUT_KEY), so $DRAIN_CHANGE was not changed, the nodes stay cordoned and no later wave starts: $(join_lines "$left")"
    fi
    sleep "$poll"
  done
}

# cordoned_by_others_has NODE: NODE was cordoned by someone else (cordoned_by_others).
cordoned_by_others_has() {
  case $cordoned_by_others in
    *" $1 "*) return 0 ;;
  esac
  return 1
}

# cordon_and_drain NODE...: cordons the nodes (marked with CORDON_MARK; a node someone else
# cordoned stays as it is, and cordoned afterwards), then drains them.
cordon_and_drain() {
  local node
  for node in "$@"; do
    if cordoned_by_others_has "$node"; then
      info "node $node was already cordoned: it stays cordoned afterwards"
      continue
    fi
    "$KUBECTL" annotate node "$node" "$CORDON_MARK=true" --overwrite >/dev/null
    "$KUBECTL" cordon "$node" >/dev/null
    info "node $node cordoned"
  done
  drain "$@"
}

# uncordon NODE...: uncordons the nodes the rollout cordoned (none when evict is false).
uncordon() {
  local node
  for node in "$@"; do
    if [ "$evict" = false ] || cordoned_by_others_has "$node"; then
      continue
    fi
    "$KUBECTL" uncordon "$node" >/dev/null
    "$KUBECTL" annotate node "$node" "$CORDON_MARK-" >/dev/null
    info "node $node uncordoned"
  done
}

# advertised NODE: empty when ALLOCATABLE has every resource=count of the node's table line,
# else what differs.
advertised() {
  local pair resource count have mismatch
  mismatch=""
  target "$1"
  for pair in $RESOURCES; do
    resource=${pair%=*}
    count=${pair#*=}
    have=$(json_string_field "$ALLOCATABLE" "$resource")
    [ "$have" = "$count" ] || mismatch="$mismatch${mismatch:+, }$resource=${have:-0} (expected $count)"
  done
  printf '%s' "$mismatch"
}
