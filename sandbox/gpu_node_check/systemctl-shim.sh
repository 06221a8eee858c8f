#!/usr/bin/env bash
# `systemctl` for the one unit gpu-node-check starts, on a machine whose PID 1 is not systemd (a
# container or a microVM): `start`, `restart` and `is-active [--quiet]` of `containerd`, the calls
# config/node-scripts/node-prep.sh makes (restart, then is-active until it answers). It does what
# Debian's containerd.service does (ExecStart=/usr/bin/containerd, KillMode=process): restart stops
# the daemon with SIGTERM, waits for it to exit, starts it again. Active = the process is alive and
# answers on its socket. Every call is logged to $STATE/systemctl.log, every (re)start counted in
# $STATE/containerd.starts. Anything else is refused: the check never pretends to have systemd.
set -euo pipefail
STATE=${GPU_NODE_CHECK_STATE:-/run/gpu-node-check}
mkdir -p "$STATE"
printf '%s systemctl %s\n' "$(date -u +%H:%M:%S.%N | cut -c1-12)" "$*" >>"$STATE/systemctl.log"
pidfile=$STATE/containerd.pid

alive() { [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }
answers() { timeout 5 ctr --address /run/containerd/containerd.sock version >/dev/null 2>&1; }

start() {
  alive && return 0
  modprobe overlay 2>/dev/null || true  # the unit's ExecStartPre=-/sbin/modprobe overlay
  setsid /usr/bin/containerd </dev/null >>"$STATE/containerd.log" 2>&1 &
  echo $! >"$pidfile"
  echo $(( $(cat "$STATE/containerd.starts" 2>/dev/null || echo 0) + 1 )) >"$STATE/containerd.starts"
}

stop() {
  alive || return 0
  local pid i
  pid=$(cat "$pidfile")
  kill -TERM "$pid"
  for i in $(seq 1 300); do
    kill -0 "$pid" 2>/dev/null || return 0
    [ "$i" -lt 300 ] && sleep 0.1
  done
  echo "systemctl (gpu-node-check): containerd (pid $pid) did not stop within 30 s" >&2
  return 1
}

quiet=false
args=()
for a in "$@"; do
  case $a in --quiet | -q) quiet=true ;; *) args+=("$a") ;; esac
done
verb=${args[0]:-}
unit=${args[1]:-}
unit=${unit%.service}
if [ "$unit" != containerd ]; then
  echo "systemctl (gpu-node-check): only the containerd unit is known here, not '${args[*]}'" >&2
  exit 1
fi
case $verb in
  start) start ;;
  restart) stop; start ;;
  stop) stop ;;
  is-active)
    if alive && answers; then $quiet || echo active; exit 0; fi
    $quiet || echo inactive
    exit 3
    ;;
  *) echo "systemctl (gpu-node-check): '$verb' is not supported" >&2; exit 1 ;;
esac
