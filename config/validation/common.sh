# shellcheck shell=bash
# Helpers shared by the validation payloads and the MIG rollout script; sourced, never run on its
# own.
#
# Every payload ends with exactly one verdict line:
#   PASS <check>: <what was proven>
#   FAIL <check>: <what is wrong>
# The FAIL line also goes to the container's termination message, which is what
# `pulumi up` prints when it reports the failed Job.

CHECK_NAME=${CHECK_NAME:-validation}
TERMINATION_LOG=${TERMINATION_LOG:-/dev/termination-log}
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}

fail() {
  local line="FAIL ${CHECK_NAME}: $*"
  printf '%s\n' "$line" >&2
  # The kubelet keeps at most 4096 bytes of a termination message.
  { printf '%s\n' "${line:0:4000}" >"$TERMINATION_LOG"; } 2>/dev/null || true
  exit 1
}

pass() {
  printf 'PASS %s: %s\n' "$CHECK_NAME" "$*"
  exit 0
}

info() {
  printf '%s: %s\n' "$CHECK_NAME" "$*"
}

# require_int NAME VALUE: VALUE must be a whole number.
require_int() {
  [[ $2 =~ ^[0-9]+$ ]] || fail "$1 must be a whole number, got '$2'"
}

# require_set NAME VALUE: VALUE must not be empty.
require_set() {
  [[ -n $2 ]] || fail "$1 is not set"
}

# list_devices: fills GPU_UUIDS and MIG_UUIDS from `nvidia-smi -L`.
#   GPU 0: NVIDIA H200 (UUID: GPU-...)
#     MIG 1g.18gb     Device  0: (UUID: MIG-...)
list_devices() {
  local out line
  GPU_UUIDS=()
  MIG_UUIDS=()
  if ! out=$("$NVIDIA_SMI" -L 2>&1); then
    fail "'nvidia-smi -L' failed: ${out//$'\n'/ }"
  fi
  while IFS= read -r line; do
    if [[ $line =~ ^GPU\ [0-9]+:.*\(UUID:\ (GPU-[^\)]+)\) ]]; then
      GPU_UUIDS+=("${BASH_REMATCH[1]}")
    elif [[ $line =~ ^[[:space:]]+MIG\ .*Device\ +[0-9]+:.*\(UUID:\ (MIG-[^\)]+)\) ]]; then
      MIG_UUIDS+=("${BASH_REMATCH[1]}")
    fi
  done <<<"$out"
}

# json_string_field JSON KEY: the string value of "KEY":"..." in a flat JSON object
# (what `kubectl get -o jsonpath='{.metadata.labels}'` prints), or nothing.
json_string_field() {
  local pattern="\"${2//./\\.}\":\"([^\"]*)\""
  if [[ $1 =~ $pattern ]]; then
    printf '%s' "${BASH_REMATCH[1]}"
  fi
}

# read_nodes FIELD NODE...: reads one field (a jsonpath such as .status.allocatable) of each named
# node with `kubectl get node <names>` (the ServiceAccount may only `get` these nodes: no list),
# 50 names per call. Fills NODE_FIELD[name]=value for every node read and NODE_ERRORS with
# kubectl's error lines (e.g. `Error from server (NotFound): nodes "x" not found`).
read_nodes() {
  local field=$1 out line template i
  shift
  local -a names=("$@") chunk
  declare -gA NODE_FIELD=()
  NODE_ERRORS=()
  for (( i = 0; i < ${#names[@]}; i += 50 )); do
    chunk=("${names[@]:i:50}")
    # One name gives the node itself, several a List: the template follows.
    template='{.metadata.name}{"\t"}{'"$field"'}{"\n"}'
    (( ${#chunk[@]} == 1 )) || template="{range .items[*]}${template}{end}"
    out=$("${KUBECTL:-kubectl}" get node "${chunk[@]}" -o "jsonpath=$template" 2>&1) || true
    while IFS= read -r line; do
      if [[ $line == *$'\t'* ]]; then
        # shellcheck disable=SC2034  # read by the payloads that source this file
        NODE_FIELD[${line%%$'\t'*}]=${line#*$'\t'}
      elif [[ -n $line ]]; then
        NODE_ERRORS+=("$line")
      fi
    done <<<"$out"
  done
}

# node_error NODE: why NODE was not read (kubectl's error line naming it, else its first one).
node_error() {
  local line
  for line in "${NODE_ERRORS[@]}"; do
    if [[ $line == *"\"$1\""* ]]; then
      printf '%s' "$line"
      return
    fi
  done
  printf '%s' "${NODE_ERRORS[0]:-kubectl printed nothing for it}"
}

# peer_barrier PEERS PREFIX DOMAIN SECONDS POLL WHAT: waits until pods 0..PEERS-1 of an Indexed Job
# ("<PREFIX>-<i>", each resolving as "<PREFIX>-<i>.<DOMAIN>" once it runs: one headless Service
# gives every started pod a DNS record) have all started; fails after SECONDS naming the pods that
# never started. WHAT names the pods in that message ("pods sharing the GPUs").
peer_barrier() {
  local peers=$1 prefix=$2 domain=$3 limit=$4 step=$5 what=$6 i
  local -A seen=()
  local -a missing
  while :; do
    for (( i = 0; i < peers; i++ )); do
      [[ -n ${seen[$i]:-} ]] && continue
      if getent hosts "${prefix}-${i}.${domain}" >/dev/null 2>&1; then
        seen[$i]=1
      fi
    done
    (( ${#seen[@]} == peers )) && return 0
    if (( SECONDS + step > limit )); then
      missing=()
      for (( i = 0; i < peers; i++ )); do
        [[ -n ${seen[$i]:-} ]] || missing+=("$i")
      done
      fail "only ${#seen[@]} of $peers $what started within ${limit}s (never started: ${missing[*]}); they cannot run concurrently"
    fi
    sleep "$step"
  done
}

# summarize MAX ITEM...: the first MAX items joined by "; ", then how many more there are.
summarize() {
  local max=$1 text="" i
  shift
  for (( i = 1; i <= $# && i <= max; i++ )); do
    text+="${text:+; }${!i}"
  done
  (( $# <= max )) || text+="; and $(( $# - max )) more node(s)"
  printf '%s' "$text"
}

# read_deadline_and_poll DEFAULT_DEADLINE DEFAULT_POLL: sets deadline and poll from
# DEADLINE_SECONDS and POLL_SECONDS (or the defaults), each a whole number.
read_deadline_and_poll() {
  deadline=${DEADLINE_SECONDS:-$1}
  poll=${POLL_SECONDS:-$2}
  require_int DEADLINE_SECONDS "$deadline"
  require_int POLL_SECONDS "$poll"
}

# poll_again PROBLEM: fails with PROBLEM when another poll would pass the deadline, else sleeps
# poll seconds.
poll_again() {
  (( SECONDS + poll <= deadline )) || fail "$1 (waited ${deadline}s)"
  sleep "$poll"
}

# wait_for_nodes FIELD CHECK NODE...: reads FIELD of the nodes not yet passed (read_nodes) and
# calls `CHECK NODE VALUE` for each, until every node has passed or the deadline is reached.
# CHECK leaves NODE_PROBLEM empty when the node passes, else sets it to why not (it may also
# fail at once). Each new summary of the first 5 problems is printed while waiting; the last
# one is the FAIL line.
wait_for_nodes() {
  local field=$1 check=$2 node summary last=""
  shift 2
  local -a pending=("$@") still problems
  while :; do
    read_nodes "$field" "${pending[@]}"
    still=()
    problems=()
    for node in "${pending[@]}"; do
      if [[ -z ${NODE_FIELD[$node]+set} ]]; then
        still+=("$node")
        problems+=("node $node cannot be read: $(node_error "$node")")
        continue
      fi
      NODE_PROBLEM=""
      "$check" "$node" "${NODE_FIELD[$node]}"
      if [[ -n $NODE_PROBLEM ]]; then
        still+=("$node")
        problems+=("$NODE_PROBLEM")
      fi
    done
    pending=("${still[@]}")
    (( ${#pending[@]} > 0 )) || return 0
    summary=$(summarize 5 "${problems[@]}")
    if [[ $summary != "$last" ]]; then
      info "$summary (waiting up to ${deadline}s)"
      last=$summary
    fi
    poll_again "$summary"
  done
}
