#!/usr/bin/env bash
# Builds the lab binaries into target/lab/bin, only when missing or stale:
#   target/lab/bin/ferry-lab   the lab (etcd + kube-apiserver + kube-controller-manager + vcsim, Go)
#   target/lab/bin/kubectl     hard link to ferry-lab (it dispatches on argv[0])
#   target/lab/bin/ferry-lab-s3  the S3 server (Rust, tests/s3 of this workspace, release build)
#   target/lab/bin/ferry-lab.test  the lab's own Go tests, compiled (run by `make test`)
#   target/lab/bin/ferry-kubevirt  KubeVirt's virt-api and virt-controller (`ferry-lab --kubevirt`),
#                                  by tests/kubevirt/build.sh: its own key and cache (.../kubevirt/<key>/)
# Built binaries are cached in ${FERRY_CACHE:-$HOME/.cache/ferry}/lab/<key>/, key = sha256 of the
# lab's sources (go.mod, go.sum, *.go, crds/*.yaml, this script) and the Go version, so a fresh
# clone on the same machine links the cached binaries instead of rebuilding. ferry-lab-s3 is cached
# apart, in .../lab-s3/<key>/, key = sha256 of tests/s3, the workspace's Cargo.toml and Cargo.lock
# and the Rust version (its cargo target directory is kept beside it, so a rebuild is incremental).
# Run from anywhere; paths are relative to the repository root.
set -euo pipefail

LAB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$LAB_DIR/../.." && pwd)"
OUT="$ROOT/target/lab/bin"
CACHE_ROOT="${FERRY_CACHE:-$HOME/.cache/ferry}"
K8S_VERSION=v1.37.2

say() { echo "lab/build: $*" >&2; }

"$LAB_DIR/ensure-tools.sh"

# ---- cache key ----------------------------------------------------------------------------
key_input() {
  (cd "$LAB_DIR" && find . -maxdepth 2 -type f \( -name '*.go' -o -name go.mod -o -name go.sum \
      -o -path './crds/*.yaml' -o -name build.sh \) -not -path './state*' | LC_ALL=C sort | xargs sha256sum)
  go env GOVERSION
}
s3_key_input() {
  (cd "$ROOT" && find tests/s3 -type f \( -name '*.rs' -o -name Cargo.toml \) | LC_ALL=C sort | xargs sha256sum &&
     sha256sum Cargo.toml Cargo.lock)
  rustc -V
}
S3_KEY="$(s3_key_input | sha256sum | cut -c1-16)"
S3_CACHE="$CACHE_ROOT/lab-s3/$S3_KEY"
KEY="$(key_input | sha256sum | cut -c1-16)"
CACHE="$CACHE_ROOT/lab/$KEY"

up_to_date() {
  [ -x "$OUT/ferry-lab" ] && [ -x "$OUT/kubectl" ] && [ -x "$OUT/ferry-lab-s3" ] && [ -x "$OUT/ferry-lab.test" ] &&
    [ "$(cat "$OUT/.key" 2>/dev/null)" = "$KEY $S3_KEY" ]
}
# KubeVirt's components have their own script, cache key, cache and lock; run last, without
# the lab's lock.
done_then_kubevirt() {
  exec 9>&-
  exec "$ROOT/tests/kubevirt/build.sh"
}

if up_to_date; then
  say "target/lab/bin is up to date (key $KEY)"
  done_then_kubevirt
fi

mkdir -p "$CACHE_ROOT/lab" "$OUT"
# One build at a time per cache (make test and a harness may both ask).
exec 9>"$CACHE_ROOT/lab/.build.lock"
if ! flock -n 9; then
  say "another lab build holds $CACHE_ROOT/lab/.build.lock; waiting for it"
  flock 9
fi
if up_to_date; then say "target/lab/bin is up to date (key $KEY)"; done_then_kubevirt; fi

# Prints a heartbeat every 30 s while the given pid runs: elapsed time and, when $1 is a log of
# `go build -v`, the number of packages compiled so far.
heartbeat() {
  local pid=$1 log=$2 total=$3 what=$4 start=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    sleep 30 &
    wait $! || true
    kill -0 "$pid" 2>/dev/null || break
    local n
    n=$(grep -cv -e '^#' -e '^go: ' "$log" 2>/dev/null || true)
    if [ -n "$total" ]; then
      say "  ... $what: $((SECONDS - start))s elapsed, $n of ~$total packages compiled (cached ones are skipped)"
    else
      say "  ... $what: $((SECONDS - start))s elapsed, $(tail -1 "$log" 2>/dev/null | cut -c1-100)"
    fi
  done
}

# ---- ferry-lab-s3 -------------------------------------------------------------------------
if [ ! -x "$S3_CACHE/ferry-lab-s3" ]; then
  say "building ferry-lab-s3 (tests/s3, cargo build --release --locked): roughly 2-5 minutes the first time"
  mkdir -p "$CACHE_ROOT/lab-s3"
  log="$CACHE_ROOT/lab-s3/build.log"
  cargo build --release --locked -p ferry-lab-s3 --manifest-path "$ROOT/Cargo.toml" \
    --target-dir "$CACHE_ROOT/lab-s3/target" >"$log" 2>&1 &
  pid=$!
  heartbeat "$pid" "$log" "" "ferry-lab-s3" &
  hb=$!
  if ! wait "$pid"; then
    kill "$hb" 2>/dev/null || true
    say "cargo build of ferry-lab-s3 failed; last lines of $log:"; tail -30 "$log" >&2; exit 1
  fi
  kill "$hb" 2>/dev/null || true
  rm -rf "$S3_CACHE.tmp"; mkdir -p "$S3_CACHE.tmp"
  cp "$CACHE_ROOT/lab-s3/target/release/ferry-lab-s3" "$S3_CACHE.tmp/"
  rm -rf "$S3_CACHE"; mv "$S3_CACHE.tmp" "$S3_CACHE"
  say "ferry-lab-s3 built"
fi

# ---- ferry-lab ------------------------------------------------------------------------------
if [ ! -x "$CACHE/ferry-lab" ] || [ ! -x "$CACHE/ferry-lab.test" ]; then
  total=$(cd "$LAB_DIR" && go list -deps . 2>/dev/null | wc -l || true)
  say "building ferry-lab: kube-apiserver + kube-controller-manager + kubectl $K8S_VERSION, etcd 3.7, vcsim (Go, CGO_ENABLED=0)"
  say "  a cold build compiles ~${total:-2800} Go packages and takes roughly 15-30 minutes on 2 cores (20 min measured on a busy machine);"
  say "  with a warm Go build cache ($(go env GOCACHE)) it takes 1-3 minutes; the result is cached in $CACHE"
  tmp="$CACHE.tmp.$$"
  rm -rf "$tmp"; mkdir -p "$tmp"
  log="$tmp/build.log"
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags="$ldflags -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=37 -X $pkg.gitTreeState=clean"
  done
  start=$SECONDS
  (cd "$LAB_DIR" && CGO_ENABLED=0 exec go build -buildvcs=false -v -ldflags "$ldflags" -o "$tmp/ferry-lab" .) >"$log" 2>&1 &
  pid=$!
  heartbeat "$pid" "$log" "$total" "ferry-lab" &
  hb=$!
  if ! wait "$pid"; then
    kill "$hb" 2>/dev/null || true
    say "go build failed; last lines of $log:"; grep -v '^[a-z0-9./_-]*$' "$log" | tail -40 >&2; exit 1
  fi
  kill "$hb" 2>/dev/null || true
  # The lab's own Go tests, compiled now while the build cache is warm: `make test` runs this
  # binary, so a machine with the lab cached but a cold Go cache never compiles Kubernetes again.
  if ! (cd "$LAB_DIR" && CGO_ENABLED=0 go test -buildvcs=false -c -o "$tmp/ferry-lab.test" .) >>"$log" 2>&1; then
    say "go test -c failed; last lines of $log:"; tail -40 "$log" >&2; exit 1
  fi
  rm -rf "$CACHE"; mv "$tmp" "$CACHE"
  say "ferry-lab built in $((SECONDS - start))s ($(du -h "$CACHE/ferry-lab" | cut -f1))"
fi

# ---- install into target/lab/bin (hard links when on the same filesystem) -------------------
place() { rm -f "$2"; ln "$1" "$2" 2>/dev/null || cp "$1" "$2"; }
place "$CACHE/ferry-lab" "$OUT/ferry-lab"
place "$OUT/ferry-lab" "$OUT/kubectl"
place "$S3_CACHE/ferry-lab-s3" "$OUT/ferry-lab-s3"
rm -f "$OUT/s3s-fs"
place "$CACHE/ferry-lab.test" "$OUT/ferry-lab.test"
echo "$KEY $S3_KEY" >"$OUT/.key"
say "target/lab/bin ready: ferry-lab, kubectl, ferry-lab-s3, ferry-lab.test (key $KEY)"
done_then_kubevirt
