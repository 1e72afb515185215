#!/usr/bin/env bash
# `make demo`: the lab, the controller, ferry-sim and the cockpit on a sample wave.
#
# Starts a lab in target/lab/demo (or $LAB_STATE), puts real VMDKs behind a few dozen vcsim VMs,
# applies the CRDs, Secrets filled from the lab's lab.json and a MigrationWave, starts the
# controller and the sim in the background (logs in target/demo/), injects two failures through
# the sim's fault annotation (an import that fails at 40 %, a conversion that fails), lifts each
# fault once its migration has failed (so that `r` retries it for real and it then succeeds), and
# runs the cockpit in the foreground with a first screen that says which keys to try. Quitting
# the cockpit (q) stops everything the demo started.
set -euo pipefail
cd "$(dirname "$0")/.."

STATE="${LAB_STATE:-$PWD/target/lab/demo}"
WORK="$PWD/target/demo"
NS="${DEMO_NAMESPACE:-demo}"
VMS="${DEMO_VMS:-30}"
DISK_MIB="${DEMO_DISK_MIB:-24}"
# The sim imports at this rate so that a person can watch progress move (CDI on real storage
# is slower still); the tests run it far faster.
IMPORT_MIB_S="${DEMO_IMPORT_MIB_S:-6}"
KUBECTL="$PWD/target/lab/bin/kubectl"
BIN="$PWD/target/debug"

mkdir -p "$WORK"
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    exec 3>&- 2>/dev/null || true
    wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

echo "== building ferry (a cold build takes several minutes on 2 cores)"
cargo build --workspace --bins

echo "== starting the lab in $STATE"
# Each demo starts from a clean cluster, so the wave runs again from the beginning.
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
# kubectl wait fails at once (not waits) on a CRD whose status.conditions is not yet written;
# that one error means "not yet".
for _ in $(seq 300); do
    out=$("$KUBECTL" "${K[@]}" wait --for=condition=Established crd --all --timeout=60s 2>&1) && break
    case "$out" in *"accessor error"*) sleep 0.2 ;; *) echo "$out" >&2; exit 1 ;; esac
done
"$KUBECTL" "${K[@]}" wait --for=condition=Established crd --all --timeout=1s >/dev/null
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
"$BIN/ferry-controller" --kubeconfig "$STATE/kubeconfig" \
    --converter-image registry.ferry.test/ferry/controller@sha256:edf95329aade2a36c424fd070bbd114b031620b33b642329b7b5c3e7ad4cbd17 \
    --metrics-addr 127.0.0.1:18080 --health-addr 127.0.0.1:18081 >"$WORK/controller.log" 2>&1 &
PIDS+=($!)
"$BIN/ferry-sim" --kubeconfig "$STATE/kubeconfig" --volume-dir "$WORK/volumes" --bin-dir "$BIN" \
    --throughput-mib "$IMPORT_MIB_S" >"$WORK/sim.log" 2>&1 &
PIDS+=($!)

echo "== two injected failures (tests/sim/README.md, Faults)"
# The wave creates its migrations Queued (maxInFlight 3): mark the 4th and the 7th before they
# start, then lift each fault once its migration failed, so that a retry succeeds.
FAULTS=("import=permanent@40%" "convert=permanent")
mapfile -t FAULTY < <(
    for _ in $(seq 1 240); do
        n=$("$KUBECTL" "${K[@]}" -n "$NS" get vmm -o name 2>/dev/null | wc -l)
        (( n >= 7 )) && break
        sleep 0.5
    done
    "$KUBECTL" "${K[@]}" -n "$NS" get vmm -o name | sort | sed -n '4p;7p'
)
for i in "${!FAULTY[@]}"; do
    "$KUBECTL" "${K[@]}" -n "$NS" annotate --overwrite "${FAULTY[$i]}" \
        "sim.ferry.example/fault=${FAULTS[$i]}" >/dev/null
    echo "   ${FAULTY[$i]#*/}: ${FAULTS[$i]}"
done
(
    while true; do
        for vmm in "${FAULTY[@]}"; do
            phase=$("$KUBECTL" "${K[@]}" -n "$NS" get "$vmm" -o 'jsonpath={.status.phase}' 2>/dev/null || true)
            if [[ "$phase" == Failed ]]; then
                "$KUBECTL" "${K[@]}" -n "$NS" annotate "$vmm" sim.ferry.example/fault- >/dev/null 2>&1 || true
            fi
        done
        sleep 3
    done
) >"$WORK/faults.log" 2>&1 &
PIDS+=($!)

echo "== the cockpit (q quits and stops the demo)"
"$BIN/ferry" --kubeconfig "$STATE/kubeconfig" -n "$NS" \
    --welcome "demo-wave migrates $VMS VMs, 3 at a time. Two fail on purpose (injected faults, lifted once they fail): find them with / phase:Failed, press r to retry. Press c to cancel a running one."
