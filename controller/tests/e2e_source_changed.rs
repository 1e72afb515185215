//! End to end, "Succeeded" means the source's final state: what ferry records of the source at
//! the power-off the copy is made after (its disks, their change ids, its configuration's
//! version, vCenter's clock) is read again before the migrated VM is made, with the power-ons
//! vCenter recorded since. A disk added while a cold copy imports or while a warm one waits
//! for its cutover, or a power cycle with a write during a cold copy, ends `SourceChanged`
//! before any VirtualMachine exists; a retry starts over and migrates the final state.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use ferry_controller::apis::kubevirt::VirtualMachine;
use ferry_crds::{ConditionType, Phase, Reason, VirtualMachineMigration, names};
use kube::Api;

/// The migration failed with `SourceChanged` naming `words`, and no VirtualMachine exists.
async fn changed_and_nothing_made(env: &Env, name: &str, words: &str) -> VirtualMachineMigration {
    let done = env.wait_terminal(name, 300).await;
    assert_eq!(done.phase(), Phase::Failed, "{}", serde_yaml_status(&done));
    let f = done.status.clone().unwrap().last_failure.unwrap();
    assert_eq!(f.reason, Reason::SourceChanged, "{f:?}");
    assert!(f.retriable, "{f:?}");
    assert!(f.message.contains(words), "{words:?} in {}", f.message);
    let vms: Api<VirtualMachine> = env.ns.api();
    assert!(
        vms.get_opt(&names::vm_name(&done)).await.unwrap().is_none(),
        "no VirtualMachine was made"
    );
    assert_ne!(
        done.condition(ConditionType::VMCreated).map(|c| c.status),
        Some(ferry_crds::ConditionStatus::True)
    );
    done
}

/// Raises spec.retry and waits for the migration to succeed.
async fn retried_to_success(env: &Env, name: &str) -> VirtualMachineMigration {
    env.patch_spec(name, serde_json::json!({"retry": 1})).await;
    env.wait_for(name, "the retry to start", 60, |v| {
        v.status.as_ref().is_some_and(|s| s.attempts >= 2)
    })
    .await;
    let done = env.wait_terminal(name, 420).await;
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&done)
    );
    done
}

/// A second disk of `mib` MiB behind the VM's `disk2.vmdk` (what `shape --add-disk plain`
/// adds): a flat VMDK of a seeded pattern; its raw image.
fn second_disk(env: &Env, mib: u64) -> PathBuf {
    let dir = env.vm.disks[0].local_path.parent().unwrap().to_path_buf();
    let raw = env.scratch.join("disk2.raw");
    let bytes: Vec<u8> = (0..mib * (1 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&raw, bytes).unwrap();
    let vmdk = dir.join("disk2.vmdk");
    let _ = std::fs::remove_file(&vmdk);
    ferry_harness::qemu_img(&[
        "convert",
        "-f",
        "raw",
        "-O",
        "vmdk",
        "-o",
        "subformat=monolithicFlat",
        raw.to_str().unwrap(),
        vmdk.to_str().unwrap(),
    ])
    .unwrap();
    raw
}

fn volume_is(env: &Env, name: &str, disk: usize, raw: &Path) {
    assert!(
        same_file(&env.volume(&dv_name(name, disk)), raw),
        "disk {disk}'s volume is the source's final disk, byte for byte"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_added_while_a_cold_copy_imports_fails_it_and_a_retry_migrates_both() {
    let mut env = Env::new("e2e-changed-disk", 16).await;
    // Imports of 16 s: the disk is added while they run.
    env.sim_args = vec!["--throughput-mib".into(), "1".into()];
    env.start_sim();
    env.start_controller();
    env.create(&env.migration("grown")).await;
    env.wait_phase("grown", Phase::Importing, 240).await;
    env.shape(&env.vm.name, &["--add-disk", "plain"]);
    let second = second_disk(&env, 16);
    let failed = changed_and_nothing_made(&env, "grown", "a disk was added").await;
    println!("{}", failed.status.unwrap().last_failure.unwrap().message);

    let done = retried_to_success(&env, "grown").await;
    let s = done.status.unwrap();
    assert_eq!(s.disks.len(), 2, "both disks migrated");
    let first = env.scratch.join("first.raw");
    qemu_raw(&env.vm.disks[0].local_path, &first);
    volume_is(&env, "grown", 0, &first);
    volume_is(&env, "grown", 1, &second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_cycle_with_a_write_during_a_cold_copy_fails_it_and_a_retry_copies_the_write() {
    let mut env = Env::new("e2e-changed-cycle", 16).await;
    let flat = env.flat_and_running().await;
    env.sim_args = vec!["--throughput-mib".into(), "1".into()];
    env.start_sim();
    env.start_controller();
    env.create(&env.migration("cycled")).await;
    env.wait_phase("cycled", Phase::Importing, 240).await;
    // Someone with vCenter rights: on, 1 MiB written by the guest, off again.
    env.shape(&env.vm.name, &["--power", "on"]);
    let written = guest_write(env.lab, &env.vm, 7.0, 23);
    assert!(!written.is_empty());
    env.shape(&env.vm.name, &["--power", "off"]);
    changed_and_nothing_made(&env, "cycled", "it was powered on at").await;

    retried_to_success(&env, "cycled").await;
    assert!(
        same_file(&env.volume(&dv_name("cycled", 0)), &flat),
        "the retry copied the source's final disk, the write included"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_added_while_a_warm_migration_waits_fails_its_cutover_with_the_source_on() {
    let mut env = Env::new("e2e-changed-warm", 16).await;
    env.flat_and_running().await;
    env.start_sim();
    env.start_controller();
    env.create(&env.warm_migration("warm", false)).await;
    env.wait_for("warm", "the first copy imported", 300, |v| {
        v.phase() == Phase::CuttingOver
            && v.condition(ConditionType::CutOver)
                .is_some_and(|c| c.reason == Reason::WaitingForCutover)
    })
    .await;
    env.shape(&env.vm.name, &["--add-disk", "plain"]);
    env.patch_spec("warm", serde_json::json!({"warm": {"cutover": true}}))
        .await;
    let failed = changed_and_nothing_made(&env, "warm", "a disk was added").await;
    assert_eq!(
        env.power_state().await,
        "poweredOn",
        "not powered off for a cutover of an old set of disks"
    );
    assert!(failed.status.unwrap().source_power_off.is_none());
}
