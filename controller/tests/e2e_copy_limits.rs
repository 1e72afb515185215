//! End to end, limits of copies per ESXi host and per datastore, across waves: two waves over
//! six VMs — two on each of three ESXi hosts, every disk on the one datastore — each wave free
//! to start all its VMs at once, under a controller that lets one migration copy from a host
//! and two from a datastore at a time. A watch samples every migration's status: never more
//! copying (in Converting, or in Preparing past the source's power-off) from one host or one
//! datastore than the limit; the ones that waited did so in `Queued`, the reason and message
//! naming the host or datastore and the count; every VM is migrated.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use ferry_crds::{
    ConditionType, MigrationWave, MigrationWaveSpec, Phase, Reason, VirtualMachineMigration,
    WavePhase, WaveVm,
};
use ferry_harness::{eventually, put_vmdk};
use futures::StreamExt;
use kube::api::PostParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

/// What the sampler saw.
#[derive(Debug, Default)]
struct Seen {
    /// The most migrations copying at once, per host and per datastore.
    peak_host: BTreeMap<String, usize>,
    peak_datastore: BTreeMap<String, usize>,
    /// The Ready reasons and messages of migrations in Queued.
    queued: BTreeSet<(String, String)>,
}

/// Whether `v` copies now, as its status says (what the controller counts).
fn copying(v: &VirtualMachineMigration) -> bool {
    let Some(s) = v.status.as_ref() else {
        return false;
    };
    match v.phase() {
        Phase::Converting => true,
        Phase::Preparing => s.source_power_off.is_some(),
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_and_datastore_limits_hold_across_two_waves() {
    let mut env = Env::new("e2e-copy-limits", 24).await;
    let inventory = env.lab.info.inventory().unwrap();
    let a = env.vm.host.clone();
    let mut hosts: Vec<String> = inventory
        .iter()
        .map(|v| v.host.clone())
        .filter(|h| !h.is_empty() && *h != a)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    assert!(hosts.len() >= 2, "the lab has four ESXi hosts: {hosts:?}");
    let (b, c) = (hosts.remove(0), hosts.remove(0));
    let mut vms = vec![env.vm.name.clone()];
    for (i, host) in [&a, &b, &b, &c, &c].into_iter().enumerate() {
        let vm = env.lab.claim_vm_where(|v| &v.host == host).unwrap();
        put_vmdk(&vm, &env.scratch.join(format!("vm-{i}")), 24, 90 + i as u64).unwrap();
        vms.push(vm.name);
    }
    env.extra_controller_args = vec![
        "--max-copies-per-host".into(),
        "1".into(),
        "--max-copies-per-datastore".into(),
        "2".into(),
        // Each copy takes a few seconds (24 MiB at 4 MiB/s): copies overlap, and the ones
        // decided while others copy must wait.
        "--converter-read-limit".into(),
        (4u64 << 20).to_string(),
    ];
    env.start_sim();
    env.start_controller();

    let (seen, sampler) = sample(env.ns.api());

    let template = env.wave_template();
    run_waves(
        &env,
        &[("w1", &vms[..3], &template), ("w2", &vms[3..], &template)],
    )
    .await;
    sampler.abort();
    let seen = seen.lock().unwrap();
    for host in [&a, &b, &c] {
        assert_eq!(
            seen.peak_host.get(host),
            Some(&1),
            "one copy at a time from {host}: {seen:?}"
        );
    }
    let peak = seen.peak_datastore.get("LocalDS_0").copied().unwrap_or(0);
    assert!(
        (1..=2).contains(&peak),
        "at most two copies at a time from the datastore: {seen:?}"
    );
    assert!(
        [&a, &b, &c]
            .iter()
            .any(|h| seen.waited(Reason::HostCopyLimit, &format!("ESXi host {h}"))),
        "a second VM of a host waited for it: {:?}",
        seen.queued
    );
    assert!(
        seen.waited(Reason::DatastoreCopyLimit, "datastore LocalDS_0"),
        "a third host's VM waited for the datastore: {:?}",
        seen.queued
    );
}

/// Samples every migration of the namespace `vmms` watches, until aborted.
fn sample(vmms: Api<VirtualMachineMigration>) -> (Arc<Mutex<Seen>>, tokio::task::JoinHandle<()>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let sampler = {
        let seen = seen.clone();
        tokio::spawn(async move {
            let mut now: BTreeMap<String, VirtualMachineMigration> = BTreeMap::new();
            let mut s = std::pin::pin!(watcher(vmms, watcher::Config::default()).applied_objects());
            while let Some(Ok(v)) = s.next().await {
                let v: VirtualMachineMigration = v;
                now.insert(v.name_any(), v);
                seen.lock().unwrap().add(&now);
            }
        })
    };
    (seen, sampler)
}

impl Seen {
    /// Adds what the migrations `now` show.
    fn add(&mut self, now: &BTreeMap<String, VirtualMachineMigration>) {
        let mut hosts: BTreeMap<String, usize> = BTreeMap::new();
        let mut stores: BTreeMap<String, usize> = BTreeMap::new();
        for m in now.values().filter(|m| copying(m)) {
            let source = m.status.as_ref().and_then(|s| s.source.as_deref()).unwrap();
            *hosts
                .entry(source.host.clone().unwrap_or_default())
                .or_default() += 1;
            for d in source.datastores() {
                *stores.entry(d.to_owned()).or_default() += 1;
            }
        }
        for (h, n) in hosts {
            let peak = self.peak_host.entry(h).or_default();
            *peak = (*peak).max(n);
        }
        for (d, n) in stores {
            let peak = self.peak_datastore.entry(d).or_default();
            *peak = (*peak).max(n);
        }
        for m in now.values().filter(|m| m.phase() == Phase::Queued) {
            if let Some(c) = m.status.as_ref().and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == ConditionType::Ready)
            }) {
                self.queued
                    .insert((c.reason.to_string(), c.message.clone()));
            }
        }
    }

    /// Whether a migration waited in Queued for `reason`, its message naming `what`.
    fn waited(&self, reason: Reason, what: &str) -> bool {
        self.queued
            .iter()
            .any(|(r, m)| *r == reason.to_string() && m.contains(what) && m.contains("limit is"))
    }
}

/// Creates each wave (name, VMs, template), each free to start all its VMs at once, and
/// waits for all to succeed.
async fn run_waves(env: &Env, waves: &[(&str, &[String], &ferry_crds::WaveTemplate)]) {
    let api: Api<MigrationWave> = env.ns.api();
    for (name, members, template) in waves {
        let spec = MigrationWaveSpec {
            template: (*template).clone(),
            vms: members.iter().map(|n| WaveVm::by_name(n.clone())).collect(),
            max_in_flight: 3,
            selector: None,
            paused: false,
            cancel: false,
            window: None,
            retry: 0,
            warm: None,
        };
        api.create(&PostParams::default(), &MigrationWave::new(name, spec))
            .await
            .unwrap();
    }
    for (name, members, _) in waves {
        let w = eventually("the wave to finish", Duration::from_secs(600), || async {
            let w = api.get(name).await.ok()?;
            w.status
                .as_ref()
                .is_some_and(|s| s.phase.is_terminal())
                .then_some(w)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
        let s = w.status.unwrap();
        assert_eq!(s.phase, WavePhase::Succeeded, "{name}: {s:?}");
        assert_eq!(
            (s.total as usize, s.counts.succeeded as usize),
            (members.len(), members.len()),
            "{name}"
        );
    }
}

/// A wave's own limit (`template.conversion.copyLimits.perHost: 1`) under a controller with
/// none: its three VMs of one ESXi host copy one at a time, and the ones that waited name the
/// wave's limit, not the controller's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waves_own_limit_holds_its_vms_under_a_controller_without_limits() {
    let mut env = Env::new("e2e-copy-limits-own", 24).await;
    let host = env.vm.host.clone();
    let mut vms = vec![env.vm.name.clone()];
    for i in 0..2 {
        let vm = env.lab.claim_vm_where(|v| v.host == host).unwrap();
        put_vmdk(&vm, &env.scratch.join(format!("vm-{i}")), 24, 70 + i as u64).unwrap();
        vms.push(vm.name);
    }
    env.extra_controller_args = vec!["--converter-read-limit".into(), (4u64 << 20).to_string()];
    env.start_sim();
    env.start_controller();
    let (seen, sampler) = sample(env.ns.api());
    let mut template = env.wave_template();
    template.conversion.copy_limits = Some(ferry_crds::CopyLimits {
        per_host: Some(1),
        per_datastore: None,
    });
    run_waves(&env, &[("w", &vms, &template)]).await;
    sampler.abort();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.peak_host.get(&host), Some(&1), "{seen:?}");
    assert!(
        seen.waited(
            Reason::HostCopyLimit,
            "its spec.conversion.copyLimits.perHost"
        ),
        "{:?}",
        seen.queued
    );
}
