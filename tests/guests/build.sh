#!/usr/bin/env bash
# Real guests for the lab: small Debian systems ferry migrates and a test boots afterwards.
#
#   tests/guests/build.sh GUEST     prints the path of GUEST's raw disk image, building it once
#
# Each guest is made from Debian packages (debootstrap --variant=minbase: a kernel, systemd,
# qemu-guest-agent) on a 1 GiB thin raw disk, and booted once under qemu (TCG) before it is
# cached: that first boot generates its machine id and writes /var/lib/ferry/marker, a file
# only that guest has. On every boot the guest writes one line to its serial console:
#
#   ferry-guest: machine-id=<id> marker=<contents of /var/lib/ferry/marker> boots=<n>
#
# so a test that boots the migrated bytes can tell they are this guest's (the first boot's line
# is kept beside the image, GUEST.first-boot). Cached in ${FERRY_CACHE:-~/.cache/ferry}/guests,
# keyed by the recipe (this script and the guest's packages): built once per machine.
#
# Guests:
#   bios-virtio   BIOS, MBR, ext4 root; its initramfs carries virtio's drivers (Debian's
#                 default, MODULES=most): boots on KubeVirt's defaults as it is.
#   uefi-virtio   UEFI: GPT, an EFI system partition with systemd-boot (the removable path,
#                 EFI/BOOT/BOOTX64.EFI) and the kernel, an ext4 root; virtio in its initramfs;
#                 boots on OVMF without Secure Boot (the vCenter VM's firmware `efi`).
#   bios-vmware   BIOS, MBR, ext4 root, Debian's generic kernel (virtio as modules) with an
#                 initramfs of VMware's storage drivers only (MODULES=list: vmw_pvscsi, mptspi,
#                 as a host-only RHEL initramfs made on VMware has): first booted on PVSCSI; on
#                 virtio it cannot find its root disk until converted. Its network is
#                 configured as on VMware: a static 192.0.2.10/24 on ens192, the name of the
#                 card in ESXi's PCI slot 192.
#
# Needs root (debootstrap, loop devices for the ext4 root; the EFI system partition is written
# with mtools); installs what it needs from Debian's packages (debootstrap, fdisk, extlinux,
# qemu-system-x86, dosfstools, mtools, ovmf) when missing.
set -euo pipefail

GUEST="${1:-}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${FERRY_CACHE:-$HOME/.cache/ferry}/guests"
SUITE=bookworm
MIRROR="${FERRY_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SIZE=1G
# How long the first boot may take under TCG on a busy 2-core machine.
BOOT_S="${FERRY_GUEST_BOOT_S:-300}"

say() { echo "guests/build: $*" >&2; }

# The bus of the guest's first boot: the one its source platform gives it; and its firmware.
FIRST_BUS=virtio
FIRMWARE=bios
case "$GUEST" in
  bios-virtio) PACKAGES="linux-image-cloud-amd64,initramfs-tools,systemd-sysv,udev,qemu-guest-agent" ;;
  uefi-virtio)
    PACKAGES="linux-image-cloud-amd64,initramfs-tools,systemd-sysv,udev,qemu-guest-agent,systemd-boot-efi"
    FIRMWARE=efi
    ;;
  bios-vmware)
    PACKAGES="linux-image-amd64,initramfs-tools,systemd-sysv,udev,qemu-guest-agent,grub-pc"
    FIRST_BUS=pvscsi
    ;;
  *) say "usage: tests/guests/build.sh bios-virtio|uefi-virtio|bios-vmware"; exit 2 ;;
esac

if [ "$(id -u)" != 0 ]; then
  say "needs root: debootstrap and loop devices"
  exit 1
fi
need=()
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v sfdisk >/dev/null 2>&1 || need+=(fdisk)
command -v extlinux >/dev/null 2>&1 || need+=(extlinux syslinux-common)
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
command -v mkfs.vfat >/dev/null 2>&1 || need+=(dosfstools)
command -v mcopy >/dev/null 2>&1 || need+=(mtools)
[ -f /usr/share/OVMF/OVMF_CODE_4M.fd ] || need+=(ovmf)
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]} with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

mkdir -p "$CACHE"
KEY="$( (echo "$GUEST $SUITE $MIRROR $PACKAGES $SIZE $FIRST_BUS $FIRMWARE"; cat "${BASH_SOURCE[0]}") | sha256sum | cut -c1-16)"
OUT="$CACHE/$GUEST-$KEY.raw"
if [ -f "$OUT" ] && [ -f "$OUT.first-boot" ]; then
  echo "$OUT"
  exit 0
fi
exec 9>"$CACHE/.build.lock"
if ! flock -n 9; then say "another guest build holds $CACHE/.build.lock; waiting"; flock 9; fi
if [ -f "$OUT" ] && [ -f "$OUT.first-boot" ]; then
  echo "$OUT"
  exit 0
fi

WORK="$(mktemp -d "$CACHE/.work-XXXXXX")"
MNT="$WORK/mnt"
LOOP=""
cleanup() {
  set +e
  mountpoint -q "$MNT" && umount "$MNT"
  [ -n "$LOOP" ] && losetup -d "$LOOP"
  rm -rf "$WORK"
}
trap cleanup EXIT
STARTED=$SECONDS

# ---- the root file system -----------------------------------------------------------------
say "$GUEST: debootstrap $SUITE with $PACKAGES (a few minutes, once)"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$WORK/root" "$MIRROR" \
  >"$WORK/debootstrap.log" 2>&1 || { tail -30 "$WORK/debootstrap.log" >&2; exit 1; }
R="$WORK/root"
echo "ferry-guest" >"$R/etc/hostname"
echo "LABEL=root / ext4 defaults 0 1" >"$R/etc/fstab"
# Empty: systemd makes the guest's own machine id on its first boot, and keeps it.
: >"$R/etc/machine-id"
rm -f "$R/var/lib/dbus/machine-id"
mkdir -p "$R/var/lib/ferry"
cat >"$R/usr/local/sbin/ferry-hello" <<'EOF'
#!/bin/sh
# The guest's line on its serial console, on every boot (tests/guests/build.sh).
set -e
m=/var/lib/ferry/marker
[ -s "$m" ] || { echo "ferry-marker-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')" >"$m"; }
n=$(( $(cat /var/lib/ferry/boots 2>/dev/null || echo 0) + 1 ))
echo "$n" >/var/lib/ferry/boots
sync
echo "ferry-guest: machine-id=$(cat /etc/machine-id) marker=$(cat "$m") boots=$n" >/dev/ttyS0
EOF
chmod 0755 "$R/usr/local/sbin/ferry-hello"
cat >"$R/etc/systemd/system/ferry-hello.service" <<'EOF'
[Unit]
Description=ferry's guest line on the serial console
After=local-fs.target systemd-machine-id-commit.service

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/ferry-hello

[Install]
WantedBy=multi-user.target
EOF
ln -sf /etc/systemd/system/ferry-hello.service \
  "$R/etc/systemd/system/multi-user.target.wants/ferry-hello.service"
if [ "$GUEST" = bios-vmware ]; then
  # GRUB 2, as an installer leaves a VMware guest (and as virt-v2v expects one): extlinux boots
  # the first boot, on which the guest installs GRUB on its own disk and makes its menu
  # (ferry-grub.service, once), so every later boot is GRUB's.
  cat >"$R/etc/default/grub" <<'EOF'
GRUB_DEFAULT=0
GRUB_TIMEOUT=1
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
GRUB_CMDLINE_LINUX="console=ttyS0,115200 rootdelay=30"
GRUB_TERMINAL="serial console"
GRUB_SERIAL_COMMAND="serial --unit=0 --speed=115200"
EOF
  cat >"$R/usr/local/sbin/ferry-grub" <<'EOF'
#!/bin/sh
# Installs GRUB on the disk holding / and writes its menu; then never again.
set -e
disk="/dev/$(lsblk -no PKNAME "$(findmnt -no SOURCE /)")"
grub-install --target=i386-pc "$disk"
update-grub
systemctl disable ferry-grub.service
EOF
  chmod 0755 "$R/usr/local/sbin/ferry-grub"
  cat >"$R/etc/systemd/system/ferry-grub.service" <<'EOF'
[Unit]
Description=GRUB installed on the guest's own disk (first boot)
Before=ferry-hello.service
After=local-fs.target

[Service]
Type=oneshot
ExecStart=/usr/local/sbin/ferry-grub

[Install]
WantedBy=multi-user.target
EOF
  ln -sf /etc/systemd/system/ferry-grub.service \
    "$R/etc/systemd/system/multi-user.target.wants/ferry-grub.service"
  # Its network as a VMware guest's is: the card named after the PCI slot ESXi gives it (ens192
  # for slot 192, as the lab's vCenter reports it), a static address configured under that name
  # (systemd-networkd). On KubeVirt the card is elsewhere on the bus: unless the conversion keeps
  # the name, the address is lost.
  mkdir -p "$R/etc/systemd/network"
  printf '[Match]\nName=ens192\n\n[Network]\nAddress=192.0.2.10/24\n' >"$R/etc/systemd/network/ens192.network"
  chroot "$R" systemctl enable systemd-networkd.service >/dev/null 2>&1
  # Only VMware's storage drivers (and what the root file system needs) in the initramfs.
  sed -i 's/^MODULES=.*/MODULES=list/' "$R/etc/initramfs-tools/initramfs.conf"
  printf '%s\n' vmw_pvscsi mptspi sd_mod ext4 >>"$R/etc/initramfs-tools/modules"
  mount -t proc proc "$R/proc"
  chroot "$R" update-initramfs -u -k all >"$WORK/initramfs.log" 2>&1 || {
    umount "$R/proc"; tail -20 "$WORK/initramfs.log" >&2; exit 1; }
  umount "$R/proc"
fi
rm -rf "$R"/var/cache/apt/archives/*.deb "$R"/var/lib/apt/lists/*
KVER="$(basename "$(ls "$R"/boot/vmlinuz-* | sort | tail -1)" | sed 's/^vmlinuz-//')"

# ---- the disk --------------------------------------------------------------------------
truncate -s "$SIZE" "$WORK/disk.raw"
# The partition at byte $1 of $2 bytes, as the loop device $LOOP.
attach() {
  LOOP="$(losetup -f --show --offset "$1" --sizelimit "$2" "$WORK/disk.raw")"
  mkdir -p "$MNT"
}
# Partition N of the disk as "START SIZE" in bytes, as sfdisk laid it out (it aligns).
part() {
  sfdisk -d "$WORK/disk.raw" | sed -n "s/.*disk\.raw$1 : start= *\([0-9]*\), size= *\([0-9]*\).*/\1 \2/p" |
    awk '{print $1 * 512, $2 * 512}'
}
detach() {
  umount "$MNT"
  losetup -d "$LOOP"
  LOOP=""
}
APPEND="root=LABEL=root rw console=ttyS0,115200 quiet"
# Debian's initramfs waits 180 s for a root disk it cannot find; the lab's VMware-only guest
# gives up after 30 s, so that a test sees it fail within its agent timeout.
if [ "$GUEST" = bios-vmware ]; then APPEND="$APPEND rootdelay=30"; fi
if [ "$FIRMWARE" = bios ]; then
  # MBR, one active ext4 partition, extlinux.
  printf 'label: dos\nstart=2048, type=83, bootable\n' | sfdisk -q "$WORK/disk.raw"
  attach $(part 1)
  # No 64bit feature: extlinux reads the file system it boots from.
  mkfs.ext4 -q -L root -O ^64bit,^metadata_csum "$LOOP"
  mount "$LOOP" "$MNT"
  (cd "$R" && tar --numeric-owner -cf - .) | (cd "$MNT" && tar --numeric-owner -xf -)
  mkdir -p "$MNT/boot/extlinux"
  printf 'DEFAULT debian\nTIMEOUT 1\nPROMPT 0\nLABEL debian\n  KERNEL /boot/vmlinuz-%s\n  APPEND initrd=/boot/initrd.img-%s %s\n' \
    "$KVER" "$KVER" "$APPEND" >"$MNT/boot/extlinux/extlinux.conf"
  extlinux --install "$MNT/boot/extlinux" >/dev/null 2>&1
  detach
  dd if=/usr/lib/syslinux/mbr/mbr.bin of="$WORK/disk.raw" bs=440 count=1 conv=notrunc status=none
else
  # GPT: a 100 MiB EFI system partition (systemd-boot on the removable path, the kernel and its
  # initramfs, one loader entry) and the ext4 root.
  printf 'label: gpt\nstart=2048, size=204800, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=esp\nstart=206848, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root\n' |
    sfdisk -q "$WORK/disk.raw"
  read -r ESP ESP_BYTES < <(part 1)
  attach $(part 2)
  mkfs.ext4 -q -L root -O ^64bit,^metadata_csum "$LOOP"
  mount "$LOOP" "$MNT"
  (cd "$R" && tar --numeric-owner -cf - .) | (cd "$MNT" && tar --numeric-owner -xf -)
  detach
  # FAT, written with mtools into the image (no vfat mount needed).
  # One sector a cluster: enough clusters for FAT32 in 100 MiB.
  mkfs.vfat -F 32 -s 1 -n ESP --offset $((ESP / 512)) "$WORK/disk.raw" $((ESP_BYTES / 1024)) >/dev/null 2>&1
  export MTOOLS_SKIP_CHECK=1
  FAT="$WORK/disk.raw@@$ESP"
  for d in /EFI /EFI/BOOT /loader /loader/entries; do mmd -i "$FAT" "::$d"; done
  printf 'default debian.conf\ntimeout 0\n' >"$WORK/loader.conf"
  printf 'title Debian\nlinux /vmlinuz\ninitrd /initrd.img\noptions %s\n' "$APPEND" >"$WORK/debian.conf"
  mcopy -i "$FAT" "$R/usr/lib/systemd/boot/efi/systemd-bootx64.efi" ::/EFI/BOOT/BOOTX64.EFI
  mcopy -i "$FAT" "$R/boot/vmlinuz-$KVER" ::/vmlinuz
  mcopy -i "$FAT" "$R/boot/initrd.img-$KVER" ::/initrd.img
  mcopy -i "$FAT" "$WORK/loader.conf" ::/loader/loader.conf
  mcopy -i "$FAT" "$WORK/debian.conf" ::/loader/entries/debian.conf
fi

# ---- its first boot: machine id and marker made, the line seen --------------------------
say "$GUEST: first boot under qemu (TCG), at most $BOOT_S s"
FERRY_FIRMWARE="$FIRMWARE" "$HERE/boot.sh" "$WORK/disk.raw" "$BOOT_S" "$FIRST_BUS" >"$WORK/first-boot" || {
  say "$GUEST: the first boot printed no ferry-guest line; its console:"
  tail -40 "$WORK/disk.raw.console" >&2 || true
  exit 1
}
mv "$WORK/disk.raw" "$OUT"
mv "$WORK/first-boot" "$OUT.first-boot"
say "$GUEST: built in $((SECONDS - STARTED)) s: $OUT ($(cat "$OUT.first-boot"))"
echo "$OUT"
