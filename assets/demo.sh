#!/usr/bin/env bash
# `make demo`: the lab, the controller, ferry-sim and the cockpit on a sample wave.
#
# Starts a lab in target/lab/demo (or $LAB_STATE), puts real VMDKs behind a few dozen vcsim VMs,
# applies the CRDs, Secrets filled from the lab's lab.json and a MigrationWave, starts the
# controller and the sim in the background (logs in target/demo/), injects two failures through
# the sim's fault annotation (an import that fails at 40 %, a conversion that fails), lifts each
# fault once its migration has failed (so that `r` retries it for real and it then succeeds), and
# runs the cockpit in the foreground with a first screen that says which keys to try. Quitting
# the cockpit (q) stops everything the demo started, and the demo fails if any of it outlives
# its stop by more than $DEMO_STOP_S seconds.
#
# DEMO_HEADLESS=1 (`make demo-check`, run by `make test`): the same demo with the cockpit
# replaced by a scripted check of what a person would see and do: both injected failures fail,
# `ferry retry` of each succeeds, the wave ends Succeeded, and the stop leaves no process.
set -euo pipefail
cd "$(dirname "$0")/.."

STATE="${LAB_STATE:-$PWD/target/lab/demo}"
WORK="${DEMO_WORK:-$PWD/target/demo}"
NS="${DEMO_NAMESPACE:-demo}"
VMS="${DEMO_VMS:-30}"
DISK_MIB="${DEMO_DISK_MIB:-24}"
# The sim imports at this rate so that a person can watch progress move (CDI on real storage
# is slower still); the tests run it far faster.
IMPORT_MIB_S="${DEMO_IMPORT_MIB_S:-6}"
HEADLESS="${DEMO_HEADLESS:-}"
# How long the controller, the sim and the lab may take to stop (SIGTERM, then stdin's end).
STOP_S="${DEMO_STOP_S:-30}"
# How long the headless check waits for the wave to end.
CHECK_S="${DEMO_CHECK_S:-900}"
KUBECTL="$PWD/target/lab/bin/kubectl"
BIN="$PWD/target/debug"

mkdir -p "$WORK"
PIDS=()
# Stops what the demo started: SIGTERM to the controller, the sim and the fault lifter, the end
# of the lab's stdin; each must be gone within STOP_S, else it is named, killed, and the demo
# fails (a stop that needs SIGKILL is a bug, not a detail).
cleanup() {
    local status=$? left=() pid
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    exec 3>&-
    local deadline=$((SECONDS + STOP_S))
    while ((SECONDS < deadline)); do
        left=()
        for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && left+=("$pid"); done
        # The lab's processes name its state directory in their arguments (a shell that only
        # set LAB_STATE for this script is not one of them).
        mapfile -t -O "${#left[@]}" left < <(pgrep -f -- "--state-dir $STATE|$STATE/" || true)
        ((${#left[@]} == 0)) && break
        sleep 0.2
    done
    if ((${#left[@]} > 0)); then
        echo "== still running ${STOP_S} s after the stop (killed now):" >&2
        ps -o pid,args -p "${left[@]}" >&2 || true
        kill -KILL "${left[@]}" 2>/dev/null || true
        status=1
    fi
    wait 2>/dev/null || true
    [[ -n "$HEADLESS" ]] && echo "== demo stopped: $( ((status == 0)) && echo "nothing left running" || echo "exit $status")"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# DEMO_NO_BUILD=1: the binaries in target/debug are this checkout's already (make test builds
# them with its tests first; a build of the binaries alone would compile them once more, with
# other features).
if [[ -z "${DEMO_NO_BUILD:-}" ]]; then
    echo "== building ferry (a cold build takes several minutes on 2 cores)"
    cargo build --workspace --bins
fi

echo "== starting the lab in $STATE"
# The lab stops when its stdin (this shell's fd 3) closes: nothing else the demo starts may hold
# it open (each gets 3>&-). Each demo starts from a clean cluster, so the wave runs again from
# the beginning.
rm -rf "$STATE"
mkdir -p "$STATE"
rm -f "$STATE.stdout"
exec 3> >(exec target/lab/bin/ferry-lab --state-dir "$STATE" --vms "$((VMS + 8))" --stop-on-stdin-eof \
    >"$STATE.stdout" 2>"$WORK/lab.log")
until grep -qx ready "$STATE.stdout" 2>/dev/null; do sleep 0.5; done
K=(--kubeconfig "$STATE/kubeconfig")
lab() { python3 -c "import json,sys; d=json.load(open('$STATE/lab.json')); print(eval(sys.argv[1]))" "$1"; }

echo "== real disks behind $VMS vcsim VMs (${DISK_MIB} MiB each, qemu-img)"
mapfile -t NAMES < <(python3 - "$STATE/inventory.json" "$VMS" "$DISK_MIB" "$WORK" <<'PY'
import json, os, subprocess, sys
inv, n, mib, work = json.load(open(sys.argv[1]))["vms"], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
for i, vm in enumerate(inv[:n]):
    raw = os.path.join(work, vm["name"] + ".raw")
    with open(raw, "wb") as f:
        for m in range(mib):
            f.write(os.urandom(1 << 20) if m % 4 != 3 else bytes(1 << 20))
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "vmdk", raw, vm["disks"][0]["localPath"]], check=True)
    os.remove(raw)
    print(vm["name"])
PY
)

echo "== CRDs, namespace $NS, Secrets from lab.json, wave demo-wave"
"$KUBECTL" "${K[@]}" apply -f deploy/crds/ >/dev/null
# The controller's namespace: it keeps the key of its creation stamps there.
"$KUBECTL" "${K[@]}" apply -f deploy/controller/namespace.yaml >/dev/null
tests/lab/wait-established.sh "$KUBECTL" "${K[@]}" -- >/dev/null
"$KUBECTL" "${K[@]}" create namespace "$NS" --dry-run=client -o yaml | "$KUBECTL" "${K[@]}" apply -f - >/dev/null
# Credentials Secrets are opted in for ferry (the label) and bound to their endpoints (url and
# thumbprint; endpoint and bucket): ferry sends them nowhere else.
"$KUBECTL" "${K[@]}" -n "$NS" create secret generic vsphere-credentials \
    --from-literal=username="$(lab "d['vcenter']['username']")" \
    --from-literal=password="$(lab "d['vcenter']['password']")" \
    --from-literal=url="$(lab "d['vcenter']['url']")" \
    --from-literal=thumbprint="$(lab "d['vcenter']['thumbprintSha256']")" \
    --dry-run=client -o yaml | "$KUBECTL" "${K[@]}" label --local -f - -o yaml \
    migration.platform.example/credentials=true | "$KUBECTL" "${K[@]}" apply -f - >/dev/null
"$KUBECTL" "${K[@]}" -n "$NS" create secret generic s3-credentials \
    --from-literal=accessKeyId="$(lab "d['s3']['accessKey']")" \
    --from-literal=secretAccessKey="$(lab "d['s3']['secretKey']")" \
    --from-literal=endpoint="$(lab "d['s3']['endpoint']")" \
    --from-literal=bucket="$(lab "d['s3']['bucket']")" \
    --dry-run=client -o yaml | "$KUBECTL" "${K[@]}" label --local -f - -o yaml \
    migration.platform.example/credentials=true | "$KUBECTL" "${K[@]}" apply -f - >/dev/null
{
cat <<YAML
apiVersion: migration.platform.example/v1alpha1
kind: MigrationWave
metadata:
  name: demo-wave
  namespace: $NS
spec:
  maxInFlight: 3
  # Released once the injected faults are on their migrations (below).
  paused: true
  template:
    source:
      url: $(lab "d['vcenter']['url']")
      credentialsSecretRef: {name: vsphere-credentials}
      thumbprint: "$(lab "d['vcenter']['thumbprintSha256']")"
      powerOff: true
      restorePowerState: OnCancelOrFailure
    target:
      runStrategy: Always
    staging:
      endpoint: $(lab "d['s3']['endpoint']")
      bucket: $(lab "d['s3']['bucket']")
      prefix: demo
      credentialsSecretRef: {name: s3-credentials}
  vms:
YAML
for n in "${NAMES[@]}"; do echo "    - name: $n"; done
} | "$KUBECTL" "${K[@]}" apply -f - >/dev/null

echo "== controller and sim (logs in $WORK)"
# The converter image is required and pinned by digest; ferry-sim runs the converter from $BIN
# whatever the image, so this one (ferry_harness::LAB_CONVERTER_IMAGE, a reserved .test domain)
# is never pulled.
# The lab has no deploy/controller admission policies: the controller is told not to wait for them.
FERRY_ADMISSION_POLICIES=not-required "$BIN/ferry-controller" --kubeconfig "$STATE/kubeconfig" \
    --converter-image registry.ferry.test/ferry/controller@sha256:edf95329aade2a36c424fd070bbd114b031620b33b642329b7b5c3e7ad4cbd17 \
    --metrics-addr "${DEMO_METRICS_ADDR-127.0.0.1:18080}" --health-addr "${DEMO_HEALTH_ADDR-127.0.0.1:18081}" \
    >"$WORK/controller.log" 2>&1 3>&- &
PIDS+=($!)
"$BIN/ferry-sim" --kubeconfig "$STATE/kubeconfig" --volume-dir "$WORK/volumes" --bin-dir "$BIN" \
    --throughput-mib "$IMPORT_MIB_S" >"$WORK/sim.log" 2>&1 3>&- &
PIDS+=($!)

echo "== two injected failures (tests/sim/README.md, Faults)"
# The paused wave creates its migrations and starts none: mark the 4th and the 7th, then let the
# wave go, and lift each fault once its migration failed, so that a retry succeeds.
FAULTS=("import=permanent@40%" "convert=permanent")
members=0
for _ in $(seq 1 600); do
    members=$("$KUBECTL" "${K[@]}" -n "$NS" get vmm -o name 2>/dev/null | wc -l)
    ((members >= VMS)) && break
    sleep 0.2
done
if ((members < VMS)); then
    echo "the wave made $members of its $VMS migrations in 120 s; the controller's log:" >&2
    tail -20 "$WORK/controller.log" >&2
    exit 1
fi
mapfile -t FAULTY < <("$KUBECTL" "${K[@]}" -n "$NS" get vmm -o name | sort | sed -n '4p;7p')
for i in "${!FAULTY[@]}"; do
    "$KUBECTL" "${K[@]}" -n "$NS" annotate --overwrite "${FAULTY[$i]}" \
        "sim.ferry.example/fault=${FAULTS[$i]}" >/dev/null
    echo "   ${FAULTY[$i]#*/}: ${FAULTS[$i]}"
done
"$KUBECTL" "${K[@]}" -n "$NS" patch migrationwave demo-wave --type=merge -p '{"spec":{"paused":false}}' >/dev/null
(
    # Not the demo's own stop (a subshell keeps its traps).
    trap - EXIT INT TERM
    while true; do
        for vmm in "${FAULTY[@]}"; do
            phase=$("$KUBECTL" "${K[@]}" -n "$NS" get "$vmm" -o 'jsonpath={.status.phase}' 2>/dev/null || true)
            if [[ "$phase" == Failed ]]; then
                "$KUBECTL" "${K[@]}" -n "$NS" annotate "$vmm" sim.ferry.example/fault- >/dev/null 2>&1 || true
            fi
        done
        sleep 3
    done
) >"$WORK/faults.log" 2>&1 3>&- &
PIDS+=($!)

if [[ -n "$HEADLESS" ]]; then
    # What the welcome screen asks a person to do, done by script and checked.
    phase() { "$KUBECTL" "${K[@]}" -n "$NS" get "$1" -o 'jsonpath={.status.phase}' 2>/dev/null || true; }
    until_true() { # WHAT COMMAND...: polls COMMAND until it succeeds, at most CHECK_S seconds
        local what=$1 deadline=$((SECONDS + CHECK_S)); shift
        until "$@"; do
            if ((SECONDS >= deadline)); then
                echo "== demo check FAILED: $what not within ${CHECK_S} s; the board:" >&2
                "$BIN/ferry" --kubeconfig "$STATE/kubeconfig" -n "$NS" board --once >&2 || true
                exit 1
            fi
            sleep 1
        done
    }
    failed_and_lifted() {
        [[ "$(phase "$1")" == Failed ]] &&
            [[ -z "$("$KUBECTL" "${K[@]}" -n "$NS" get "$1" -o 'jsonpath={.metadata.annotations.sim\.ferry\.example/fault}')" ]]
    }
    wave_succeeded() {
        [[ "$(phase migrationwave/demo-wave)" == Succeeded ]]
    }
    for vmm in "${FAULTY[@]}"; do
        until_true "$vmm failed by its injected fault" failed_and_lifted "$vmm"
        echo "   ${vmm#*/}: Failed ($("$KUBECTL" "${K[@]}" -n "$NS" get "$vmm" -o 'jsonpath={.status.lastFailure.reason}'))"
        "$BIN/ferry" --kubeconfig "$STATE/kubeconfig" -n "$NS" retry "${vmm#*/}"
    done
    until_true "the wave Succeeded" wave_succeeded
    for vmm in "${FAULTY[@]}"; do
        [[ "$(phase "$vmm")" == Succeeded ]] || { echo "== demo check FAILED: $vmm is $(phase "$vmm")" >&2; exit 1; }
    done
    "$BIN/ferry" --kubeconfig "$STATE/kubeconfig" -n "$NS" board --once
    echo "== demo check passed: $VMS migrations Succeeded, the two injected failures after one retry each"
    exit 0
fi

echo "== the cockpit (q quits and stops the demo)"
"$BIN/ferry" --kubeconfig "$STATE/kubeconfig" -n "$NS" \
    --welcome "demo-wave migrates $VMS VMs, 3 at a time. Two fail on purpose (injected faults, lifted once they fail): find them with / phase:Failed, press r to retry. Press c to cancel a running one."
