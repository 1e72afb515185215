#!/usr/bin/env bash
# Waits until every CRD chosen by ARGS is Established, by polling the CRDs' conditions.
#
#   tests/lab/wait-established.sh KUBECTL... -- [CRD names | -l SELECTOR]   (nothing: every CRD)
#
# Not `kubectl wait --for=condition=Established`: it fails at once, rather than waiting, on a CRD
# whose status.conditions the apiserver has not written yet ("accessor error"), and its
# --timeout covers every CRD it waits on one after another (~0.1 s each on a loaded 2-core
# machine), so a short timeout fails although every CRD is established. Here the one deadline
# ($FERRY_WAIT_S seconds, default 120) is for the whole set, a CRD not created yet counts as not
# established, and on timeout the ones still pending are named.
set -euo pipefail

KUBECTL=()
while (($#)) && [[ "$1" != -- ]]; do KUBECTL+=("$1"); shift; done
[[ "${1:-}" == -- ]] && shift
if ((${#KUBECTL[@]} == 0)); then
    echo "usage: $0 KUBECTL [ARGS...] -- [CRD names | -l SELECTOR]" >&2
    exit 2
fi

deadline=$((SECONDS + ${FERRY_WAIT_S:-120}))
while :; do
    # kubectl prints a List for several objects or a selector, the object itself for one name;
    # a name not created yet is an error, and so "not yet".
    if json=$("${KUBECTL[@]}" get crd "$@" -o json 2>"${TMPDIR:-/tmp}/wait-established.$$"); then
        pending=$(python3 -c '
import json, sys
doc = json.load(sys.stdin)
items = doc.get("items", []) if doc.get("kind") == "List" else [doc]
for crd in items:
    conds = (crd.get("status") or {}).get("conditions") or []
    if not any(c.get("type") == "Established" and c.get("status") == "True" for c in conds):
        print(crd["metadata"]["name"])
if not items and len(sys.argv) > 1:
    print("(none matches yet)")
' "$@" <<<"$json")
    else
        pending="($(tail -1 "${TMPDIR:-/tmp}/wait-established.$$"))"
    fi
    rm -f "${TMPDIR:-/tmp}/wait-established.$$"
    [[ -z "$pending" ]] && exit 0
    if ((SECONDS >= deadline)); then
        echo "CRDs not Established after ${FERRY_WAIT_S:-120} s:" $pending >&2
        exit 1
    fi
    sleep 0.2
done
