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

/// A snapshot named as ferry names its own (`migration.platform.example/warm-<uid>-<attempt>`,
/// the first attempt 1), planted on the source before the migration starts: its name proves
/// nothing (the migration's uid is readable by whoever reads the migration). Preflight holds the
/// migration (a VM with snapshots is not migrated), ferry takes no snapshot of its own, and
/// cancelled, it leaves the planted one where it is. (One planted between the record of ferry's
/// name and its task: the test after this one.)
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
            &format!("{}warm-{uid}-1", ferry_crds::names::PREFIX),
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

/// A snapshot of ferry's exact name planted between the moment ferry records the name and the
/// moment its snapshot is taken (the lab's vCenter holds ferry's CreateSnapshot_Task for a few
/// seconds, `shape --snapshot-delay`, and says so with a file beside the VM's disk): ferry's own
/// is taken too, and only it carries ferry's stamp. The migration fails (SnapshotFailed) naming
/// the planted one; deleted, it removes its own snapshot — read back through the lab's vCenter —
/// and leaves the planted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_ferrys_name_planted_while_ferry_takes_its_own_leaves_only_ferrys_removed() {
    let mut env = Env::new("e2e-warm-clash", 16).await;
    env.flat_and_running().await;
    env.shape(&env.vm.name, &["--snapshot-delay", "6s"]);
    env.start_sim();
    env.start_controller();
    let created = env.create(&env.warm_migration("clash", false)).await;
    let uid = created.metadata.uid.clone().unwrap();
    let name = format!("{}warm-{uid}-1", ferry_crds::names::PREFIX);
    env.wait_for("clash", "ferry's snapshot named", 180, |v| {
        v.status
            .as_ref()
            .and_then(|s| s.warm.as_ref())
            .and_then(|w| w.snapshot.as_ref())
            .is_some_and(|r| r.name == name && r.moref.is_none())
    })
    .await;
    // Ferry's CreateSnapshot_Task is in: the lab marks it while it holds it.
    let pending = env.vm.disks[0]
        .local_path
        .with_file_name(".ferry-lab-snapshot-pending");
    ferry_harness::eventually(
        "ferry's snapshot task held",
        std::time::Duration::from_secs(60),
        || async { pending.exists().then_some(()) },
    )
    .await
    .unwrap();
    env.shape(&env.vm.name, &["--snapshot-delay", "0s"]);
    let s = lab_session(env.lab).await;
    let planted = s
        .create_snapshot(&env.vm.moref, &name, "planted under ferry's name, no stamp")
        .await
        .unwrap();
    assert!(
        pending.exists(),
        "planted while ferry's task was still held"
    );

    let failed = env.wait_terminal("clash", 120).await;
    assert_eq!(
        failed.phase(),
        Phase::Failed,
        "{}",
        serde_yaml_status(&failed)
    );
    let f = failed.status.clone().unwrap().last_failure.unwrap();
    assert_eq!(f.reason, Reason::SnapshotFailed, "{f:?}");
    assert!(
        f.message.contains(&planted),
        "names the planted one: {}",
        f.message
    );
    let both = s.snapshots(&env.vm.moref).await.unwrap();
    assert_eq!(both.len(), 2, "ferry's own and the planted one: {both:?}");

    env.api()
        .delete("clash", &Default::default())
        .await
        .unwrap();
    env.wait_gone("clash", 120).await;
    let left = s.snapshots(&env.vm.moref).await.unwrap();
    assert_eq!(
        left.iter().map(|x| x.moref.as_str()).collect::<Vec<_>>(),
        [planted.as_str()],
        "ferry's own snapshot is gone, the planted one stays"
    );
    let _ = s.logout().await;
}

/// Precopy rounds: while the migration waits for its cutover, every interval a snapshot of the
/// running source and only what changed since the round before are copied into the volume; the
/// round measures the guest's change rate and predicts the cutover's copy; its snapshot goes.
/// The cutover then copies only what changed since the last round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn precopy_rounds_follow_the_running_guest_until_the_cutover() {
    let (env, flat) = warm_env("e2e-warm-rounds").await;
    let mut vmm = env.warm_migration("rounds", false);
    vmm.spec.warm.as_mut().unwrap().precopy_interval_seconds = Some(10);
    env.create(&vmm).await;
    env.wait_for(
        "rounds",
        "the first copy imported",
        300,
        waiting_for_cutover,
    )
    .await;

    let written = guest_write(env.lab, &env.vm, 10.0, 21);
    assert!(!written.is_empty());
    let rounded = env
        .wait_for("rounds", "a second round copied", 120, |v| {
            v.status
                .as_ref()
                .and_then(|s| s.warm.as_ref())
                .is_some_and(|w| w.rounds >= 2 && w.snapshot.is_none())
        })
        .await;
    let w = rounded.status.clone().unwrap().warm.unwrap();
    assert_eq!(
        env.power_state().await,
        "poweredOn",
        "rounds copy while the source runs"
    );
    assert!(
        same_file(&env.volume(&dv_name("rounds", 0)), &flat),
        "the round copied what the guest wrote"
    );
    if w.rounds == 2 {
        assert_eq!(
            w.last_delta_bytes,
            Some(written.len() as i64 * MIB),
            "the second round copied what changed since the first, no more"
        );
        assert!(
            w.change_rate_bytes_per_second.is_some_and(|r| r > 0),
            "{w:?}"
        );
    }
    assert!(
        w.predicted_cutover_copy_seconds.is_some_and(|s| s >= 1),
        "{w:?}"
    );
    assert!(w.next_round_at.is_some(), "{w:?}");
    let s = lab_session(env.lab).await;
    assert_eq!(s.snapshots(&env.vm.moref).await.unwrap(), vec![]);

    // More writes, then the cutover (a round may be under way: it is cut short).
    let more = guest_write(env.lab, &env.vm, 5.0, 22);
    assert!(!more.is_empty());
    env.patch_spec("rounds", serde_json::json!({"warm": {"cutover": true}}))
        .await;
    let done = env.wait_terminal("rounds", 300).await;
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&done)
    );
    assert_eq!(env.power_state().await, "poweredOff");
    assert!(
        same_file(&env.volume(&dv_name("rounds", 0)), &flat),
        "the volume is the source's final disk, byte for byte"
    );
    let w = done.status.unwrap().warm.unwrap();
    assert!(
        w.cutover_bytes.unwrap_or_default() <= more.len() as i64 * MIB,
        "the cutover copied at most what changed since the last round: {w:?}"
    );
    assert_eq!(s.snapshots(&env.vm.moref).await.unwrap(), vec![]);
    let _ = s.logout().await;
}

/// A warm wave of two VMs with `maxInFlight` 1: both are precopied while they run (a migration
/// waiting for its cutover takes no slot), both wait; at the wave's cutover they cut over one at
/// a time, and each volume ends byte-equal to its source's final disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_wave_precopies_every_vm_then_cuts_them_over_within_max_in_flight() {
    use ferry_crds::{MigrationWave, MigrationWaveSpec, VirtualMachineMigration, WaveVm};
    use futures::StreamExt;
    use kube::api::{Api, Patch, PatchParams, PostParams};
    use kube::runtime::{WatchStreamExt, watcher};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    let mut env = Env::new("e2e-warm-wave", 16).await;
    let flat = env.flat_and_running().await;
    let second = env.lab.claim_vm().unwrap();
    ferry_harness::put_disk(
        &second,
        &env.scratch.join("second"),
        16,
        0x5ec,
        ferry_harness::DiskKind::Flat,
        4,
    )
    .unwrap();
    let s = lab_session(env.lab).await;
    s.power_on(&second.moref).await.unwrap();
    let second_flat = second.disks[0].local_path.with_file_name("disk1-flat.vmdk");
    env.start_sim();
    env.start_controller();

    let mut template = env.wave_template();
    template.mode = ferry_crds::MigrationMode::Warm;
    let spec = MigrationWaveSpec {
        template,
        vms: [env.vm.name.clone(), second.name.clone()]
            .into_iter()
            .map(WaveVm::by_name)
            .collect(),
        max_in_flight: 1,
        selector: None,
        paused: false,
        cancel: false,
        window: None,
        retry: 0,
        warm: Some(ferry_crds::WarmSpec::default()),
    };
    let names = [&env.vm.name, &second.name]
        .map(|n| ferry_crds::child_migration_name("ww", &WaveVm::by_name(n.clone())));
    // The most children cutting over at once (cutover begun, not finished).
    let vmms: Api<VirtualMachineMigration> = env.ns.api();
    let peak = std::sync::Arc::new(AtomicUsize::new(0));
    let tracker = {
        let (peak, vmms) = (peak.clone(), vmms.clone());
        tokio::spawn(async move {
            let mut cutting = std::collections::BTreeMap::new();
            let mut s = std::pin::pin!(watcher(vmms, watcher::Config::default()).applied_objects());
            while let Some(Ok(v)) = s.next().await {
                let v: VirtualMachineMigration = v;
                let begun = v
                    .status
                    .as_ref()
                    .and_then(|s| s.warm.as_ref())
                    .is_some_and(|w| w.cutover_started_at.is_some());
                cutting.insert(
                    kube::ResourceExt::name_any(&v),
                    begun && !v.phase().is_terminal(),
                );
                let n = cutting.values().filter(|c| **c).count();
                peak.fetch_max(n, Ordering::Relaxed);
            }
        })
    };
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(&PostParams::default(), &MigrationWave::new("ww", spec))
        .await
        .unwrap();
    for n in &names {
        env.wait_for(n, "the first copy imported", 300, waiting_for_cutover)
            .await;
    }
    let w = ferry_harness::eventually(
        "the wave to count both waiting",
        Duration::from_secs(60),
        || async {
            let w = waves.get("ww").await.ok()?;
            w.status
                .as_ref()
                .is_some_and(|s| s.waiting_for_cutover == 2 && s.in_flight == 0)
                .then_some(w)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    assert_eq!(w.status.unwrap().counts.succeeded, 0);
    assert_eq!(env.power_state().await, "poweredOn");
    assert_eq!(env.power_state_of(&second).await, "poweredOn");

    // Both guests write; then the wave's cutover.
    assert!(!guest_write(env.lab, &env.vm, 25.0, 31).is_empty());
    assert!(!guest_write(env.lab, &second, 25.0, 32).is_empty());
    waves
        .patch(
            "ww",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"warm": {"cutover": true}}})),
        )
        .await
        .unwrap();
    for n in &names {
        let done = env.wait_terminal(n, 300).await;
        assert_eq!(
            done.phase(),
            Phase::Succeeded,
            "{}",
            serde_yaml_status(&done)
        );
    }
    tracker.abort();
    assert_eq!(
        peak.load(Ordering::Relaxed),
        1,
        "one cutover at a time (maxInFlight 1)"
    );
    assert_eq!(env.power_state().await, "poweredOff");
    assert_eq!(env.power_state_of(&second).await, "poweredOff");
    assert!(same_file(&env.volume(&dv_name(&names[0], 0)), &flat));
    assert!(same_file(&env.volume(&dv_name(&names[1], 0)), &second_flat));
    for vm in [&env.vm, &second] {
        assert_eq!(s.snapshots(&vm.moref).await.unwrap(), vec![]);
    }
    let _ = s.logout().await;
}

/// The round's record as the migration shows it.
fn warm_of(v: &ferry_crds::VirtualMachineMigration) -> ferry_crds::WarmStatus {
    v.status
        .as_ref()
        .and_then(|s| s.warm.as_deref().cloned())
        .unwrap_or_default()
}

/// SIGKILLed twice inside a precopy round (once its snapshot is recorded, once its Job exists),
/// the controller takes the round up again: it completes, the volume follows the guest, the
/// source runs on, no snapshot and no round Job are left; then the cutover ends byte-equal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_inside_a_precopy_round_finishes_it_and_leaves_nothing() {
    use k8s_openapi::api::batch::v1::Job;
    use kube::api::Api;
    use std::time::Duration;

    let (mut env, flat) = warm_env("e2e-warm-kill").await;
    let mut vmm = env.warm_migration("killed", false);
    vmm.spec.warm.as_mut().unwrap().precopy_interval_seconds = Some(10);
    env.create(&vmm).await;
    env.wait_for(
        "killed",
        "the first copy imported",
        300,
        waiting_for_cutover,
    )
    .await;
    let written = guest_write(env.lab, &env.vm, 10.0, 41);
    assert!(!written.is_empty());

    // Inside round 2: its snapshot recorded.
    env.wait_for("killed", "round 2's snapshot recorded", 120, |v| {
        let w = warm_of(v);
        w.rounds == 1 && w.snapshot.is_some()
    })
    .await;
    env.controller.take().unwrap().kill();
    env.start_controller();
    // Inside round 2 again: its Job made (unless the round ended meanwhile: then the next).
    let jobs: Api<Job> = env.ns.api();
    let job = ferry_crds::names::precopy_job_name(&env.get("killed").await);
    ferry_harness::eventually("the round's Job", Duration::from_secs(120), || async {
        jobs.get_opt(&job).await.ok().flatten().map(|_| ())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    env.controller.take().unwrap().kill();
    env.start_controller();

    let rounded = env
        .wait_for("killed", "a round completed after the kills", 180, |v| {
            let w = warm_of(v);
            w.rounds >= 2 && w.snapshot.is_none()
        })
        .await;
    assert_eq!(
        env.power_state().await,
        "poweredOn",
        "rounds leave it running"
    );
    assert!(
        same_file(&env.volume(&dv_name("killed", 0)), &flat),
        "the round copied what the guest wrote"
    );
    assert_eq!(warm_of(&rounded).last_round_failure, None);
    let s = lab_session(env.lab).await;
    assert_eq!(s.snapshots(&env.vm.moref).await.unwrap(), vec![]);

    env.patch_spec("killed", serde_json::json!({"warm": {"cutover": true}}))
        .await;
    let done = env.wait_terminal("killed", 300).await;
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&done)
    );
    assert!(same_file(&env.volume(&dv_name("killed", 0)), &flat));
    assert_eq!(s.snapshots(&env.vm.moref).await.unwrap(), vec![]);
    assert!(
        jobs.get_opt(&job).await.unwrap().is_none(),
        "no round Job left"
    );
    let _ = s.logout().await;
}

/// A precopy round whose Job fails (the sim's permanent Job fault) is recorded and ended: its
/// snapshot removed, the source untouched and running, the change ids not moved; once the fault
/// is gone the next round copies those changes again, and the cutover ends byte-equal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_precopy_round_is_recorded_and_the_next_copies_its_changes_again() {
    let (env, flat) = warm_env("e2e-warm-fail").await;
    let mut vmm = env.warm_migration("failing", false);
    vmm.spec.warm.as_mut().unwrap().precopy_interval_seconds = Some(10);
    env.create(&vmm).await;
    env.wait_for(
        "failing",
        "the first copy imported",
        300,
        waiting_for_cutover,
    )
    .await;
    // Every later Job of this migration fails until the annotation goes.
    env.annotate("failing", FAULT, Some("convert=permanent"))
        .await;
    let written = guest_write(env.lab, &env.vm, 10.0, 51);
    assert!(!written.is_empty());
    let failed = env
        .wait_for("failing", "a round failed and ended", 180, |v| {
            let w = warm_of(v);
            w.last_round_failure.is_some() && w.snapshot.is_none()
        })
        .await;
    let w = warm_of(&failed);
    assert_eq!(w.rounds, 1, "a failed round does not count: {w:?}");
    assert_eq!(failed.phase(), Phase::CuttingOver, "it waits on");
    assert!(
        w.last_round_failure
            .as_deref()
            .is_some_and(|m| m.contains("injected permanent convert fault")),
        "{w:?}"
    );
    assert_eq!(env.power_state().await, "poweredOn");
    let s = lab_session(env.lab).await;
    assert_eq!(s.snapshots(&env.vm.moref).await.unwrap(), vec![]);
    assert!(
        !same_file(&env.volume(&dv_name("failing", 0)), &flat),
        "the failed round's changes are not in the volume yet"
    );

    env.annotate("failing", FAULT, None).await;
    let rounded = env
        .wait_for("failing", "the next round completed", 180, |v| {
            let w = warm_of(v);
            w.rounds >= 2 && w.snapshot.is_none()
        })
        .await;
    assert_eq!(
        warm_of(&rounded).last_round_failure,
        None,
        "cleared by a round that completed"
    );
    assert!(
        same_file(&env.volume(&dv_name("failing", 0)), &flat),
        "the next round copied the failed one's changes again"
    );
    env.patch_spec("failing", serde_json::json!({"warm": {"cutover": true}}))
        .await;
    let done = env.wait_terminal("failing", 300).await;
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&done)
    );
    assert!(same_file(&env.volume(&dv_name("failing", 0)), &flat));
    assert_eq!(s.snapshots(&env.vm.moref).await.unwrap(), vec![]);
    let _ = s.logout().await;
}

/// A cutover asked while a precopy round's Job is still at work cuts that round short: its Job
/// deleted in the foreground (its pods gone before the cutover's Job writes), its snapshot
/// removed, its changes not counted; the cutover copies everything since the last completed
/// round and the volume ends byte-equal. The round is held in flight by the sim's `always`
/// Job fault (each attempt fails; the Job retries after its backoff, 10 s then 20 s), so the
/// cutover lands inside it; the fault goes with the cutover's patch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cutover_cuts_a_running_precopy_round_short_and_copies_its_changes() {
    use k8s_openapi::api::batch::v1::Job;
    use kube::api::{Api, Patch, PatchParams};
    use std::time::Duration;

    let (env, flat) = warm_env("e2e-warm-short").await;
    let mut vmm = env.warm_migration("short", false);
    vmm.spec.warm.as_mut().unwrap().precopy_interval_seconds = Some(10);
    env.create(&vmm).await;
    env.wait_for("short", "the first copy imported", 300, waiting_for_cutover)
        .await;
    env.annotate("short", FAULT, Some("convert=always")).await;
    let written = guest_write(env.lab, &env.vm, 10.0, 61);
    assert!(!written.is_empty());

    // Round 2 in flight: its Job made, one attempt failed, the Job retrying.
    let jobs: Api<Job> = env.ns.api();
    let job = ferry_crds::names::precopy_job_name(&env.get("short").await);
    ferry_harness::eventually(
        "the round's Job retrying",
        Duration::from_secs(180),
        || async {
            let j = jobs.get_opt(&job).await.ok().flatten()?;
            let st = j.status?;
            let ended = st.conditions.iter().flatten().any(|c| {
                matches!(c.type_.as_str(), "Failed" | "FailureTarget" | "Complete")
                    && c.status == "True"
            });
            (st.failed.unwrap_or(0) >= 1 && !ended).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    let during = env.get("short").await;
    assert!(
        warm_of(&during).snapshot.is_some(),
        "the round's snapshot is held"
    );
    assert_eq!(warm_of(&during).rounds, 1);

    let patch = serde_json::json!({
        "metadata": {"annotations": {FAULT: null}},
        "spec": {"warm": {"cutover": true}},
    });
    env.api()
        .patch("short", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let done = env.wait_terminal("short", 300).await;
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&done)
    );
    let w = warm_of(&done);
    assert_eq!(
        (w.rounds, w.last_round_failure.clone()),
        (1, None),
        "the round was cut short, neither completed nor failed: {w:?}"
    );
    assert!(w.cutover_bytes.is_some_and(|b| b > 0), "{w:?}");
    assert!(
        same_file(&env.volume(&dv_name("short", 0)), &flat),
        "the cutover copied the cut round's changes"
    );
    assert!(
        jobs.get_opt(&job).await.unwrap().is_none(),
        "no round Job left"
    );
    let s = lab_session(env.lab).await;
    assert_eq!(s.snapshots(&env.vm.moref).await.unwrap(), vec![]);
    let _ = s.logout().await;
}

/// A DataVolume deleted by hand while the migration waits for its cutover took the first copy
/// and its precopy rounds with it. The migration fails at once, naming it, for good (importing
/// again would skip the rounds' changes); the cutover asked for after it never powers the
/// source off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_datavolume_deleted_before_the_cutover_fails_it_and_the_source_runs_on() {
    use ferry_controller::apis::cdi::DataVolume;
    use kube::api::DeleteParams;
    let (env, _flat) = warm_env("e2e-warm-lost").await;
    env.create(&env.warm_migration("lost", false)).await;
    env.wait_for("lost", "the first copy imported", 300, waiting_for_cutover)
        .await;
    let dvs: kube::Api<DataVolume> = env.ns.api();
    let dv = dv_name("lost", 0);
    dvs.delete(&dv, &DeleteParams::background()).await.unwrap();
    env.patch_spec("lost", serde_json::json!({"warm": {"cutover": true}}))
        .await;
    let v = env.wait_terminal("lost", 120).await;
    assert_eq!(v.phase(), Phase::Failed, "{}", serde_yaml_status(&v));
    let c = v.condition(ConditionType::CutOver).unwrap();
    assert_eq!(c.reason, Reason::CutoverFailed, "{}", serde_yaml_status(&v));
    assert!(c.message.contains(&dv), "{}", c.message);
    let failure = v.status.as_ref().unwrap().last_failure.clone().unwrap();
    assert!(
        !failure.retriable,
        "importing again would skip the rounds' changes"
    );
    assert_eq!(
        env.power_state().await,
        "poweredOn",
        "the source is never powered off for a cutover with nothing to copy onto"
    );
}
