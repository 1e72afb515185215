//! End to end, a MigrationWave: three VMs, `maxInFlight: 1`, each migrated in turn by its own
//! child migration; the wave sums them up. VMs whose migrations would share a name (in one wave,
//! or across two) get one migration between them, and the other is told why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use ferry_crds::condition::WaveConditionType;
use ferry_crds::{
    ConditionStatus, MigrationWave, MigrationWaveSpec, Phase, Reason, VirtualMachineMigration,
    VmSelector, WavePhase, WaveVm, names,
};
use ferry_harness::{eventually, put_vmdk};
use futures::StreamExt;
use kube::api::{Patch, PatchParams, PostParams};
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
        vms: vms.iter().map(|n| WaveVm::by_name(n.clone())).collect(),
        max_in_flight: 1,
        selector: None,
        paused: false,
        cancel: false,
        window: None,
        retry: 0,
        warm: None,
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
            // A watch error (a lab just started) is retried, not the end of the tracking.
            let mut s = std::pin::pin!(
                watcher(vmms, watcher::Config::default())
                    .default_backoff()
                    .applied_objects()
            );
            while let Some(v) = s.next().await {
                let Ok(v) = v else { continue };
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
            .map(WaveVm::by_name)
            .collect(),
        max_in_flight: 1,
        selector: None,
        paused: false,
        cancel: false,
        window: None,
        retry: 0,
        warm: None,
    };
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(&PostParams::default(), &MigrationWave::new("w2", spec))
        .await
        .unwrap();
    let first = ferry_crds::child_migration_name("w2", &WaveVm::by_name(env.vm.name.clone()));
    let queued = ferry_crds::child_migration_name("w2", &WaveVm::by_name(second.name.clone()));
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

/// The notes of the Events with `reason` about the object `name`.
async fn event_notes(env: &Env, name: &str, reason: &str) -> Vec<String> {
    let events: Api<k8s_openapi::api::events::v1::Event> = env.ns.api();
    events
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.note)
        .collect()
}

/// A wave of the test's template over the VMs named `vms`.
fn wave_over(env: &Env, vms: &[&str], paused: bool) -> MigrationWaveSpec {
    MigrationWaveSpec {
        template: env.wave_template(),
        vms: vms.iter().map(|n| WaveVm::by_name(*n)).collect(),
        max_in_flight: 2,
        selector: None,
        paused,
        cancel: false,
        window: None,
        retry: 0,
        warm: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_vms_making_one_name_the_first_migrates_and_the_second_is_a_name_collision() {
    let mut env = Env::new("e2e-wave-collide", 8).await;
    let second = env.lab.claim_vm().unwrap();
    // Names of this run only (the lab's vCenter is shared): both make the label `web-<ns>`.
    let upper = format!("Web-{}", env.ns.name);
    let under = format!("web_{}", env.ns.name.replace('-', "_"));
    env.shape(&env.vm.name.clone(), &["--name", &upper]);
    env.shape(&second.name, &["--name", &under]);
    let untouched = env.power_state_of(&second).await;
    env.start_sim();
    env.start_controller();
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(
            &PostParams::default(),
            &MigrationWave::new("w3", wave_over(&env, &[&upper, &under], false)),
        )
        .await
        .unwrap();
    let w = wait_wave(&env, "w3", "the wave to finish", |w| {
        w.status.as_ref().is_some_and(|s| s.phase.is_terminal())
    })
    .await;
    let s = w.status.unwrap();
    let name = wave_child("w3", &upper);
    assert_eq!(name, wave_child("w3", &under), "one name for both");
    // The first migrated; the second got no migration, and the wave says so.
    assert_eq!(s.phase, WavePhase::Failed, "{s:?}");
    assert_eq!((s.total, s.counts.succeeded, s.counts.failed), (2, 1, 0));
    let all = env.api().list(&Default::default()).await.unwrap().items;
    assert_eq!(
        all.len(),
        1,
        "one migration: {:?}",
        all.iter().map(|m| m.name_any()).collect::<Vec<_>>()
    );
    assert_eq!(all[0].name_any(), name);
    assert_eq!(all[0].spec.source.vm, VmSelector::by_name(upper.clone()));
    assert_eq!(all[0].phase(), Phase::Succeeded);
    assert_eq!(s.collisions.len(), 1, "{:?}", s.collisions);
    let c = &s.collisions[0];
    assert_eq!(
        (
            c.index,
            c.vm.as_str(),
            c.other_vm.as_str(),
            c.migration.as_str()
        ),
        (1, under.as_str(), upper.as_str(), name.as_str())
    );
    let d = s.condition(WaveConditionType::Degraded).unwrap();
    assert_eq!(
        (d.status, d.reason),
        (ConditionStatus::True, Reason::NameCollision)
    );
    assert!(
        d.message.contains(&upper) && d.message.contains(&under),
        "{}",
        d.message
    );
    env.wait_event("w3", "NameCollision").await;
    let notes = event_notes(&env, "w3", "NameCollision").await;
    assert_eq!(notes.len(), 1, "told once: {notes:?}");
    assert!(
        notes[0].contains(&upper) && notes[0].contains(&under),
        "{notes:?}"
    );
    assert_eq!(
        env.power_state_of(&second).await,
        untouched,
        "the second VM was never touched"
    );

    // A targetName parts them: the wave takes the second VM up (paused here: made and held).
    waves
        .patch(
            "w3",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"paused": true, "vms": [
                {"name": upper},
                {"name": under, "targetName": "web-b"},
            ]}})),
        )
        .await
        .unwrap();
    wait_wave(&env, "w3", "the second VM to be taken up", |w| {
        w.status
            .as_ref()
            .is_some_and(|s| s.collisions.is_empty() && s.counts.total() == 2)
    })
    .await;
    let taken = env.get("w3-web-b").await;
    assert!(taken.is_held());
    assert_eq!(taken.spec.source.vm, VmSelector::by_name(under));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_never_takes_another_waves_migration_of_the_same_name() {
    let mut env = Env::new("e2e-wave-names", 1).await;
    let other = env.lab.claim_vm().unwrap();
    // Wave `a` with VM `b-<u>` and wave `a-b` with VM `<u>` both make `a-b-<u>`.
    let (b_u, u) = (format!("b-{}", env.ns.name), env.ns.name.clone());
    env.shape(&env.vm.name.clone(), &["--name", &b_u]);
    env.shape(&other.name, &["--name", &u]);
    env.start_controller();
    let shared = wave_child("a", &b_u);
    assert_eq!(shared, wave_child("a-b", &u));
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(
            &PostParams::default(),
            &MigrationWave::new("a", wave_over(&env, &[&b_u], true)),
        )
        .await
        .unwrap();
    let theirs = env
        .wait_for(&shared, "wave a's migration", 120, |m| m.is_held())
        .await;
    waves
        .create(
            &PostParams::default(),
            &MigrationWave::new("a-b", wave_over(&env, &[&u], true)),
        )
        .await
        .unwrap();
    let w = wait_wave(&env, "a-b", "the collision to be reported", |w| {
        w.status.as_ref().is_some_and(|s| !s.collisions.is_empty())
    })
    .await;
    let s = w.status.unwrap();
    let c = &s.collisions[0];
    assert_eq!(
        (
            c.vm.as_str(),
            c.other_vm.as_str(),
            c.other_wave.as_deref(),
            c.migration.as_str()
        ),
        (u.as_str(), b_u.as_str(), Some("a"), shared.as_str())
    );
    assert!(c.message.contains("in wave a"), "{}", c.message);
    assert_eq!(s.counts, Default::default(), "nothing of wave a's counted");
    assert_eq!(s.phase, WavePhase::Failed, "its one VM gets no migration");
    let d = s.condition(WaveConditionType::Degraded).unwrap();
    assert_eq!(d.reason, Reason::NameCollision);
    env.wait_event("a-b", "NameCollision").await;
    // The migration is still wave a's alone, of wave a's VM, as it was.
    let now = env.get(&shared).await;
    assert_eq!(now.uid(), theirs.uid());
    let owners = now.owner_references();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].name, "a");
    assert_eq!(now.spec.source.vm, VmSelector::by_name(b_u));
    assert!(now.is_held());
    let a = waves.get("a").await.unwrap().status.unwrap();
    assert!(a.collisions.is_empty(), "{:?}", a.collisions);
    assert_eq!(
        env.api()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
}

/// A wave whose window has ended starts nothing: its migration stays `Queued`, held, its source
/// untouched, and the wave says so (`forecast.outsideWindow`, Progressing `OutsideWindow`); once
/// the window is moved to the next night's, the migration starts and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wave_outside_its_window_starts_nothing_until_the_window_is_moved() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let mut env = Env::new("e2e-wave-window", 8).await;
    env.start_sim();
    env.start_controller();
    let now = k8s_openapi::jiff::Timestamp::now();
    let at = |secs: i64| {
        Time(k8s_openapi::jiff::Timestamp::from_second(now.as_second() + secs).unwrap())
    };
    let mut spec = wave_over(&env, &[&env.vm.name.clone()], false);
    spec.window = Some(ferry_crds::MaintenanceWindow {
        start: Some(at(-7200)),
        end: at(-60),
    });
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(&PostParams::default(), &MigrationWave::new("win", spec))
        .await
        .unwrap();
    let child = ferry_crds::child_migration_name("win", &WaveVm::by_name(env.vm.name.clone()));
    let w = eventually(
        "the wave to say its window holds",
        Duration::from_secs(60),
        || async {
            let w = waves.get("win").await.ok()?;
            let s = w.status.as_ref()?;
            let held = s.forecast.as_ref().is_some_and(|f| f.outside_window == 1);
            let said = s
                .condition(WaveConditionType::Progressing)
                .is_some_and(|c| c.reason == Reason::OutsideWindow);
            (held && said).then_some(w)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    let c = w
        .status
        .unwrap()
        .condition(WaveConditionType::Progressing)
        .cloned()
        .unwrap();
    // Ended before anything was measured: the window's end alone holds it.
    assert!(
        c.message.contains("not started: the window ended at"),
        "{}",
        c.message
    );
    let v = env.get(&child).await;
    assert_eq!(v.phase(), Phase::Queued);
    assert!(v.is_held(), "never released");
    assert_eq!(env.power_state().await, "poweredOn", "the source untouched");
    waves
        .patch(
            "win",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"window": {"end": at(3600)}}})),
        )
        .await
        .unwrap();
    let v = env.wait_terminal(&child, 300).await;
    assert_eq!(v.phase(), Phase::Succeeded, "{}", serde_yaml_status(&v));
    let w = eventually("the wave to succeed", Duration::from_secs(60), || async {
        let w = waves.get("win").await.ok()?;
        (w.status.as_ref()?.phase == WavePhase::Succeeded).then_some(w)
    })
    .await
    .unwrap();
    let f = w.status.unwrap().forecast.unwrap();
    assert_eq!(f.outside_window, 0);
    assert!(
        f.migration_seconds.is_some(),
        "measured on the one that succeeded: {f:?}"
    );
    // Its first end forecast was kept, made once the one succeeded (what `ferry report` holds
    // the end against).
    let (made, first) = (
        f.first_made_at.clone().unwrap(),
        f.first_ends_at.clone().unwrap(),
    );
    assert!(
        made.0 >= v.status.as_ref().unwrap().completed_at.clone().unwrap().0 && first.0 >= made.0,
        "{f:?}"
    );
}

/// A window that ends before the wave's last VMs can finish. Four VMs, one at a time: once the
/// first has succeeded (what one migration takes is measured on it) and the second runs, the
/// window's end is moved to 1.2 migrations from now. The forecast names the last two at risk at
/// once (`forecast.atRisk`, `atRiskNames`, in `spec.vms` order) while the second still runs; the
/// second finishes, and the two it named are never started: held in `Queued`, counted outside the
/// window, the wave `OutsideWindow`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forecast_names_the_vms_a_closing_window_will_leave_and_they_do_not_start() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let mut env = Env::new("e2e-wave-risk", 8).await;
    let mut vms = vec![env.vm.name.clone()];
    for i in 0..3 {
        let vm = env.lab.claim_vm().unwrap();
        put_vmdk(&vm, &env.scratch.join(format!("extra-{i}")), 8, 91 + i).unwrap();
        vms.push(vm.name);
    }
    // Half a MiB a second: each 8 MiB migration takes about 20 s, far more than the wave's
    // reconciles and this test's polls, so the second still runs when the window moves.
    env.sim_args = vec!["--throughput-mib".into(), "0.5".into()];
    env.start_sim();
    env.start_controller();
    let at = |secs: i64| {
        Time(
            k8s_openapi::jiff::Timestamp::from_second(
                k8s_openapi::jiff::Timestamp::now().as_second() + secs,
            )
            .unwrap(),
        )
    };
    let names: Vec<&str> = vms.iter().map(String::as_str).collect();
    let mut spec = wave_over(&env, &names, false);
    spec.max_in_flight = 1;
    spec.window = Some(ferry_crds::MaintenanceWindow {
        start: None,
        end: at(3600),
    });
    let waves: Api<MigrationWave> = env.ns.api();
    waves
        .create(&PostParams::default(), &MigrationWave::new("risk", spec))
        .await
        .unwrap();
    let child = |vm: &str| ferry_crds::child_migration_name("risk", &WaveVm::by_name(vm));
    let first = env.wait_terminal(&child(&vms[0]), 300).await;
    assert_eq!(
        first.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&first)
    );
    let measured = eventually(
        "the wave to measure its first migration",
        Duration::from_secs(60),
        || async {
            let w = waves.get("risk").await.ok()?;
            w.status?.forecast?.migration_seconds
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    // The end: the second (released when the first ended) fits, the last two do not.
    let end = at((measured.max(1) * 12) / 10);
    waves
        .patch(
            "risk",
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({"spec": {"window": {"end": end}}})),
        )
        .await
        .unwrap();
    let late: Vec<String> = vms[2..].iter().map(|vm| child(vm)).collect();
    let named = eventually(
        "the forecast to name the VMs at risk",
        Duration::from_secs(60),
        || async {
            let f = waves.get("risk").await.ok()?.status?.forecast?;
            (f.at_risk > 0).then_some(f)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    assert_eq!(named.at_risk, 2, "{named:?}");
    assert_eq!(named.at_risk_names, late, "in spec.vms order");
    // Each unfinished one has its start and end; the late ones end past the window's end.
    let risky: Vec<&str> = named
        .vms
        .iter()
        .filter(|v| v.at_risk)
        .map(|v| v.migration.as_str())
        .collect();
    assert_eq!(risky, late, "{named:?}");
    assert!(
        named
            .vms
            .iter()
            .all(|v| v.ends_at.0 > v.starts_at.0 && (v.ends_at.0 > end.0) == v.at_risk),
        "{named:?}"
    );
    let second = env.wait_terminal(&child(&vms[1]), 300).await;
    assert_eq!(
        second.phase(),
        Phase::Succeeded,
        "{}",
        serde_yaml_status(&second)
    );
    let held = eventually(
        "the wave to hold the last two outside its window",
        Duration::from_secs(60),
        || async {
            let w = waves.get("risk").await.ok()?;
            let s = w.status.as_ref()?;
            let outside = s.forecast.as_ref()?.outside_window;
            let said = s
                .condition(WaveConditionType::Progressing)
                .is_some_and(|c| c.reason == Reason::OutsideWindow);
            (outside == 2 && said).then_some(w)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    for name in &late {
        let v = env.get(name).await;
        assert_eq!(v.phase(), Phase::Queued, "{name} never started");
        assert!(v.is_held(), "{name} never released");
        assert!(
            v.status
                .as_ref()
                .and_then(|s| s.started_at.as_ref())
                .is_none(),
            "{name}"
        );
    }
    let f = held.status.unwrap().forecast.unwrap();
    assert_eq!(f.at_risk_names, late, "{f:?}");

    // Before its window opens, a new wave of the namespace with nothing of its own measured is
    // forecast by what the others took, and told it does not fit: three VMs one at a time in a
    // window of about two migrations. Nothing of it starts.
    let fresh: Vec<String> = (0..3).map(|_| env.lab.claim_vm().unwrap().name).collect();
    let names: Vec<&str> = fresh.iter().map(String::as_str).collect();
    let mut spec = wave_over(&env, &names, false);
    spec.max_in_flight = 1;
    let start = at(3600);
    spec.window = Some(ferry_crds::MaintenanceWindow {
        end: Time(
            k8s_openapi::jiff::Timestamp::from_second(
                start.0.as_second() + (measured.max(1) * 22) / 10,
            )
            .unwrap(),
        ),
        start: Some(start.clone()),
    });
    waves
        .create(&PostParams::default(), &MigrationWave::new("later", spec))
        .await
        .unwrap();
    let short = eventually(
        "the later wave to be told it does not fit its window",
        Duration::from_secs(60),
        || async {
            let f = waves.get("later").await.ok()?.status?.forecast?;
            (!f.window_short.is_empty()).then_some(f)
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
    assert!(
        short.basis.contains("namespace's 2 other"),
        "measured on risk's two: {short:?}"
    );
    assert!(
        short.window_short.contains("does not fit its window")
            && short.window_short.contains("3 migration(s)")
            && short.window_short.contains("past the window's end"),
        "{short:?}"
    );
    assert!(
        short.ends_at.unwrap().0 > start.0,
        "counted from the window's start"
    );
    for vm in &fresh {
        let name = ferry_crds::child_migration_name("later", &WaveVm::by_name(vm));
        assert_eq!(env.get(&name).await.phase(), Phase::Queued, "{name}");
    }
}
