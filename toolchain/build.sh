#!/usr/bin/env bash
# Builds the end-to-end toolchain from published Go modules, at the pins in versions.env, into a
# cache folder keyed by version: $GPU_STACK_TOOLS (default ~/.cache/gpu-stack/tools)/<name>-<version>/.
# Each folder carries a stamp of its recipe (.recipe: a hash of its build function's text, the
# helpers it calls, the pins it reads, the flags and the Go version; see `recipe`): a component
# whose folder is complete with the same recipe is not built again, one whose recipe changed is
# rebuilt (a folder built before the stamps existed has none: rebuilt once). Usage:
# toolchain/build.sh [component...] (default: all); sourced, it defines its functions only. Every `go get` names its version (a bare package path would upgrade it). Each build runs in a throw-away wrapper module (no replace directives of the
# upstream go.mod apply to a dependency; the wrapper adds the few that matter). Build logs and
# timings go to $GPU_STACK_TOOLS/logs/.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
TOOLS="${GPU_STACK_TOOLS:-$HOME/.cache/gpu-stack/tools}"
# Upstream sources the Go module proxy does not serve (the command provider, the Python language
# host): the reference folder of `make reference` (sandbox/reference.py says where: one setting,
# $GPU_STACK_REFERENCE, for the tests, the harness and this script), each file checked by sha256.
REFERENCE="${GPU_STACK_REFERENCE:-$(cd "$here/.." && python3 -m sandbox.reference where)}"
export CGO_ENABLED="${CGO_ENABLED:-0}" GOFLAGS=-mod=mod GOTOOLCHAIN=local
LDS="-s -w"

info() { printf 'toolchain: %s\n' "$*" >&2; }

# have NAME-VERSION [RECIPE]: the component's folder is complete (written last, by rename) and,
# given RECIPE, was built by that recipe
have() { [ -f "$TOOLS/$1/.complete" ] && { [ -z "${2:-}" ] || [ "$(cat "$TOOLS/$1/.recipe" 2>/dev/null)" = "$2" ]; }; }

# Helpers a build function may call; their text is part of the recipe of each function calling them.
HELPERS=(wrapper reference_copy upstream_sums)
# What a component's result is made of besides its own function: pulumi-release links the CLI and
# the language host, so their recipes are part of its own.
declare -A DEPS=([pulumi-release]="pulumi language-python")

# recipe COMPONENT: a hash of what builds it: its build function's text (`declare -f`: comments
# and layout normalised away), the helpers it calls, the value of every versions.env pin it names,
# the flags shared by all builds, the Go version, and the recipes of what it is made of.
recipe() {
  local c="$1" text h v d
  text="$(declare -f "build_${c//-/_}")"
  for h in "${HELPERS[@]}"; do
    if grep -qw "$h" <<<"$text"; then text+=$'\n'"$(declare -f "$h")"; fi
  done
  for v in $(grep -oE '[A-Z][A-Z_]*_VERSION[A-Z_]*' <<<"$text" | sort -u); do text+=$'\n'"$v=${!v:-}"; done
  if grep -qw PULUMI_BUILD_FLAGS <<<"$text"; then text+=$'\n'"PULUMI_BUILD_FLAGS=${PULUMI_BUILD_FLAGS[*]}"; fi
  text+=$'\n'"LDS=$LDS CGO_ENABLED=$CGO_ENABLED GOFLAGS=$GOFLAGS go=$(go env GOVERSION 2>/dev/null || echo none)"
  for d in ${DEPS[$c]:-}; do text+=$'\n'"$d=$(recipe "$d")"; done
  printf '%s' "$text" | sha256sum | cut -c1-16
}

# build_in NAME-VERSION FUNCTION RECIPE: runs FUNCTION in a fresh wrapper dir with $out the bin
# dir, then publishes the result, stamped with RECIPE, atomically.
build_in() {
  local key="$1" fn="$2" rec="$3" work start lock
  # one build of a component at a time (a second invocation waits, then finds it built)
  exec {lock}>"$TOOLS/.$key.lock"
  flock "$lock"
  if have "$key" "$rec"; then info "$key: cached"; exec {lock}>&-; return 0; fi
  if have "$key"; then
    info "$key: its recipe changed (build.sh, a pin it reads or Go: $(cat "$TOOLS/$key/.recipe" 2>/dev/null || echo 'no stamp') -> $rec): rebuilding"
  fi
  work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-stack-build.XXXXXX")"
  out="$work/out"; mkdir -p "$out"
  start=$(date +%s)
  info "$key: building (log: $TOOLS/logs/$key.log)"
  # In the background for the same reason as the loop at the end (`set -e` stays on inside).
  ( cd "$work" && "$fn" ) >"$TOOLS/logs/$key.log" 2>&1 &
  if ! wait $!; then
    tail -30 "$TOOLS/logs/$key.log" >&2
    info "$key: FAILED"; rm -rf "$work"; exec {lock}>&-; return 1
  fi
  echo "$(( $(date +%s) - start ))" >"$out/.build-seconds"
  echo "$rec" >"$out/.recipe"
  touch "$out/.complete"
  rm -rf "${TOOLS:?}/$key"; mv "$out" "$TOOLS/$key"; rm -rf "$work"
  info "$key: built in $(cat "$TOOLS/$key/.build-seconds") s"
  exec {lock}>&-
}

wrapper() { go mod init "local/$1" >/dev/null 2>&1; }

build_pulumi() {
  # The CLI only; the Python language host is its own component (build_language_python).
  local v="v$PULUMI_VERSION" ver=github.com/pulumi/pulumi/sdk/v3/go/common/version.Version
  wrapper pulumi
  go mod edit -replace=github.com/atotto/clipboard=github.com/tgummerer/clipboard@v0.0.0-20241001131231-d02d263e614e
  go get "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi@$v" "github.com/pulumi/pulumi/sdk/v3@$v"
  go build "${PULUMI_BUILD_FLAGS[@]}" -ldflags "$LDS -X $ver=$v" -o "$out/" \
    github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
  "$out/pulumi" version
}

# The Go build flags the CLI and the language host share: one compile of pkg/v3 and sdk/v3 serves
# both (the build cache keys packages by flags and tags, not by -ldflags).
PULUMI_BUILD_FLAGS=(-trimpath -tags "osusergo,grpcnotrace")

# reference_copy DIR: a writable copy of $REFERENCE/DIR in the current folder.
reference_copy() {
  cp -r "$REFERENCE/$1" .; chmod -R u+w "$(basename "$REFERENCE/$1")"
}

# Components built from the reference sources, and what a clone without them installs instead:
# there they are skipped with that line (the harness takes them from PATH), except under CI=true.
declare -A FROM_REFERENCE=(
  [language-python]="pulumi-v$PULUMI_VERSION/sdk/python/cmd|put a released Pulumi CLI $PULUMI_VERSION on PATH (it bundles pulumi-language-python)"
  [pulumi-release]="pulumi-v$PULUMI_VERSION/sdk/python/cmd|put a released Pulumi CLI $PULUMI_VERSION on PATH (it bundles pulumi-language-python)"
  [command-provider]="pulumi-command-v$PULUMI_COMMAND_VERSION/provider|pulumi plugin install resource command $PULUMI_COMMAND_VERSION (the harness finds it there)"
)

build_language_python() {
  # pulumi-language-python and its exec shim from the reference copy of pulumi v3.259.0; the
  # module's two monorepo replaces point at the served modules of the CLI's own pin.
  local v="v$PULUMI_VERSION" ver=github.com/pulumi/pulumi/sdk/v3/go/common/version.Version
  reference_copy "pulumi-v$PULUMI_VERSION/sdk/python/cmd"
  cd cmd/pulumi-language-python
  go mod edit -replace="github.com/pulumi/pulumi/pkg/v3=github.com/pulumi/pulumi/pkg/v3@$v" \
    -replace="github.com/pulumi/pulumi/sdk/v3=github.com/pulumi/pulumi/sdk/v3@$v" \
    -require="github.com/pulumi/pulumi/pkg/v3@$v" -require="github.com/pulumi/pulumi/sdk/v3@$v"
  go build "${PULUMI_BUILD_FLAGS[@]}" -ldflags "$LDS -X $ver=$v" -o "$out/pulumi-language-python" .
  # the host runs the shim beside its own executable as `python3 <shim>` (no exec bit needed)
  install -m 0755 ../pulumi-language-python-exec "$out/"
  "$out/pulumi-language-python" -version | grep -qF "$PULUMI_VERSION"
}

build_pulumi_release() {
  # The released CLI's layout: pulumi with pulumi-language-python and its shim beside it, where
  # the CLI looks for a bundled language host (next to its own executable, links resolved).
  # Hard links where the cache folder allows them, else copies.
  local f cli="$TOOLS/pulumi-$PULUMI_VERSION" lang="$TOOLS/pulumi-language-python-$PULUMI_VERSION"
  have "pulumi-$PULUMI_VERSION" && have "pulumi-language-python-$PULUMI_VERSION" || {
    echo "build pulumi and language-python first" >&2; return 1; }
  for f in "$cli/pulumi" "$lang/pulumi-language-python" "$lang/pulumi-language-python-exec"; do
    ln "$f" "$out/" 2>/dev/null || cp -p "$f" "$out/"
  done
  "$out/pulumi" version
}

build_command_provider() {
  # pulumi-resource-command from the reference copy of pulumi-command v1.2.1's provider module
  # (no replace directives; every dependency comes from the module proxy), version stamped.
  local m=github.com/pulumi/pulumi-command/provider
  reference_copy "pulumi-command-v$PULUMI_COMMAND_VERSION/provider"
  cd provider
  go build -trimpath -ldflags "$LDS -X $m/pkg/version.Version=$PULUMI_COMMAND_VERSION" \
    -o "$out/pulumi-resource-command" ./cmd/pulumi-resource-command
  # (-trimpath leaves -ldflags out of the build info: the end-to-end tests ask the running plugin
  # for its version instead, tests/e2e/test_toolchain_versions.py)
}

build_kubernetes_provider() {
  local mod=github.com/pulumi/pulumi-kubernetes/provider/v4 dir
  wrapper pulumi-kubernetes
  go mod download -json "$mod@$PULUMI_KUBERNETES_PROVIDER_MODULE_VERSION" >/dev/null
  dir="$(go mod download -json "$mod@$PULUMI_KUBERNETES_PROVIDER_MODULE_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  # the main package embeds two generated, git-ignored files (upstream: go generate): make them
  # in a writable copy of the module, as generate.go does (schema with its version set; mapping)
  cp -r "$dir" provider; chmod -R u+w provider
  python3 - "$PULUMI_KUBERNETES_VERSION" <<'PY'
import json, sys
d = "provider/cmd/pulumi-resource-kubernetes/"
schema = json.load(open(d + "schema.json"))
schema["version"] = sys.argv[1]
json.dump(schema, open(d + "schema-embed.json", "w"))
json.dump(json.load(open(d + "terraform-mapping.json")), open(d + "terraform-mapping-embed.json", "w"))
PY
  go mod edit -replace="$mod=./provider"
  go get "$mod/cmd/pulumi-resource-kubernetes@$PULUMI_KUBERNETES_PROVIDER_MODULE_VERSION" \
    "github.com/pulumi/pulumi-kubernetes/sdk/v4@v$PULUMI_KUBERNETES_VERSION"
  go build -trimpath -ldflags "$LDS -X $mod/pkg/version.Version=$PULUMI_KUBERNETES_VERSION" \
    -o "$out/pulumi-resource-kubernetes" "$mod/cmd/pulumi-resource-kubernetes"
}

build_kubernetes() {
  local v="v$KUBERNETES_VERSION" minor gomod
  minor="$(echo "$KUBERNETES_VERSION" | cut -d. -f2)"
  wrapper k8s
  gomod="$(go mod download -json "k8s.io/kubernetes@$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  # every staging module k8s.io/kubernetes replaces with ./staging/... comes from its release tag
  go mod edit -json "$gomod" | python3 -c '
import json, sys
mod = json.load(sys.stdin)
for r in mod.get("Replace") or []:
    if r["New"]["Path"].startswith("./staging/"):
        print(r["Old"]["Path"])
' | while read -r m; do go mod edit -replace="$m=$m@v0.${KUBERNETES_VERSION#1.}"; done
  local godebug; godebug="$(sed -n 's/^godebug //p' "$gomod" | head -1)"
  [ -n "$godebug" ] && go mod edit -godebug="$godebug"
  go get "k8s.io/kubernetes/cmd/kube-apiserver@$v" "k8s.io/kubernetes/cmd/kube-controller-manager@$v" \
    "k8s.io/kubernetes/cmd/kube-scheduler@$v" "k8s.io/kubernetes/cmd/kubectl@$v"
  local p=k8s.io/component-base/version c=k8s.io/client-go/pkg/version
  local ldf="$LDS -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
  ldf="$ldf -X $p.buildDate=1970-01-01T00:00:00Z -X $c.gitVersion=$v -X $c.gitMajor=1 -X $c.gitMinor=$minor"
  go build -trimpath -ldflags "$ldf" -o "$out/" k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
  "$out/kube-apiserver" --version
}

build_etcd() {
  wrapper etcd
  go get "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"
  go build -trimpath -ldflags "$LDS" -o "$out/etcd" go.etcd.io/etcd/server/v3
  "$out/etcd" --version
}

build_kwok() {
  wrapper kwok
  go get "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwokctl@v$KWOK_VERSION"
  go build -trimpath -ldflags "$LDS -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=v$KUBERNETES_VERSION" \
    -o "$out/" sigs.k8s.io/kwok/cmd/kwok sigs.k8s.io/kwok/cmd/kwokctl
}

# kwok's own stage definitions (node initialize/heartbeat, pod ready/complete/delete), as its module
# ships them: the harness starts kwok with these plus its own, so it cannot use kwokctl's defaults.
build_kwok_stages() {
  wrapper kwok-stages
  local dir; dir="$(go mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  for s in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
    pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    install -m 0644 "$dir/kustomize/stage/$s.yaml" "$out/"
  done
}

# upstream_sums MODULE VERSION: the checksum database answers 404 for some of NVIDIA's modules
# at the pinned versions (and `go get` then fell back to the newest version): the module's own
# sum is taken from its download (the tag and commit are logged: Origin), and its go.sum becomes
# the wrapper's, so every dependency is checked against upstream's sums instead.
upstream_sums() {
  local dir
  export GONOSUMDB="${GONOSUMDB:+$GONOSUMDB,}$1"
  go mod download -json "$1@$2" | tee download.json
  dir="$(python3 -c 'import json; print(json.load(open("download.json"))["Dir"])')"
  cp "$dir/go.sum" go.sum; chmod u+w go.sum
}

build_nvidia_ctk() {
  # nvidia-ctk and nvidia-cdi-hook (node preparation, CDI); nvidia-container-runtime and its
  # legacy hook (which devices a container gets: tests/design/test_node_isolation.py).
  local m=github.com/NVIDIA/nvidia-container-toolkit v="v$NVIDIA_CONTAINER_TOOLKIT_VERSION" commit c cmds=()
  for c in nvidia-ctk nvidia-cdi-hook nvidia-container-runtime nvidia-container-runtime-hook; do cmds+=("$m/cmd/$c"); done
  wrapper nvidia-ctk
  upstream_sums "$m" "$v"
  commit="$(python3 -c 'import json; print(json.load(open("download.json"))["Origin"]["Hash"][:8])')"
  go get "${cmds[@]/%/@$v}"
  go list -m "$m" | grep -qx "$m $v"
  # go-nvml (linked by the cdi and system commands) is cgo only, as upstream builds it.
  CGO_ENABLED=1 go build -trimpath \
    -ldflags "$LDS -X $m/internal/info.version=${v#v} -X $m/internal/info.gitCommit=$commit" \
    -o "$out/" "${cmds[@]}"
  # the version label is an -X flag: check the module the binary was really built from
  go version -m "$out/nvidia-ctk" | grep -E "^[[:space:]]mod[[:space:]]${m}[[:space:]]${v}[[:space:]]"
  "$out/nvidia-ctk" --version
}

build_mig_parted() {
  local m=github.com/NVIDIA/mig-parted
  wrapper mig-parted
  go get "$m/cmd/nvidia-mig-parted@v$NVIDIA_MIG_PARTED_VERSION"
  CGO_ENABLED=1 go build -trimpath -ldflags "$LDS" -o "$out/" "$m/cmd/nvidia-mig-parted"
}

build_device_plugin() {
  local m=github.com/NVIDIA/k8s-device-plugin
  wrapper device-plugin
  upstream_sums "$m" "v$NVIDIA_DEVICE_PLUGIN_VERSION"
  go get "$m/cmd/nvidia-device-plugin@v$NVIDIA_DEVICE_PLUGIN_VERSION"
  CGO_ENABLED=1 go build -trimpath -ldflags "$LDS -X $m/internal/info.version=$NVIDIA_DEVICE_PLUGIN_VERSION" \
    -o "$out/" "$m/cmd/nvidia-device-plugin"
}

build_mps_control_daemon() {
  # the device plugin's MPS side (its own DaemonSet in the operator): same module, same version
  local m=github.com/NVIDIA/k8s-device-plugin
  wrapper mps-control-daemon
  upstream_sums "$m" "v$NVIDIA_DEVICE_PLUGIN_VERSION"
  go get "$m/cmd/mps-control-daemon@v$NVIDIA_DEVICE_PLUGIN_VERSION"
  CGO_ENABLED=1 go build -trimpath -ldflags "$LDS -X $m/internal/info.version=$NVIDIA_DEVICE_PLUGIN_VERSION" \
    -o "$out/" "$m/cmd/mps-control-daemon"
}

declare -A KEYS=(
  [pulumi]="pulumi-$PULUMI_VERSION"
  [language-python]="pulumi-language-python-$PULUMI_VERSION"
  [command-provider]="pulumi-command-$PULUMI_COMMAND_VERSION"
  [pulumi-release]="pulumi-release-$PULUMI_VERSION"
  [kubernetes-provider]="pulumi-kubernetes-$PULUMI_KUBERNETES_VERSION"
  [kubernetes]="kubernetes-$KUBERNETES_VERSION"
  [etcd]="etcd-$ETCD_VERSION"
  [kwok]="kwok-$KWOK_VERSION"
  [kwok-stages]="kwok-stages-$KWOK_VERSION"
  [nvidia-ctk]="nvidia-container-toolkit-$NVIDIA_CONTAINER_TOOLKIT_VERSION"
  [mig-parted]="nvidia-mig-parted-$NVIDIA_MIG_PARTED_VERSION"
  [device-plugin]="nvidia-device-plugin-$NVIDIA_DEVICE_PLUGIN_VERSION"
  [mps-control-daemon]="nvidia-mps-control-daemon-$NVIDIA_DEVICE_PLUGIN_VERSION"
)
ORDER=(nvidia-ctk mig-parted pulumi language-python pulumi-release command-provider kubernetes-provider etcd kwok kwok-stages kubernetes device-plugin mps-control-daemon)
main() {
  local c rec status=0
  [ $# -gt 0 ] && ORDER=("$@")
  mkdir -p "$TOOLS/logs"
  for c in "${ORDER[@]}"; do
    if [ -z "${KEYS[$c]:-}" ] || ! declare -F "build_${c//-/_}" >/dev/null; then
      info "$c: no such component (one of: ${!KEYS[*]})"; status=1; continue
    fi
    rec="$(recipe "$c")"
    if [ -n "${FROM_REFERENCE[$c]:-}" ] && ! have "${KEYS[$c]}" "$rec" && [ ! -d "$REFERENCE/${FROM_REFERENCE[$c]%%|*}" ]; then
      info "${KEYS[$c]}: not built, no source at $REFERENCE/${FROM_REFERENCE[$c]%%|*} (run \`make reference\`); or instead: ${FROM_REFERENCE[$c]#*|}"
      [ "${CI:-}" = true ] && status=1
      continue
    fi
    if [ -n "${FROM_REFERENCE[$c]:-}" ] && ! have "${KEYS[$c]}" "$rec" &&
      ! (cd "$here/.." && GPU_STACK_REFERENCE="$REFERENCE" python3 -m sandbox.reference check "${FROM_REFERENCE[$c]%%/*}"); then
      info "${KEYS[$c]}: not built: its source at $REFERENCE differs from toolchain/reference.sha256 (run \`make reference\`)"
      status=1
      continue
    fi
    # In the background, then waited for: a function called where its status is tested (`f || x`,
    # `if f`) runs with `set -e` off, down to every subshell (bash), so a failed step would go on.
    build_in "${KEYS[$c]}" "build_${c//-/_}" "$rec" &
    wait $! || status=1
  done
  return $status
}

# Sourced (tests: the recipe of each component), it stops here.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
