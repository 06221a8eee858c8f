# shellcheck shell=bash
# Helpers shared by the validation payloads; sourced, never run on its own.
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
  { printf '%s\n' "$line" >"$TERMINATION_LOG"; } 2>/dev/null || true
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
