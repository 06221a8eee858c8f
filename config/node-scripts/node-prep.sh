#!/usr/bin/env bash
# gpu-stack node preparation: one idempotent script, three phases.
#
#   preflight  read-only: the host driver works (nvidia-smi), the GPUs match the stack config,
#              and one machine-readable line on stdout:  GPU_STACK_PREFLIGHT {json}
#   toolkit    NVIDIA Container Toolkit pinned to GPU_STACK_TOOLKIT_VERSION from NVIDIA's package
#              repository (apt or dnf); nothing happens when that version is already installed
#   runtime    `nvidia-ctk runtime configure` for containerd, docker, k3s or rke2; the runtime is
#              restarted only when its config files really changed (checksums before and after)
#
# The stack renders this file per node: shell-quoted variable assignments are inserted right
# below the marker line further down. Run by hand (read-only): `make gpu-check`, or
#   GPU_STACK_PHASES=preflight bash config/node-scripts/node-prep.sh
# Everything but the report line goes to stderr.
# GPU_STACK_ROOT prefixes every host path; it exists for the tests and is empty on real hosts.
set -euo pipefail
export LC_ALL=C

# @gpu-stack-values@ (rendered values go below this line)

GPU_STACK_NODE=${GPU_STACK_NODE:-$(hostname 2>/dev/null || echo unknown)}
GPU_STACK_PHASES=${GPU_STACK_PHASES:-preflight}
GPU_STACK_CONFIG_KEY=${GPU_STACK_CONFIG_KEY:-}
GPU_STACK_EXPECT_MODEL=${GPU_STACK_EXPECT_MODEL:-}
GPU_STACK_EXPECT_NAMES=${GPU_STACK_EXPECT_NAMES:-}
GPU_STACK_NAME_MATCH=${GPU_STACK_NAME_MATCH:-words}
GPU_STACK_EXPECT_COUNT=${GPU_STACK_EXPECT_COUNT:-}
GPU_STACK_RUNTIME=${GPU_STACK_RUNTIME:-}
GPU_STACK_TOOLKIT_VERSION=${GPU_STACK_TOOLKIT_VERSION:-1.18.1}
GPU_STACK_ROOT=${GPU_STACK_ROOT:-}
ROOT=$GPU_STACK_ROOT

TOOLKIT_REPO=https://nvidia.github.io/libnvidia-container
TOOLKIT_PACKAGES=(nvidia-container-toolkit nvidia-container-toolkit-base libnvidia-container-tools libnvidia-container1)
KEYRING=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg

log() { printf 'gpu-stack[%s]: %s\n' "$GPU_STACK_NODE" "$*" >&2; }
die() { printf 'gpu-stack[%s]: ERROR: %s\n' "$GPU_STACK_NODE" "$*" >&2; exit 1; }

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

# apt, dnf, or nothing (unsupported).
package_family() {
  local id like word
  id=$(os_field ID)
  like=$(os_field ID_LIKE)
  for word in $id $like; do
    case $word in
      debian | ubuntu) echo apt; return 0 ;;
      rhel | centos | fedora | rocky | almalinux | ol | amzn) echo dnf; return 0 ;;
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
  printf '%s\n' "${found[@]}"
}

# --------------------------------------------------------------------------- preflight
preflight() {
  local where=${GPU_STACK_CONFIG_KEY:-the stack config}
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    die "nvidia-smi not found: the NVIDIA driver is not installed on this host, but the stack expects it there (gpu-stack:driver.placement = 'host'); install the driver, or let the GPU Operator install it (driver.placement 'operator')"
  fi
  local query rc=0
  query=$(nvidia-smi --query-gpu=name,driver_version,mig.mode.current --format=csv,noheader 2>&1) || rc=$?
  if [ "$rc" -ne 0 ]; then
    die "nvidia-smi failed (exit $rc): the NVIDIA driver is installed but not working: $(printf '%s' "$query" | head -n 1)"
  fi

  local names=() migs=() driver="" line name version mig
  while IFS= read -r line; do
    [ -n "$(trim "$line")" ] || continue
    IFS=, read -r name version mig <<<"$line"
    names+=("$(trim "$name")")
    migs+=("$(trim "${mig:-}")")
    driver=$(trim "${version:-}")
  done <<<"$query"
  local count=${#names[@]}
  if [ "$count" -eq 0 ]; then
    die "nvidia-smi lists no GPU: the driver is loaded but sees no device on this host"
  fi

  local mig_capable=false m
  for m in "${migs[@]}"; do
    case $m in Enabled | Disabled) mig_capable=true ;; esac
  done

  local problems=() i
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

  local toolkit os
  toolkit=$(toolkit_version)
  os="$(os_field ID) $(os_field VERSION_ID)"
  printf 'GPU_STACK_PREFLIGHT {"node":%s,"ok":%s,"driver":%s,"gpus":%s,"count":%s,"mig":%s,"migCapable":%s,"runtime":%s,"runtimeFound":%s,"runtimes":%s,"toolkit":%s,"os":%s,"problems":%s}\n' \
    "$(json_str "$GPU_STACK_NODE")" \
    "$([ ${#problems[@]} -eq 0 ] && echo true || echo false)" \
    "$(json_str "$driver")" \
    "$(json_list "${names[@]}")" \
    "$count" \
    "$(json_list "${migs[@]}")" \
    "$mig_capable" \
    "$(json_str "$GPU_STACK_RUNTIME")" \
    "$runtime_found" \
    "$(json_list "${found[@]}")" \
    "$( [ -n "$toolkit" ] && json_str "$toolkit" || echo null)" \
    "$(json_str "$(trim "$os")")" \
    "$(json_list "${problems[@]}")"

  if [ ${#problems[@]} -gt 0 ]; then
    local p
    for p in "${problems[@]}"; do log "preflight: $p"; done
    die "preflight failed: this host does not match $where (${#problems[@]} problem(s) above)"
  fi
  log "preflight ok: $count x ${names[0]}, driver $driver"
}

# --------------------------------------------------------------------------- toolkit
install_apt() {
  local pin=$1-1 pkgs=() p
  for p in "${TOOLKIT_PACKAGES[@]}"; do pkgs+=("$p=$pin"); done
  if [ ! -s "$ROOT$KEYRING" ]; then
    log "adding NVIDIA's package signing key"
    mkdir -p "$(dirname "$ROOT$KEYRING")"
    curl -fsSL "$TOOLKIT_REPO/gpgkey" | gpg --batch --yes --dearmor -o "$ROOT$KEYRING"
  fi
  local list=$ROOT/etc/apt/sources.list.d/nvidia-container-toolkit.list
  local want
  # shellcheck disable=SC2016 # $(ARCH) is apt's own variable, written literally
  want=$(printf 'deb [signed-by=%s] %s/stable/deb/$(ARCH) /' "$KEYRING" "$TOOLKIT_REPO")
  if [ ! -f "$list" ] || [ "$(cat "$list")" != "$want" ]; then
    mkdir -p "$(dirname "$list")"
    printf '%s\n' "$want" >"$list"
  fi
  log "installing NVIDIA Container Toolkit $pin (apt)"
  DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    --allow-downgrades --allow-change-held-packages \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${pkgs[@]}" >&2
  apt-mark hold "${TOOLKIT_PACKAGES[@]}" >&2
}

install_dnf() {
  local pin=$1-1 pkgs=() p
  for p in "${TOOLKIT_PACKAGES[@]}"; do pkgs+=("$p-$pin"); done
  local repo=$ROOT/etc/yum.repos.d/nvidia-container-toolkit.repo
  local want
  want=$(printf '%s\n' \
    '[nvidia-container-toolkit]' \
    'name=nvidia-container-toolkit' \
    "baseurl=$TOOLKIT_REPO/stable/rpm/\$basearch" \
    'repo_gpgcheck=1' \
    'gpgcheck=0' \
    'enabled=1' \
    "gpgkey=$TOOLKIT_REPO/gpgkey" \
    'sslverify=1' \
    'sslcacert=/etc/pki/tls/certs/ca-bundle.crt')
  if [ ! -f "$repo" ] || [ "$(cat "$repo")" != "$want" ]; then
    mkdir -p "$(dirname "$repo")"
    printf '%s\n' "$want" >"$repo"
  fi
  log "installing NVIDIA Container Toolkit $pin (dnf)"
  dnf install -y -q --allowerasing "${pkgs[@]}" >&2
}

toolkit() {
  local want=$GPU_STACK_TOOLKIT_VERSION have family
  have=$(toolkit_version)
  if [ "$have" = "$want" ]; then
    log "toolkit: NVIDIA Container Toolkit $want already installed; nothing to do"
    return 0
  fi
  family=$(package_family)
  case $family in
    apt) install_apt "$want" ;;
    dnf) install_dnf "$want" ;;
    *)
      die "unsupported OS '$(os_field ID)' (ID_LIKE '$(os_field ID_LIKE)') in $ROOT/etc/os-release: the toolkit can be installed with apt (Debian, Ubuntu) or dnf (RHEL family) only; install NVIDIA Container Toolkit $want by hand or set gpu-stack:toolkit.placement to 'operator'"
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

runtime() {
  [ -n "$GPU_STACK_RUNTIME" ] || die "runtime: GPU_STACK_RUNTIME is not set (containerd, docker, k3s or rke2)"
  local config files=() args=() unit
  case $GPU_STACK_RUNTIME in
    containerd)
      config=$ROOT/etc/containerd/config.toml
      local dropin=$ROOT/etc/containerd/conf.d/99-nvidia.toml
      files=("$config" "$dropin")
      args=(--runtime=containerd "--config=$config" "--drop-in-config=$dropin")
      if [ -f "$config" ]; then
        # containerd 2.x with a `version = 2` file: read the file, never `containerd config dump`,
        # or the drop-in comes out in a newer config version and containerd stops (RUNTIME_CONFIG_SOURCE=file).
        if grep -Eq '^[[:space:]]*version[[:space:]]*=[[:space:]]*2[[:space:]]*$' "$config"; then
          log "runtime: $config is config version 2; configuring from the file (RUNTIME_CONFIG_SOURCE=file)"
        fi
        args+=(--config-source=file)
      else
        args+=(--config-source=command)
      fi
      unit=containerd
      ;;
    docker)
      config=$ROOT/etc/docker/daemon.json
      files=("$config")
      args=(--runtime=docker "--config=$config")
      unit=docker
      ;;
    k3s | rke2)
      # Their containerd config is generated at start from their own template (never edited here);
      # the socket is /run/k3s/containerd/containerd.sock for both.
      config=$ROOT/var/lib/rancher/$GPU_STACK_RUNTIME/agent/etc/containerd/config.toml
      files=("$config")
      [ -f "$config" ] || die "runtime: $config not found: start $GPU_STACK_RUNTIME on this node first (it writes its containerd config at start)"
      if has_nvidia_runtime "$config"; then
        log "runtime: $GPU_STACK_RUNTIME's containerd config already has the nvidia runtime; nothing to do"
        return 0
      fi
      args=(--runtime=containerd "--config=$config" --drop-in-config= --config-source=file)
      if [ "$GPU_STACK_RUNTIME" = k3s ]; then
        unit=$(active_unit k3s-agent k3s)
      else
        unit=$(active_unit rke2-agent rke2-server)
      fi
      ;;
    *) die "runtime: unknown runtime '$GPU_STACK_RUNTIME' (containerd, docker, k3s or rke2)" ;;
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
  systemctl restart "$unit"
}

# --------------------------------------------------------------------------- main
case $GPU_STACK_NAME_MATCH in
  exact | words) ;;
  *) die "unknown GPU_STACK_NAME_MATCH '$GPU_STACK_NAME_MATCH' (exact, words)" ;;
esac
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
