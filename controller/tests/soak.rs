//! The soak: a wave of 100 VMs, 200 in `make bench` (`maxInFlight` 20, 5 % transient faults and
//! three permanent ones, the sim at speed) through two controller replicas under leader election while the leader is
//! SIGKILLed every 5–20 s, the lab's apiserver is restarted once, and a Job and a DataVolume are
//! deleted by hand mid-phase. It checks that every migration ends `Succeeded`, or `Failed` exactly
//! where a permanent fault was injected; that `maxInFlight` was never exceeded (sampled every
//! 100 ms); that no child was created twice; and that deleting the wave leaves nothing of ferry's
//! own work while the migrated VMs and their disks stay. It runs on a lab of its own (the
//! apiserver restart must not disturb other suites) and prints its counts, with where the time
//! went: set-up, wave and clean-up, each phase's mean and 90th percentile (from the migrations'
//! history) and the mean in flight (the wave takes about VMs / mean in flight × a migration's
//! time from release to its end).
//!
//! `FERRY_SOAK_VMS` sizes it (default 100, a few minutes of `make test`; `make bench` runs it at
//! 200 and prints its figures).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod ha;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{S3_SECRET, VSPHERE_SECRET, bin_dir, binaries, s3_secret, vsphere_secret};
use ferry_controller::apis::cdi::DataVolume;
use ferry_controller::apis::kubevirt::VirtualMachine;
use ferry_crds::wave::WaveSource;
use ferry_crds::{
    MigrationWave, MigrationWaveSpec, Phase, SecretRef, SourceEndpoint, StagingSpec,
    VirtualMachineMigration, WaveTemplate, WaveVm, child_migration_name,
};
use ferry_harness::{ChildGuard, Lab, eventually, put_vmdk};
use futures::StreamExt;
use ha::*;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Api, ResourceExt};

const MAX_IN_FLIGHT: i32 = 20;
/// The replicas' flags besides the lease's (`ha::LEASE`: 4 s, renewed within 3 s; shorter lost
/// the Lease under the load of the wave's deletion on a 2-core machine).
const REPLICA_ARGS: &[&str] = &["--concurrency", "32"];
const LEASE_NAME: &str = "ferry-controller";
const WAVE: &str = "soak";

fn vms() -> usize {
    std::env::var("FERRY_SOAK_VMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100)
}

/// Every (kind/name → uids) seen in the namespace, from watches started before the wave.
type Seen = Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>;

fn track<K>(api: Api<K>, kind: &'static str, seen: Seen) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    tokio::spawn(async move {
        let mut s = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
        while let Some(ev) = s.next().await {
            if let (Ok(o), Some(uid)) = (&ev, ev.as_ref().ok().and_then(|o| o.uid())) {
                let key = format!("{kind}/{}", o.name_any());
                seen.lock().unwrap().entry(key).or_default().insert(uid);
            }
        }
    })
}

/// Released and unfinished: what takes a slot of `maxInFlight`.
fn in_flight(v: &VirtualMachineMigration) -> bool {
    !v.is_held() && !v.phase().is_terminal()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soak_a_wave_through_leader_kills_an_apiserver_restart_and_deleted_children() {
    let n = vms();
    let started = Instant::now();
    binaries();
    let state = ferry_harness::run_state_dir("soak-state");
    let lab: &'static Lab = Box::leak(Box::new(Lab::start(&state, (n + 4) as u32).unwrap()));
    println!(
        "soak: lab with {} VMs ready in {:.0} s",
        n + 4,
        started.elapsed().as_secs_f64()
    );
    lab.install_crds().unwrap();
    let ns = lab.namespace("soak").await.unwrap();
    let client = ns.client.clone();
    let scratch = bin_dir().join("soak").join(&ns.name);
    std::fs::create_dir_all(&scratch).unwrap();
    let info = &lab.info;
    let secrets: Api<Secret> = ns.api();
    for s in [
        vsphere_secret(lab, VSPHERE_SECRET),
        s3_secret(lab, S3_SECRET),
    ] {
        secrets.create(&PostParams::default(), &s).await.unwrap();
    }
    // Real 1 MiB disks for the wave's VMs.
    let inventory: Vec<_> = info.inventory().unwrap().into_iter().take(n).collect();
    for (i, vm) in inventory.iter().enumerate() {
        put_vmdk(vm, &scratch.join("disks"), 1, 1000 + i as u64).unwrap();
    }
    std::fs::remove_dir_all(scratch.join("disks")).ok();

    // The sim at speed with 5 % transient faults (import restarts and failed converter pods).
    let volumes = scratch.join("volumes");
    std::fs::create_dir_all(&volumes).unwrap();
    let (ctl, sim_bin) = binaries();
    let log = |what: &str| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(scratch.join(format!("{what}.log")))
            .unwrap()
    };
    let mut sim_cmd = std::process::Command::new(sim_bin);
    sim_cmd
        .arg("--kubeconfig")
        .arg(&info.kubeconfig)
        .args(["--namespace", &ns.name, "--speed", "50"])
        .args(["--fault-rate", "import=0.025,convert=0.025", "--seed", "11"])
        .arg("--volume-dir")
        .arg(&volumes)
        .arg("--bin-dir")
        .arg(ctl.parent().unwrap())
        .env("RUST_LOG", "info,kube=warn")
        .stdout(log("sim"))
        .stderr(log("sim"));
    let _sim = ChildGuard::spawn("ferry-sim", sim_cmd).unwrap();

    // Two replicas; a supervisor brings back whichever is gone, alternately as the kubelet
    // restarts a container (same pod, same identity: it takes its own Lease straight back) and as
    // a Deployment replaces a pod (a new identity, standing by: the other replica or the new one
    // takes the Lease over once the dead leader's lease ran out).
    let kubeconfigs: Vec<(String, std::path::PathBuf)> = ["a", "b"]
        .iter()
        .map(|r| {
            (
                (*r).to_owned(),
                kubeconfig_for(lab, &scratch, &ns.name, r, None),
            )
        })
        .collect();
    // Replica `slot` in its `generation`th process: `a`, `b` first, then `a3`, `b4`, ...
    let make = {
        let (nsn, scratch) = (ns.name.clone(), scratch.clone());
        move |slot: usize, generation: usize| {
            let (base, kc) = &kubeconfigs[slot];
            let name = if generation == 0 {
                base.clone()
            } else {
                format!("{base}{generation}")
            };
            Replica::new(&name, kc.clone(), &nsn, LEASE_NAME, REPLICA_ARGS, &scratch)
        }
    };
    let replicas: Arc<tokio::sync::Mutex<Vec<Replica>>> =
        Arc::new(tokio::sync::Mutex::new(vec![make(0, 0), make(1, 0)]));
    for r in replicas.lock().await.iter_mut() {
        r.start();
    }
    let done = Arc::new(AtomicBool::new(false));
    let restarts = Arc::new(AtomicUsize::new(0));
    // Replicas are brought back until the very end: a leader lost during the wave's deletion
    // must be replaced, or nothing would clean up.
    let supervised = Arc::new(AtomicBool::new(true));
    let supervisor = {
        let (replicas, supervised, restarts) =
            (replicas.clone(), supervised.clone(), restarts.clone());
        tokio::spawn(async move {
            let mut generation = 2;
            while supervised.load(Ordering::SeqCst) {
                for (slot, r) in replicas.lock().await.iter_mut().enumerate() {
                    if !r.running() {
                        r.kill();
                        if restarts.fetch_add(1, Ordering::SeqCst) % 2 == 1 {
                            generation += 1;
                            *r = make(slot, generation);
                        }
                        r.start();
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };

    // Watches: children's uids, and the migrations for the 100 ms in-flight sampler.
    let seen: Seen = Arc::default();
    let trackers = vec![
        track::<Job>(ns.api(), "Job", seen.clone()),
        track::<DataVolume>(ns.api(), "DataVolume", seen.clone()),
        track::<VirtualMachine>(ns.api(), "VirtualMachine", seen.clone()),
        track::<Secret>(ns.api(), "Secret", seen.clone()),
    ];
    let vmms: Api<VirtualMachineMigration> = ns.api();
    let (store, writer) = reflector::store();
    let reflect = tokio::spawn(
        reflector(writer, watcher(vmms.clone(), watcher::Config::default()))
            .applied_objects()
            .for_each(|_| async {}),
    );
    let peak = Arc::new(AtomicUsize::new(0));
    let samples = Arc::new(AtomicUsize::new(0));
    // The sum of the samples: their mean says how well the wave kept its slots busy.
    let in_flight_sum = Arc::new(AtomicUsize::new(0));
    let sampler = {
        let (store, peak, samples, sum, done) = (
            store.clone(),
            peak.clone(),
            samples.clone(),
            in_flight_sum.clone(),
            done.clone(),
        );
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let now = store.state().iter().filter(|v| in_flight(v)).count();
                peak.fetch_max(now, Ordering::SeqCst);
                samples.fetch_add(1, Ordering::SeqCst);
                sum.fetch_add(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    // The wave.
    let endpoint = SourceEndpoint {
        url: Some(info.vcenter.url.clone()),
        credentials_secret_ref: SecretRef::new(VSPHERE_SECRET),
        thumbprint: Some(info.vcenter.thumbprint_sha256.clone()),
        insecure_skip_tls_verify: false,
    };
    let entries: Vec<WaveVm> = inventory
        .iter()
        .map(|vm| WaveVm::by_name(vm.name.clone()))
        .collect();
    let spec = MigrationWaveSpec {
        template: WaveTemplate {
            source: WaveSource {
                endpoint,
                power: Default::default(),
            },
            target: Default::default(),
            staging: StagingSpec {
                endpoint: info.s3.endpoint.clone(),
                bucket: info.s3.bucket.clone(),
                prefix: Some("soak".into()),
                region: info.s3.region.clone(),
                credentials_secret_ref: SecretRef::new(S3_SECRET),
            },
            conversion: Default::default(),
            mode: Default::default(),
            hooks: None,
        },
        vms: entries.clone(),
        max_in_flight: MAX_IN_FLIGHT,
        selector: None,
        paused: false,
        cancel: false,
        window: None,
        retry: 0,
        warm: None,
    };
    let waves: Api<MigrationWave> = ns.api();
    let wave_started = Instant::now();
    let setup_secs = started.elapsed().as_secs_f64();
    waves
        .create(&PostParams::default(), &MigrationWave::new(WAVE, spec))
        .await
        .unwrap();

    // Three permanent faults, on VMs late in the order (still held when annotated).
    let doomed: BTreeSet<String> = [n * 3 / 4, n * 17 / 20, n * 19 / 20]
        .iter()
        .map(|i| child_migration_name(WAVE, &entries[(*i).min(n - 1)]))
        .collect();
    for name in &doomed {
        eventually(
            &format!("{name} to exist"),
            Duration::from_secs(120),
            || async { vmms.get_opt(name).await.ok().flatten().map(|_| ()) },
        )
        .await
        .unwrap();
        let v = vmms.get(name).await.unwrap();
        assert!(v.is_held(), "{name} still held when its fault is set");
        let patch = serde_json::json!({"metadata": {"annotations": {
            common::FAULT: "import=permanent@50%"}}});
        vmms.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    // Chaos: kill the leader every 5–20 s; restart the apiserver once; delete a Job and a
    // DataVolume by hand while they work.
    let kills = Arc::new(AtomicUsize::new(0));
    let chaos = {
        let (replicas, done, kills, client, nsn) = (
            replicas.clone(),
            done.clone(),
            kills.clone(),
            client.clone(),
            ns.name.clone(),
        );
        tokio::spawn(async move {
            let mut seed = 0x5eed_u64;
            while !done.load(Ordering::SeqCst) {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let wait = 5_000 + (seed >> 33) % 15_000;
                tokio::time::sleep(Duration::from_millis(wait)).await;
                if done.load(Ordering::SeqCst) {
                    break;
                }
                let leader = holder(&client, &nsn, LEASE_NAME).await;
                let mut rs = replicas.lock().await;
                if let Some(r) = rs
                    .iter_mut()
                    .find(|r| r.name == leader && r.pid().is_some())
                {
                    r.kill();
                    kills.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    };
    let apiserver = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_secs(40));
        let t = Instant::now();
        lab.restart("apiserver").map(|()| t.elapsed())
    });
    let jobs: Api<Job> = ns.api();
    let dvs: Api<DataVolume> = ns.api();
    let deleted_by_hand: Vec<String> = {
        let job = eventually("a running Job", Duration::from_secs(180), || async {
            jobs.list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|j| j.status.as_ref().and_then(|s| s.active).unwrap_or(0) > 0)
        })
        .await
        .unwrap();
        jobs.delete(&job.name_any(), &DeleteParams::background())
            .await
            .unwrap();
        let dv = eventually(
            "an importing DataVolume",
            Duration::from_secs(180),
            || async {
                dvs.list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .find(|d| {
                        d.status.as_ref().and_then(|s| s.phase.as_deref())
                            == Some("ImportInProgress")
                    })
            },
        )
        .await
        .unwrap();
        dvs.delete(&dv.name_any(), &DeleteParams::background())
            .await
            .unwrap();
        vec![
            format!("Job/{}", job.name_any()),
            format!("DataVolume/{}", dv.name_any()),
        ]
    };

    // The end of the wave.
    let w = eventually("the wave to finish", Duration::from_secs(1500), || async {
        let w = waves.get(WAVE).await.ok()?;
        w.status
            .as_ref()
            .is_some_and(|s| s.phase.is_terminal())
            .then_some(w)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", scratch.display()));
    let wave_secs = wave_started.elapsed().as_secs_f64();
    done.store(true, Ordering::SeqCst);
    chaos.abort();
    let apiserver_restart = apiserver.await.unwrap().expect("apiserver restarted");
    sampler.await.unwrap();

    let children = vmms.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(children.len(), n, "one migration per VM");
    let mut by_phase: BTreeMap<String, usize> = BTreeMap::new();
    for c in &children {
        *by_phase.entry(c.phase().to_string()).or_default() += 1;
    }
    let failed: BTreeSet<String> = children
        .iter()
        .filter(|c| c.phase() == Phase::Failed)
        .map(ResourceExt::name_any)
        .collect();
    let succeeded: Vec<&VirtualMachineMigration> = children
        .iter()
        .filter(|c| c.phase() == Phase::Succeeded)
        .collect();
    // Why each unexpected failure failed, so that a red run says more than a name.
    let why: Vec<String> = children
        .iter()
        .filter(|c| failed.contains(&c.name_any()) != doomed.contains(&c.name_any()))
        .map(|c| {
            let last = c.status.as_ref().and_then(|s| s.last_failure.as_ref());
            let said = last.map_or("no lastFailure".into(), |f| {
                format!("{:?} at {}: {}", f.reason, f.phase, f.message)
            });
            format!("{} ({}): {said}", c.name_any(), c.phase())
        })
        .collect();
    assert_eq!(
        failed,
        doomed,
        "Failed exactly where a permanent fault was injected; phases {by_phase:?}; \
         unexpected: {why:#?}; logs in {}",
        scratch.display()
    );
    assert_eq!(succeeded.len() + failed.len(), n, "phases {by_phase:?}");
    let peak = peak.load(Ordering::SeqCst);
    assert!(
        peak <= MAX_IN_FLIGHT as usize,
        "in flight peaked at {peak} > maxInFlight {MAX_IN_FLIGHT}"
    );
    // Made again for a reason: what was deleted by hand, and the verification Job of a migration
    // whose DataVolume was (the Job ran on a volume that is gone; ferry deletes it and verifies
    // the new import with a new one).
    let redone: Vec<String> = deleted_by_hand
        .iter()
        .flat_map(|k| {
            let again = k
                .strip_prefix("DataVolume/")
                .and_then(|dv| dv.rsplit_once("-disk-"))
                .map(|(migration, _)| format!("Job/{migration}-verify"));
            std::iter::once(k.clone()).chain(again)
        })
        .collect();
    let duplicates: Vec<(String, usize)> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(k, u)| u.len() > 1 && !redone.contains(k))
        .map(|(k, u)| (k.clone(), u.len()))
        .collect();
    assert!(duplicates.is_empty(), "created twice: {duplicates:?}");
    let s = w.status.clone().unwrap();
    assert_eq!(
        (s.counts.succeeded as usize, s.counts.failed as usize),
        (succeeded.len(), failed.len())
    );

    // What the migrations made for the users stays; ferry's own work goes with the wave.
    let vms_api: Api<VirtualMachine> = ns.api();
    let kept: BTreeMap<String, String> = vms_api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|v| (v.name_any(), v.uid().unwrap_or_default()))
        .collect();
    let kept_dvs: BTreeMap<String, String> = dvs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|d| {
            succeeded
                .iter()
                .any(|c| d.name_any().starts_with(&format!("{}-", c.name_any())))
        })
        .map(|d| (d.name_any(), d.uid().unwrap_or_default()))
        .collect();
    assert_eq!(
        kept.len(),
        succeeded.len(),
        "one VirtualMachine per success"
    );
    let cleanup_started = Instant::now();
    waves
        .delete(WAVE, &DeleteParams::background())
        .await
        .unwrap();
    eventually(
        "every migration of the deleted wave to be gone",
        Duration::from_secs(600),
        || async {
            vmms.list(&ListParams::default())
                .await
                .ok()
                .filter(|l| l.items.is_empty())
                .map(|_| ())
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}; logs in {}", scratch.display()));
    // Children of deleted migrations go with the garbage collector, a moment later.
    let leftovers = || async {
        let jobs_left = jobs.list(&ListParams::default()).await.ok()?.items.len();
        let secrets_left: Vec<String> = secrets
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .map(ResourceExt::name_any)
            // The credentials, and the controllers' creation-proof key: it lives in their
            // namespace, the Lease's, which is the wave's here.
            .filter(|n| {
                n != VSPHERE_SECRET
                    && n != S3_SECRET
                    && n != ferry_controller::children::proof::DEFAULT_SECRET_NAME
            })
            .collect();
        let dvs_left: BTreeMap<String, String> = dvs
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .iter()
            .map(|d| (d.name_any(), d.uid().unwrap_or_default()))
            .collect();
        Some((jobs_left, secrets_left, dvs_left))
    };
    let _ = eventually(
        "the garbage collector to remove the deleted migrations' children",
        Duration::from_secs(180),
        || async {
            let (j, s, d) = leftovers().await?;
            (j == 0 && s.is_empty() && d == kept_dvs).then_some(())
        },
    )
    .await;
    let (left_jobs, left_secrets, dvs_now) = leftovers().await.unwrap();
    let cleanup_secs = cleanup_started.elapsed().as_secs_f64();
    let vms_now: BTreeMap<String, String> = vms_api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|v| (v.name_any(), v.uid().unwrap_or_default()))
        .collect();
    let mut staged = vec![];
    let staging = info.s3.data_dir.join(&info.s3.bucket).join("soak");
    collect_files(&staging, &mut staged);
    assert_eq!(left_jobs, 0, "Jobs left after the wave was deleted");
    assert!(left_secrets.is_empty(), "Secrets left: {left_secrets:?}");
    assert!(staged.is_empty(), "staging objects left: {staged:?}");
    assert_eq!(
        dvs_now, kept_dvs,
        "only the migrated VMs' disks stay, untouched"
    );
    assert_eq!(vms_now, kept, "every migrated VM stays, untouched");

    supervised.store(false, Ordering::SeqCst);
    supervisor.abort();
    reflect.abort();
    for t in trackers {
        t.abort();
    }
    let replica_restarts = restarts.load(Ordering::SeqCst);
    // Every change of holder counts one transition: the takeovers.
    let takeovers =
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(client.clone(), &ns.name)
            .get(LEASE_NAME)
            .await
            .ok()
            .and_then(|l| l.spec?.lease_transitions)
            .unwrap_or(0);
    let summary = format!(
        "soak: {n} VMs, maxInFlight {MAX_IN_FLIGHT}: set up in {setup_secs:.0} s, wave finished \
         in {wave_secs:.0} s, cleaned up in {cleanup_secs:.0} s ({:.0} s in all)\n\
         soak: {} Succeeded, {} Failed (permanent faults injected: {}), phases {by_phase:?}\n\
         soak: time per phase, mean/p90: {}\n\
         soak: in flight peaked at {peak} over {} samples (100 ms), {:.1} on average\n\
         soak: leader SIGKILLed {} times ({replica_restarts} replica restarts, every other one \
         under a new identity; {takeovers} changes of the Lease's holder), apiserver restarted \
         once ({:.1} s), deleted by hand: {deleted_by_hand:?}\n\
         soak: children seen: {}, created twice: {} (besides those deleted by hand)\n\
         soak: after deleting the wave: {left_jobs} Jobs, {} Secrets, {} staging objects left; \
         {} VirtualMachines and {} DataVolumes of succeeded migrations kept",
        started.elapsed().as_secs_f64(),
        succeeded.len(),
        failed.len(),
        doomed.len(),
        phase_times(&children),
        samples.load(Ordering::SeqCst),
        in_flight_sum.load(Ordering::SeqCst) as f64 / samples.load(Ordering::SeqCst).max(1) as f64,
        kills.load(Ordering::SeqCst),
        apiserver_restart.as_secs_f64(),
        seen.lock().unwrap().len(),
        duplicates.len(),
        left_secrets.len(),
        staged.len(),
        vms_now.len(),
        dvs_now.len(),
    );
    println!("{summary}");
    // `make test` captures a passing test's output: its figures go where the run prints them
    // (`tests/run-tests.sh`), so that a slow soak in CI says where its time went.
    if let Some(dir) = std::env::var_os("FERRY_TEST_LOG_DIR") {
        std::fs::write(std::path::Path::new(&dir).join("soak.txt"), &summary).ok();
    }
    drop(replicas);
    drop(ns);
    lab.stop().unwrap();
    std::fs::remove_dir_all(&scratch).ok();
    std::fs::remove_dir_all(&state).ok();
}

/// Where the migrations' time went: per phase, the mean and 90th percentile of the time spent in
/// it (from `status.history`, whole seconds), over the migrations that passed through it.
fn phase_times(children: &[VirtualMachineMigration]) -> String {
    let mut spent: BTreeMap<Phase, Vec<i64>> = BTreeMap::new();
    for c in children {
        for h in c.status.iter().flat_map(|s| s.history.iter()) {
            if let Some(left) = &h.left_at {
                let ms = left.0.as_millisecond() - h.entered_at.0.as_millisecond();
                spent.entry(h.phase).or_default().push(ms);
            }
        }
    }
    spent
        .iter_mut()
        .map(|(phase, ms)| {
            ms.sort_unstable();
            let mean = ms.iter().sum::<i64>() as f64 / ms.len() as f64 / 1000.0;
            let p90 = ms[(ms.len() * 9 / 10).min(ms.len() - 1)] as f64 / 1000.0;
            format!("{phase} {mean:.1}/{p90:.0} s (n={})", ms.len())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn collect_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            collect_files(&p, out);
        } else {
            out.push(p);
        }
    }
}
