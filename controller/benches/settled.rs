//! `make bench`: the controller's memory on a settled cluster (issue #30). A migration program
//! leaves its records behind: every Succeeded migration with its released VirtualMachine, its
//! DataVolume and the running VM's instance. This bench makes such a cluster from one real
//! migration (its objects copied, each copy labelled for a migration of its own), at 1,000 and
//! then 10,000, restarts the controller on each, and reads its memory once every cache has
//! synced; then runs a wave of 100 VMs (`maxInFlight` 50) in a namespace of its own, with one
//! controller of both namespaces, and reads it again while the wave runs.
//! Prints a table with the target beside each figure and writes `target/bench/settled.{txt,json}`.
//!
//! `FERRY_BENCH_SETTLED_SMALL`, `FERRY_BENCH_SETTLED`, `FERRY_BENCH_INFLIGHT_VMS`,
//! `FERRY_BENCH_SPEED` resize it; `FERRY_BENCH_CONTROLLER_WRAP` starts the controller through a
//! program of one's own (a heap profiler's preload).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ferry_crds::{MigrationWave, VirtualMachineMigration, names};
use ferry_harness::{ChildGuard, Lab, TestNamespace, eventually, put_vmdk, repo_root};
use futures::StreamExt;
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, ResourceExt};
use support::*;

/// The objects of one finished migration, as the API holds them (every field, not only what
/// ferry's types read).
struct Model {
    vmm: VirtualMachineMigration,
    vm: DynamicObject,
    dv: DynamicObject,
    vmi: DynamicObject,
}

fn dynamic(ns: &TestNamespace, group: &str, version: &str, kind: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    Api::namespaced_with(ns.client.clone(), &ns.name, &ar)
}

/// The one object of `api` labelled `label=value`.
async fn one(api: &Api<DynamicObject>, label: &str, value: &str) -> DynamicObject {
    let mut items = api
        .list(&ListParams::default().labels(&format!("{label}={value}")))
        .await
        .unwrap()
        .items;
    assert_eq!(items.len(), 1, "one object labelled {label}={value}");
    items.pop().unwrap()
}

/// A copy of `model` named `name`, for the migration `(migration, uid)`, owned by `owner` (the
/// VM, for an instance) or by nobody (released).
fn copy(
    model: &DynamicObject,
    name: &str,
    migration: &str,
    uid: &str,
    owner: Option<(&str, &str)>,
) -> DynamicObject {
    let mut o = model.clone();
    let labels = o.metadata.labels.clone().unwrap_or_default();
    o.metadata = kube::api::ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(labels),
        annotations: model.metadata.annotations.clone(),
        ..Default::default()
    };
    let l = o.labels_mut();
    l.insert(names::MIGRATION_LABEL.to_owned(), migration.to_owned());
    if l.contains_key(names::MIGRATION_UID_LABEL) {
        l.insert(names::MIGRATION_UID_LABEL.to_owned(), uid.to_owned());
    }
    if let Some((vm, vm_uid)) = owner {
        o.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "kubevirt.io/v1".into(),
                kind: "VirtualMachine".into(),
                name: vm.to_owned(),
                uid: vm_uid.to_owned(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            },
        ]);
    }
    o.data.as_object_mut().unwrap().remove("status");
    o
}

/// Creates `o` and writes `status` through its status subresource; returns its uid.
async fn put(api: &Api<DynamicObject>, o: &DynamicObject, status: &serde_json::Value) -> String {
    let made = api.create(&PostParams::default(), o).await.unwrap();
    let name = made.name_any();
    if !status.is_null() {
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&serde_json::json!({ "status": status })),
        )
        .await
        .unwrap();
    }
    made.uid().unwrap()
}

/// Adds settled migrations `from..to` (copies of the model, each with its released VM and
/// DataVolume and its VM's running instance).
async fn grow(ns: &TestNamespace, model: &Model, from: usize, to: usize) {
    let vmms: Api<VirtualMachineMigration> = ns.api();
    let vms = dynamic(ns, "kubevirt.io", "v1", "VirtualMachine");
    let vmis = dynamic(ns, "kubevirt.io", "v1", "VirtualMachineInstance");
    let dvs = dynamic(ns, "cdi.kubevirt.io", "v1beta1", "DataVolume");
    let status = |o: &DynamicObject| o.data.get("status").cloned().unwrap_or_default();
    let t = Instant::now();
    futures::stream::iter(from..to)
        .for_each_concurrent(32, |i| {
            let (vmms, vms, vmis, dvs) = (vmms.clone(), vms.clone(), vmis.clone(), dvs.clone());
            let (vm_status, vmi_status, dv_status) =
                (status(&model.vm), status(&model.vmi), status(&model.dv));
            async move {
                let name = format!("settled-{i:05}");
                let mut v = VirtualMachineMigration::new(&name, model.vmm.spec.clone());
                v.metadata.finalizers = Some(vec![names::FINALIZER.to_owned()]);
                v.metadata.labels = model.vmm.metadata.labels.clone().map(|mut l| {
                    l.remove(names::WAVE_LABEL);
                    l
                });
                v.metadata.annotations = model.vmm.metadata.annotations.clone().map(|mut a| {
                    a.remove(names::HOLD_ANNOTATION);
                    a
                });
                let made = vmms.create(&PostParams::default(), &v).await.unwrap();
                let uid = made.uid().unwrap();
                let patch = serde_json::json!({"status": model.vmm.status});
                vmms.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap();
                let dv = copy(&model.dv, &format!("{name}-disk-0"), &name, &uid, None);
                put(&dvs, &dv, &dv_status).await;
                let vm = copy(&model.vm, &name, &name, &uid, None);
                let vm_uid = put(&vms, &vm, &vm_status).await;
                let vmi = copy(&model.vmi, &name, &name, &uid, Some((&name, &vm_uid)));
                put(&vmis, &vmi, &vmi_status).await;
            }
        })
        .await;
    println!(
        "bench: settled migrations {from}..{to} added in {:.0} s",
        t.elapsed().as_secs_f64()
    );
}

/// What a controller started on the cluster shows once it is ready and has reconciled every
/// migration: seconds to ready, and (peak, current) resident MiB a few seconds later.
struct Settled {
    ready_secs: f64,
    peak: f64,
    rss: f64,
    metrics: String,
}

/// Waits until the controller leads with every cache synced and holds every settled migration (a
/// standby answers `/readyz` too, so the cache's own count decides: within the 5 s its gauge
/// takes to refresh).
async fn settle(ctl: &Controller, total: usize) -> Settled {
    let started = Instant::now();
    eventually(
        "the controller to hold and reconcile every settled migration",
        Duration::from_secs(900),
        || async {
            let m = http_get(ctl.metrics, "/metrics");
            let n = total as f64;
            // Released VMs and DataVolumes are outside the child watches (their selector
            // excludes the released label), a settled migration's instance is held in no form,
            // and a settled migration of the first list is not reconciled (nothing to do): ready
            // (every cache synced) with every migration held is the end of it.
            (ctl.ready() && metric(&m, "ferry_controller_cached_migrations", "") >= n).then_some(())
        },
    )
    .await
    .unwrap();
    let ready_secs = started.elapsed().as_secs_f64();
    // The cached-children gauge is refreshed every 5 s; the allocator settles meanwhile.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let (_, peak, rss) = usage(ctl.proc.id().unwrap());
    Settled {
        ready_secs,
        peak,
        rss,
        metrics: http_get(ctl.metrics, "/metrics"),
    }
}

fn forms(m: &str) -> String {
    ["whole", "metadata", "stub"]
        .iter()
        .map(|f| {
            let n = metric(
                m,
                "ferry_controller_cached_children",
                &format!("form=\"{f}\""),
            );
            format!("{n:.0} {f}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn sim(
    (ctl_bin, sim_bin): &(PathBuf, PathBuf),
    lab: &Lab,
    ns: &TestNamespace,
    volumes: &Path,
    speed: usize,
) -> ChildGuard {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(repo_root().join("target/bench/settled-sim.log"))
        .unwrap();
    let mut cmd = Command::new(sim_bin);
    cmd.arg("--kubeconfig")
        .arg(&lab.info.kubeconfig)
        .args(["--namespace", &ns.name, "--speed", &speed.to_string()])
        .arg("--volume-dir")
        .arg(volumes)
        .arg("--bin-dir")
        .arg(ctl_bin.parent().unwrap())
        .env("RUST_LOG", "warn")
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    ChildGuard::spawn("ferry-sim", cmd).unwrap()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Some(f) = std::env::args().skip(1).find(|a| !a.starts_with('-'))
        && !"settled".contains(&f)
    {
        return;
    }
    ferry_vsphere::tls::install_default_provider();
    let small = env_or("FERRY_BENCH_SETTLED_SMALL", 1_000);
    let large = env_or("FERRY_BENCH_SETTLED", 10_000);
    // The wave runs in a namespace of its own, the sim playing KubeVirt there only: in the
    // settled one it would play every copied VM (10,000 running ones are beyond it: 1.4 GB, a
    // 100-VM wave's first 29 in CreatingVM after 5 min). The controller then watches both.
    let wave_vms = env_or("FERRY_BENCH_INFLIGHT_VMS", 100);
    let speed = env_or("FERRY_BENCH_SPEED", 20);
    let state = repo_root().join("target/lab/bench-settled-state");
    let _ = std::fs::remove_dir_all(&state);
    let lab = Lab::start(&state, (wave_vms + 1) as u32).unwrap();
    lab.install_crds().unwrap();
    let ns = lab.namespace("settled").await.unwrap();
    let scratch = repo_root().join("target/bench/settled-scratch");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    lab_secrets(&lab, &ns).await;
    let inventory: Vec<_> = lab
        .info
        .inventory()
        .unwrap()
        .into_iter()
        .take(wave_vms + 1)
        .collect();
    for (i, vm) in inventory.iter().enumerate() {
        put_vmdk(vm, &scratch.join("disks"), 1, i as u64).unwrap();
    }
    let volumes = scratch.join("volumes");
    std::fs::create_dir_all(&volumes).unwrap();
    let names: Vec<String> = inventory.iter().map(|v| v.name.clone()).collect();
    let waves: Api<MigrationWave> = ns.api();

    // One real migration: the model of every settled one.
    let bins = bins();
    let log = repo_root().join("target/bench/settled-controller.log");
    let the_sim = sim(&bins, &lab, &ns, &volumes, speed);
    let ctl = start_controller(&bins.0, &lab, &ns.name, &log);
    run_wave(&waves, "model", &lab, &names[..1], 1).await;
    let vmms: Api<VirtualMachineMigration> = ns.api();
    let vmm = vmms
        .list(&ListParams::default().labels(&format!("{}=model", names::WAVE_LABEL)))
        .await
        .unwrap()
        .items
        .pop()
        .unwrap();
    let (name, uid) = (vmm.name_any(), vmm.uid().unwrap());
    let model = Model {
        vm: one(
            &dynamic(&ns, "kubevirt.io", "v1", "VirtualMachine"),
            names::MIGRATION_UID_LABEL,
            &uid,
        )
        .await,
        dv: one(
            &dynamic(&ns, "cdi.kubevirt.io", "v1beta1", "DataVolume"),
            names::MIGRATION_UID_LABEL,
            &uid,
        )
        .await,
        vmi: one(
            &dynamic(&ns, "kubevirt.io", "v1", "VirtualMachineInstance"),
            names::MIGRATION_LABEL,
            &name,
        )
        .await,
        vmm,
    };
    fn bytes(v: &impl serde::Serialize) -> usize {
        serde_json::to_vec(v).map_or(0, |b| b.len())
    }
    println!(
        "bench: the model's objects: migration {} B, VM {} B, DataVolume {} B, instance {} B",
        bytes(&model.vmm),
        bytes(&model.vm),
        bytes(&model.dv),
        bytes(&model.vmi)
    );
    // The copies are not the sim's to run (they stand for VMs running elsewhere) nor the
    // controller's to migrate: both stop while the cluster grows.
    drop(the_sim);
    let mut ctl = Some(ctl);
    let mut at = vec![];
    let mut have = 1;
    for size in [small, large] {
        if let Some(mut c) = ctl.take() {
            c.proc.terminate();
        }
        grow(&ns, &model, have - 1, size - 1).await;
        have = size;
        let c = start_controller(&bins.0, &lab, &ns.name, &log);
        let s = settle(&c, size).await;
        println!(
            "bench: {size} settled: ready in {:.1} s, RSS {:.0} MiB (peak {:.0}); cached children {}",
            s.ready_secs,
            s.rss,
            s.peak,
            forms(&s.metrics)
        );
        at.push((size, s));
        ctl = Some(c);
    }
    let mut ctl = ctl.unwrap();

    // A wave in flight on the large cluster (when asked for; see `wave_vms`).
    let in_flight = if wave_vms == 0 {
        None
    } else {
        let wave_ns = lab.namespace("inflight").await.unwrap();
        lab_secrets(&lab, &wave_ns).await;
        ctl.proc.terminate();
        // One controller of every namespace: the settled 10,000 and the wave's.
        let every = start_controller_in(&bins.0, &lab, None, &ns.name, &log);
        settle(&every, large).await;
        let the_sim = sim(&bins, &lab, &wave_ns, &volumes, speed);
        let waves: Api<MigrationWave> = wave_ns.api();
        let pid = every.proc.id().unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let peak_kib = Arc::new(AtomicU64::new(0));
        let sampler = {
            let (done, peak_kib) = (done.clone(), peak_kib.clone());
            tokio::spawn(async move {
                while !done.load(Ordering::SeqCst) {
                    let (_, _, rss) = usage(pid);
                    peak_kib.fetch_max((rss * 1024.0) as u64, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            })
        };
        let wall = run_wave(&waves, "inflight", &lab, &names[1..], 50).await;
        done.store(true, Ordering::SeqCst);
        sampler.await.unwrap();
        let in_flight_rss = peak_kib.load(Ordering::SeqCst) as f64 / 1024.0;
        let (_, hwm, _) = usage(pid);
        drop(the_sim);
        drop(every);
        drop(wave_ns);
        Some((in_flight_rss, hwm, wall))
    };

    let (small_s, large_s) = (&at[0].1, &at[1].1);
    let ratio = large_s.rss / small_s.rss;
    let whole = metric(
        &large_s.metrics,
        "ferry_controller_cached_children",
        "form=\"whole\"",
    );
    let rows = vec![
        row(
            &format!("controller RSS, {small} settled migrations with VMs, volumes, instances"),
            format!("{:.0} MiB (peak {:.0})", small_s.rss, small_s.peak),
            "-",
        ),
        row(
            &format!("controller RSS, {large} settled"),
            format!(
                "{:.0} MiB (peak {:.0}), {ratio:.2}× the {small}",
                large_s.rss, large_s.peak
            ),
            "≤ 150 MiB, ≤ 1.2×",
        ),
        row(
            &format!("  children cached at {large} settled"),
            forms(&large_s.metrics),
            "0 whole",
        ),
        row(
            &format!("restart on {small} / {large} settled: time to ready (caches synced)"),
            format!("{:.1} s / {:.1} s", small_s.ready_secs, large_s.ready_secs),
            "reported",
        ),
        row(
            &format!(
                "controller RSS while a {wave_vms}-VM wave (maxInFlight 50) runs on the {large}"
            ),
            in_flight.map_or_else(
                || "not run (FERRY_BENCH_INFLIGHT_VMS=0)".to_owned(),
                |(rss, hwm, wall)| {
                    format!(
                        "{rss:.0} MiB (process peak {hwm:.0}); wave {:.0} s",
                        wall.as_secs_f64()
                    )
                },
            ),
            "≤ 200 MiB",
        ),
    ];
    write_table(
        "ferry-controller: memory on a settled cluster",
        "settled",
        &rows,
    );
    assert_eq!(whole, 0.0, "no released child cached whole");
    drop(ctl);
    drop(ns);
    lab.stop().unwrap();
    if std::env::var_os("FERRY_BENCH_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let _ = std::fs::remove_dir_all(&state);
}
