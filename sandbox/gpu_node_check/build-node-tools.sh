#!/usr/bin/env bash
# shellcheck disable=SC2154  # $out: set by build_in (toolchain/build.sh), the folder a build writes to
# The two node-side Kubernetes binaries `make gpu-node-check` carries beside the toolchain and that
# `make e2e-tools` does not build (the simulated clusters need neither): the kubelet at the
# toolchain's KUBERNETES_VERSION and crictl (cri-tools) of the same minor, into the same
# version-keyed cache ($GPU_STACK_TOOLS/kubelet-<v>/, cri-tools-<v>/), with toolchain/build.sh's
# own helpers (build_in: recipe stamp, lock, log under $GPU_STACK_TOOLS/logs). Built only when
# missing; about 10 minutes cold on 2 cores for the kubelet (it shares the module cache of the
# toolchain's kubernetes build), 2 for crictl.
#   bash sandbox/gpu_node_check/build-node-tools.sh [kubelet] [crictl]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../../toolchain/build.sh
. "$here/../../toolchain/build.sh"

# cri-tools is versioned with Kubernetes' minor (v1.34.0 for Kubernetes 1.34).
CRI_TOOLS_VERSION="${CRI_TOOLS_VERSION:-1.$(echo "$KUBERNETES_VERSION" | cut -d. -f2).0}"

build_kubelet() {
  # As build_kubernetes: k8s.io/kubernetes replaces its staging modules with ./staging/..., which
  # a module build cannot follow; each comes from its release tag instead.
  local v="v$KUBERNETES_VERSION" minor gomod p ldf
  minor="$(echo "$KUBERNETES_VERSION" | cut -d. -f2)"
  wrapper kubelet
  gomod="$(go mod download -json "k8s.io/kubernetes@$v" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')"
  go mod edit -json "$gomod" | python3 -c '
import json, sys
for r in json.load(sys.stdin).get("Replace") or []:
    if r["New"]["Path"].startswith("./staging/"):
        print(r["Old"]["Path"])
' | while read -r m; do go mod edit -replace="$m=$m@v0.${KUBERNETES_VERSION#1.}"; done
  local godebug; godebug="$(sed -n 's/^godebug //p' "$gomod" | head -1)"
  [ -n "$godebug" ] && go mod edit -godebug="$godebug"
  go get "k8s.io/kubernetes/cmd/kubelet@$v"
  p=k8s.io/component-base/version
  ldf="$LDS -X $p.gitVersion=$v -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean -X $p.buildDate=1970-01-01T00:00:00Z"
  go build -trimpath -ldflags "$ldf" -o "$out/" k8s.io/kubernetes/cmd/kubelet
  "$out/kubelet" --version
}

build_crictl() {
  local m=sigs.k8s.io/cri-tools
  wrapper crictl
  go get "$m/cmd/crictl@v$CRI_TOOLS_VERSION"
  go build -trimpath -ldflags "$LDS -X $m/pkg/version.Version=$CRI_TOOLS_VERSION" -o "$out/" "$m/cmd/crictl"
  "$out/crictl" --version
}

[ $# -gt 0 ] || set -- kubelet crictl
mkdir -p "$TOOLS/logs"
for c in "$@"; do
  case $c in
    kubelet) build_in "kubelet-$KUBERNETES_VERSION" build_kubelet "$(recipe kubelet)" ;;
    crictl) build_in "cri-tools-$CRI_TOOLS_VERSION" build_crictl "$(recipe crictl)" ;;
    *) info "$c: no such node tool (kubelet, crictl)"; exit 1 ;;
  esac
done
