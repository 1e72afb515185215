#!/usr/bin/env bash
# Stops what tests/kubevirt/run.sh LAB_STATE_DIR started (virt-api, virt-controller), by their pid files.
# The webhooks stay registered (failurePolicy Fail: KubeVirt objects are refused until run.sh again).
set -euo pipefail
KV="$(cd "$1" && pwd)/kubevirt"
for name in virt-api virt-controller; do
  f="$KV/$name.pid"
  [ -f "$f" ] || continue
  pid=$(cat "$f")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$pid" 2>/dev/null || true
    echo "kubevirt/stop: $name (pid $pid) stopped" >&2
  fi
  rm -f "$f"
done
