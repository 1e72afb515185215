//! End to end, a MigrationWave: three VMs, `maxInFlight: 1`, each migrated in turn by its own
//! child migration; the wave sums them up.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use ferry_crds::{
    MigrationWave, MigrationWaveSpec, Phase, VirtualMachineMigration, VmSelector, WavePhase,
    WaveVm, names,
};
use ferry_harness::{eventually, put_vmdk};
use futures::StreamExt;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_migrates_its_vms_within_max_in_flight() {
    let mut env = Env::new("e2e-wave", 8).await;
    let mut vms = vec![env.vm.name.clone()];
    for i in 0..2 {
        let vm = env.lab.claim_vm().unwrap();
        put_vmdk(&vm, &env.scratch.join(format!("extra-{i}")), 8, 77 + i).unwrap();
        vms.push(vm.name);
    }
    env.start_sim();
    env.start_controller();
    let spec = MigrationWaveSpec {
        template: env.wave_template(),
        vms: vms
            .iter()
            .map(|n| WaveVm {
                vm: VmSelector::by_name(n.clone()),
                target_name: None,
            })
            .collect(),
        max_in_flight: 1,
        selector: None,
        paused: false,
        cancel: false,
        retry: 0,
    };
    let waves: Api<MigrationWave> = env.ns.api();
    // Track the largest number of children in flight at once.
    let vmms: Api<VirtualMachineMigration> = env.ns.api();
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tracker = {
        let peak = peak.clone();
        let vmms = vmms.clone();
        tokio::spawn(async move {
            let mut phases: BTreeMap<String, Phase> = BTreeMap::new();
            let mut s = std::pin::pin!(watcher(vmms, watcher::Config::default()).applied_objects());
            while let Some(Ok(v)) = s.next().await {
                let v: VirtualMachineMigration = v;
                phases.insert(v.name_any(), v.phase());
                let n = phases.values().filter(|p| p.is_in_flight()).count();
                peak.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    waves
        .create(&PostParams::default(), &MigrationWave::new("w1", spec))
        .await
        .unwrap();
    let w = eventually("the wave to finish", Duration::from_secs(600), || async {
        let w = waves.get("w1").await.ok()?;
        w.status
            .as_ref()
            .is_some_and(|s| s.phase.is_terminal())
            .then_some(w)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    tracker.abort();
    let s = w.status.unwrap();
    assert_eq!(s.phase, WavePhase::Succeeded, "{s:?}");
    assert_eq!((s.total, s.counts.succeeded, s.in_flight), (3, 3, 0));
    assert!(s.completed_at.is_some() && s.throughput_per_hour.is_some());
    assert_eq!(
        peak.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "never more than maxInFlight at once"
    );
    for child in vmms.list(&Default::default()).await.unwrap().items {
        assert_eq!(
            child.labels().get(names::WAVE_LABEL).map(String::as_str),
            Some("w1")
        );
        assert!(!child.is_held());
        assert_eq!(child.phase(), Phase::Succeeded);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_wave_cancels_its_running_and_queued_migrations() {
    let mut env = Env::new("e2e-wave-cancel", 16).await;
    let second = env.lab.claim_vm().unwrap();
    put_vmdk(&second, &env.scratch.join("second"), 16, 99).unwrap();
    env.sim_args = vec!["--throughput-mib".into(), "1".into()];
    env.start_sim();
    env.start_controller();
    let spec = MigrationWaveSpec {
        template: env.wave_template(),
        vms: [env.vm.name.clone(), second.name.clone()]
            .into_iter()
            .map(|n| WaveVm {
                vm: VmSelector::by_name(n),
                target_name: None,
            })
            .collect(),
        max_in_flight: 1,
        selector: None,
        paused: false,
        cancel: false,
        retry: 0,
    };
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(&PostParams::default(), &MigrationWave::new("w2", spec))
        .await
        .unwrap();
    let first = ferry_crds::child_migration_name(
        "w2",
        &WaveVm {
            vm: VmSelector::by_name(env.vm.name.clone()),
            target_name: None,
        },
    );
    let queued = ferry_crds::child_migration_name(
        "w2",
        &WaveVm {
            vm: VmSelector::by_name(second.name.clone()),
            target_name: None,
        },
    );
    env.wait_phase(&first, Phase::Importing, 240).await;
    assert_eq!(
        env.get(&queued).await.phase(),
        Phase::Queued,
        "held while the first one runs"
    );
    waves
        .patch(
            "w2",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&serde_json::json!({"spec": {"cancel": true}})),
        )
        .await
        .unwrap();
    env.wait_phase(&first, Phase::Cancelled, 120).await;
    env.wait_phase(&queued, Phase::Cancelled, 120).await;
    let w = eventually(
        "the wave to be Cancelled",
        Duration::from_secs(60),
        || async {
            let w = waves.get("w2").await.ok()?;
            w.status
                .as_ref()
                .is_some_and(|s| s.phase == WavePhase::Cancelled && s.counts.cancelled == 2)
                .then_some(w)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    assert_eq!(w.status.unwrap().in_flight, 0);
    assert!(
        env.staged_files().is_empty(),
        "staging left: {:?}",
        env.staged_files()
    );
}
