//! End to end, resumability: the controller is SIGKILLed once inside each checkpoint and
//! restarted; the migration still succeeds and no child is ever created twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use ferry_crds::{Phase, Readiness, VirtualMachineMigration};
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};

/// Creates `vmm` and SIGKILLs the controller once inside each checkpoint it enters, restarting it
/// each time; `in_checkpoint` runs after each kill, with the checkpoint. The migration at its end.
async fn kill_in_every_checkpoint(
    env: &mut Env,
    vmm: &VirtualMachineMigration,
    mut in_checkpoint: impl FnMut(&Env, Phase),
) -> (VirtualMachineMigration, BTreeSet<Phase>, Creations) {
    let creations = Creations::watch(env).await;
    let api = env.api();
    let name = vmm.metadata.name.clone().unwrap();
    let mut phases = std::pin::pin!(
        watcher(
            api.clone(),
            watcher::Config::default().fields(&format!("metadata.name={name}"))
        )
        .applied_objects()
        .filter_map(|v| async move { v.ok().map(|v: VirtualMachineMigration| v.phase()) })
    );
    env.create(vmm).await;
    let mut killed = BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(420);
    loop {
        let next = tokio::time::timeout_at(deadline, phases.next()).await;
        let Ok(Some(phase)) = next else {
            panic!(
                "no progress; killed in {killed:?}; logs in {}",
                env.scratch.display()
            )
        };
        if phase.is_checkpoint() && killed.insert(phase) {
            if let Some(c) = env.controller.as_mut() {
                c.kill();
            }
            in_checkpoint(env, phase);
            // A moment for the world to move on without us, then back.
            tokio::time::sleep(Duration::from_millis(300)).await;
            env.start_controller();
        }
        if phase.is_terminal() {
            break;
        }
    }
    (env.get(&name).await, killed, creations)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_in_every_checkpoint_still_migrates_without_duplicate_children() {
    let mut env = Env::new("e2e-crash", 64).await;
    // Slow enough that Importing spans a kill and a restart.
    env.sim_args = vec!["--throughput-mib".into(), "8".into()];
    env.start_sim();
    env.start_controller();
    let mut vmm = env.migration("crashy");
    // The agent connects a moment after the instance runs: Validating lasts long enough to be
    // killed in (a guest ready at once goes from Starting to Succeeded in one reconcile).
    vmm.spec.target.template.readiness = Some(Readiness::AgentConnected);
    let (v, killed, creations) = kill_in_every_checkpoint(&mut env, &vmm, |_, _| {}).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    assert_eq!(
        killed,
        Phase::CHECKPOINTS
            .into_iter()
            .filter(|p| !matches!(p, Phase::CuttingOver | Phase::ConvertingGuest))
            .collect::<BTreeSet<_>>(),
        "killed once inside each checkpoint of a cold migration (its guest not converted)"
    );
    assert!(all_conditions_true(&v));
    assert_eq!(creations.duplicates(), vec![], "no child created twice");
    let names = creations.names();
    for kind in ["Job/", "DataVolume/", "VirtualMachine/", "Secret/"] {
        assert!(
            names.iter().any(|n| n.starts_with(kind)),
            "a {kind} was created: {names:?}"
        );
    }
    let raw = env.scratch.join("expected.raw");
    qemu_raw(&env.disk.vmdk, &raw);
    assert!(same_file(&env.volume(&dv_name("crashy", 0)), &raw));
    assert!(env.staged_files().is_empty());
}

/// A warm migration asked to cut over at creation: killed in every checkpoint, the snapshot's
/// and the cutover's included, while its guest writes before the cutover. It still ends with the
/// volume equal to the source's final disk, no snapshot left and no child made twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_migration_killed_in_every_checkpoint_still_cuts_over_to_the_final_disk() {
    let mut env = Env::new("e2e-crash-warm", 16).await;
    let flat = env.flat_and_running().await;
    env.sim_args = vec!["--throughput-mib".into(), "4".into()];
    env.start_sim();
    env.start_controller();
    let mut vmm = env.warm_migration("warmcrash", true);
    vmm.spec.target.template.readiness = Some(Readiness::AgentConnected);
    let (v, killed, creations) = kill_in_every_checkpoint(&mut env, &vmm, |env, phase| {
        // The guest writes while the source still runs: the cutover must carry it over.
        if matches!(phase, Phase::Converting | Phase::Importing) {
            guest_write(env.lab, &env.vm, 20.0, phase.index() as u64);
        }
    })
    .await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    assert_eq!(
        killed,
        Phase::CHECKPOINTS
            .into_iter()
            .filter(|p| *p != Phase::ConvertingGuest)
            .collect::<BTreeSet<_>>(),
        "killed once inside each checkpoint of a warm migration (its guest not converted)"
    );
    assert!(all_conditions_true(&v), "{}", serde_yaml_status(&v));
    assert_eq!(creations.duplicates(), vec![], "no child created twice");
    assert!(
        creations.names().iter().any(|n| n.ends_with("-cutover")),
        "{:?}",
        creations.names()
    );
    assert!(
        same_file(&env.volume(&dv_name("warmcrash", 0)), &flat),
        "the volume is the source's final disk"
    );
    let s = lab_session(env.lab).await;
    assert_eq!(s.snapshots(&env.vm.moref).await.unwrap(), vec![]);
    let _ = s.logout().await;
}

/// The window between Validating's release of the VM and the status write that records the end:
/// a controller that dies there leaves a migration whose status lags behind the world (here its
/// status is put back to what it was in Starting, as if every later write was lost). The VM is
/// released — held by the cache as metadata only — and the restarted controller must still see
/// it whole, running, and bring the migration to its end: not start it again, not wait forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_status_that_lags_behind_the_release_still_ends_succeeded() {
    use ferry_controller::apis::kubevirt::VirtualMachine;
    use kube::api::PostParams;
    let mut env = Env::new("e2e-crash-lag", 4).await;
    env.start_sim();
    env.start_controller();
    let api = env.api();
    let starting = {
        let mut seen = std::pin::pin!(
            watcher(
                api.clone(),
                watcher::Config::default().fields("metadata.name=lagging")
            )
            .applied_objects()
        );
        env.create(&env.migration("lagging")).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
        loop {
            let next = tokio::time::timeout_at(deadline, seen.next()).await;
            let Ok(Some(Ok(v))) = next else {
                panic!("never seen in Starting; logs in {}", env.scratch.display())
            };
            if v.phase() == Phase::Starting {
                break v.status.unwrap();
            }
        }
    };
    let done = env.wait_phase("lagging", Phase::Succeeded, 300).await;
    let vms: kube::Api<VirtualMachine> = env.ns.api();
    let vm_name = ferry_crds::names::vm_name(&done);
    let vm = vms.get(&vm_name).await.unwrap();
    assert!(
        vm.metadata.owner_references.is_none_or(|o| o.is_empty()),
        "released"
    );
    // Killed between the release and the write of the end: the status is Starting's.
    if let Some(c) = env.controller.as_mut() {
        c.kill();
    }
    let mut lagging = api.get("lagging").await.unwrap();
    lagging.status = Some(starting);
    api.replace_status("lagging", &PostParams::default(), &lagging)
        .await
        .unwrap();
    assert_eq!(env.get("lagging").await.phase(), Phase::Starting);
    env.start_controller();
    let v = env.wait_phase("lagging", Phase::Succeeded, 120).await;
    assert!(all_conditions_true(&v), "{}", serde_yaml_status(&v));
    let after = vms.get(&vm_name).await.unwrap();
    assert_eq!(
        after.metadata.uid, vm.metadata.uid,
        "the same VM, not made again"
    );
    assert!(
        after.metadata.owner_references.is_none_or(|o| o.is_empty()),
        "still released"
    );
    // Never two live copies: the target runs, so the source stays off.
    assert_eq!(env.power_state().await, "poweredOff");
}

/// A verification of a DataVolume that was replaced since says nothing of the volume there is.
/// The controller is stopped as soon as it made the verification Job; the Job passes; then the
/// DataVolume is deleted by hand (as the soak does), and the restarted controller makes it
/// again. It is imported again and a new verification Job, made for the new DataVolume, checks
/// it: the old Job's pass is not taken for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verification_of_a_replaced_datavolume_is_made_again() {
    use ferry_controller::apis::cdi::DataVolume;
    use ferry_controller::children::verify_job;
    use k8s_openapi::api::batch::v1::Job;
    use kube::ResourceExt;
    use kube::api::DeleteParams;
    let mut env = Env::new("e2e-crash-reverify", 16).await;
    env.start_sim();
    env.start_controller();
    let creations = Creations::watch(&env).await;
    let jobs: kube::Api<Job> = env.ns.api();
    let dvs: kube::Api<DataVolume> = env.ns.api();
    let vmm = env.migration("reverify");
    let job_name = ferry_crds::names::verify_job_name(&vmm);
    let dv = dv_name("reverify", 0);
    let mut made = std::pin::pin!(
        watcher(
            jobs.clone(),
            watcher::Config::default().fields(&format!("metadata.name={job_name}"))
        )
        .applied_objects()
        .filter_map(|j| async move { j.ok() })
    );
    env.create(&vmm).await;
    let first = next_job(&mut made, None).await;
    if let Some(c) = env.controller.as_mut() {
        c.kill();
    }
    let old = dvs.get(&dv).await.unwrap();
    assert_eq!(verify_job::made_for(&first), Some(vec![old.uid().unwrap()]));
    ferry_harness::eventually(
        "the first verification to pass",
        Duration::from_secs(120),
        || async {
            let j = jobs.get(&job_name).await.ok()?;
            (j.status?.succeeded? >= 1).then_some(())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    assert_eq!(
        env.get("reverify").await.phase(),
        Phase::Importing,
        "stopped before it read the pass"
    );
    dvs.delete(&dv, &DeleteParams::background()).await.unwrap();
    ferry_harness::eventually("the DataVolume gone", Duration::from_secs(60), || async {
        matches!(dvs.get_opt(&dv).await, Ok(None)).then_some(())
    })
    .await
    .unwrap();
    env.start_controller();
    let second = next_job(&mut made, first.uid()).await;
    let new = dvs.get(&dv).await.unwrap();
    assert_ne!(new.uid(), old.uid(), "the DataVolume was made again");
    assert_eq!(
        verify_job::made_for(&second),
        Some(vec![new.uid().unwrap()]),
        "the new verification checks the new DataVolume"
    );
    let v = env.wait_terminal("reverify", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    assert_eq!(
        creations.duplicates(),
        vec![
            (format!("DataVolume/{dv}"), 2),
            (format!("Job/{job_name}"), 2)
        ],
        "only the deleted DataVolume and its verification were made again"
    );
    let raw = env.scratch.join("expected.raw");
    qemu_raw(&env.disk.vmdk, &raw);
    assert!(same_file(&env.volume(&dv), &raw));
}

/// The next Job `made` sees whose uid is not `not`.
async fn next_job(
    made: &mut (impl futures::Stream<Item = k8s_openapi::api::batch::v1::Job> + Unpin),
    not: Option<String>,
) -> k8s_openapi::api::batch::v1::Job {
    use kube::ResourceExt;
    loop {
        let j = tokio::time::timeout(Duration::from_secs(300), made.next())
            .await
            .expect("a Job in time")
            .expect("the Job watch goes on");
        if j.uid() != not {
            return j;
        }
    }
}

/// A conversion Job deleted by hand while its pod converts (as the soak does): its pod is
/// killed, ferry makes the Job again, and the new Job's image, not the killed one's half, is
/// imported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversion_job_deleted_while_it_converts_is_made_again() {
    use k8s_openapi::api::batch::v1::Job;
    use kube::ResourceExt;
    use kube::api::DeleteParams;
    let mut env = Env::new("e2e-crash-rejob", 16).await;
    env.extra_controller_args = vec!["--converter-read-limit".into(), "1048576".into()];
    env.start_sim();
    env.start_controller();
    let creations = Creations::watch(&env).await;
    let jobs: kube::Api<Job> = env.ns.api();
    let vmm = env.migration("rejob");
    let job_name = ferry_crds::names::job_name(&vmm);
    env.create(&vmm).await;
    // Its pod runs (the soak deletes the first Job it sees so).
    let first = ferry_harness::eventually("the Job's pod to run", Duration::from_secs(120), || {
        let jobs = jobs.clone();
        let job_name = job_name.clone();
        async move {
            let j = jobs.get(&job_name).await.ok()?;
            (j.status.as_ref()?.active? > 0).then_some(j)
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    jobs.delete(&job_name, &DeleteParams::background())
        .await
        .unwrap();
    let v = env.wait_terminal("rejob", 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    assert_eq!(
        creations.duplicates(),
        vec![(format!("Job/{job_name}"), 2)],
        "only the deleted Job was made again"
    );
    assert_ne!(
        ferry_crds::child::find(&v.status.as_ref().unwrap().children, "Job", &job_name)
            .map(|r| r.uid.clone()),
        first.uid(),
        "the migration records the new Job"
    );
    let raw = env.scratch.join("expected.raw");
    qemu_raw(&env.disk.vmdk, &raw);
    assert!(same_file(&env.volume(&dv_name("rejob", 0)), &raw));
}
