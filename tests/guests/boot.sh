#!/usr/bin/env bash
# Boots a disk image under qemu (TCG: software emulation, which starts and runs the same on any
# machine here) and prints the guest's `ferry-guest:` line from its serial console.
#
#   tests/guests/boot.sh IMAGE SECONDS [BUS]
#
# IMAGE is booted as the one disk on BUS (virtio by default, as KubeVirt's default disk bus;
# sata, scsi, pvscsi), with SeaBIOS (OVMF with FERRY_FIRMWARE=efi), 512 MiB, no network, the console kept in IMAGE.console. The
# guest's writes go to IMAGE. Exits 0 with the line once the guest printed it (then qemu is
# stopped), 3 as soon as its initramfs gives up finding its root disk, 1 when SECONDS pass
# without either.
set -euo pipefail

IMAGE="$1"
SECONDS_MAX="$2"
BUS="${3:-virtio}"
CONSOLE="$IMAGE.console"
FORMAT="$(qemu-img info --output=json "$IMAGE" | sed -n 's/.*"format": "\([a-z0-9]*\)".*/\1/p' | head -1)"

case "$BUS" in
  virtio) DISK=(-drive "file=$IMAGE,format=$FORMAT,if=virtio,cache=writeback") ;;
  sata) DISK=(-drive "file=$IMAGE,format=$FORMAT,if=none,id=d0,cache=writeback" -device ahci,id=ahci -device ide-hd,drive=d0,bus=ahci.0) ;;
  scsi) DISK=(-drive "file=$IMAGE,format=$FORMAT,if=none,id=d0,cache=writeback" -device virtio-scsi-pci,id=scsi -device scsi-hd,drive=d0) ;;
  # VMware's paravirtual SCSI controller, as a VM on ESXi has it (qemu emulates it).
  pvscsi) DISK=(-drive "file=$IMAGE,format=$FORMAT,if=none,id=d0,cache=writeback" -device pvscsi,id=pv -device scsi-hd,drive=d0,bus=pv.0) ;;
  *) echo "guests/boot: BUS is virtio, sata, scsi or pvscsi" >&2; exit 2 ;;
esac

# FERRY_FIRMWARE=efi: OVMF without Secure Boot, its variables in a copy beside the image.
FIRMWARE_ARGS=()
if [ "${FERRY_FIRMWARE:-bios}" = efi ]; then
  cp /usr/share/OVMF/OVMF_VARS_4M.fd "$IMAGE.vars"
  FIRMWARE_ARGS=(-drive "if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd"
    -drive "if=pflash,format=raw,file=$IMAGE.vars")
fi
: >"$CONSOLE"
qemu-system-x86_64 -machine pc,accel=tcg -m 512 -smp 1 -nographic -nodefaults \
  -serial "file:$CONSOLE" -net none -no-reboot "${FIRMWARE_ARGS[@]}" "${DISK[@]}" \
  </dev/null >/dev/null 2>&1 &
QEMU=$!
trap 'kill "$QEMU" 2>/dev/null; wait "$QEMU" 2>/dev/null || true' EXIT
for _ in $(seq 1 "$SECONDS_MAX"); do
  # (Escape sequences may come before it on the same line: the console is cleared.)
  line="$(grep -a -o -m1 'ferry-guest: machine-id=[0-9a-f]* marker=[^ ]* boots=[0-9]*' "$CONSOLE" || true)"
  if [ -n "$line" ]; then
    echo "$line"
    exit 0
  fi
  # Debian's initramfs, its root disk not found (no driver for its controller): it will not boot.
  if grep -a -q 'Gave up waiting for root' "$CONSOLE"; then
    exit 3
  fi
  kill -0 "$QEMU" 2>/dev/null || break
  sleep 1
done
exit 1
