# shellcheck shell=busybox
# Helpers shared by the validation payloads and the MIG rollout scripts; sourced, never run on its
# own. POSIX sh: the Jobs that talk to the API run it under the GPU Operator image's busybox `sh`
# (no bash there, config/job-images.yaml); the payloads on the CUDA images run it under bash.
# It uses only busybox applets (date, mktemp, grep, rm, tr, awk) and the caller's kubectl.
#
# Every payload ends with exactly one verdict line:
#   PASS <check>: <what was proven>
#   FAIL <check>: <what is wrong>
# The FAIL line also goes to the container's termination message, which is what
# `pulumi up` prints when it reports the failed Job.

CHECK_NAME=${CHECK_NAME:-validation}
TERMINATION_LOG=${TERMINATION_LOG:-/dev/termination-log}
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}
# A newline and a tab, for splitting and joining (POSIX sh has no $'...').
NL='
'
TAB=$(printf '\t')
# When the script started (busybox ash has no $SECONDS).
SCRIPT_STARTED=$(date +%s)

fail() {
  local line
  line="FAIL ${CHECK_NAME}: $*"
  printf '%s\n' "$line" >&2
  # The kubelet keeps at most 4096 bytes of a termination message.
  { printf '%.4000s\n' "$line" >"$TERMINATION_LOG"; } 2>/dev/null || true
  exit 1
}

pass() {
  printf 'PASS %s: %s\n' "$CHECK_NAME" "$*"
  exit 0
}

info() {
  printf '%s: %s\n' "$CHECK_NAME" "$*"
}

# elapsed: whole seconds since the script started.
elapsed() {
  echo $(( $(date +%s) - SCRIPT_STARTED ))
}

# is_int VALUE: VALUE is a whole number.
is_int() {
  case $1 in
    '' | *[!0-9]*) return 1 ;;
  esac
  return 0
}

# require_int NAME VALUE: VALUE must be a whole number.
require_int() {
  is_int "$2" || fail "$1 must be a whole number, got '$2'"
}

# require_set NAME VALUE: VALUE must not be empty.
require_set() {
  [ -n "$2" ] || fail "$1 is not set"
}

# one_line TEXT: TEXT with its newlines as spaces (for a FAIL line).
one_line() {
  printf '%s' "$1" | tr '\n' ' '
}

# scratch VAR NAME: sets VAR to a fresh file under TMPDIR (/tmp, the pod's writable emptyDir).
# (Never `fail` inside $(...): it would end the subshell only, not the script.)
scratch() {
  local path
  # shellcheck disable=SC2034  # read by the eval below
  path=$(mktemp "${TMPDIR:-/tmp}/$2.XXXXXX") || fail "cannot create a scratch file under ${TMPDIR:-/tmp}"
  eval "$1=\$path"
}

# json_string_field JSON KEY: the string value of "KEY":"..." in a flat JSON object
# (what `kubectl get -o jsonpath='{.metadata.labels}'` prints), or nothing.
json_string_field() {
  case $1 in
    *"\"$2\":\""*)
      set -- "${1#*"\"$2\":\""}"
      printf '%s' "${1%%\"*}"
      ;;
  esac
}

# read_nodes FIELD NODE...: reads one field (a jsonpath such as .status.allocatable) of each named
# node with `kubectl get node <names>` (the ServiceAccount may only `get` these nodes: no list),
# 50 names per call. Writes "<name><TAB><value>" per node read to the file NODE_TABLE and
# kubectl's error lines (e.g. `Error from server (NotFound): nodes "x" not found`) to NODE_ERRORS;
# node_field and node_error read them. Node names are DNS subdomains: no blank, no glob character.
read_nodes() {
  local field chunk count name
  field=$1
  shift
  [ -n "${NODE_TABLE:-}" ] || scratch NODE_TABLE node-table
  [ -n "${NODE_ERRORS:-}" ] || scratch NODE_ERRORS node-errors
  : >"$NODE_TABLE"
  : >"$NODE_ERRORS"
  chunk=""
  count=0
  for name in "$@"; do
    chunk="$chunk $name"
    count=$(( count + 1 ))
    if [ "$count" -eq 50 ]; then
      # shellcheck disable=SC2086  # node names: no blank, no glob character
      read_node_chunk "$field" $chunk
      chunk=""
      count=0
    fi
  done
  # shellcheck disable=SC2086
  [ "$count" -eq 0 ] || read_node_chunk "$field" $chunk
}

# read_node_chunk FIELD NODE...: one `kubectl get node` of read_nodes.
read_node_chunk() {
  local field template out line
  field=$1
  shift
  # One name gives the node itself, several a List: the template follows.
  template='{.metadata.name}{"\t"}{'"$field"'}{"\n"}'
  [ "$#" -eq 1 ] || template="{range .items[*]}${template}{end}"
  out=$("${KUBECTL:-kubectl}" get node "$@" -o "jsonpath=$template" 2>&1) || true
  while IFS= read -r line; do
    case $line in
      *"$TAB"*) printf '%s\n' "$line" >>"$NODE_TABLE" ;;
      ?*) printf '%s\n' "$line" >>"$NODE_ERRORS" ;;
    esac
  done <<EOF
$out
EOF
}

# node_field NODE: the field read_nodes read of NODE; status 1 when NODE was not read.
node_field() {
  local name value
  while IFS="$TAB" read -r name value; do
    if [ "$name" = "$1" ]; then
      printf '%s' "$value"
      return 0
    fi
  done <"$NODE_TABLE"
  return 1
}

# node_error NODE: why NODE was not read (kubectl's error line naming it, else its first one).
node_error() {
  local line first=""
  while IFS= read -r line; do
    [ -n "$first" ] || first=$line
    case $line in
      *"\"$1\""*)
        printf '%s' "$line"
        return
        ;;
    esac
  done <"$NODE_ERRORS"
  printf '%s' "${first:-kubectl printed nothing for it}"
}

# row_of FILE NAME: the rest of the first line of FILE (a table of "<name> <words>..." lines)
# whose first word is NAME, or nothing.
row_of() {
  local name rest
  while read -r name rest; do
    if [ "$name" = "$2" ]; then
      printf '%s' "$rest"
      return
    fi
  done <"$1"
}

# is_pair WORD: WORD is <resource>=<count>, the resource of [a-z0-9./-], the count a whole number.
is_pair() {
  case $1 in
    *=*) ;;
    *) return 1 ;;
  esac
  case ${1%%=*} in
    '' | *[!a-z0-9./-]*) return 1 ;;
  esac
  is_int "${1#*=}"
}

# table_value FILE KEY: the text after the first tab of the last line of FILE whose first field
# (up to that tab) is KEY, as a map keeps the last value set for a key; status 1 when no line
# has KEY. Lines are "<key><TAB><value>" (a scratch file standing in for an associative array).
table_value() {
  KEY=$2 awk -F "$TAB" '$1 == ENVIRON["KEY"] { found = 1; value = substr($0, length($1) + 2) }
    END { if (found) printf "%s", value; exit !found }' "$1"
}

# summarize MAX ITEM...: the first MAX items joined by "; ", then how many more there are.
summarize() {
  local max text item i
  max=$1
  shift
  text=""
  i=0
  for item in "$@"; do
    i=$(( i + 1 ))
    [ "$i" -gt "$max" ] || text="${text:+$text; }$item"
  done
  [ "$#" -le "$max" ] || text="$text; and $(( $# - max )) more node(s)"
  printf '%s' "$text"
}

# summarize_lines MAX TEXT: summarize of TEXT's non-empty lines.
summarize_lines() {
  local max
  max=$1
  set -f
  local IFS="$NL"
  # shellcheck disable=SC2086  # split on newlines only, no globbing
  set -- $2
  set +f
  summarize "$max" "$@"
}

# count_words TEXT: how many blank-separated words TEXT has.
count_words() {
  set -f
  # shellcheck disable=SC2086
  set -- $1
  set +f
  echo "$#"
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
  [ $(( $(elapsed) + poll )) -le "$deadline" ] || fail "$1 (waited ${deadline}s)"
  sleep "$poll"
}

# poll_nodes DEADLINE READ CHECK BEFORE AFTER NODE...: looks at the NODEs until every one has
# passed or another poll would end past DEADLINE (seconds since the script started). Once a pass
# `READ NODE...` reads, for the nodes not yet passed, what CHECK looks at; then `CHECK NODE` for
# each of them leaves NODE_PROBLEM empty when NODE passes, else sets it to why not, naming the node
# (it may also fail at once). Each new summary of the first 5 problems goes to the log as
# "<BEFORE><summary><AFTER>"; between passes it sleeps poll seconds. It returns with
# POLL_PROBLEMS (the last pass's problems, a line each) and POLL_SUMMARY (their summary) empty
# when every node passed, else set: the caller fails with them.
poll_nodes() {
  local poll_deadline poll_read poll_check say_before say_after pending still problems node summary last
  poll_deadline=$1
  poll_read=$2
  poll_check=$3
  say_before=$4
  say_after=$5
  shift 5
  pending=$*
  last=""
  POLL_PROBLEMS=""
  POLL_SUMMARY=""
  while :; do
    # shellcheck disable=SC2086  # node names: no blank, no glob character
    "$poll_read" $pending
    still=""
    problems=""
    for node in $pending; do
      NODE_PROBLEM=""
      "$poll_check" "$node"
      if [ -n "$NODE_PROBLEM" ]; then
        still="$still $node"
        problems="$problems$NODE_PROBLEM$NL"
      fi
    done
    pending=$still
    [ -n "$pending" ] || return 0
    summary=$(summarize_lines 5 "$problems")
    if [ "$summary" != "$last" ]; then
      info "$say_before$summary$say_after"
      last=$summary
    fi
    if [ $(( $(elapsed) + poll )) -gt "$poll_deadline" ]; then
      # shellcheck disable=SC2034  # read by wait_until (config/dra-rollout/dra-rollout.sh)
      POLL_PROBLEMS=$problems
      POLL_SUMMARY=$summary
      return 0
    fi
    sleep "$poll"
  done
}

# wait_for_nodes FIELD CHECK NODE...: reads FIELD of the nodes not yet passed (read_nodes) and
# calls `CHECK NODE VALUE` for each, until every node has passed or the deadline is reached
# (poll_nodes). CHECK leaves NODE_PROBLEM empty when the node passes, else sets it to why not (it
# may also fail at once). Each new summary of the first 5 problems is printed while waiting; the
# last one is the FAIL line.
wait_for_nodes() {
  WAIT_FIELD=$1
  WAIT_CHECK=$2
  shift 2
  poll_nodes "$deadline" read_waited_nodes check_read_node "" " (waiting up to ${deadline}s)" "$@"
  [ -z "$POLL_SUMMARY" ] || fail "$POLL_SUMMARY (waited ${deadline}s)"
}

# read_waited_nodes NODE...: read_nodes of wait_for_nodes' FIELD.
read_waited_nodes() {
  read_nodes "$WAIT_FIELD" "$@"
}

# check_read_node NODE: wait_for_nodes' CHECK of NODE's FIELD, or why NODE could not be read.
check_read_node() {
  local value
  if ! value=$(node_field "$1"); then
    NODE_PROBLEM="node $1 cannot be read: $(node_error "$1")"
    return
  fi
  "$WAIT_CHECK" "$1" "$value"
}
