//! End to end, warm: the first copy is taken from a snapshot while the source runs and its guest
//! writes (`ferry-lab guest-write`), imported and verified; the source runs on until the
//! operator cuts over; then it is powered off, what changed is copied into the volume, and the
//! VM is created and started. The volume ends byte-equal to the source's final disk, and no
//! snapshot is left on the source.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ferry_crds::{ConditionType, Phase, Reason};

const MIB: i64 = 1 << 20;

/// A warm migration's environment: this test's VM on a flat disk, running; its flat file.
async fn warm_env(prefix: &str) -> (Env, std::path::PathBuf) {
    let mut env = Env::new(prefix, 16).await;
    let flat = env.flat_and_running().await;
    env.start_sim();
    env.start_controller();
    (env, flat)
}

fn waiting_for_cutover(v: &ferry_crds::VirtualMachineMigration) -> bool {
    v.phase() == Phase::CuttingOver
        && v.condition(ConditionType::CutOver)
            .is_some_and(|c| c.reason == Reason::WaitingForCutover)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_migration_copies_while_the_source_runs_and_cuts_over_to_its_final_state() {
    let (env, flat) = warm_env("e2e-warm").await;
    env.create(&env.warm_migration("warm", false)).await;

    let precopied = env
        .wait_for("warm", "the first copy imported", 300, waiting_for_cutover)
        .await;
    assert_eq!(
        env.power_state().await,
        "poweredOn",
        "the source runs while it waits for the cutover"
    );
    let w = precopied.status.clone().unwrap().warm.unwrap();
    assert_eq!(w.rounds, 1);
    assert!(w.snapshot.is_none(), "the first copy's snapshot is removed");
    let s = lab_session(env.lab).await;
    assert_eq!(s.snapshots(&env.vm.moref).await.unwrap(), vec![]);
    assert!(
        same_file(&env.volume(&dv_name("warm", 0)), &flat),
        "the first copy is the disk as it was"
    );

    // The guest writes while the migration waits; then the operator cuts over.
    let written = guest_write(env.lab, &env.vm, 25.0, 9);
    assert!(!written.is_empty());
    assert!(!same_file(&env.volume(&dv_name("warm", 0)), &flat));
    env.patch_spec("warm", serde_json::json!({"warm": {"cutover": true}}))
        .await;
    let done = env.wait_terminal("warm", 300).await;
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "status:\n{}",
        serde_yaml_status(&done)
    );
    assert!(all_conditions_true(&done), "{}", serde_yaml_status(&done));
    let status = done.status.clone().unwrap();
    let visited: Vec<Phase> = status.history.iter().map(|h| h.phase).collect();
    assert_eq!(
        visited,
        [
            Phase::Preparing,
            Phase::Converting,
            Phase::Importing,
            Phase::CuttingOver,
            Phase::CreatingVM,
            Phase::Starting,
            Phase::Validating,
            Phase::Succeeded
        ]
    );
    assert_eq!(env.power_state().await, "poweredOff");
    assert!(
        same_file(&env.volume(&dv_name("warm", 0)), &flat),
        "the volume is the source's final disk, byte for byte"
    );
    assert_eq!(
        status.warm.unwrap().cutover_bytes,
        Some(written.len() as i64 * MIB),
        "the cutover copied what the guest wrote, no more"
    );
    assert!(
        status.source_power_off.is_some(),
        "powered off at the cutover"
    );
    assert_eq!(s.snapshots(&env.vm.moref).await.unwrap(), vec![]);
    let _ = s.logout().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_before_the_cutover_the_source_runs_on_untouched_with_no_snapshot_left() {
    let (env, _) = warm_env("e2e-warm-cancel").await;
    env.create(&env.warm_migration("early", false)).await;
    env.wait_for("early", "the first copy imported", 300, waiting_for_cutover)
        .await;
    env.patch_spec("early", serde_json::json!({"cancel": true}))
        .await;
    let done = env.wait_terminal("early", 120).await;
    assert_eq!(
        done.phase(),
        Phase::Cancelled,
        "{}",
        serde_yaml_status(&done)
    );
    assert_eq!(env.power_state().await, "poweredOn", "never powered off");
    assert!(done.status.unwrap().source_power_off.is_none());
    let s = lab_session(env.lab).await;
    assert_eq!(s.snapshots(&env.vm.moref).await.unwrap(), vec![]);
    let _ = s.logout().await;
}

/// A snapshot named as ferry names its own, planted on the source before the migration starts:
/// its name proves nothing (the migration's uid is readable by whoever reads the migration).
/// Preflight holds the migration (a VM with snapshots is not migrated), ferry takes no snapshot
/// of its own, and cancelled, it leaves the planted one where it is. (A snapshot planted after
/// preflight, between the record of ferry's name and its task, is judged by its creation stamp:
/// `reconcile::warm`'s and `reconcile::converting`'s unit tests.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_ferrys_name_that_ferry_did_not_take_holds_the_migration_and_stays() {
    let mut env = Env::new("e2e-warm-planted", 16).await;
    env.flat_and_running().await;
    let created = env.create(&env.warm_migration("planted", false)).await;
    let uid = created.metadata.uid.clone().unwrap();
    let s = lab_session(env.lab).await;
    let planted = s
        .create_snapshot(
            &env.vm.moref,
            &format!("ferry-warm-{uid}-0"),
            "taken by ferry for the warm migration (a copy of its words, no stamp)",
        )
        .await
        .unwrap();
    env.start_sim();
    env.start_controller();

    let held = env
        .wait_for("planted", "held by preflight", 120, |v| {
            v.condition(ConditionType::Validated)
                .is_some_and(|c| c.reason == Reason::PreflightFailed)
        })
        .await;
    assert_eq!(held.phase(), Phase::Pending);
    let message = &held.condition(ConditionType::Validated).unwrap().message;
    assert!(message.contains("SnapshotPresent"), "{message}");
    env.patch_spec("planted", serde_json::json!({"cancel": true}))
        .await;
    let done = env.wait_terminal("planted", 120).await;
    assert_eq!(
        done.phase(),
        Phase::Cancelled,
        "{}",
        serde_yaml_status(&done)
    );
    let left = s.snapshots(&env.vm.moref).await.unwrap();
    assert_eq!(
        left.iter().map(|x| x.moref.as_str()).collect::<Vec<_>>(),
        [planted.as_str()],
        "the planted snapshot stays, and ferry took none of its own"
    );
    assert_eq!(env.power_state().await, "poweredOn", "never powered off");
    let _ = s.logout().await;
}
