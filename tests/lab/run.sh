#!/usr/bin/env bash
# Builds the lab if needed, then runs it in the foreground:
#   tests/lab/run.sh [--vms N] [--stop-on-stdin-eof]
# State directory: $LAB_STATE, default target/lab/state (relative to the repository root).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
"$ROOT/tests/lab/build.sh"
cd "$ROOT"
exec target/lab/bin/ferry-lab --state-dir "${LAB_STATE:-target/lab/state}" "$@"
