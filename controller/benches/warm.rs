//! `make bench`: a warm migration's downtime against a cold one's, the same disk, one run. An
//! 8 GiB thin disk (half of it data, ESXi's flat layout) behind two lab VMs: one migrated cold,
//! one warm while its guest writes 2 % of its blocks (`ferry-lab guest-write`) between the
//! first copy and a precopy round, and 2 % more between the round and the cutover. Downtime: the source powered off (`status.sourcePowerOff`) to
//! the VirtualMachineInstance running (`VMStarted`'s transition), whole seconds as the status
//! records them. Also reported: the bytes the warm migration read from the source for its first
//! copy, a precopy round and the cutover (the precopy's extra load on the source's storage).
//!
//! `FERRY_BENCH_WARM_MIB` resizes the disk (default 8192). Prints a table with the target beside
//! each figure and writes `target/bench/warm.{txt,json}`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;
mod support;

use std::process::Command;

use common::*;
use ferry_crds::{ConditionType, MigrationMode, Phase, Reason, VirtualMachineMigration, WarmSpec};
use ferry_harness::{DiskKind, InventoryVm, put_disk};

/// Seconds from the source's power-off to the instance running, as the status records them.
fn downtime(v: &VirtualMachineMigration) -> Option<i64> {
    let s = v.status.as_ref()?;
    let off = s.source_power_off.as_ref()?;
    let off = off
        .shutdown_guest_at
        .as_ref()
        .or(off.hard_power_off_at.as_ref())?;
    let running = v
        .condition(ConditionType::VMStarted)?
        .last_transition_time
        .clone();
    Some(running.0.as_second() - off.0.as_second())
}

/// The claimed VM given an ESXi-style flat disk of `mib` MiB, every second MiB zero, and
/// powered on.
async fn vm_with_disk(env: &Env, mib: u64, seed: u64) -> InventoryVm {
    let vm = env.lab.claim_vm().unwrap();
    let disk = put_disk(
        &vm,
        &env.scratch.join(&vm.name),
        mib,
        seed,
        DiskKind::Flat,
        2,
    )
    .unwrap();
    let _ = std::fs::remove_file(&disk.raw);
    ferry_vsphere::tls::install_default_provider();
    let vc = &env.lab.info.vcenter;
    let s = ferry_vsphere::Session::connect(&ferry_vsphere::Endpoint {
        url: vc.url.clone(),
        username: vc.username.clone(),
        password: vc.password.clone().into(),
        tls: ferry_vsphere::TlsPolicy::Insecure,
    })
    .await
    .unwrap();
    s.power_on(&vm.moref).await.unwrap();
    let _ = s.logout().await;
    vm
}

fn guest_write(env: &Env, vm: &InventoryVm, percent: f64, seed: u64) -> u64 {
    let out = Command::new(ferry_harness::repo_root().join("target/lab/bin/ferry-lab"))
        .arg("guest-write")
        .arg("--state-dir")
        .arg(&env.lab.info.state_dir)
        .args([
            "--vm",
            &vm.name,
            "--percent",
            &percent.to_string(),
            "--seed",
            &seed.to_string(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("bytes="))
        .and_then(|b| b.parse().ok())
        .unwrap()
}

#[tokio::main]
async fn main() {
    let mib: u64 = std::env::var("FERRY_BENCH_WARM_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8192);
    let mut env = Env::new("bench-warm", 8).await;
    env.start_sim();
    env.start_controller();

    // Cold.
    let cold_vm = vm_with_disk(&env, mib, 5).await;
    env.create(&env.migration_of("cold", &cold_vm)).await;
    let cold = env.wait_terminal("cold", 3600).await;
    assert_eq!(
        cold.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&cold)
    );
    let cold_down = downtime(&cold).unwrap();
    // Its volume and staging go before the warm run: one disk's copies at a time.
    env.api().delete("cold", &Default::default()).await.unwrap();
    env.wait_gone("cold", 600).await;
    let _ = std::fs::remove_file(env.volume(&dv_name("cold", 0)));
    let _ = std::fs::remove_file(
        cold_vm.disks[0]
            .local_path
            .with_file_name("disk1-flat.vmdk"),
    );

    // Warm: the guest writes 2 % between the first copy and the cutover.
    let warm_vm = vm_with_disk(&env, mib, 6).await;
    let mut vmm = env.migration_of("warm", &warm_vm);
    vmm.spec.mode = MigrationMode::Warm;
    // A round a minute: the bench waits for one round between the first copy and the cutover.
    vmm.spec.warm = Some(WarmSpec {
        precopy_interval_seconds: Some(60),
        ..WarmSpec::default()
    });
    env.create(&vmm).await;
    let precopied = env
        .wait_for("warm", "the first copy imported", 3600, |v| {
            v.phase() == Phase::CuttingOver
                && v.condition(ConditionType::CutOver)
                    .is_some_and(|c| c.reason == Reason::WaitingForCutover)
        })
        .await;
    let first_copy: i64 = precopied
        .status
        .as_ref()
        .map(|s| s.disks.iter().filter_map(|d| d.staged_bytes).sum())
        .unwrap_or(0);
    // 2 % written, a precopy round copies it (the source's extra load per round), 2 % more
    // written, then the cutover copies only that.
    let round_written = guest_write(&env, &warm_vm, 2.0, 27);
    let rounded = env
        .wait_for("warm", "a precopy round copied", 3600, |v| {
            v.status
                .as_ref()
                .and_then(|s| s.warm.as_ref())
                .is_some_and(|w| w.rounds >= 2 && w.snapshot.is_none())
        })
        .await;
    let round_bytes = rounded
        .status
        .as_ref()
        .and_then(|s| s.warm.as_ref())
        .and_then(|w| w.last_delta_bytes)
        .unwrap_or(0);
    let predicted = rounded
        .status
        .as_ref()
        .and_then(|s| s.warm.as_ref())
        .and_then(|w| w.predicted_cutover_copy_seconds);
    let predicted_downtime = rounded
        .status
        .as_ref()
        .and_then(|s| s.warm.as_ref())
        .and_then(|w| w.predicted_downtime_seconds);
    let written = guest_write(&env, &warm_vm, 2.0, 28);
    env.patch_spec("warm", serde_json::json!({"warm": {"cutover": true}}))
        .await;
    let warm = env.wait_terminal("warm", 3600).await;
    assert_eq!(
        warm.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&warm)
    );
    let warm_down = downtime(&warm).unwrap();
    let cutover_bytes = warm
        .status
        .as_ref()
        .and_then(|s| s.warm.as_ref())
        .and_then(|w| w.cutover_bytes)
        .unwrap_or(0);
    let _ = std::fs::remove_file(env.volume(&dv_name("warm", 0)));

    let ratio = warm_down.max(1) as f64 / cold_down.max(1) as f64;
    let gib = |b: i64| format!("{:.2} GiB", b as f64 / f64::from(1u32 << 30));
    let rows = vec![
        support::row(
            &format!(
                "{} MiB thin disk (half data): cold downtime (power-off → VMI running)",
                mib
            ),
            format!("{cold_down} s"),
            "-",
        ),
        support::row(
            "  warm downtime, the guest having written 2 % before the cutover",
            format!("{warm_down} s"),
            "-",
        ),
        support::row("  warm / cold", format!("{ratio:.3}"), "≤ 0.2"),
        support::row(
            "  read from the source: first copy (staged image) / a precopy round / cutover",
            format!(
                "{} / {} / {}",
                gib(first_copy),
                gib(round_bytes),
                gib(cutover_bytes)
            ),
            "reported",
        ),
        support::row(
            "  written by the guest before the round / before the cutover",
            format!(
                "{} / {}",
                gib(i64::try_from(round_written).unwrap_or(i64::MAX)),
                gib(i64::try_from(written).unwrap_or(i64::MAX))
            ),
            "-",
        ),
        support::row(
            "  cutover copy predicted after the round",
            predicted.map_or("-".to_owned(), |p| format!("{p} s")),
            "reported",
        ),
        support::row(
            "  downtime predicted after the round (copy + longest shutdown; boot on top)",
            predicted_downtime.map_or("-".to_owned(), |p| format!("{p} s")),
            "reported",
        ),
    ];
    support::write_table("ferry-controller: warm migration's downtime", "warm", &rows);
}
