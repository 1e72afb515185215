//! End to end, steering a running wave: paused, resumed and retried (the succeeded migrations
//! never redone), `maxInFlight` raised and lowered live and never exceeded, admissions in
//! `spec.vms` order, a failed migration freeing its slot.
//!
//! Every release (a child losing its hold annotation) is checked where it is seen, in the order
//! of one watch: the children in flight besides it must be fewer than the `maxInFlight` the
//! controller may have acted on — any generation of the wave from the last one it acknowledged
//! (`status.observedGeneration`) to the newest. Resource versions order the two watches (the
//! lab has one etcd, whose revisions they are).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::*;
use ferry_crds::condition::WaveConditionType;
use ferry_crds::{
    ConditionStatus, MigrationWave, MigrationWaveSpec, Phase, VirtualMachineMigration, WavePhase,
    WaveVm,
};
use ferry_harness::put_vmdk;
use futures::StreamExt;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

fn rv(o: &impl ResourceExt) -> u64 {
    o.resource_version()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One release as seen on the children's watch.
#[derive(Clone, Debug)]
struct Release {
    name: String,
    rv: u64,
    others_in_flight: usize,
}

/// The wave as seen on its watch: (resourceVersion, generation, observedGeneration, maxInFlight).
type WaveSeen = (u64, i64, i64, i32);

#[derive(Default)]
struct Seen {
    releases: Vec<Release>,
    waves: Vec<WaveSeen>,
    peak: usize,
}

fn watch(env: &Env, seen: Arc<Mutex<Seen>>) -> Vec<tokio::task::JoinHandle<()>> {
    let vmms: Api<VirtualMachineMigration> = env.ns.api();
    let waves: Api<MigrationWave> = env.ns.api();
    let s1 = seen.clone();
    let children = tokio::spawn(async move {
        let mut state: BTreeMap<String, VirtualMachineMigration> = BTreeMap::new();
        let mut events =
            std::pin::pin!(watcher(vmms, watcher::Config::default()).applied_objects());
        while let Some(Ok(v)) = events.next().await {
            let v: VirtualMachineMigration = v;
            let was_held = state.get(&v.name_any()).is_none_or(|o| o.is_held());
            state.insert(v.name_any(), v.clone());
            let in_flight = |c: &VirtualMachineMigration| !c.is_held() && !c.phase().is_terminal();
            let mut s = s1.lock().unwrap();
            s.peak = s.peak.max(state.values().filter(|c| in_flight(c)).count());
            if was_held && !v.is_held() {
                let others = state
                    .values()
                    .filter(|c| c.name_any() != v.name_any() && in_flight(c))
                    .count();
                s.releases.push(Release {
                    name: v.name_any(),
                    rv: rv(&v),
                    others_in_flight: others,
                });
            }
        }
    });
    let wave = tokio::spawn(async move {
        let mut events =
            std::pin::pin!(watcher(waves, watcher::Config::default()).applied_objects());
        while let Some(Ok(w)) = events.next().await {
            let w: MigrationWave = w;
            let observed = w
                .status
                .as_ref()
                .and_then(|s| s.observed_generation)
                .unwrap_or(0);
            seen.lock().unwrap().waves.push((
                rv(&w),
                w.metadata.generation.unwrap_or(0),
                observed,
                w.spec.max_in_flight,
            ));
        }
    });
    vec![children, wave]
}

/// The largest `maxInFlight` the controller may have acted on just before `at`.
fn allowed(waves: &[WaveSeen], at: u64) -> i32 {
    let before: Vec<&WaveSeen> = waves.iter().filter(|w| w.0 < at).collect();
    let Some(last) = before.last() else {
        return 0;
    };
    let acknowledged = last.2;
    before
        .iter()
        .filter(|w| w.1 >= acknowledged)
        .map(|w| w.3)
        .max()
        .unwrap_or(0)
}

fn check_releases(seen: &Seen) {
    for r in &seen.releases {
        let max = allowed(&seen.waves, r.rv);
        assert!(
            (r.others_in_flight as i32) < max,
            "{} released with {} others in flight, maxInFlight {max}",
            r.name,
            r.others_in_flight
        );
    }
}

fn spec(env: &Env, vms: &[String], max_in_flight: i32, paused: bool) -> MigrationWaveSpec {
    MigrationWaveSpec {
        template: env.wave_template(),
        vms: vms.iter().map(|n| WaveVm::by_name(n.clone())).collect(),
        max_in_flight,
        selector: None,
        paused,
        cancel: false,
        window: None,
        retry: 0,
        warm: None,
    }
}

async fn vms(env: &Env, n: usize, mib: u64) -> Vec<String> {
    let mut out = vec![env.vm.name.clone()];
    for i in 1..n {
        let vm = env.lab.claim_vm().unwrap();
        put_vmdk(
            &vm,
            &env.scratch.join(format!("extra-{i}")),
            mib,
            300 + i as u64,
        )
        .unwrap();
        out.push(vm.name);
    }
    out
}

async fn patch_wave(waves: &Api<MigrationWave>, name: &str, spec: serde_json::Value) {
    waves
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": spec})),
        )
        .await
        .unwrap();
}

fn cond(w: &MigrationWave, t: WaveConditionType) -> (ConditionStatus, String) {
    let c = w.status.as_ref().and_then(|s| s.condition(t)).unwrap();
    (c.status, c.message.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_retry_steer_a_wave_and_never_redo_a_success() {
    let mut env = Env::new("e2e-wave-steer", 8).await;
    let names = vms(&env, 4, 8).await;
    // Imports of ~4 s: a pause lands while one runs.
    env.sim_args = vec!["--throughput-mib".into(), "2".into()];
    env.start_sim();
    env.start_controller();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let tasks = watch(&env, seen.clone());
    let creations = Creations::watch(&env).await;
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(
            &PostParams::default(),
            &MigrationWave::new("w", spec(&env, &names, 1, true)),
        )
        .await
        .unwrap();
    let kids: Vec<String> = names.iter().map(|n| wave_child("w", n)).collect();
    // Paused from the start: every child exists and none is released.
    let w = wait_wave(&env, "w", "the paused wave to create its children", |w| {
        w.status
            .as_ref()
            .is_some_and(|s| s.phase == WavePhase::Paused && s.counts.queued == 4)
    })
    .await;
    assert_eq!(w.status.unwrap().in_flight, 0);
    // The second VM fails for good in Importing; it must free its slot.
    env.annotate(&kids[1], FAULT, Some("import=permanent@50%"))
        .await;
    patch_wave(&waves, "w", serde_json::json!({"paused": false})).await;
    env.wait_phase(&kids[1], Phase::Failed, 300).await;
    env.wait_phase(&kids[2], Phase::Importing, 300).await;
    // Paused while the third runs: it finishes, the fourth stays held.
    patch_wave(&waves, "w", serde_json::json!({"paused": true})).await;
    env.wait_phase(&kids[2], Phase::Succeeded, 300).await;
    let w = wait_wave(
        &env,
        "w",
        "the paused wave to count the third success",
        |w| {
            w.status.as_ref().is_some_and(|s| {
                s.phase == WavePhase::Paused && s.counts.succeeded == 2 && s.counts.failed == 1
            })
        },
    )
    .await;
    let fourth = env.get(&kids[3]).await;
    assert!(
        fourth.is_held() && fourth.phase() == Phase::Queued,
        "held while paused"
    );
    assert_eq!(
        cond(&w, WaveConditionType::Degraded).0,
        ConditionStatus::True
    );
    assert!(
        cond(&w, WaveConditionType::Degraded)
            .1
            .starts_with("1 of 4 failed")
    );
    patch_wave(&waves, "w", serde_json::json!({"paused": false})).await;
    let w = wait_wave(&env, "w", "the wave to finish with one failure", |w| {
        w.status
            .as_ref()
            .is_some_and(|s| s.phase == WavePhase::Failed)
    })
    .await;
    assert_eq!(
        cond(&w, WaveConditionType::Completed).0,
        ConditionStatus::True
    );
    // Retry: the failed one runs again (its fault removed), the successes stay as they were.
    let before: Vec<VirtualMachineMigration> =
        futures::future::join_all(kids.iter().map(|k| env.get(k))).await;
    let jobs_before = creations.names();
    env.annotate(&kids[1], FAULT, None).await;
    patch_wave(&waves, "w", serde_json::json!({"retry": 1})).await;
    let w = wait_wave(&env, "w", "the retried wave to succeed", |w| {
        w.status
            .as_ref()
            .is_some_and(|s| s.phase == WavePhase::Succeeded)
    })
    .await;
    let s = w.status.clone().unwrap();
    assert_eq!(
        (s.counts.succeeded, s.counts.failed, s.in_flight),
        (4, 0, 0)
    );
    assert_eq!(
        cond(&w, WaveConditionType::Degraded).0,
        ConditionStatus::False
    );
    for (i, old) in before.iter().enumerate() {
        let now = env.get(&kids[i]).await;
        let (o, n) = (old.status.as_ref().unwrap(), now.status.as_ref().unwrap());
        if i == 1 {
            assert_eq!(n.attempts, o.attempts + 1, "the failed one was retried");
        } else {
            assert_eq!(
                (now.uid(), n.attempts, &n.completed_at, now.spec.retry),
                (old.uid(), o.attempts, &o.completed_at, 0),
                "{} was not redone",
                kids[i]
            );
        }
    }
    let new_children: Vec<String> = creations
        .names()
        .into_iter()
        .filter(|n| !jobs_before.contains(n))
        .collect();
    let retried_vm = ferry_crds::names::vm_name(&env.get(&kids[1]).await);
    assert!(
        new_children
            .iter()
            .all(|n| n.contains(&kids[1]) || n == &format!("VirtualMachine/{retried_vm}")),
        "only the retried migration made new children: {new_children:?}"
    );
    // The retried migration made its failed import's DataVolume anew; nothing else twice.
    let twice: Vec<(String, usize)> = creations
        .duplicates()
        .into_iter()
        .filter(|(n, _)| !n.contains(&kids[1]))
        .collect();
    assert!(twice.is_empty(), "created twice: {twice:?}");
    for t in tasks {
        t.abort();
    }
    let seen = seen.lock().unwrap();
    check_releases(&seen);
    let order: Vec<&str> = seen.releases.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        order,
        kids.iter().map(String::as_str).collect::<Vec<_>>(),
        "admitted in spec.vms order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_raised_and_lowered_live_is_never_exceeded() {
    let mut env = Env::new("e2e-wave-throttle", 4).await;
    let names = vms(&env, 10, 4).await;
    // Imports of ~4 s each keep several in flight.
    env.sim_args = vec!["--throughput-mib".into(), "1".into()];
    env.start_sim();
    env.start_controller();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let tasks = watch(&env, seen.clone());
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(
            &PostParams::default(),
            &MigrationWave::new("t", spec(&env, &names, 2, false)),
        )
        .await
        .unwrap();
    let in_flight = |w: &MigrationWave| w.status.as_ref().map_or(0, |s| s.in_flight);
    wait_wave(&env, "t", "two in flight", |w| in_flight(w) == 2).await;
    patch_wave(&waves, "t", serde_json::json!({"maxInFlight": 4})).await;
    wait_wave(&env, "t", "four in flight after the raise", |w| {
        in_flight(w) == 4
    })
    .await;
    let peak_raised = seen.lock().unwrap().peak;
    patch_wave(&waves, "t", serde_json::json!({"maxInFlight": 1})).await;
    let w = wait_wave(&env, "t", "the wave to finish", |w| {
        w.status.as_ref().is_some_and(|s| s.phase.is_terminal())
    })
    .await;
    assert_eq!(w.status.unwrap().phase, WavePhase::Succeeded);
    for t in tasks {
        t.abort();
    }
    let seen = seen.lock().unwrap();
    assert_eq!(seen.releases.len(), 10, "every child released once");
    check_releases(&seen);
    let after_lowering: Vec<&Release> = seen
        .releases
        .iter()
        .filter(|r| allowed(&seen.waves, r.rv) == 1)
        .collect();
    assert!(
        !after_lowering.is_empty(),
        "some releases happened under maxInFlight 1"
    );
    println!(
        "releases: {:?}; peak in flight {} (4 after the raise: {peak_raised})",
        seen.releases
            .iter()
            .map(|r| (
                r.name.as_str(),
                r.others_in_flight,
                allowed(&seen.waves, r.rv)
            ))
            .collect::<Vec<_>>(),
        seen.peak
    );
    let order: Vec<String> = seen.releases.iter().map(|r| r.name.clone()).collect();
    let want: Vec<String> = names.iter().map(|n| wave_child("t", n)).collect();
    assert_eq!(order, want, "admitted in spec.vms order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_declared_with_a_selector_resolves_it_once_and_records_the_vms() {
    let mut env = Env::new("e2e-wave-select", 1).await;
    env.start_controller();
    let waves: Api<MigrationWave> = env.ns.api();
    // Ten VMs of this test's own (the lab's vCenter is shared: other tests claim, rename and
    // power VMs), renamed under a prefix of this run, so that the pattern chooses exactly them.
    let run = env.ns.name.rsplit('-').next().unwrap().to_uppercase();
    let mut want: Vec<String> = (0..10)
        .map(|i| {
            let vm = env.lab.claim_vm().unwrap();
            let name = format!("SEL{run}_VM{i}");
            env.shape(&vm.name, &["--name", &name]);
            name
        })
        .collect();
    want.sort();
    // Paused: the children are made and held, nothing of those VMs is touched.
    let mut s = spec(&env, &[], 3, true);
    s.selector = Some(ferry_crds::WaveSelector {
        folder: Some("DC0/vm".into()),
        name_pattern: Some(format!("SEL{run}_VM?")),
        tag: None,
    });
    waves
        .create(
            &PostParams::default(),
            &MigrationWave::new("sel", s.clone()),
        )
        .await
        .unwrap();
    let w = wait_wave(
        &env,
        "sel",
        "the selector to be resolved and the children made",
        |w| {
            w.status
                .as_ref()
                .is_some_and(|s| s.selected_vms.is_some() && s.counts.queued == 10)
        },
    )
    .await;
    let st = w.status.unwrap();
    assert_eq!(st.selected_vms.as_ref(), Some(&want));
    assert_eq!(st.total, 10);
    for n in &want {
        let c = env.get(&wave_child("sel", n)).await;
        assert!(c.is_held(), "{n} held while the wave is paused");
    }
    // Resolved once: a later change of the wave keeps the recorded choice.
    patch_wave(&waves, "sel", serde_json::json!({"maxInFlight": 4})).await;
    let w = wait_wave(&env, "sel", "the change to be observed", |w| {
        w.status.as_ref().and_then(|s| s.observed_generation) == w.metadata.generation
    })
    .await;
    assert_eq!(w.status.unwrap().selected_vms, Some(want));
    // A folder that does not exist: said so in Progressing, nothing chosen.
    let mut bad = s;
    bad.selector = Some(ferry_crds::WaveSelector {
        folder: Some("DC0/vm/nope".into()),
        name_pattern: None,
        tag: None,
    });
    waves
        .create(&PostParams::default(), &MigrationWave::new("nofolder", bad))
        .await
        .unwrap();
    let w = wait_wave(&env, "nofolder", "the missing folder to be reported", |w| {
        w.status
            .as_ref()
            .and_then(|s| s.condition(WaveConditionType::Progressing))
            .is_some_and(|c| c.reason == ferry_crds::Reason::VMNotFound)
    })
    .await;
    let st = w.status.unwrap();
    assert!(st.selected_vms.is_none());
    let c = st.condition(WaveConditionType::Progressing).unwrap();
    assert!(c.message.contains("DC0/vm/nope"), "{}", c.message);
    // Neither a list nor a selector, or both: refused by the API.
    let mut neither = spec(&env, &[], 1, true);
    neither.selector = None;
    let err = waves
        .create(
            &PostParams::default(),
            &MigrationWave::new("neither", neither),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("spec.selector"), "{err}");
}
