//! End to end, one VM: a vcsim VM with a real 64 MiB VMDK migrates to `Succeeded` through every
//! checkpoint, with the controller and the sim as processes against the lab.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Instant;

use common::*;
use ferry_crds::{Phase, names};
use k8s_openapi::api::batch::v1::Job;
use kube::Api;

use ferry_controller::apis::cdi::DataVolume;
use ferry_controller::apis::kubevirt::VirtualMachine;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_64_mib_vm_migrates_to_succeeded_through_every_checkpoint() {
    let mut env = Env::new("e2e-happy", 64).await;
    env.start_sim();
    env.start_controller();
    let started = Instant::now();
    env.create(&env.migration("happy")).await;

    let done = env
        .wait_for("happy", "happy to succeed", 300, |v| {
            v.phase().is_terminal()
        })
        .await;
    let wall = secs(started);
    assert_eq!(
        done.phase(),
        Phase::Succeeded,
        "status:\n{}",
        serde_yaml_status(&done)
    );
    assert!(
        all_conditions_true(&done),
        "all eight conditions True:\n{}",
        serde_yaml_status(&done)
    );
    let status = done.status.clone().unwrap();
    assert_eq!(status.attempts, 1);
    assert!(status.started_at.is_some() && status.completed_at.is_some());
    assert_eq!(status.observed_generation, done.metadata.generation);
    let visited: Vec<Phase> = status.history.iter().map(|h| h.phase).collect();
    assert_eq!(
        visited,
        [
            Phase::Preparing,
            Phase::Converting,
            Phase::Importing,
            Phase::CreatingVM,
            Phase::Starting,
            Phase::Validating,
            Phase::Succeeded
        ]
    );
    assert_eq!(
        status.source.as_ref().and_then(|s| s.power_state),
        Some(ferry_crds::PowerState::PoweredOn),
        "original power state recorded"
    );
    assert_eq!(
        env.power_state().await,
        "poweredOff",
        "the source stays off after a successful migration"
    );
    let disk = &status.disks[0];
    assert_eq!(disk.checksum.as_deref().map(str::len), Some(64));
    assert_eq!(disk.import_phase.as_deref(), Some("Succeeded"));

    // The sim's volume holds exactly the converted disk.
    let raw = env.scratch.join("expected.raw");
    qemu_raw(&env.disk.vmdk, &raw);
    assert!(
        same_file(&env.volume(&dv_name("happy", 0)), &raw),
        "the imported volume equals qemu-img convert -O raw of the VMDK"
    );

    // An Event for the start and one for the end; the way between is the status's history
    // (asserted above; the phases in between are no write of their own).
    let reasons = env.wait_event("happy", "Succeeded").await;
    for want in ["Preparing", "Succeeded"] {
        assert!(
            reasons.iter().any(|r| r == want),
            "an Event {want} among {reasons:?}"
        );
    }

    // Staging is empty; the VM and its volume outlive the migration record.
    assert!(
        env.staged_files().is_empty(),
        "staging left: {:?}",
        env.staged_files()
    );
    let vms: Api<VirtualMachine> = env.ns.api();
    let vm_name = names::vm_name(&done);
    let vm = vms.get(&vm_name).await.unwrap();
    assert!(
        vm.metadata.owner_references.unwrap_or_default().is_empty(),
        "the VM is released from the migration"
    );
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("Always"));

    let writes = env.api_writes();
    let total: u64 = writes.values().sum();
    println!("E2E 64MiB migration: wall {wall:.1}s, controller API writes {total}: {writes:?}");

    // A settled migration costs nothing: a restarted controller holds it as a record (it
    // succeeded: nothing is left to reconcile, see `migrations`) and writes nothing.
    env.start_controller();
    ferry_harness::eventually(
        "the restarted controller to hold the migration as a record",
        std::time::Duration::from_secs(30),
        || async {
            (env.metric("ferry_controller_cached_migrations{form=\"record\"}") == 1).then_some(())
        },
    )
    .await
    .unwrap();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let after_restart = env.api_writes();
    assert_eq!(
        after_restart.values().sum::<u64>(),
        0,
        "no write for a settled migration: {after_restart:?}"
    );

    // Deleting the finished migration leaves the VM alone.
    env.api()
        .delete("happy", &Default::default())
        .await
        .unwrap();
    env.wait_gone("happy", 60).await;
    assert!(
        vms.get_opt(&vm_name).await.unwrap().is_some(),
        "the migrated VM survives the deletion of its migration"
    );
    let dvs: Api<DataVolume> = env.ns.api();
    assert!(
        dvs.get_opt(&dv_name("happy", 0)).await.unwrap().is_some(),
        "and so does its volume"
    );
    let jobs: Api<Job> = env.ns.api();
    // The Job was owned by the migration: garbage collection takes it.
    ferry_harness::eventually(
        "the Job to be collected",
        std::time::Duration::from_secs(60),
        || async {
            jobs.get_opt("happy-convert")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        },
    )
    .await
    .unwrap();
}
