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
//! The node's part (the instance running qemu from the VMI's spec, readiness from the guest's
//! agent) is not played by ferry-sim yet: this test boots the volume itself.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debian_guest_migrated_cold_boots_from_the_imported_volume() {
    let root = ferry_harness::repo_root();
    let built = Command::new(root.join("tests/guests/build.sh"))
        .arg("bios-virtio")
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "tests/guests/build.sh bios-virtio: {}",
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

    let mut env = Env::new("e2e-real-guest", 1).await;
    // The guest is the VM's disk, as vSphere would hold it.
    let vmdk = &env.vm.disks[0].local_path;
    let convert = Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "vmdk"])
        .arg(&image)
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

    // The imported volume, booted as KubeVirt attaches it (a copy: the claim stays as it is).
    let volume = env
        .volumes
        .join(&env.ns.name)
        .join(format!("{}.img", names::datavolume_name(&vmm, 0)));
    let booted = env.scratch.join("migrated.raw");
    std::fs::copy(&volume, &booted).unwrap();
    let out = Command::new(root.join("tests/guests/boot.sh"))
        .arg(&booted)
        .arg("300")
        .arg("virtio")
        .output()
        .unwrap();
    let console =
        std::fs::read_to_string(format!("{}.console", booted.display())).unwrap_or_default();
    assert!(
        out.status.success(),
        "the migrated guest printed no line in 300 s; its console's end:\n{}",
        console
            .lines()
            .rev()
            .take(30)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n")
    );
    let line = String::from_utf8(out.stdout).unwrap();
    let migrated = fields(&line);
    assert_eq!(
        migrated.get("machine-id"),
        source.get("machine-id"),
        "{line}"
    );
    assert_eq!(migrated.get("marker"), source.get("marker"), "{line}");
    assert_eq!(
        migrated.get("boots").map(String::as_str),
        Some("2"),
        "the source's one boot, then this one: {line}"
    );
}
