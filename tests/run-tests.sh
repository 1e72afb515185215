#!/usr/bin/env bash
# `make test`: build everything, start one lab for all suites, run every test against it, stop
# the lab, check that nothing we started survives, and print one summary line.
set -uo pipefail
cd "$(dirname "$0")/.."

STATE="$PWD/target/lab/test-state"
LOG_DIR="$PWD/target/test-logs"
export FERRY_TEST_LOG_DIR="$LOG_DIR"
mkdir -p "$LOG_DIR"
rm -f "$LOG_DIR/soak.txt"

echo "== building the workspace (a cold build takes several minutes on 2 cores)"
cargo build --workspace --bins --tests --benches || exit 1
# e2e_real_guest is `test = false` (controller/Cargo.toml): `cargo test --workspace` leaves it to
# its own step below, and this is its build.
REAL_GUEST_BIN=$(cargo test -p ferry-controller --test e2e_real_guest --no-run 2>&1 \
    | sed -n 's/.*Executable tests\/e2e_real_guest.rs (\(.*\))$/\1/p')
[[ -x "$REAL_GUEST_BIN" ]] || { echo "e2e_real_guest did not build"; exit 1; }
# Cargo names it relative to here; the lane runs it from the package's directory, as cargo does.
REAL_GUEST_BIN="$(realpath "$REAL_GUEST_BIN")"

echo "== the OCI image (target/image/ferry) from this build, for its proof tests; the Debian root"
echo "   file system is cached in ~/.cache/ferry/image (a cold one takes 2-5 minutes)"
image/build.sh --profile "${FERRY_IMAGE_PROFILE:-debug}" || exit 1

# The guest Job's program (ferry-controller convert-guest) runs virt-v2v-in-place; where the sim
# plays the node it runs on this machine. What it needs beyond Debian's virt-v2v package: nbdkit
# (its `-i disk` input; only recommended, not a dependency), guestfish (it writes the network
# cards' kept names into the guest) and a kernel in /boot (libguestfs' supermin builds its
# appliance from the host's). Installed here, not by tests/guests/build.sh:
# that script is the guests' cache key, and a tool is no part of their recipe.
V2V_NEED=()
command -v virt-v2v-in-place >/dev/null 2>&1 || V2V_NEED+=(virt-v2v)
command -v nbdkit >/dev/null 2>&1 || V2V_NEED+=(nbdkit)
command -v guestfish >/dev/null 2>&1 || V2V_NEED+=(guestfish)
compgen -G "/boot/vmlinuz-*" >/dev/null || V2V_NEED+=(linux-image-amd64)
if (( ${#V2V_NEED[@]} > 0 )); then
    echo "== installing ${V2V_NEED[*]} (Debian's, for the guest conversion Job)"
    SUDO=""; [[ "$(id -u)" == 0 ]] || SUDO="sudo"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${V2V_NEED[@]}" >/dev/null
    command -v virt-v2v-in-place >/dev/null 2>&1 || { echo "virt-v2v-in-place still missing"; exit 1; }
    command -v guestfish >/dev/null 2>&1 || { echo "guestfish still missing"; exit 1; }
fi
# The real guests e2e_real_guest migrates and boots: built once per machine (debootstrap from
# Debian's packages, a first boot under TCG), cached in ~/.cache/ferry/guests like the lab, and
# built here, before the suites' clock starts, one after another.
echo "== the lab's real guests (tests/guests/build.sh; cached, a cold build takes about 5 minutes)"
GUESTS_STARTED=$(date +%s)
for g in bios-virtio uefi-virtio bios-vmware; do
    tests/guests/build.sh "$g" >/dev/null || { echo "tests/guests/build.sh $g failed"; exit 1; }
done
echo "== guests ready in $(( $(date +%s) - GUESTS_STARTED )) s"
# The suites write disks, staged objects and volumes (GiBs at their peak): a full disk fails
# every later suite for a reason that is not theirs, so the free space is on record.
echo "== free space where the suites write: $(df -h --output=avail target | tail -1 | tr -d ' ')"

# With KubeVirt's own virt-api and virt-controller (--kubevirt): every VirtualMachine the
# suites create is admitted by KubeVirt's webhooks and run by its controller; ferry-sim plays
# the node only (and CDI). The sim's own suites, which test it playing KubeVirt whole, start a
# lab of their own without it.
echo "== starting the lab (with KubeVirt's virt-api and virt-controller) in $STATE"
rm -rf "$STATE"
mkdir -p "$STATE"
# The lab reads its stdin from this shell's fd 3: if this script dies in any way, the pipe
# closes and the lab stops itself.
exec 3> >(exec target/lab/bin/ferry-lab --state-dir "$STATE" --vms 240 --kubevirt --stop-on-stdin-eof \
    >"$STATE.stdout" 2>"$STATE.stderr")
LAB_STARTED=$(date +%s)
until grep -qx ready "$STATE.stdout" 2>/dev/null; do
    if (( $(date +%s) - LAB_STARTED > 300 )); then
        echo "the lab did not become ready in 300 s; its stderr:"; tail -50 "$STATE.stderr"; exit 1
    fi
    if [[ -f "$STATE/lab.json" ]] && ! kill -0 "$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["pid"])' "$STATE/lab.json")" 2>/dev/null; then
        echo "the lab exited; its stderr:"; tail -50 "$STATE.stderr"; exit 1
    fi
    sleep 0.5
done
echo "== lab ready in $(( $(date +%s) - LAB_STARTED )) s"

echo "== the lab's own Go tests (component table, readiness, start/stop order)"
(cd tests/lab && ../../target/lab/bin/ferry-lab.test -test.count=1 -test.v >"$LOG_DIR/go-test.log" 2>&1)
GO_STATUS=$?
grep -E '^(--- |ok|FAIL)' "$LOG_DIR/go-test.log"

export FERRY_LAB_STATE="$STATE"
# Two lanes against the one lab. The real guests' suite spends its quarter hour on one guest at
# a time (a TCG boot or a conversion takes one core at most, an initramfs that finds no disk
# takes none), so it runs beside every other suite, at the lowest CPU priority (nice 19: its
# test, sims, controllers, qemu and virt-v2v): the other suites get the cores whenever they want
# them, the guests what is left. Beside them at the default priority (28ebefe), two other
# suites failed for want of CPU. What is left can be little: on the project's CI runner one
# conversion took over 900 s while the others ran (250 s alone), so a guest's wait in the suite
# (GUEST_WORK_SECS) outlasts them, and so does the lane's limit. Its output goes to its own log,
# shown whole when it ends.
echo "== e2e_real_guest runs beside the other suites, niced (log in $LOG_DIR/real-guest.log)"
( cd controller && exec nice -n 19 timeout --signal=TERM --kill-after=30s \
    "${FERRY_REAL_GUEST_TIMEOUT:-50m}" "$REAL_GUEST_BIN" ) >"$LOG_DIR/real-guest.log" 2>&1 &
REAL_GUEST_PID=$!
# A hung test must fail the run with its name on screen, not eat CI's whole time budget.
timeout --signal=TERM --kill-after=30s "${FERRY_TEST_TIMEOUT:-50m}" \
    cargo test --workspace --no-fail-fast 2>&1 | tee "$LOG_DIR/cargo-test.log"
STATUS=${PIPESTATUS[0]}
wait "$REAL_GUEST_PID"
REAL_GUEST_STATUS=$?
echo "== e2e_real_guest (its own lane), exit $REAL_GUEST_STATUS:"
cat "$LOG_DIR/real-guest.log"
if [[ "$REAL_GUEST_STATUS" != 0 ]]; then STATUS=1; fi
echo "== free space after the suites: $(df -h --output=avail target | tail -1 | tr -d ' ')"

echo "== stopping the lab"
LAB_PID=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["pid"])' "$STATE/lab.json" 2>/dev/null || true)
exec 3>&-
if [[ -n "$LAB_PID" ]]; then
    for _ in $(seq 1 600); do kill -0 "$LAB_PID" 2>/dev/null || break; sleep 0.1; done
fi
LEFT=$(pgrep -f -- "$STATE" || true)
if [[ -n "$LEFT" ]]; then
    echo "processes survived the lab:"; ps -o pid,args -p $LEFT; STATUS=1
fi
# Labs that tests started for themselves (target/lab/runs/NAME-PID) stop when their test process
# exits (their stdin closes); give them the time a lab takes to stop, then nothing may be left.
RUNS="$PWD/target/lab/runs/"
for _ in $(seq 1 600); do pgrep -f -- "$RUNS" >/dev/null || break; sleep 0.1; done
LEFT=$(pgrep -f -- "$RUNS" || true)
if [[ -n "$LEFT" ]]; then
    echo "processes of the tests' own labs survived them:"; ps -o pid,args -p $LEFT; STATUS=1
fi

# The README's first command, as a newcomer runs it, with the cockpit replaced by a scripted
# check (assets/demo.sh, DEMO_HEADLESS): a lab of its own, started after the suites' lab stopped.
echo "== make demo, headless (log in $LOG_DIR/demo-check.log)"
DEMO_HEADLESS=1 DEMO_NO_BUILD=1 LAB_STATE="$PWD/target/lab/demo-check" DEMO_WORK="$PWD/target/demo-check" \
    DEMO_METRICS_ADDR= DEMO_HEALTH_ADDR= assets/demo.sh >"$LOG_DIR/demo-check.log" 2>&1
DEMO_STATUS=$?
if [[ "$DEMO_STATUS" == 0 ]]; then
    echo "demo check: ok ($(grep -E '^== demo check passed' "$LOG_DIR/demo-check.log"))"
else
    echo "demo check: FAILED (exit $DEMO_STATUS); the end of its log:"; tail -40 "$LOG_DIR/demo-check.log"
    STATUS=1
fi

PASSED=$(cat "$LOG_DIR/cargo-test.log" "$LOG_DIR/real-guest.log" | grep -Eo '^test result: .* ([0-9]+) passed' | grep -Eo '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
FAILED=$(cat "$LOG_DIR/cargo-test.log" "$LOG_DIR/real-guest.log" | grep -Eo '^test result: .* ([0-9]+) failed' | grep -Eo '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
GO_PASSED=$(grep -c '^--- PASS' "$LOG_DIR/go-test.log" || true)
GO_FAILED=$(grep -c '^--- FAIL' "$LOG_DIR/go-test.log" || true)
PASSED=$((PASSED + GO_PASSED)); FAILED=$((FAILED + GO_FAILED))
if [[ "$DEMO_STATUS" == 0 ]]; then PASSED=$((PASSED + 1)); else FAILED=$((FAILED + 1)); fi
if [[ "$GO_STATUS" != 0 && "$STATUS" == 0 ]]; then STATUS=$GO_STATUS; fi
# Where the minutes went: each suite's own clock (cargo's "finished in"), slowest first, so that a
# CI log says what to shorten. Counts, not timings, are what the tests assert.
echo
echo "== the slowest suites (seconds)"
awk '/^ *Running /{name=$0; sub(/^ *Running /,"",name); sub(/ \(.*$/,"",name); gsub(/ /,"_",name)} /^test result: /{for(i=1;i<=NF;i++) if($i=="in"){t=$(i+1); sub("s","",t); print t, name}}' \
    "$LOG_DIR/cargo-test.log" | sort -rn | head -12 | awk '{printf "%8.0f  %s\n", $1, $2}'
REAL_GUEST_SECS=$(grep -Eo 'finished in [0-9.]+s' "$LOG_DIR/real-guest.log" | grep -Eo '[0-9.]+' | tail -1)
printf "%8.0f  %s\n" "${REAL_GUEST_SECS:-0}" "e2e_real_guest (its own step)"
# The soak's own account of its time (set-up, wave, clean-up, phases, leader kills).
[[ -f "$LOG_DIR/soak.txt" ]] && { echo; cat "$LOG_DIR/soak.txt"; echo; }
echo
echo "$PASSED passed, $FAILED failed"
exit "$STATUS"
