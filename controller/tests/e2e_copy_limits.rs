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

    let vmms: Api<VirtualMachineMigration> = env.ns.api();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let sampler = {
        let seen = seen.clone();
        let vmms = vmms.clone();
        tokio::spawn(async move {
            let mut now: BTreeMap<String, VirtualMachineMigration> = BTreeMap::new();
            let mut s = std::pin::pin!(watcher(vmms, watcher::Config::default()).applied_objects());
            while let Some(Ok(v)) = s.next().await {
                let v: VirtualMachineMigration = v;
                now.insert(v.name_any(), v);
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
                let mut seen = seen.lock().unwrap();
                for (h, n) in hosts {
                    let peak = seen.peak_host.entry(h).or_default();
                    *peak = (*peak).max(n);
                }
                for (d, n) in stores {
                    let peak = seen.peak_datastore.entry(d).or_default();
                    *peak = (*peak).max(n);
                }
                for m in now.values().filter(|m| m.phase() == Phase::Queued) {
                    if let Some(c) = m.status.as_ref().and_then(|s| {
                        s.conditions
                            .iter()
                            .find(|c| c.type_ == ConditionType::Ready)
                    }) {
                        seen.queued
                            .insert((c.reason.to_string(), c.message.clone()));
                    }
                }
            }
        })
    };

    let waves: Api<MigrationWave> = env.ns.api();
    for (name, members) in [("w1", &vms[..3]), ("w2", &vms[3..])] {
        let spec = MigrationWaveSpec {
            template: env.wave_template(),
            vms: members.iter().map(|n| WaveVm::by_name(n.clone())).collect(),
            max_in_flight: 3,
            selector: None,
            paused: false,
            cancel: false,
            retry: 0,
            warm: None,
        };
        waves
            .create(&PostParams::default(), &MigrationWave::new(name, spec))
            .await
            .unwrap();
    }
    for name in ["w1", "w2"] {
        let w = eventually("the wave to finish", Duration::from_secs(600), || async {
            let w = waves.get(name).await.ok()?;
            w.status
                .as_ref()
                .is_some_and(|s| s.phase.is_terminal())
                .then_some(w)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}; logs in {}", env.scratch.display()));
        let s = w.status.unwrap();
        assert_eq!(s.phase, WavePhase::Succeeded, "{name}: {s:?}");
        assert_eq!((s.total, s.counts.succeeded), (3, 3), "{name}");
    }
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
    let named = |reason: Reason, what: &str| {
        seen.queued
            .iter()
            .any(|(r, m)| *r == reason.to_string() && m.contains(what) && m.contains("limit is"))
    };
    assert!(
        [&a, &b, &c]
            .iter()
            .any(|h| named(Reason::HostCopyLimit, &format!("ESXi host {h}"))),
        "a second VM of a host waited for it: {:?}",
        seen.queued
    );
    assert!(
        named(Reason::DatastoreCopyLimit, "datastore LocalDS_0"),
        "a third host's VM waited for the datastore: {:?}",
        seen.queued
    );
}
