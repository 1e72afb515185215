#!/usr/bin/env bash
# Checks, against a lab where tests/kubevirt/run.sh runs virt-api and virt-controller, that KubeVirt's own
# admission and controller act on VirtualMachines created with kubectl:
#   1. a valid VM with runStrategy Always is admitted and virt-controller creates its VMI and virt-launcher pod;
#   2. a VM whose disk names no volume is refused with KubeVirt's message (virtualmachine-validator);
#   3. a VM shaped as ferry's controller builds it (controller/src/children/virtual_machine.rs: EFI, sata disks
#      on DataVolumes, e1000e with the source MAC, pod network) is admitted and, started, waits for its PVC;
#   4. the VMI spec cannot be changed by a user (update of VMI object is restricted);
#   5. runStrategy Halted removes the VMI.
# usage: tests/kubevirt/smoke.sh LAB_STATE_DIR     (namespace kv-smoke, deleted at the end)
set -euo pipefail
LAB=$(cd "$1" && pwd)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
k() { "$ROOT/target/lab/bin/kubectl" --kubeconfig "$LAB/kubeconfig" -n kv-smoke "$@"; }
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
fails=0
wait_for() { # seconds command...
  local t=$1; shift
  for _ in $(seq 1 $((t * 2))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  return 1
}
k create namespace kv-smoke --dry-run=client -o yaml | k apply -f - >/dev/null

vm() { # name runStrategy volume-name
  cat <<YAML
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: $1}
spec:
  runStrategy: $2
  template:
    spec:
      domain:
        cpu: {cores: 1}
        memory: {guest: 128Mi}
        devices:
          disks: [{name: root, disk: {bus: virtio}}]
      volumes: [{name: $3, containerDisk: {image: quay.io/kubevirt/cirros-container-disk-demo}}]
YAML
}

# 1
if vm good Always root | k apply -f - >/dev/null; then ok "valid VM admitted"; else bad "valid VM refused"; fi
if wait_for 60 k get vmi good; then ok "virt-controller created VMI good ($(k get vmi good -o jsonpath='{.status.phase}'))"
else bad "no VMI for VM good: $(k get vm good -o jsonpath='{.status.conditions[*].message}')"; fi
if wait_for 30 bash -c "'$ROOT/target/lab/bin/kubectl' --kubeconfig '$LAB/kubeconfig' -n kv-smoke get pods -l kubevirt.io=virt-launcher -o name | grep -q ."; then
  ok "virt-launcher pod created: $(k get pods -l kubevirt.io=virt-launcher -o name)"; else bad "no virt-launcher pod"; fi
# 2
if out=$(vm broken Always other | k apply -f - 2>&1); then bad "invalid VM admitted"
elif grep -q "Name 'root' not found" <<<"$out"; then ok "invalid VM refused: $out"; else bad "invalid VM refused, other message: $out"; fi
# 3
cat <<'YAML' | k apply -f - >/dev/null && ok "ferry-shaped VM admitted" || bad "ferry-shaped VM refused"
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata: {name: dc0-h0-vm0, labels: {ferry.example/migration: web-1}}
spec:
  runStrategy: Halted
  template:
    metadata: {labels: {ferry.example/migration: web-1}}
    spec:
      domain:
        cpu: {sockets: 1, cores: 2, threads: 1}
        memory: {guest: 2048Mi}
        resources: {requests: {memory: 2048Mi}}
        firmware: {uuid: 42265e3b-3d1b-4b6b-9d58-2c8a9f0b1c2d, bootloader: {efi: {secureBoot: false}}}
        devices:
          disks:
          - {name: disk-0, disk: {bus: sata}, bootOrder: 1}
          - {name: disk-1, disk: {bus: sata}}
          interfaces: [{name: net-0, model: e1000e, masquerade: {}, macAddress: "00:50:56:aa:bb:01"}]
      networks: [{name: net-0, pod: {}}]
      volumes:
      - {name: disk-0, dataVolume: {name: web-1-disk-0}}
      - {name: disk-1, dataVolume: {name: web-1-disk-1}}
YAML
k patch vm dc0-h0-vm0 --type=merge -p '{"spec":{"runStrategy":"Always"}}' >/dev/null
if wait_for 30 k get vmi dc0-h0-vm0; then
  sleep 2; ok "ferry-shaped VM started: VMI $(k get vmi dc0-h0-vm0 -o jsonpath='{.status.phase}'), VM $(k get vm dc0-h0-vm0 -o jsonpath='{.status.printableStatus}')"
else bad "no VMI for the ferry-shaped VM: $(k get vm dc0-h0-vm0 -o jsonpath='{.status.conditions[*].message}')"; fi
# 4
if out=$(k patch vmi good --type=merge -p '{"spec":{"domain":{"cpu":{"cores":2}}}}' 2>&1); then bad "VMI spec change admitted"
else ok "VMI spec change refused: $out"; fi
# 5
k patch vm good --type=merge -p '{"spec":{"runStrategy":"Halted"}}' >/dev/null
if wait_for 60 bash -c "! '$ROOT/target/lab/bin/kubectl' --kubeconfig '$LAB/kubeconfig' -n kv-smoke get vmi good"; then ok "runStrategy Halted removed VMI good"
else bad "VMI good still there after Halted"; fi

"$ROOT/target/lab/bin/kubectl" --kubeconfig "$LAB/kubeconfig" delete namespace kv-smoke --wait=false >/dev/null
[ "$fails" = 0 ] && echo "smoke: all passed" || { echo "smoke: $fails failed"; exit 1; }
