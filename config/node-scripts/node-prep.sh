#!/usr/bin/env bash
# gpu-stack node preparation: one idempotent script, three phases.
#
#   preflight  read-only: the host driver works (nvidia-smi), the GPUs match the stack config,
#              the container runtime's version and config can run GPU pods under the stack's
#              values (CDI on or off), and one machine-readable line on stdout:
#              GPU_STACK_PREFLIGHT {json}
#   toolkit    NVIDIA Container Toolkit pinned to GPU_STACK_TOOLKIT_VERSION from the package
#              repository the stack names (NVIDIA's, or the site's own mirror: apt, dnf or yum;
#              curl, gnupg and CA certificates first where missing), or, with the source
#              `preinstalled`, only checked (nothing is installed, no host is reached);
#              nothing happens when that version is already installed
#   runtime    `nvidia-ctk runtime configure` for containerd, docker or cri-o (k3s and RKE2 detect
#              the runtime themselves); the runtime is restarted only when its config files really
#              changed (checksums before and after), then waited for
#
# Every package-manager call, repository refresh, download and wait runs under `timeout` with its
# own limit (GPU_STACK_TIMEOUT_* below) and fails naming the step: a hung package manager fails
# this node's command instead of blocking `pulumi up`.
#
# The stack copies this one file to every node unchanged (remote.CopyToRemote, to
# ~/.gpu-stack-node-prep.sh) and runs it through the launcher below with the node's values as
# environment variables (GPU_STACK_* below). Run by hand (read-only): `make gpu-check`, or
#   GPU_STACK_PHASES=preflight bash config/node-scripts/node-prep.sh
# Everything but the report line goes to stderr.
# GPU_STACK_ROOT prefixes every host path; it exists for the tests and is empty on real hosts.

# Launcher, POSIX sh (the node command, gpu_stack/node_prep.py launch_string):
#   sh ./.gpu-stack-node-prep.sh --gpu-stack-launch SHA256 TIMEOUT NAME=VALUE...
# copies this file to a private directory, refuses a copy that is not the version the stack sent
# (SHA256), runs it with bash as root (or through `sudo -n`) under `timeout -k 30 TIMEOUT` with the
# values in its environment, prints the report line on stdout and one summary line on stderr, and
# keeps the report line (~/.gpu-stack-node-prep.preflight) and the whole log on the node
# (~/.gpu-stack-node-prep.log); on failure it prints the failed
# step and the log's last lines instead. sh never reads past this block (it exits).
if [ "${1:-}" = --gpu-stack-launch ]; then
  want=$2 limit=$3 node=unknown
  shift 3
  for arg in "$@"; do
    case $arg in GPU_STACK_NODE=*) node=${arg#GPU_STACK_NODE=} ;; esac
  done
  dir="${TMPDIR:-/tmp}/gpu-stack-node-prep.$$"
  (umask 077 && mkdir "$dir") || exit 1
  cp -- "$0" "$dir/node-prep.sh" || { rm -rf "$dir"; exit 1; }
  got=$(sha256sum <"$dir/node-prep.sh" 2>/dev/null | cut -c1-64)
  if [ "$got" != "$want" ]; then
    echo "gpu-stack: $0 on node $node is not the script this stack copied (sha256 ${got:-unknown}, expected $want); run pulumi up again" >&2
    rm -rf "$dir"
    exit 1
  fi
  set -- env "$@" bash "$dir/node-prep.sh"
  if command -v timeout >/dev/null 2>&1; then set -- timeout -k 30 "$limit" "$@"; fi
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
      echo 'gpu-stack: the SSH user is not root and sudo is not installed' >&2
      rm -rf "$dir"
      exit 1
    fi
    set -- sudo -n -- "$@"
  fi
  "$@" >"$dir/out" 2>"$dir/log"
  rc=$?
  cat "$dir/out"
  # the report line kept beside the log: an update of the node command prints it again
  # (gpu_stack/design/node_prep.py UPDATE_COMMAND), so the stack's nodePreflight outlives it
  report="${0%.sh}.preflight"
  if grep '^GPU_STACK_PREFLIGHT ' "$dir/out" >"$report.new" 2>/dev/null; then mv -f "$report.new" "$report"; else rm -f "$report.new" "$report"; fi
  log="${0%.sh}.log"
  cat "$dir/log" >"$log" 2>/dev/null || log="(not kept: $log is not writable)"
  steps=$(sed -n 's/^gpu-stack\[.*\]: step: //p' "$dir/log" | tr '\n' ' ')
  if [ "$rc" -eq 0 ]; then
    if grep -q ': runtime: .*restarting' "$dir/log"; then restart="runtime restarted"; else restart="no runtime restart"; fi
    echo "gpu-stack: node preparation of $node done (steps: ${steps% }; $restart); whole log on the node: $log" >&2
    rm -rf "$dir"
    exit 0
  fi
  step=$(sed -n 's/^gpu-stack\[.*\]: step: //p' "$dir/log" | tail -n 1)
  if [ "$rc" -eq 124 ]; then why="stopped after ${limit}s (gpu-stack:ssh.timeoutSeconds)"; else why="exit $rc"; fi
  echo "gpu-stack: node preparation of $node failed in step ${step:-start} ($why); last 20 lines (whole log on the node: $log):" >&2
  tail -n 20 "$dir/log" >&2
  rm -rf "$dir"
  exit "$rc"
fi

set -euo pipefail
export LC_ALL=C

# @gpu-stack-values@ (render_script inserts values below this line; the stack passes them in the environment)

GPU_STACK_NODE=${GPU_STACK_NODE:-$(hostname 2>/dev/null || echo unknown)}
GPU_STACK_PHASES=${GPU_STACK_PHASES:-preflight}
# How messages name the node's gpu settings: by the node's name (a list index would change when
# another node is added or removed, and re-run this node).
GPU_STACK_CONFIG_KEY=${GPU_STACK_CONFIG_KEY:-the gpu of node $GPU_STACK_NODE in gpu-stack:nodes}
GPU_STACK_EXPECT_MODEL=${GPU_STACK_EXPECT_MODEL:-}
GPU_STACK_EXPECT_NAMES=${GPU_STACK_EXPECT_NAMES:-}
GPU_STACK_NAME_MATCH=${GPU_STACK_NAME_MATCH:-words}
GPU_STACK_EXPECT_COUNT=${GPU_STACK_EXPECT_COUNT:-}
GPU_STACK_RUNTIME=${GPU_STACK_RUNTIME:-}
GPU_STACK_TOOLKIT_VERSION=${GPU_STACK_TOOLKIT_VERSION:-1.18.1}
# host: the driver is installed on this host; operator: the GPU Operator's driver container
# provides it under /run/nvidia/driver (the toolkit's `root` points there).
GPU_STACK_DRIVER=${GPU_STACK_DRIVER:-host}
# true: the chart runs with cdi.enabled, the device plugin hands out CDI devices only, so the
# runtime itself must process CDI; false: nvidia becomes the runtime's default runtime.
GPU_STACK_CDI=${GPU_STACK_CDI:-true}
# Where the toolkit packages come from: nvidia (NVIDIA's repository), mirror (the site's own) or
# preinstalled (the node image has them: checked, never installed). The repository URLs and the
# signing key (a URL, or a file on this host) are given by the stack; none is built in.
GPU_STACK_TOOLKIT_SOURCE=${GPU_STACK_TOOLKIT_SOURCE:-nvidia}
GPU_STACK_TOOLKIT_APT_URL=${GPU_STACK_TOOLKIT_APT_URL:-}
GPU_STACK_TOOLKIT_RPM_URL=${GPU_STACK_TOOLKIT_RPM_URL:-}
GPU_STACK_TOOLKIT_KEY=${GPU_STACK_TOOLKIT_KEY:-}
# false: NVIDIA_VISIBLE_DEVICES of an unprivileged container selects no GPU (only pods that request
# one get one); true: the toolkit's own default, any container can name GPUs by that variable.
GPU_STACK_ACCEPT_ENVVAR=${GPU_STACK_ACCEPT_ENVVAR:-false}
# Seconds each bounded step may take (package installs, repository refreshes, downloads, waits).
GPU_STACK_TIMEOUT_INSTALL=${GPU_STACK_TIMEOUT_INSTALL:-900}
GPU_STACK_TIMEOUT_REFRESH=${GPU_STACK_TIMEOUT_REFRESH:-300}
GPU_STACK_TIMEOUT_DOWNLOAD=${GPU_STACK_TIMEOUT_DOWNLOAD:-120}
GPU_STACK_TIMEOUT_WAIT=${GPU_STACK_TIMEOUT_WAIT:-180}
GPU_STACK_ROOT=${GPU_STACK_ROOT:-}
ROOT=$GPU_STACK_ROOT

TOOLKIT_PACKAGES=(nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools libnvidia-container1)
KEYRING=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
OPERATOR_DRIVER_ROOT=/run/nvidia/driver
# NVIDIA's fix for GPUs lost after `systemctl daemon-reload` on systemd-cgroup hosts
# (nvidia-container-toolkit#48, nvidia-docker#1671): /dev/char/MAJOR:MINOR links to the device
# nodes, re-created by this udev rule whenever the driver binds. `--create-all` needs the device
# majors of nvidia and nvidia-uvm in /proc/devices ("missing required device major nvidia-uvm"
# otherwise), and nvidia-uvm is often loaded only by the first CUDA process: so the modules are
# loaded and the control device nodes made first, as the operator's validator does
# (--load-kernel-modules --create-device-nodes), here and in the rule (at boot the rule fires when
# nvidia.ko binds, before anything has loaded nvidia-uvm). Here the modules are loaded only when
# /proc/devices lacks nvidia-uvm: `--load-kernel-modules` runs `/sbin/modprobe` for nvidia,
# nvidia-uvm and nvidia-modeset every time, loaded or not (v1.18.1
# internal/system/nvmodules/modules.go, LoadAll), and fails the whole command where modprobe is
# not installed or a module does not exist, though the driver is loaded: seen on an H200 VM with
# the driver loaded at boot and no kmod ("failed to load module nvidia: fork/exec /sbin/modprobe:
# no such file or directory", docs/node-preparation.md, "One real GPU node").
DEV_CHAR_RULE_FILE=/lib/udev/rules.d/71-nvidia-dev-char.rules
DEV_CHAR_FLAGS=(--create-all --load-kernel-modules --create-device-nodes)
DEV_CHAR_FLAGS_LOADED=(--create-all --create-device-nodes)
DEV_CHAR_RULE='ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", RUN+="/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all --load-kernel-modules --create-device-nodes"'

log() { printf 'gpu-stack[%s]: %s\n' "$GPU_STACK_NODE" "$*" >&2; }
die() { printf 'gpu-stack[%s]: ERROR: %s\n' "$GPU_STACK_NODE" "$*" >&2; exit 1; }

# bounded LIMIT_VAR "step" COMMAND...: run COMMAND (stdout to stderr) under `timeout` with the
# limit held in LIMIT_VAR; a hang or a failure ends the script with a message naming the step.
bounded() {
  local var=$1 what=$2 limit rc=0
  shift 2
  limit=${!var}
  timeout -k 10 "$limit" "$@" >&2 || rc=$?
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    die "$what did not finish within ${limit}s ($var) and was stopped; check the host (a held package lock, an unreachable repository) and run again"
  fi
  [ "$rc" -eq 0 ] || die "$what failed (exit $rc)"
}

# The toolkit and runtime phases change the host: they need root (the stack's command string
# runs this script through `sudo -n` for a non-root SSH user). The preflight alone does not.
if [ "$GPU_STACK_PHASES" != preflight ] && [ -z "$ROOT" ] && [ "$(id -u)" -ne 0 ]; then
  die "phases '$GPU_STACK_PHASES' change the host and need root: run as root or as a user with passwordless sudo"
fi

# JSON string literal of $1 (quotes, backslashes and control characters escaped or dropped).
json_str() {
  local s=$1
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\t'/\\t}
  s=${s//$'\r'/}
  s=$(printf '%s' "$s" | tr -d '\000-\010\013\014\016-\037\177')
  printf '"%s"' "$s"
}

# JSON array of strings from the arguments.
json_list() {
  local out="" item
  for item in "$@"; do
    out+="${out:+,}$(json_str "$item")"
  done
  printf '[%s]' "$out"
}

trim() {
  local s=$1
  s=${s#"${s%%[![:space:]]*}"}
  s=${s%"${s##*[![:space:]]}"}
  printf '%s' "$s"
}

lower() { printf '%s' "$1" | tr '[:upper:]' '[:lower:]'; }

# Lowercase words of a GPU name: "NVIDIA A100-SXM4-40GB" -> " nvidia a100 sxm4 40gb ".
words() {
  local s
  s=$(printf '%s' "$1" | tr '[:upper:]' '[:lower:]' | tr -c 'a-z0-9\n' ' ' | tr -s ' ')
  printf ' %s ' "$(trim "$s")"
}

# True when GPU name $1 is one of the accepted names (one per line of GPU_STACK_EXPECT_NAMES):
# GPU_STACK_NAME_MATCH=exact: equal, ignoring case and outer spaces (names from the GPU catalog);
# words: all of an accepted name's words appear among the GPU name's words ("L4" is not "L40S").
name_accepted() {
  local have pattern want ok
  have=$(words "$1")
  while IFS= read -r pattern; do
    [ -n "$(trim "$pattern")" ] || continue
    if [ "$GPU_STACK_NAME_MATCH" = exact ]; then
      [ "$(lower "$(trim "$1")")" = "$(lower "$(trim "$pattern")")" ] && return 0
      continue
    fi
    ok=1
    for want in $(words "$pattern"); do
      case $have in *" $want "*) ;; *) ok=0 ;; esac
    done
    [ "$ok" = 1 ] && return 0
  done <<<"$GPU_STACK_EXPECT_NAMES"
  return 1
}

os_field() {
  local key=$1 line value
  [ -r "$ROOT/etc/os-release" ] || return 0
  while IFS= read -r line; do
    case $line in
      "$key="*)
        value=${line#*=}
        value=${value#\"}; value=${value%\"}
        value=${value#\'}; value=${value%\'}
        printf '%s' "$value"
        return 0
        ;;
    esac
  done <"$ROOT/etc/os-release"
}

# apt, dnf, yum (Amazon Linux 2, or an RHEL-family host without dnf), or nothing (unsupported).
package_family() {
  local id like word
  id=$(os_field ID)
  like=$(os_field ID_LIKE)
  if [ "$id" = amzn ] && [ "$(os_field VERSION_ID)" = 2 ]; then echo yum; return 0; fi
  for word in $id $like; do
    case $word in
      debian | ubuntu) echo apt; return 0 ;;
      rhel | centos | fedora | rocky | almalinux | ol | amzn)
        if command -v dnf >/dev/null 2>&1 || ! command -v yum >/dev/null 2>&1; then echo dnf; else echo yum; fi
        return 0
        ;;
    esac
  done
  echo ""
}

toolkit_version() {
  local out
  out=$(nvidia-ctk --version 2>/dev/null) || return 0
  printf '%s\n' "$out" | sed -n 's/.*version \([0-9][0-9.]*\).*/\1/p' | head -n 1
}

runtimes_found() {
  local found=()
  if command -v k3s >/dev/null 2>&1 || [ -d "$ROOT/var/lib/rancher/k3s/agent" ]; then found+=(k3s); fi
  if command -v rke2 >/dev/null 2>&1 || [ -d "$ROOT/var/lib/rancher/rke2/agent" ]; then found+=(rke2); fi
  if command -v containerd >/dev/null 2>&1; then found+=(containerd); fi
  if command -v dockerd >/dev/null 2>&1 || command -v docker >/dev/null 2>&1; then found+=(docker); fi
  if command -v crio >/dev/null 2>&1; then found+=(crio); fi
  printf '%s\n' "${found[@]}"
}

# First x.y.z in a tool's version output ("containerd github.com/containerd/containerd v1.7.27 ...").
version_in() { printf '%s\n' "$1" | { grep -Eo '[0-9]+\.[0-9]+\.[0-9]+' || true; } | head -n 1; }

# version_lt A B: true when version A is older than B (numeric per part).
version_lt() {
  local a b i x y
  IFS=. read -r -a a <<<"$1"
  IFS=. read -r -a b <<<"$2"
  for i in 0 1 2; do
    x=${a[$i]:-0}; y=${b[$i]:-0}
    [ "$((10#$x))" -lt "$((10#$y))" ] && return 0
    [ "$((10#$x))" -gt "$((10#$y))" ] && return 1
  done
  return 1
}

# The version of the declared runtime ("" when it cannot be read).
runtime_version() {
  local out=""
  case $GPU_STACK_RUNTIME in
    containerd) out=$(containerd --version 2>/dev/null) || true ;;
    docker) out=$(docker version --format '{{.Server.Version}}' 2>/dev/null || dockerd --version 2>/dev/null) || true ;;
    crio) out=$(crio --version 2>/dev/null) || true ;;
    k3s) out=$(k3s --version 2>/dev/null) || true ;;
    rke2) out=$(rke2 --version 2>/dev/null) || true ;;
  esac
  version_in "$out"
}

# The `version` of a containerd config file: 1, 2, 3..., "none" (keys but no version: a v1
# config), "empty" (no keys), "absent" (no file).
containerd_config_version() {
  local file=$1 v
  [ -f "$file" ] || { echo absent; return 0; }
  v=$(sed -n 's/^[[:space:]]*version[[:space:]]*=[[:space:]]*\([0-9][0-9]*\)[[:space:]]*\(#.*\)\{0,1\}$/\1/p' "$file" | head -n 1)
  if [ -n "$v" ]; then echo "$v"; return 0; fi
  if grep -Evq '^[[:space:]]*(#.*)?$' "$file"; then echo none; else echo empty; fi
}

# k3s and RKE2 generate their containerd config at start; where it lands.
rancher_config() { printf '%s' "$ROOT/var/lib/rancher/$GPU_STACK_RUNTIME/agent/etc/containerd/config.toml"; }

# True when a containerd config sets `enable_cdi = true` / `= false` ($2).
config_sets_cdi() { [ -f "$1" ] && grep -Eq "^[[:space:]]*enable_cdi[[:space:]]*=[[:space:]]*$2([[:space:]]|#|\$)" "$1"; }

# The cgroup driver of the node's containers: systemd, cgroupfs or unknown. The kubelet's config
# says it where it says it (its driver and the runtime's must match); else the runtime's config.
cgroup_driver() {
  local kubelet=$ROOT/var/lib/kubelet/config.yaml v f files=()
  v=$( { [ -f "$kubelet" ] && sed -n 's/^cgroupDriver:[[:space:]]*"\{0,1\}\([a-z]*\).*/\1/p' "$kubelet"; } | head -n 1)
  case $v in systemd | cgroupfs) echo "$v"; return 0 ;; esac
  case $GPU_STACK_RUNTIME in
    containerd | k3s | rke2)
      files=("$ROOT/etc/containerd/config.toml" "$ROOT"/etc/containerd/conf.d/*.toml)
      [ "$GPU_STACK_RUNTIME" = containerd ] || files=("$(rancher_config)")
      for f in "${files[@]}"; do
        if [ -f "$f" ] && grep -Eq '^[[:space:]]*SystemdCgroup[[:space:]]*=[[:space:]]*true' "$f"; then echo systemd; return 0; fi
      done
      ;;
    crio)
      # cri-o's default cgroup_manager is systemd
      if grep -Eqs '^[[:space:]]*cgroup_manager[[:space:]]*=[[:space:]]*"cgroupfs"' "$ROOT/etc/crio/crio.conf" "$ROOT"/etc/crio/crio.conf.d/*; then
        echo cgroupfs
      else
        echo systemd
      fi
      return 0
      ;;
    docker)
      f=$ROOT/etc/docker/daemon.json
      if [ -f "$f" ] && grep -q 'native.cgroupdriver=systemd' "$f"; then echo systemd; return 0; fi
      if [ -f "$f" ] && grep -q 'native.cgroupdriver=cgroupfs' "$f"; then echo cgroupfs; return 0; fi
      ;;
  esac
  echo unknown
}

# Problems with the runtime's version and config for the stack's values (one per line).
runtime_problems() {
  local version=$1 cdi_key=gpu-stack:toolkit.cdi config cv
  case $GPU_STACK_RUNTIME in
    containerd)
      cv=$(containerd_config_version "$ROOT/etc/containerd/config.toml")
      if [ "$GPU_STACK_CDI" = true ] && [ -n "$version" ] && version_lt "$version" 1.7.0; then
        echo "runtime: containerd $version has no CDI support (1.7 or later), but $cdi_key = true makes the device plugin hand out CDI devices only; upgrade containerd to 1.7+ or set $cdi_key false"
      fi
      if [ "$cv" = none ] || [ "$cv" = 1 ]; then
        if [ -n "$version" ] && ! version_lt "$version" 2.0.0; then
          echo "runtime: $ROOT/etc/containerd/config.toml is a version 1 config (no 'version' key) and containerd $version reads version 2 or 3 only; convert it (containerd config migrate) and run again"
        fi
      fi
      ;;
    docker)
      if [ "$GPU_STACK_CDI" = true ] && [ -n "$version" ] && version_lt "$version" 25.0.0; then
        echo "runtime: Docker $version has no CDI support (25.0 or later), but $cdi_key = true makes the device plugin hand out CDI devices only; upgrade Docker or set $cdi_key false"
      fi
      ;;
    k3s | rke2)
      config=$(rancher_config)
      if [ -f "$config" ]; then
        cv=$(containerd_config_version "$config")
        if [ "$GPU_STACK_CDI" = true ] && { config_sets_cdi "$config" false || { [ "$cv" != 3 ] && ! config_sets_cdi "$config" true; }; }; then
          echo "runtime: $GPU_STACK_RUNTIME's containerd config ($config, version $cv) leaves CDI off, but $cdi_key = true makes the device plugin hand out CDI devices only; use a $GPU_STACK_RUNTIME release with containerd 2 (config version 3, CDI on), set enable_cdi = true through its config.toml.tmpl, or set $cdi_key false"
        fi
      fi
      ;;
  esac
}

# --------------------------------------------------------------------------- preflight
preflight() {
  local where=${GPU_STACK_CONFIG_KEY:-the stack config}
  local names=() migs=() driver="" count=0
  if [ "$GPU_STACK_DRIVER" = operator ]; then
    # The GPU Operator's driver container brings the driver (and nvidia-smi) after this runs.
    driver=operator
  else
    read_gpus
  fi
  local problems=() i
  if [ "$GPU_STACK_DRIVER" != operator ]; then
    if [ -n "$GPU_STACK_EXPECT_COUNT" ] && [ "$count" -ne "$GPU_STACK_EXPECT_COUNT" ]; then
      problems+=("GPU count: $where declares $GPU_STACK_EXPECT_COUNT x ${GPU_STACK_EXPECT_MODEL:-GPU}, nvidia-smi finds $count")
    fi
    if [ -n "$GPU_STACK_EXPECT_NAMES" ]; then
      for i in "${!names[@]}"; do
        if ! name_accepted "${names[$i]}"; then
          problems+=("GPU model: GPU $i is '${names[$i]}', but $where declares model '${GPU_STACK_EXPECT_MODEL}'")
        fi
      done
    fi
  fi
  local mig_capable=false m
  for m in "${migs[@]}"; do
    case $m in Enabled | Disabled) mig_capable=true ;; esac
  done
  preflight_runtime_and_report
}

# Sets names, migs, driver and count (of the caller) from nvidia-smi; dies when the driver is
# missing or broken.
read_gpus() {
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    die "nvidia-smi not found: the NVIDIA driver is not installed on this host, but the stack expects it there (gpu-stack:driver.placement = 'host'); install the driver, or let the GPU Operator install it (driver.placement 'operator')"
  fi
  local query rc=0
  query=$(nvidia-smi --query-gpu=name,driver_version,mig.mode.current --format=csv,noheader 2>&1) || rc=$?
  if [ "$rc" -ne 0 ]; then
    die "nvidia-smi failed (exit $rc): the NVIDIA driver is installed but not working: $(printf '%s' "$query" | head -n 1)"
  fi

  local line name version mig
  while IFS= read -r line; do
    [ -n "$(trim "$line")" ] || continue
    IFS=, read -r name version mig <<<"$line"
    names+=("$(trim "$name")")
    migs+=("$(trim "${mig:-}")")
    driver=$(trim "${version:-}")
  done <<<"$query"
  count=${#names[@]}
  if [ "$count" -eq 0 ]; then
    die "nvidia-smi lists no GPU: the driver is loaded but sees no device on this host"
  fi
}

# The rest of the preflight (uses the caller's names, migs, driver, count, mig_capable, problems).
preflight_runtime_and_report() {
  local found=() rt
  while IFS= read -r rt; do [ -n "$rt" ] && found+=("$rt"); done < <(runtimes_found)
  local runtime_found=null
  if [ -n "$GPU_STACK_RUNTIME" ]; then
    runtime_found=false
    for rt in "${found[@]}"; do [ "$rt" = "$GPU_STACK_RUNTIME" ] && runtime_found=true; done
    if [ "$runtime_found" = false ]; then
      problems+=("runtime: the stack config declares '$GPU_STACK_RUNTIME' but it is not installed here (found: ${found[*]:-none})")
    fi
  fi

  local runtime_ver="" p
  if [ "$runtime_found" = true ]; then
    runtime_ver=$(runtime_version)
    while IFS= read -r p; do
      [ -n "$p" ] && problems+=("$p")
    done < <(runtime_problems "$runtime_ver")
  fi

  local toolkit os source="" cgroup dev_char=false
  toolkit=$(toolkit_version)
  os="$(os_field ID) $(os_field VERSION_ID)"
  cgroup=$(cgroup_driver)
  [ "$(cat "$ROOT$DEV_CHAR_RULE_FILE" 2>/dev/null)" = "$DEV_CHAR_RULE" ] && dev_char=true
  case " $GPU_STACK_PHASES " in
    *" toolkit "*)
      source=$(toolkit_source "$toolkit")
      log "preflight: toolkit source: $source"
      case $source in
        "preinstalled, but"*) problems+=("toolkit: gpu-stack:toolkit.packages.source is 'preinstalled', but this host has NVIDIA Container Toolkit ${toolkit:-(none)}, not $GPU_STACK_TOOLKIT_VERSION: put $GPU_STACK_TOOLKIT_VERSION in the node image, or take the packages from a mirror") ;;
        "none:"*) problems+=("toolkit: ${source#none: }") ;;
      esac
      ;;
  esac
  printf 'GPU_STACK_PREFLIGHT {"node":%s,"ok":%s,"driver":%s,"gpus":%s,"count":%s,"mig":%s,"migCapable":%s,"runtime":%s,"runtimeFound":%s,"runtimeVersion":%s,"runtimes":%s,"cdi":%s,"toolkit":%s,"toolkitSource":%s,"os":%s,"cgroupDriver":%s,"devCharRule":%s,"problems":%s}\n' \
    "$(json_str "$GPU_STACK_NODE")" \
    "$([ ${#problems[@]} -eq 0 ] && echo true || echo false)" \
    "$(json_str "$driver")" \
    "$(json_list "${names[@]}")" \
    "$count" \
    "$(json_list "${migs[@]}")" \
    "$mig_capable" \
    "$(json_str "$GPU_STACK_RUNTIME")" \
    "$runtime_found" \
    "$( [ -n "$runtime_ver" ] && json_str "$runtime_ver" || echo null)" \
    "$(json_list "${found[@]}")" \
    "$([ "$GPU_STACK_CDI" = true ] && echo true || echo false)" \
    "$( [ -n "$toolkit" ] && json_str "$toolkit" || echo null)" \
    "$( [ -n "$source" ] && json_str "$source" || echo null)" \
    "$(json_str "$(trim "$os")")" \
    "$(json_str "$cgroup")" \
    "$dev_char" \
    "$(json_list "${problems[@]}")"

  if [ ${#problems[@]} -gt 0 ]; then
    local p
    for p in "${problems[@]}"; do log "preflight: $p"; done
    # The problems name their own keys (GPU model/count, runtime, CDI); the summary names the node.
    die "preflight failed: this host does not match ${where%.gpu} (${#problems[@]} problem(s) above)"
  fi
  if [ "$GPU_STACK_DRIVER" = operator ]; then
    log "preflight ok: the driver comes from the GPU Operator; runtime $GPU_STACK_RUNTIME ${runtime_ver:-(version unknown)}"
  else
    log "preflight ok: $count x ${names[0]}, driver $driver"
  fi
}

# --------------------------------------------------------------------------- toolkit
# The repository URL for this host's package manager (apt or dnf/yum), empty when none is given.
toolkit_repo_url() {
  case $1 in
    apt) printf '%s' "$GPU_STACK_TOOLKIT_APT_URL" ;;
    dnf | yum) printf '%s' "$GPU_STACK_TOOLKIT_RPM_URL" ;;
  esac
}

# What the toolkit phase will do, in one line (the preflight reports it): `installed <v>`
# (nothing to do), `preinstalled, but ...`, `<source> <repository URL>`, or `none: <why>`.
toolkit_source() {
  local have=$1 family url
  if [ "$have" = "$GPU_STACK_TOOLKIT_VERSION" ]; then
    printf 'installed %s (nothing to install)' "$have"
    return 0
  fi
  if [ "$GPU_STACK_TOOLKIT_SOURCE" = preinstalled ]; then
    printf 'preinstalled, but version %s' "${have:-none}"
    return 0
  fi
  family=$(package_family)
  url=$(toolkit_repo_url "$family")
  if [ -z "$family" ]; then
    printf 'unsupported OS (no apt, dnf or yum)'
  elif [ -z "$url" ]; then
    printf 'none: this host installs packages with %s, and gpu-stack:toolkit.packages names no %s repository (%s)' \
      "$family" "$([ "$family" = apt ] && echo apt || echo rpm)" "$([ "$family" = apt ] && echo aptUrl || echo rpmUrl)"
  else
    printf '%s %s' "$GPU_STACK_TOOLKIT_SOURCE" "$url"
  fi
}

# A signing key named by its path on this host is read only as a regular file (links followed) of
# 1 byte to 1 MiB: a FIFO or a device (/dev/zero, a link to /dev/stdin) is never read or waited on.
key_file_ok() {
  [ -f "$ROOT$1" ] && [ -s "$ROOT$1" ] ||
    die "the toolkit repository's signing key $1 (gpu-stack:toolkit.packages.gpgKey) is not a regular file on this host (a FIFO, a device or an empty file is no key)"
  local LC_ALL=C text
  text=$(head -c 1048577 "$ROOT$1")
  [ "${#text}" -le 1048576 ] ||
    die "the toolkit repository's signing key $1 (gpu-stack:toolkit.packages.gpgKey) is larger than 1 MiB; an ASCII-armored key is a few KiB"
}

# The signing key's ASCII-armored text: a file on this host (an absolute path) or downloaded.
toolkit_key_text() {
  local key=$GPU_STACK_TOOLKIT_KEY
  [ -n "$key" ] || die "no signing key for the toolkit's package repository (gpu-stack:toolkit.packages.gpgKey)"
  if [ "${key#/}" != "$key" ]; then
    key_file_ok "$key"
    cat "$ROOT$key"
    return 0
  fi
  timeout -k 10 "$GPU_STACK_TIMEOUT_DOWNLOAD" curl -fsSL "$key" ||
    die "downloading the toolkit repository's signing key ($key) failed or took longer than ${GPU_STACK_TIMEOUT_DOWNLOAD}s (GPU_STACK_TIMEOUT_DOWNLOAD)"
}

# NVIDIA's install guide: curl and gnupg (and CA certificates for https) before the repository.
prerequisites_apt() {
  local missing=()
  [ "${GPU_STACK_TOOLKIT_KEY#/}" != "$GPU_STACK_TOOLKIT_KEY" ] || command -v curl >/dev/null 2>&1 || missing+=(curl)
  command -v gpg >/dev/null 2>&1 || missing+=(gnupg)
  [ -s "$ROOT/etc/ssl/certs/ca-certificates.crt" ] || missing+=(ca-certificates)
  [ ${#missing[@]} -gt 0 ] || return 0
  log "installing prerequisites: ${missing[*]} (apt)"
  bounded GPU_STACK_TIMEOUT_REFRESH "refreshing package lists (apt-get update)" \
    env DEBIAN_FRONTEND=noninteractive apt-get update -q
  bounded GPU_STACK_TIMEOUT_INSTALL "installing prerequisites ${missing[*]} (apt-get install)" \
    env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

prerequisites_rpm() {
  local tool=$1 missing=()
  [ "${GPU_STACK_TOOLKIT_KEY#/}" != "$GPU_STACK_TOOLKIT_KEY" ] || command -v curl >/dev/null 2>&1 || missing+=(curl)
  [ -s "$ROOT/etc/pki/tls/certs/ca-bundle.crt" ] || missing+=(ca-certificates)
  [ ${#missing[@]} -gt 0 ] || return 0
  log "installing prerequisites: ${missing[*]} ($tool)"
  bounded GPU_STACK_TIMEOUT_INSTALL "installing prerequisites ${missing[*]} ($tool install)" \
    "$tool" install -y -q "${missing[@]}"
}

install_apt() {
  local pin=$1-1 pkgs=() p
  for p in "${TOOLKIT_PACKAGES[@]}"; do pkgs+=("$p=$pin"); done
  local url
  url=$(toolkit_repo_url apt)
  [ -n "$url" ] || die "this host installs packages with apt, and gpu-stack:toolkit.packages names no apt repository (aptUrl)"
  prerequisites_apt
  # The keyring is (re)written when missing or when the stack names another key (a mirror's).
  if [ ! -s "$ROOT$KEYRING" ] || [ "$(cat "$ROOT$KEYRING.source" 2>/dev/null)" != "$GPU_STACK_TOOLKIT_KEY" ]; then
    log "adding the package signing key ($GPU_STACK_TOOLKIT_KEY)"
    mkdir -p "$(dirname "$ROOT$KEYRING")"
    local key
    key=$(toolkit_key_text)
    printf '%s\n' "$key" | gpg --batch --yes --dearmor -o "$ROOT$KEYRING"
    printf '%s\n' "$GPU_STACK_TOOLKIT_KEY" >"$ROOT$KEYRING.source"
  fi
  local list=$ROOT/etc/apt/sources.list.d/nvidia-container-toolkit.list
  local want
  want=$(printf 'deb [signed-by=%s] %s /' "$KEYRING" "$url")
  if [ ! -f "$list" ] || [ "$(cat "$list")" != "$want" ]; then
    mkdir -p "$(dirname "$list")"
    printf '%s\n' "$want" >"$list"
  fi
  log "installing NVIDIA Container Toolkit $pin (apt)"
  bounded GPU_STACK_TIMEOUT_REFRESH "refreshing package lists (apt-get update)" \
    env DEBIAN_FRONTEND=noninteractive apt-get update -q
  bounded GPU_STACK_TIMEOUT_INSTALL "installing NVIDIA Container Toolkit $pin (apt-get install)" \
    env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    --allow-downgrades --allow-change-held-packages \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${pkgs[@]}"
  bounded GPU_STACK_TIMEOUT_INSTALL "holding the toolkit packages (apt-mark hold)" apt-mark hold "${TOOLKIT_PACKAGES[@]}"
}

# dnf (RHEL family, Amazon Linux 2023) or yum (Amazon Linux 2): the same repository file.
install_rpm() {
  local tool=$2 pin=$1-1 pkgs=() p
  for p in "${TOOLKIT_PACKAGES[@]}"; do pkgs+=("$p-$pin"); done
  local url key=$GPU_STACK_TOOLKIT_KEY
  url=$(toolkit_repo_url "$tool")
  [ -n "$url" ] || die "this host installs packages with $tool, and gpu-stack:toolkit.packages names no rpm repository (rpmUrl)"
  [ -n "$key" ] || die "no signing key for the toolkit's package repository (gpu-stack:toolkit.packages.gpgKey)"
  if [ "${key#/}" != "$key" ]; then
    key_file_ok "$key"
    key=file://$key
  fi
  prerequisites_rpm "$tool"
  local repo=$ROOT/etc/yum.repos.d/nvidia-container-toolkit.repo
  local want
  want=$(printf '%s\n' \
    '[nvidia-container-toolkit]' \
    'name=nvidia-container-toolkit' \
    "baseurl=$url" \
    'repo_gpgcheck=1' \
    'gpgcheck=0' \
    'enabled=1' \
    "gpgkey=$key" \
    'sslverify=1' \
    'sslcacert=/etc/pki/tls/certs/ca-bundle.crt')
  if [ ! -f "$repo" ] || [ "$(cat "$repo")" != "$want" ]; then
    mkdir -p "$(dirname "$repo")"
    printf '%s\n' "$want" >"$repo"
  fi
  log "installing NVIDIA Container Toolkit $pin ($tool)"
  local extra=()
  [ "$tool" = dnf ] && extra=(--allowerasing)
  bounded GPU_STACK_TIMEOUT_INSTALL "installing NVIDIA Container Toolkit $pin ($tool install)" \
    "$tool" install -y -q "${extra[@]}" "${pkgs[@]}"
}

toolkit() {
  local want=$GPU_STACK_TOOLKIT_VERSION have family
  have=$(toolkit_version)
  if [ "$have" = "$want" ]; then
    log "toolkit: NVIDIA Container Toolkit $want already installed; nothing to do"
    return 0
  fi
  if [ "$GPU_STACK_TOOLKIT_SOURCE" = preinstalled ]; then
    die "toolkit: gpu-stack:toolkit.packages.source is 'preinstalled', but this host has NVIDIA Container Toolkit ${have:-(none)}, not $want; nothing was installed"
  fi
  family=$(package_family)
  case $family in
    apt) install_apt "$want" ;;
    dnf | yum) install_rpm "$want" "$family" ;;
    *)
      die "unsupported OS '$(os_field ID)' (ID_LIKE '$(os_field ID_LIKE)') in $ROOT/etc/os-release: the toolkit can be installed with apt (Debian, Ubuntu), dnf (RHEL family, Amazon Linux 2023) or yum (Amazon Linux 2) only; install NVIDIA Container Toolkit $want by hand or set gpu-stack:toolkit.placement to 'operator'"
      ;;
  esac
  have=$(toolkit_version)
  [ "$have" = "$want" ] || die "toolkit: after installing, nvidia-ctk reports version '${have:-none}', expected $want"
  log "toolkit: NVIDIA Container Toolkit $want installed"
}

# --------------------------------------------------------------------------- runtime
checksum() {
  local f
  for f in "$@"; do
    if [ -f "$f" ]; then sha256sum <"$f" | cut -d' ' -f1; else echo absent; fi
  done
}

# The active one of a set of systemd units (server or agent flavour); the first if none is.
active_unit() {
  local unit
  for unit in "$@"; do
    if systemctl is-active --quiet "$unit" 2>/dev/null; then echo "$unit"; return 0; fi
  done
  echo "$1"
}

has_nvidia_runtime() {
  # v2 configs quote it "nvidia", containerd 2 (config version 3) templates 'nvidia'.
  [ -f "$1" ] && grep -Eq "runtimes\.[\"']?nvidia[\"']?\]" "$1"
}

# restart UNIT: restart it and wait (bounded) until systemd reports it active again.
restart() {
  local unit=$1
  bounded GPU_STACK_TIMEOUT_WAIT "restarting $unit (systemctl restart)" systemctl restart "$unit"
  bounded GPU_STACK_TIMEOUT_WAIT "waiting for $unit to be active again" \
    "$BASH" -c 'until systemctl is-active --quiet "$1"; do sleep 1; done' wait-active "$unit"
}

# The nvidia-container-runtime `root` for a driver the GPU Operator installs (NVIDIA's
# "pre-installed toolkit, no driver" setup); nothing when the driver is on the host.
# Written by this script, not by `nvidia-ctk config --set nvidia-container-cli.root=...`: v1.18.1
# writes that value commented out (`#root = "/run/nvidia/driver"`, because it equals the example
# it comments: internal/config/toml.go, commentDefaults), so the runtime would never read it.
# Runs after toolkit_config (whose nvidia-ctk save comments it out again).
driver_root() {
  [ "$GPU_STACK_DRIVER" = operator ] || return 0
  local config=$ROOT/etc/nvidia-container-runtime/config.toml want="root = \"$OPERATOR_DRIVER_ROOT\""
  if grep -Eq "^[[:space:]]*root[[:space:]]*=[[:space:]]*\"$OPERATOR_DRIVER_ROOT\"" "$config" 2>/dev/null; then
    log "runtime: the toolkit's driver root is already $OPERATOR_DRIVER_ROOT"
    return 0
  fi
  [ -f "$config" ] || nvidia-ctk config "--config-file=$config" --in-place >&2
  if grep -Eq '^[[:space:]]*#?[[:space:]]*root[[:space:]]*=' "$config" && grep -q '^\[nvidia-container-cli\]' "$config"; then
    # the (commented) root line of the [nvidia-container-cli] table
    sed -i "/^\[nvidia-container-cli\]/,/^\[/ s|^[[:space:]]*#\{0,1\}[[:space:]]*root[[:space:]]*=.*|$want|" "$config"
  fi
  if ! grep -Eq "^$want\$" "$config"; then
    if grep -q '^\[nvidia-container-cli\]' "$config"; then
      sed -i "/^\[nvidia-container-cli\]/a $want" "$config"
    else
      printf '\n[nvidia-container-cli]\n%s\n' "$want" >>"$config"
    fi
  fi
  log "runtime: the toolkit's driver root is now $OPERATOR_DRIVER_ROOT (the GPU Operator's driver)"
}

# Which containers the nvidia runtime hands GPUs to (docs/node-preparation.md, "Only pods that
# ask get a GPU"). accept-nvidia-visible-devices-envvar-when-unprivileged = false: an unprivileged
# container's NVIDIA_VISIBLE_DEVICES (every CUDA image sets it to `all`) selects nothing, in every
# runtime mode (internal/config/image/cuda_image.go, VisibleDevices); devices come from the device
# plugin's CDI annotations/devices or, without CDI, from its volume mounts, which
# accept-nvidia-visible-devices-as-volume-mounts = true makes the runtime read. The runtime reads
# this file at every container start: no restart.
toolkit_config() {
  local config=$ROOT/etc/nvidia-container-runtime/config.toml mounts=false sets=() pair key want have
  [ "$GPU_STACK_CDI" = true ] || [ "$GPU_STACK_ACCEPT_ENVVAR" = true ] || mounts=true
  for pair in "accept-nvidia-visible-devices-envvar-when-unprivileged=$GPU_STACK_ACCEPT_ENVVAR:true" \
    "accept-nvidia-visible-devices-as-volume-mounts=$mounts:false"; do
    key=${pair%%=*}; want=${pair#*=}; want=${want%:*}
    have=""
    [ -f "$config" ] && have=$(sed -n "s/^[[:space:]]*${key}[[:space:]]*=[[:space:]]*\([a-z]*\).*/\1/p" "$config" | head -n 1)
    [ -n "$have" ] || have=${pair##*:}  # absent or commented: the toolkit's default
    [ "$have" = "$want" ] || sets+=("--set=$key=$want")
  done
  if [ ${#sets[@]} -eq 0 ]; then
    log "runtime: the toolkit already gives GPUs to unprivileged containers only through the device plugin (accept-nvidia-visible-devices-envvar-when-unprivileged = $GPU_STACK_ACCEPT_ENVVAR)"
    return 0
  fi
  mkdir -p "$(dirname "$config")"
  nvidia-ctk config "--config-file=$config" --in-place "${sets[@]}" >&2
  log "runtime: toolkit config set: ${sets[*]#--set=}"
}

# Systemd-cgroup hosts with the driver on the host: the /dev/char links and the udev rule that
# keeps them (see DEV_CHAR_RULE). Without them systemd rewrites a running container's device
# rules at `systemctl daemon-reload` without the GPUs ("Failed to initialize NVML: Unknown
# Error"). The operator's validator makes the links too, for a host driver as well, at each of its
# starts; this step makes them before the operator runs, and the rule after a driver reload.
dev_char_links() {
  [ "$GPU_STACK_DRIVER" = host ] || return 0
  local cgroup rule=$ROOT$DEV_CHAR_RULE_FILE
  cgroup=$(cgroup_driver)
  if [ "$cgroup" != systemd ]; then
    log "runtime: cgroup driver $cgroup: no /dev/char links needed"
    return 0
  fi
  if [ "$(cat "$rule" 2>/dev/null)" != "$DEV_CHAR_RULE" ]; then
    mkdir -p "$(dirname "$rule")"
    printf '%s\n' "$DEV_CHAR_RULE" >"$rule"
    log "runtime: installed $DEV_CHAR_RULE_FILE (keeps the /dev/char links of the GPUs)"
  fi
  # existing links are kept (the tool warns and goes on); the modules are loaded only where
  # nvidia-uvm is not (see DEV_CHAR_FLAGS)
  local flags=("${DEV_CHAR_FLAGS[@]}")
  if grep -Eq '^[[:space:]]*[0-9]+[[:space:]]+nvidia-uvm$' "$ROOT/proc/devices" 2>/dev/null; then
    flags=("${DEV_CHAR_FLAGS_LOADED[@]}")
  fi
  nvidia-ctk system create-dev-char-symlinks "${flags[@]}" "--driver-root=${ROOT:-/}" \
    "--dev-char-path=$ROOT/dev/char" >&2
  log "runtime: cgroup driver systemd: /dev/char links of the NVIDIA devices in place"
}

# With CDI and the driver on the host: the CDI spec of the host's GPUs at /var/run/cdi/nvidia.yaml.
# The toolkit 1.18 packages generate and refresh it themselves (nvidia-cdi-refresh.path/.service,
# on install and on driver changes); generated here only when it is missing, e.g. where systemd
# did not run the unit. The device plugin writes its own spec for the devices it hands out.
cdi_spec() {
  [ "$GPU_STACK_CDI" = true ] && [ "$GPU_STACK_DRIVER" = host ] || return 0
  local spec=$ROOT/var/run/cdi/nvidia.yaml
  if [ -s "$spec" ]; then
    return 0
  fi
  mkdir -p "$(dirname "$spec")"
  bounded GPU_STACK_TIMEOUT_WAIT "generating the CDI spec $spec (nvidia-ctk cdi generate)" \
    nvidia-ctk cdi generate "--output=$spec"
  log "runtime: generated the CDI spec $spec"
}

# Arguments for `nvidia-ctk runtime configure` that follow the CDI choice: with CDI the runtime
# processes CDI devices itself (the operator's own toolkit does the same, nvidia not default);
# without, nvidia becomes the default runtime so pods get GPUs through NVIDIA_VISIBLE_DEVICES.
cdi_args() {
  if [ "$GPU_STACK_CDI" = true ]; then echo --cdi.enabled; else echo --set-as-default; fi
}

# containerd: which config source keeps a second run byte-identical (see the README):
#   v1 config (no `version`)          -> in place, no drop-in (v1 has no imports)
#   `version = 2` file, containerd 2+ -> file (a dump would be version 3: containerd stops)
#   otherwise (no file, v2 on 1.x,
#   v3 on 2.x)                        -> command: `containerd config dump` holds the complete CRI
#                                        section, which the drop-in must repeat (containerd before
#                                        2.1 replaces a plugin's whole section per file)
# Derived from the file's version and containerd's, which a run never changes.
containerd_args() {
  local config=$1 dropin=$2 cv version major
  cv=$(containerd_config_version "$config")
  version=$(runtime_version)
  major=${version%%.*}
  case $cv in
    none | 1)
      log "runtime: $config is a version 1 config (no drop-in support); configuring it in place"
      # `--drop-in-config` and an empty value as two words: the CLI (urfave/cli v3) reads
      # `--drop-in-config=` as a flag missing its value and takes the next argument instead.
      printf '%s\n' --runtime=containerd "--config=$config" --drop-in-config "" --config-source=file
      ;;
    2)
      if [ -n "$major" ] && [ "$major" -ge 2 ]; then
        log "runtime: $config is config version 2 under containerd $version; configuring from the file (RUNTIME_CONFIG_SOURCE=file)"
        printf '%s\n' --runtime=containerd "--config=$config" "--drop-in-config=$dropin" --config-source=file
      else
        printf '%s\n' --runtime=containerd "--config=$config" "--drop-in-config=$dropin" --config-source=command
      fi
      ;;
    *)
      printf '%s\n' --runtime=containerd "--config=$config" "--drop-in-config=$dropin" --config-source=command
      ;;
  esac
  cdi_args
}

# The runtime phase: the toolkit's and the runtime's config, then the /dev/char links (after the
# runtime config, which may be what says the cgroup driver is systemd).
runtime() {
  runtime_config
  dev_char_links
}

runtime_config() {
  [ -n "$GPU_STACK_RUNTIME" ] || die "runtime: GPU_STACK_RUNTIME is not set (containerd, docker, crio, k3s or rke2)"
  local config files=() args=() unit a
  toolkit_config
  driver_root
  cdi_spec
  case $GPU_STACK_RUNTIME in
    containerd)
      config=$ROOT/etc/containerd/config.toml
      local dropin=$ROOT/etc/containerd/conf.d/99-nvidia.toml
      files=("$config" "$dropin")
      while IFS= read -r a; do args+=("$a"); done < <(containerd_args "$config" "$dropin")
      unit=containerd
      ;;
    docker)
      config=$ROOT/etc/docker/daemon.json
      files=("$config")
      args=(--runtime=docker "--config=$config" "$(cdi_args)")
      unit=docker
      ;;
    crio)
      # cri-o processes CDI itself (on by default); nvidia-ctk ignores --cdi.enabled for it.
      config=$ROOT/etc/crio/conf.d/99-nvidia.toml
      files=("$config")
      args=(--runtime=crio "--config=$ROOT/etc/crio/crio.conf" "--drop-in-config=$config")
      [ "$GPU_STACK_CDI" = true ] || args+=(--set-as-default)
      unit=crio
      ;;
    k3s | rke2)
      # Their containerd config is generated at every start from their template (an edit to it is
      # lost at the next restart); at start they detect nvidia-container-runtime and add the
      # `nvidia` runtime themselves. So: restart once after the toolkit is installed, then check.
      config=$(rancher_config)
      [ -f "$config" ] || die "runtime: $config not found: start $GPU_STACK_RUNTIME on this node first (it writes its containerd config at start)"
      if has_nvidia_runtime "$config"; then
        log "runtime: $GPU_STACK_RUNTIME's containerd config already has the nvidia runtime; nothing to do"
        return 0
      fi
      if [ "$GPU_STACK_RUNTIME" = k3s ]; then
        unit=$(active_unit k3s-agent k3s)
      else
        unit=$(active_unit rke2-agent rke2-server)
      fi
      log "runtime: restarting $unit so that it detects the nvidia runtime"
      restart "$unit"
      bounded GPU_STACK_TIMEOUT_WAIT "waiting for $GPU_STACK_RUNTIME to write the nvidia runtime into $config" \
        "$BASH" -c 'until grep -Eq "runtimes\.[\"'"'"']?nvidia[\"'"'"']?\]" "$1"; do sleep 1; done' wait-nvidia "$config"
      log "runtime: $GPU_STACK_RUNTIME detected the nvidia runtime"
      return 0
      ;;
    *) die "runtime: unknown runtime '$GPU_STACK_RUNTIME' (containerd, docker, crio, k3s or rke2)" ;;
  esac

  local before after
  before=$(checksum "${files[@]}")
  nvidia-ctk runtime configure "${args[@]}" >&2
  after=$(checksum "${files[@]}")
  if [ "$before" = "$after" ]; then
    log "runtime: $GPU_STACK_RUNTIME config unchanged; no restart"
    return 0
  fi
  log "runtime: $GPU_STACK_RUNTIME config changed; restarting $unit"
  restart "$unit"
}

# --------------------------------------------------------------------------- main
case $GPU_STACK_NAME_MATCH in
  exact | words) ;;
  *) die "unknown GPU_STACK_NAME_MATCH '$GPU_STACK_NAME_MATCH' (exact, words)" ;;
esac
case $GPU_STACK_DRIVER in host | operator) ;; *) die "unknown GPU_STACK_DRIVER '$GPU_STACK_DRIVER' (host, operator)" ;; esac
case $GPU_STACK_CDI in true | false) ;; *) die "unknown GPU_STACK_CDI '$GPU_STACK_CDI' (true, false)" ;; esac
case $GPU_STACK_TOOLKIT_SOURCE in
  nvidia | mirror | preinstalled) ;;
  *) die "unknown GPU_STACK_TOOLKIT_SOURCE '$GPU_STACK_TOOLKIT_SOURCE' (nvidia, mirror, preinstalled)" ;;
esac
case $GPU_STACK_ACCEPT_ENVVAR in true | false) ;; *) die "unknown GPU_STACK_ACCEPT_ENVVAR '$GPU_STACK_ACCEPT_ENVVAR' (true, false)" ;; esac
for limit in GPU_STACK_TIMEOUT_INSTALL GPU_STACK_TIMEOUT_REFRESH GPU_STACK_TIMEOUT_DOWNLOAD GPU_STACK_TIMEOUT_WAIT; do
  [[ ${!limit} =~ ^[1-9][0-9]{0,5}$ ]] || die "$limit must be a number of seconds (1-999999), got '${!limit}'"
done
for phase in $GPU_STACK_PHASES; do
  case $phase in
    preflight | toolkit | runtime) ;;
    *) die "unknown phase '$phase' (preflight, toolkit, runtime)" ;;
  esac
done
for phase in $GPU_STACK_PHASES; do
  log "step: $phase"
  "$phase"
done
