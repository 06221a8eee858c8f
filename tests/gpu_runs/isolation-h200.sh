#!/usr/bin/env bash
# On a GPU host without Kubernetes: which GPUs the real nvidia-container-runtime v1.18.1 hands a
# container under the toolkit config the stack writes (docs/node-preparation.md, "Only pods that
# ask get a GPU"), with this host's real driver (its CDI spec generated here, jit-cdi from NVML),
# and the real /dev/char links. runc is a stand-in that records the final OCI spec instead of
# starting a container. Usage: BIN=<folder with nvidia-ctk, nvidia-container-runtime> bash $0
set -euo pipefail
BIN=$(cd "${BIN:-build/nvidia}" && pwd)
W=$(mktemp -d)
mkdir -p "$W/bin" "$W/cdi" "$W/bundle/rootfs"
echo "### host"; uname -sr; nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader
"$BIN/nvidia-ctk" --version | head -n 1
UUID=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -n 1)

cat >"$W/bin/runc" <<'EOF'
#!/bin/sh
b=.
while [ $# -gt 0 ]; do [ "$1" = --bundle ] && b=$2; shift; done
cp "$b/config.json" "$b/final.json"
EOF
chmod +x "$W/bin/runc"

echo "### nvidia-ctk cdi generate (what node-prep.sh creates with CDI and the host driver)"
if [ -n "${CDI_SPEC:-}" ]; then  # a dry run of this script on a machine without a GPU
  cp "$CDI_SPEC" "$W/cdi/nvidia.yaml"
else
  "$BIN/nvidia-ctk" cdi generate --output="$W/cdi/nvidia.yaml" 2>"$W/generate.log" || { tail -5 "$W/generate.log"; exit 1; }
fi
"$BIN/nvidia-ctk" cdi list --spec-dir="$W/cdi" 2>/dev/null || grep -E '^  - name:|^- name:' "$W/cdi/nvidia.yaml"

# config NAME SET...: a toolkit config as `nvidia-ctk config --set` writes it, plus where the stand-in is
config() {
  local name=$1
  shift
  "$BIN/nvidia-ctk" config --config-file="$W/$name.toml" --in-place "$@" \
    "--set=nvidia-container-runtime.runtimes=$W/bin/runc" "--set=nvidia-container-runtime.modes.cdi.spec-dirs=$W/cdi" \
    "--set=nvidia-container-runtime.debug=$W/$name.log" --set=nvidia-container-runtime.log-level=debug \
    "--set=nvidia-ctk.path=$BIN/nvidia-ctk" "--set=nvidia-container-runtime-hook.path=$BIN/nvidia-container-runtime-hook"
}
config open                                    # the toolkit's own defaults
config closed --set=accept-nvidia-visible-devices-envvar-when-unprivileged=false
config closed-nocdi --set=accept-nvidia-visible-devices-envvar-when-unprivileged=false \
  --set=accept-nvidia-visible-devices-as-volume-mounts=true

spec() { # spec KIND: the OCI spec of a CUDA-image container (NVIDIA_VISIBLE_DEVICES=all)
  local env='"PATH=/usr/bin:/bin","NVIDIA_VISIBLE_DEVICES=all"' extra="" caps=""
  case $1 in
    asked-cdi) extra=',"annotations":{"cdi.k8s.io/nvidia-device-plugin_0":"nvidia.com/gpu=0"}' ;;
    asked-mounts)
      env='"PATH=/usr/bin:/bin","NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices"'
      extra=',"mounts":[{"destination":"/var/run/nvidia-container-devices/'"$UUID"'","source":"/dev/null","type":"bind","options":["bind"]}]' ;;
    privileged) caps=',"capabilities":{"bounding":["CAP_SYS_ADMIN"]}' ;;
  esac
  printf '{"ociVersion":"1.0.2","root":{"path":"rootfs"},"linux":{},"process":{"args":["nvidia-smi"],"cwd":"/","env":[%s]%s}%s}\n' "$env" "$caps" "$extra"
}

run() { # run CONFIG MODE POD
  local cfg=$W/$1.toml
  sed -i "s|^mode = .*|mode = \"$2\"|" "$cfg"
  spec "$3" >"$W/bundle/config.json"
  rm -f "$W/bundle/final.json"
  local rc=0
  NVIDIA_CTK_CONFIG_FILE_PATH=$cfg PATH="$W/bin:/usr/bin:/bin" "$BIN/nvidia-container-runtime" create --bundle "$W/bundle" c1 >"$W/out" 2>&1 || rc=$?
  local gpus="" devices=0 requested
  if [ -f "$W/bundle/final.json" ]; then
    gpus=$( { grep -o '"path":"/dev/nvidia[0-9][0-9]*"' "$W/bundle/final.json" || true; } | sort -u | sed 's/"path":"//; s/"//' | tr '\n' ' ')
    devices=$( { grep -o '"path":"/dev/[^"]*"' "$W/bundle/final.json" || true; } | sort -u | wc -l)
  fi
  requested=$( { grep -o 'Creating CDI modifier for devices: \[[^]]*\]\|No devices requested' "$W/$1.log" || true; } | tail -n 1)
  printf '%-12s %-5s %-13s rc=%s requested: %-55s GPU device nodes: %s(%s device nodes in all)\n' \
    "$1" "$2" "$3" "$rc" "${requested:-?}" "${gpus:-none }" "$devices"
  [ "$rc" -eq 0 ] || tail -n 2 "$W/out"
}

echo "### which GPUs each container gets (config, mode: auto = jit-cdi on NVML hosts, cdi = the operator's)"
for mode in auto cdi; do
  for pod in none privileged asked-cdi; do run open "$mode" "$pod"; done
  for pod in none privileged asked-cdi; do run closed "$mode" "$pod"; done
  for pod in none privileged asked-mounts; do run closed-nocdi "$mode" "$pod"; done
done

echo "### /dev/char links (nvidia-ctk system create-dev-char-symlinks --create-all), twice"
links() { { ls -l "$W/devchar" 2>/dev/null || true; } | awk 'NR>1 {print $9, $10, $11}'; }
"$BIN/nvidia-ctk" system create-dev-char-symlinks --create-all --dev-char-path="$W/devchar" 2>&1 | tail -n 3 || true
first=$(links)
"$BIN/nvidia-ctk" system create-dev-char-symlinks --create-all --dev-char-path="$W/devchar" >/dev/null 2>&1 || true
second=$(links)
printf '%s\n' "$first"
[ "$first" = "$second" ] && echo "second run: links unchanged" || echo "second run: links CHANGED"
