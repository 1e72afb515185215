#!/usr/bin/env bash
# `make image`: ferry's one OCI image (ferry-controller, which is also the converter and the guest
# Job's program, with qemu-img and virt-v2v), built without Docker or any daemon:
#   1. a minimal Debian root file system from the Debian archive (debootstrap --variant=minbase)
#      with the packages of image/packages.txt, trimmed, with the non-root user 65532 — cached in
#      ${FERRY_CACHE:-$HOME/.cache/ferry}/image/rootfs-<key>.tar, key = sha256 of the recipe;
#   2. ferry-controller built by cargo (release by default; `--profile debug` packs the binary
#      `make test` already built) and stripped, as a second layer;
#   3. both layers packed as an OCI image layout in target/image/ferry by image/ocipack (a Go
#      program on go-containerregistry, built once and cached like the lab), with user 65532,
#      entrypoint ferry-controller and labels naming version and source.
# Prints the image's digest and size, and writes them to target/image/ferry.json.
# Needs root (debootstrap, and the root file system keeps root-owned files); run from anywhere.
set -euo pipefail

IMAGE_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$IMAGE_DIR/.." && pwd)"
CACHE="${FERRY_CACHE:-$HOME/.cache/ferry}/image"
OUT="$ROOT/target/image"
PROFILE=release
SUITE=bookworm
MIRROR="${FERRY_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
REF_NAME="ferry/controller"

while [ $# -gt 0 ]; do
  case "$1" in
    --profile) PROFILE="$2"; shift 2 ;;
    *) echo "usage: image/build.sh [--profile release|debug]" >&2; exit 2 ;;
  esac
done
case "$PROFILE" in release | debug) ;; *) echo "image/build: --profile is release or debug" >&2; exit 2 ;; esac

say() { echo "image/build: $*" >&2; }
STARTED=$SECONDS
elapsed() { echo "$((SECONDS - STARTED)) s"; }

if [ "$(id -u)" != 0 ]; then
  say "needs root: debootstrap makes a root file system with root-owned files"
  exit 1
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  say "installing debootstrap (Debian package) with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi
mkdir -p "$CACHE" "$OUT"
exec 9>"$CACHE/.build.lock"
if ! flock -n 9; then say "another image build holds $CACHE/.build.lock; waiting"; flock 9; fi

# ---- 1. the Debian root file system ---------------------------------------------------------
PACKAGES="$(grep -v '^\s*#' "$IMAGE_DIR/packages.txt" | xargs | tr ' ' ',')"

# Everything that shapes the root file system goes into its cache key.
make_rootfs() {
  local work=$1
  debootstrap --variant=minbase "$SUITE" "$work/root" "$MIRROR" \
    >"$work/debootstrap.log" 2>&1 || { tail -30 "$work/debootstrap.log" >&2; return 1; }
  local r="$work/root"
  # The packages by apt inside the new root, as the Containerfile installs them: debootstrap's
  # own --include configures a package set this large (virt-v2v's) in an order that fails.
  mount -t proc proc "$r/proc"
  local ok=0
  chroot "$r" env DEBIAN_FRONTEND=noninteractive apt-get update -qq >>"$work/debootstrap.log" 2>&1 &&
    chroot "$r" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      ${PACKAGES//,/ } >>"$work/debootstrap.log" 2>&1 || ok=$?
  umount "$r/proc"
  [ "$ok" = 0 ] || { tail -30 "$work/debootstrap.log" >&2; return 1; }
  # What a container never needs: package lists and caches, docs (copyright notices stay),
  # manuals, translations, logs, device nodes (the runtime provides /dev).
  rm -rf "$r"/var/cache/apt/* "$r"/var/lib/apt/lists/* "$r"/var/log/* "$r"/usr/share/man \
    "$r"/usr/share/info "$r"/usr/share/locale/* "$r"/var/cache/debconf/*-old "$r"/dev/* \
    "$r"/run/* "$r"/tmp/*
  find "$r/usr/share/doc" -mindepth 2 -not -name copyright -not -type d -delete
  find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
  # The kernel is there for libguestfs' appliance, which supermin builds from the kernel and
  # its modules alone: the initramfs the kernel's package made is never booted. The appliance
  # runs on qemu's virtual hardware, so the modules for sound, graphics, video capture, radios,
  # InfiniBand, physical NICs, sensors and staging drivers are never loaded there (its disks,
  # virtio, SCSI, md, device-mapper and every file system stay).
  rm -f "$r"/boot/initrd.img-*
  local k
  for k in "$r"/usr/lib/modules/*/kernel; do
    rm -rf "$k"/sound "$k"/drivers/{gpu,media,infiniband,iio,staging,comedi,isdn,bluetooth} \
      "$k"/drivers/net/{wireless,ethernet} "$k"/net/{bluetooth,wireless,mac80211}
    chroot "$r" depmod -a "$(basename "$(dirname "$k")")"
  done
  # The non-root user every ferry pod runs as.
  echo 'nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin' >>"$r/etc/passwd"
  echo 'nonroot:x:65532:' >>"$r/etc/group"
  install -d -o 65532 -g 65532 -m 0750 "$r/home/nonroot"
  chmod 1777 "$r/tmp"
  (cd "$r" && find . -mindepth 1 | LC_ALL=C sort | sed 's,^\./,,' |
    tar --no-recursion --numeric-owner -T - -cf "$work/rootfs.tar")
}
ROOTFS_KEY="$( (echo "$SUITE $MIRROR $PACKAGES"; declare -f make_rootfs) | sha256sum | cut -c1-16)"
ROOTFS="$CACHE/rootfs-$ROOTFS_KEY.tar"
if [ -f "$ROOTFS" ]; then
  say "Debian root file system: cached ($ROOTFS)"
else
  say "Debian root file system: debootstrap --variant=minbase $SUITE + ${PACKAGES//,/ } from $MIRROR;"
  say "  this takes 2-5 minutes the first time, then it is cached in $ROOTFS"
  WORK="$(mktemp -d "$CACHE/rootfs-build.XXXXXX")"
  trap 'rm -rf "$WORK"' EXIT
  make_rootfs "$WORK"
  mv "$WORK/rootfs.tar" "$ROOTFS"
  rm -rf "$WORK"
  trap - EXIT
  say "Debian root file system: built in $(elapsed), $(du -h "$ROOTFS" | cut -f1)"
fi

# ---- 2. the binary ---------------------------------------------------------------------------
if [ "$PROFILE" = release ]; then
  say "ferry-controller: cargo build --release (a cold release build takes about 10 minutes on 2 cores)"
  cargo build --release --locked --workspace --bins >&2
else
  say "ferry-controller: the debug build (cargo build --workspace --bins, as make test does)"
  cargo build --locked --workspace --bins >&2
fi
BIN="$ROOT/target/$PROFILE/ferry-controller"
APP="$OUT/app"
rm -rf "$APP" && install -d "$APP/usr/local/bin"
install -m 0755 "$BIN" "$APP/usr/local/bin/ferry-controller"
strip --strip-unneeded "$APP/usr/local/bin/ferry-controller"
# Every entry owned by root, read-only to the user, at one fixed time: a reproducible layer.
EPOCH="$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || echo 0)"
(cd "$APP" && find . -mindepth 1 | LC_ALL=C sort | sed 's,^\./,,' |
  tar --no-recursion --owner=0 --group=0 --numeric-owner --mtime="@$EPOCH" -T - -cf "$OUT/app.tar")

# ---- 3. the OCI layout -------------------------------------------------------------------------
OCIPACK_KEY="$( (cd "$IMAGE_DIR/ocipack" && cat go.mod go.sum main.go; go env GOVERSION) | sha256sum | cut -c1-16)"
OCIPACK="$CACHE/ocipack-$OCIPACK_KEY"
if [ ! -x "$OCIPACK" ]; then
  say "ocipack: building image/ocipack (go-containerregistry, from the Go module proxy)"
  (cd "$IMAGE_DIR/ocipack" && go build -trimpath -o "$OCIPACK.tmp" .) && mv "$OCIPACK.tmp" "$OCIPACK"
fi
VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/Cargo.toml" | head -1)"
REVISION="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
# Where the source is: FERRY_IMAGE_SOURCE, else the git remote this clone came from.
SOURCE_URL="${FERRY_IMAGE_SOURCE:-$(git -C "$ROOT" config --get remote.origin.url 2>/dev/null || true)}"
SOURCE_URL="${SOURCE_URL:-unknown: no git remote (set FERRY_IMAGE_SOURCE)}"
CREATED="$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)"
say "packing target/image/ferry ($REF_NAME:$VERSION, $PROFILE)"
"$OCIPACK" --out "$OUT/ferry" --ref "$REF_NAME:$VERSION" \
  --layer "$ROOTFS" --layer "$OUT/app.tar" \
  --user 65532:65532 --entrypoint /usr/local/bin/ferry-controller --workdir / \
  --env PATH=/usr/local/bin:/usr/bin:/bin \
  --label org.opencontainers.image.title=ferry-controller \
  --label org.opencontainers.image.description="ferry: vSphere to KubeVirt migration controller and converter (qemu-img, virt-v2v)" \
  --label org.opencontainers.image.version="$VERSION" \
  --label org.opencontainers.image.revision="$REVISION" \
  --label org.opencontainers.image.source="$SOURCE_URL" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  --label org.opencontainers.image.created="$CREATED" \
  --label org.opencontainers.image.base.name="debian:$SUITE (debootstrap minbase)" \
  --created "$CREATED" >"$OUT/pack.json"
rm -rf "$APP" "$OUT/app.tar"
python3 - "$OUT/pack.json" "$PROFILE" "$OUT/ferry.json" "$ROOTFS" <<'PY'
import json, os, sys
info = json.load(open(sys.argv[1]))
info["profile"] = sys.argv[2]
info["rootfsTarBytes"] = os.path.getsize(sys.argv[4])
json.dump(info, open(sys.argv[3], "w"), indent=1)
PY
rm -f "$OUT/pack.json"
say "target/image/ferry: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["ref"], d["digest"], "%.1f MiB compressed" % (d["compressedBytes"]/1048576))' "$OUT/ferry.json") in $(elapsed)"
DIGEST="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"])' "$OUT/ferry.json")"
say "to deploy it: push target/image/ferry to REGISTRY (crane push / skopeo copy keep the digest), then"
say "  (cd deploy/controller && kustomize edit set image ferry/controller=REGISTRY/ferry/controller@$DIGEST)"
