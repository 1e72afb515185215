#!/usr/bin/env bash
# Installs the host tools the lab's tests need, only when missing: qemu-img (Debian qemu-utils)
# and tmux.
# Checks that Go and Cargo are present (they come with the machine image).
set -euo pipefail

say() { echo "lab/ensure-tools: $*" >&2; }

# command -> Debian package, installed only when the command is missing
need=()
command -v qemu-img >/dev/null 2>&1 || need+=(qemu-utils)   # qemu-img: real VMDKs for vcsim's datastore
command -v tmux >/dev/null 2>&1 || need+=(tmux)              # the cockpit's terminal tests
if [ ${#need[@]} -gt 0 ]; then
  say "missing tools: installing ${need[*]} with apt-get (non-interactive)"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  command -v qemu-img >/dev/null 2>&1 || { say "qemu-img still missing after installing qemu-utils"; exit 1; }
  command -v tmux >/dev/null 2>&1 || { say "tmux still missing after installing tmux"; exit 1; }
  say "installed ${need[*]}"
fi

command -v go >/dev/null 2>&1 || { say "go is not installed (need Go >= 1.26)"; exit 1; }
command -v cargo >/dev/null 2>&1 || { say "cargo is not installed (needed to build the lab's S3 server, tests/s3)"; exit 1; }

gov=$(go env GOVERSION | sed 's/^go//')
case "$gov" in
  1.2[6-9]*|1.[3-9][0-9]*|[2-9].*) ;;
  *) say "Go $gov is too old: k8s.io/kubernetes v1.37 needs Go >= 1.26"; exit 1 ;;
esac
