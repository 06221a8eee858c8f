#!/bin/sh
# runc for gpu-node-check's containers stage (/usr/local/sbin/runc, ahead of /usr/sbin/runc on
# PATH for containerd's shim and nvidia-container-runtime): keeps a copy of the OCI spec of every
# `create` (as runc gets it, after the nvidia runtime's changes) under
# /var/tmp/gpu-node-check/final-specs/<container id>.json, then runs /usr/sbin/runc unchanged.
dir=/var/tmp/gpu-node-check/final-specs
bundle="" prev="" id=""
for a in "$@"; do
  case $prev in --bundle | -b) bundle=$a ;; esac
  case $a in --bundle=*) bundle=${a#--bundle=} ;; esac
  prev=$a
done
[ $# -gt 0 ] && eval "id=\${$#}"
if [ -n "$bundle" ] && [ -f "$bundle/config.json" ] && [ -n "$id" ]; then
  mkdir -p "$dir" && cp "$bundle/config.json" "$dir/$id.json" 2>/dev/null
fi
exec /usr/sbin/runc "$@"
