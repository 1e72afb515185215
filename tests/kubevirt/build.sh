#!/usr/bin/env bash
# Builds KubeVirt's own virt-api and virt-controller (Go module kubevirt.io/kubevirt, see go.mod)
# into target/lab/bin, only when missing or stale:
#   target/lab/bin/ferry-kubevirt   one multi-call binary: `ferry-kubevirt virt-api ARGS`,
#                                   `ferry-kubevirt virt-controller ARGS`, `ferry-kubevirt manifests`
#   target/lab/bin/virt-api, target/lab/bin/virt-controller   hard links (it dispatches on argv[0])
# Built binaries are cached in ${FERRY_CACHE:-$HOME/.cache/ferry}/kubevirt/<key>/, key = sha256 of
# this module's go.mod, go.sum, *.go, this script and the Go version, so a fresh clone on the same
# machine links the cached binary instead of rebuilding. Run from anywhere.
set -euo pipefail

KV_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$KV_DIR/../.." && pwd)"
OUT="$ROOT/target/lab/bin"
CACHE_ROOT="${FERRY_CACHE:-$HOME/.cache/ferry}"
KUBEVIRT_VERSION="$(cd "$KV_DIR" && go list -m -f "{{.Version}}" kubevirt.io/kubevirt)"

say() { echo "kubevirt/build: $*" >&2; }

key_input() {
  (cd "$KV_DIR" && find . -maxdepth 1 -type f \( -name '*.go' -o -name go.mod -o -name go.sum -o -name build.sh \) |
     LC_ALL=C sort | xargs sha256sum)
  go env GOVERSION
}
KEY="$(key_input | sha256sum | cut -c1-16)"
CACHE="$CACHE_ROOT/kubevirt/$KEY"

up_to_date() {
  [ -x "$OUT/ferry-kubevirt" ] && [ -x "$OUT/virt-api" ] && [ -x "$OUT/virt-controller" ] &&
    [ "$(cat "$OUT/.kubevirt-key" 2>/dev/null)" = "$KEY" ]
}
if up_to_date; then
  say "target/lab/bin/ferry-kubevirt is up to date (key $KEY)"
  exit 0
fi

mkdir -p "$CACHE_ROOT/kubevirt" "$OUT"
exec 9>"$CACHE_ROOT/kubevirt/.build.lock"
if ! flock -n 9; then
  say "another build holds $CACHE_ROOT/kubevirt/.build.lock; waiting for it"
  flock 9
fi
if up_to_date; then say "target/lab/bin/ferry-kubevirt is up to date (key $KEY)"; exit 0; fi

if [ ! -x "$CACHE/ferry-kubevirt" ]; then
  total=$(cd "$KV_DIR" && CGO_ENABLED=0 go list -deps . 2>/dev/null | wc -l || true)
  say "building ferry-kubevirt: KubeVirt $KUBEVIRT_VERSION virt-api + virt-controller (Go, CGO_ENABLED=0)"
  say "  a cold build compiles ~${total:-1250} Go packages (roughly 10-20 minutes on 2 cores); the result is cached in $CACHE"
  tmp="$CACHE.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  log="$tmp/build.log"
  # As KubeVirt's hack/version.sh does (kubevirt::version::ldflags).
  v=kubevirt.io/client-go/version
  ldflags="-s -w -X $v.gitVersion=$KUBEVIRT_VERSION -X $v.gitTreeState=clean -X $v.buildDate=1970-01-01T00:00:00Z"
  start=$SECONDS
  (cd "$KV_DIR" && CGO_ENABLED=0 exec go build -buildvcs=false -v -ldflags "$ldflags" -o "$tmp/ferry-kubevirt" .) >"$log" 2>&1 &
  pid=$!
  ( while kill -0 "$pid" 2>/dev/null; do
      sleep 30 & wait $! || true
      kill -0 "$pid" 2>/dev/null || break
      n=$(grep -cv -e '^#' -e '^go: ' "$log" 2>/dev/null || true)
      say "  ... $((SECONDS - start))s elapsed, $n of ~$total packages compiled (cached ones are skipped)"
    done ) 9>&- &   # not holding the lock: a killed build must not leave it to its heartbeat
  hb=$!
  if ! wait "$pid"; then
    kill "$hb" 2>/dev/null || true
    say "go build failed; last lines of $log:"; grep -v '^[a-zA-Z0-9./_~-]*$' "$log" | tail -40 >&2; exit 1
  fi
  kill "$hb" 2>/dev/null || true
  rm -rf "$CACHE"; mv "$tmp" "$CACHE"
  say "ferry-kubevirt built in $((SECONDS - start))s ($(du -h "$CACHE/ferry-kubevirt" | cut -f1))"
fi

place() { rm -f "$2"; ln "$1" "$2" 2>/dev/null || cp "$1" "$2"; }
place "$CACHE/ferry-kubevirt" "$OUT/ferry-kubevirt"
place "$OUT/ferry-kubevirt" "$OUT/virt-api"
place "$OUT/ferry-kubevirt" "$OUT/virt-controller"
echo "$KEY" >"$OUT/.kubevirt-key"
say "target/lab/bin ready: ferry-kubevirt, virt-api, virt-controller (KubeVirt $KUBEVIRT_VERSION, key $KEY)"
