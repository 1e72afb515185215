//! End to end, resumability: the controller is SIGKILLed once inside each checkpoint and
//! restarted; the migration still succeeds and no child is ever created twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use ferry_crds::{Phase, VirtualMachineMigration};
use futures::StreamExt;
use kube::runtime::{WatchStreamExt, watcher};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_in_every_checkpoint_still_migrates_without_duplicate_children() {
    let mut env = Env::new("e2e-crash", 64).await;
    // Slow enough that Importing spans a kill and a restart.
    env.sim_args = vec!["--throughput-mib".into(), "8".into()];
    env.start_sim();
    env.start_controller();
    let creations = Creations::watch(&env).await;
    let api = env.api();
    let mut phases = std::pin::pin!(
        watcher(
            api.clone(),
            watcher::Config::default().fields("metadata.name=crashy")
        )
        .applied_objects()
        .filter_map(|v| async move { v.ok().map(|v: VirtualMachineMigration| v.phase()) })
    );
    env.create(&env.migration("crashy")).await;
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
            // A moment for the world to move on without us, then back.
            tokio::time::sleep(Duration::from_millis(300)).await;
            env.start_controller();
        }
        if phase.is_terminal() {
            break;
        }
    }
    let v = env.get("crashy").await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    assert_eq!(
        killed,
        Phase::CHECKPOINTS.into_iter().collect::<BTreeSet<_>>(),
        "killed once inside each checkpoint"
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
