//! A real operating system booted from the bytes ferry moved.
//!
//! `tests/guests/build.sh bios-virtio` makes a small Debian guest (BIOS, MBR, ext4, its
//! initramfs with virtio's drivers) and boots it once: that boot made its machine id and a file
//! only it has (`/var/lib/ferry/marker`), and printed its line. The guest goes behind a vcsim VM
//! as that VM's VMDK; ferry migrates it cold — vCenter, the converter Job, S3, the import, the
//! verification — and the imported volume (the sim's file for the claim) is then booted under
//! qemu as KubeVirt would attach it (virtio). The guest's line must name the source's machine id
//! and marker, on its second boot ever: the migrated bytes are the source's system, and it runs.
//!
//! `uefi-virtio` (GPT, systemd-boot) on a vCenter VM with EFI firmware becomes a VirtualMachine
//! with EFI, and its volume boots on OVMF.
//!
//! `bios-vmware`, whose initramfs carries only VMware's storage drivers (first booted on PVSCSI),
//! migrated the same way, does not find its root disk on virtio, and boots on PVSCSI from the
//! same migrated bytes: the case guest conversion is for.
//!
//! The node's part (the instance running qemu from the VMI's spec, readiness from the guest's
//! agent) is not played by ferry-sim yet: these tests boot the volume themselves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::*;
use ferry_crds::{Phase, names};

/// The guest's serial line, split into its fields.
fn fields(line: &str) -> std::collections::BTreeMap<String, String> {
    line.trim_start_matches("ferry-guest: ")
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

/// The guest's `line`, checked to name the source's machine id and marker; its fields.
fn names_the_source(
    line: &str,
    source: &std::collections::BTreeMap<String, String>,
) -> std::collections::BTreeMap<String, String> {
    let migrated = fields(line);
    assert_eq!(
        migrated.get("machine-id"),
        source.get("machine-id"),
        "{line}"
    );
    assert_eq!(migrated.get("marker"), source.get("marker"), "{line}");
    migrated
}

/// `tests/guests/build.sh GUEST`: the cached guest image, and its first boot's fields.
fn guest(
    name: &str,
) -> (
    std::path::PathBuf,
    std::collections::BTreeMap<String, String>,
) {
    let built = Command::new(ferry_harness::repo_root().join("tests/guests/build.sh"))
        .arg(name)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "tests/guests/build.sh {name}: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let image = std::path::PathBuf::from(String::from_utf8(built.stdout).unwrap().trim());
    let first = std::fs::read_to_string(format!("{}.first-boot", image.display())).unwrap();
    let source = fields(&first);
    assert_eq!(
        source.get("boots").map(String::as_str),
        Some("1"),
        "{first}"
    );
    (image, source)
}

/// Migrates `image` cold as the VM of a new test namespace `ns` and returns a copy of the
/// imported volume (the claim stays as it is).
async fn migrated(ns: &str, image: &std::path::Path) -> (Env, std::path::PathBuf) {
    migrated_shaped(ns, image, &[]).await
}

/// As [`migrated`], the vcsim VM shaped first (`ferry-lab shape` arguments).
async fn migrated_shaped(
    ns: &str,
    image: &std::path::Path,
    shape: &[&str],
) -> (Env, std::path::PathBuf) {
    let mut env = Env::new(ns, 1).await;
    if !shape.is_empty() {
        env.shape(&env.vm.name.clone(), shape);
    }
    // The guest is the VM's disk, as vSphere would hold it.
    let vmdk = &env.vm.disks[0].local_path;
    let convert = Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "vmdk"])
        .arg(image)
        .arg(vmdk)
        .output()
        .unwrap();
    assert!(
        convert.status.success(),
        "{}",
        String::from_utf8_lossy(&convert.stderr)
    );
    env.start_sim();
    env.start_controller();
    let vmm = env.create(&env.migration("guest")).await;
    let v = env.wait_terminal("guest", 600).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    let volume = env
        .volumes
        .join(&env.ns.name)
        .join(format!("{}.img", names::datavolume_name(&vmm, 0)));
    let copy = env.scratch.join("migrated.raw");
    std::fs::copy(&volume, &copy).unwrap();
    (env, copy)
}

/// `tests/guests/boot.sh IMAGE 300 BUS` on SeaBIOS: its exit code, its line, and its
/// console's end.
fn boot(image: &std::path::Path, bus: &str) -> (Option<i32>, String, String) {
    boot_on(image, bus, "bios")
}

/// As [`boot`], on `firmware` (`bios`: SeaBIOS; `efi`: OVMF without Secure Boot).
fn boot_on(image: &std::path::Path, bus: &str, firmware: &str) -> (Option<i32>, String, String) {
    let out = Command::new(ferry_harness::repo_root().join("tests/guests/boot.sh"))
        .arg(image)
        .arg("300")
        .arg(bus)
        .env("FERRY_FIRMWARE", firmware)
        .output()
        .unwrap();
    let console =
        std::fs::read_to_string(format!("{}.console", image.display())).unwrap_or_default();
    let end: Vec<&str> = console.lines().rev().take(30).collect();
    let end: Vec<&str> = end.into_iter().rev().collect();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        end.join("\n"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debian_guest_migrated_cold_boots_from_the_imported_volume() {
    let (image, source) = guest("bios-virtio");
    let (_env, volume) = migrated("e2e-real-guest", &image).await;
    let (code, line, console) = boot(&volume, "virtio");
    assert_eq!(
        code,
        Some(0),
        "the migrated guest printed no line; its console's end:\n{console}"
    );
    let migrated = names_the_source(&line, &source);
    assert_eq!(
        migrated.get("boots").map(String::as_str),
        Some("2"),
        "the source's one boot, then this one: {line}"
    );
}

/// The guest that needs converting: its initramfs has only VMware's storage drivers. Migrated
/// byte for byte, on virtio (KubeVirt's default bus) it does not find its root disk; the same
/// migrated bytes on VMware's PVSCSI boot and name the source. What ferry does not do yet —
/// inspect such a guest and convert it — is what this shows is needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_with_only_vmwares_drivers_does_not_find_its_root_on_virtio_until_converted() {
    let (image, source) = guest("bios-vmware");
    let (_env, volume) = migrated("e2e-real-guest-vmw", &image).await;
    let (code, _, console) = boot(&volume, "virtio");
    assert_eq!(
        code,
        Some(3),
        "on virtio its initramfs gives up finding its root; its console's end:\n{console}"
    );
    assert!(console.contains("Gave up waiting for root"), "{console}");
    let (code, line, console) = boot(&volume, "pvscsi");
    assert_eq!(
        code,
        Some(0),
        "on PVSCSI it boots; its console's end:\n{console}"
    );
    names_the_source(&line, &source);
}

/// A UEFI guest (GPT, an EFI system partition with systemd-boot) on a vCenter VM whose firmware
/// is `efi`: ferry makes a VirtualMachine with EFI (Secure Boot off, as the source had it), and
/// the migrated volume boots on OVMF, naming the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_uefi_guest_migrated_cold_boots_on_ovmf() {
    use ferry_controller::apis::kubevirt::VirtualMachine;
    let (image, source) = guest("uefi-virtio");
    let (env, volume) = migrated_shaped("e2e-real-guest-efi", &image, &["--firmware", "efi"]).await;
    let vms: kube::Api<VirtualMachine> = env.ns.api();
    let vm = vms.list(&Default::default()).await.unwrap().items.remove(0);
    let v = serde_json::to_value(&vm).unwrap();
    let efi = &v["spec"]["template"]["spec"]["domain"]["firmware"]["bootloader"]["efi"];
    assert_eq!(efi["secureBoot"], serde_json::json!(false), "{v}");
    let (code, line, console) = boot_on(&volume, "virtio", "efi");
    assert_eq!(
        code,
        Some(0),
        "the migrated UEFI guest printed no line; its console's end:\n{console}"
    );
    names_the_source(&line, &source);
}
