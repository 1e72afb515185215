//! `make bench`: a 1,000-VM wave through the sim at speed, and a settled cluster of 10,000
//! migrations, on a lab of their own. Prints a table with the target beside each figure and
//! writes it to `target/bench/wave.{txt,json}`.
//!
//! The ideal wall time is what the sim's step times and `maxInFlight` allow: one migration alone
//! (measured first, same sim speed) times the number of rounds, `ceil(N / maxInFlight)`.
//! `FERRY_BENCH_VMS`, `FERRY_BENCH_SETTLED`, `FERRY_BENCH_MAX_IN_FLIGHT`, `FERRY_BENCH_SPEED`
//! resize it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use ferry_crds::{MigrationWave, Phase, VirtualMachineMigration, names};
use ferry_harness::{ChildGuard, Lab, TestNamespace, eventually, put_vmdk, repo_root};
use futures::StreamExt;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use support::*;

/// Counter `name`'s growth per migration, series by series: `verb="create",kind="Job" 1.00, …`.
fn per_series(before: &str, after: &str, name: &str, migrations: f64) -> String {
    series_growth(before, after, name)
        .into_iter()
        .map(|(labels, d)| (labels, d / migrations))
        .filter(|(_, per)| *per >= 0.05)
        .map(|(labels, per)| format!("{} {per:.2}", labels.replace('"', "")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Mean seconds per phase (from `status.history`, whole seconds) of the wave's migrations, and
/// the mean time in flight (released to Succeeded): where a migration's time goes.
async fn phase_breakdown(vmms: &Api<VirtualMachineMigration>, wave: &str) {
    let selector = format!("{}={wave}", names::WAVE_LABEL);
    let items = vmms
        .list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items;
    let mut per: BTreeMap<String, (f64, usize)> = BTreeMap::new();
    let mut flight = (0.0, 0usize);
    for v in &items {
        let Some(s) = &v.status else { continue };
        for h in &s.history {
            let Some(left) = &h.left_at else { continue };
            let d = left.0.duration_since(h.entered_at.0).as_secs_f64();
            let e = per.entry(h.phase.to_string()).or_default();
            e.0 += d;
            e.1 += 1;
        }
        let at = |p: Phase| {
            s.history
                .iter()
                .find(|h| h.phase == p)
                .map(|h| h.entered_at.0)
        };
        if let (Some(a), Some(b)) = (at(Phase::Preparing), at(Phase::Succeeded)) {
            flight.0 += b.duration_since(a).as_secs_f64();
            flight.1 += 1;
        }
    }
    for (phase, (sum, count)) in per {
        println!(
            "bench: phase {phase:<12} mean {:.2} s over {count}",
            sum / count.max(1) as f64
        );
    }
    println!(
        "bench: in flight (Preparing to Succeeded) mean {:.2} s over {}",
        flight.0 / flight.1.max(1) as f64,
        flight.1
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes --bench; a filter that does not name us skips (as libtest would).
    if let Some(f) = std::env::args().skip(1).find(|a| !a.starts_with('-'))
        && !"wave".contains(&f)
    {
        return;
    }
    ferry_vsphere::tls::install_default_provider();
    let n = env_or("FERRY_BENCH_VMS", 1000);
    let settled = env_or("FERRY_BENCH_SETTLED", 10_000);
    let max_in_flight = env_or("FERRY_BENCH_MAX_IN_FLIGHT", 50) as i32;
    let speed = env_or("FERRY_BENCH_SPEED", 20);
    let (ctl_bin, sim_bin) = bins();
    let state = repo_root().join("target/lab/bench-state");
    let _ = std::fs::remove_dir_all(&state);
    let t = Instant::now();
    let lab = Lab::start(&state, (n + 1) as u32).unwrap();
    println!(
        "bench: lab with {} VMs in {:.0} s",
        n + 1,
        t.elapsed().as_secs_f64()
    );
    lab.install_crds().unwrap();
    let ns: TestNamespace = lab.namespace("bench").await.unwrap();
    let scratch = repo_root().join("target/bench/scratch");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let info = lab.info.clone();
    lab_secrets(&lab, &ns).await;
    let inventory: Vec<_> = info.inventory().unwrap().into_iter().take(n + 1).collect();
    let t = Instant::now();
    for (i, vm) in inventory.iter().enumerate() {
        put_vmdk(vm, &scratch.join("disks"), 1, i as u64).unwrap();
    }
    let _ = std::fs::remove_dir_all(scratch.join("disks"));
    println!(
        "bench: {} 1 MiB disks written in {:.0} s",
        n + 1,
        t.elapsed().as_secs_f64()
    );

    let volumes = scratch.join("volumes");
    std::fs::create_dir_all(&volumes).unwrap();
    let log = |what: &str| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(scratch.join(format!("{what}.log")))
            .unwrap()
    };
    let mut sim = Command::new(&sim_bin);
    sim.arg("--kubeconfig")
        .arg(&info.kubeconfig)
        .args(["--namespace", &ns.name, "--speed", &speed.to_string()])
        .arg("--volume-dir")
        .arg(&volumes)
        .arg("--bin-dir")
        .arg(ctl_bin.parent().unwrap())
        .env("RUST_LOG", "warn")
        .stdout(log("sim"))
        .stderr(log("sim"));
    let sim = ChildGuard::spawn("ferry-sim", sim).unwrap();
    let mut ctl = start_controller(&ctl_bin, &lab, &ns.name, &scratch.join("controller.log"));
    let waves: Api<MigrationWave> = ns.api();

    // One migration alone: the per-migration floor at this sim speed.
    let names: Vec<String> = inventory.iter().map(|v| v.name.clone()).collect();
    let single = run_wave(&waves, "single", &lab, &names[..1], 1).await;
    let base = http_get(ctl.metrics, "/metrics");
    let (cpu0, _, _) = usage(ctl.proc.id().unwrap());
    let (api0, lab0) = lab_cpu(&state);
    let sim0 = usage(sim.id().unwrap()).0 + children_cpu(sim.id().unwrap());
    let (wall, forecast) = run_wave_forecast(&waves, "big", &lab, &names[1..], max_in_flight).await;
    let after = http_get(ctl.metrics, "/metrics");
    let (cpu1, peak_rss, _) = usage(ctl.proc.id().unwrap());
    let (api1, lab1) = lab_cpu(&state);
    let sim1 = usage(sim.id().unwrap()).0 + children_cpu(sim.id().unwrap());
    let (api_cpu, lab_rest_cpu, wave_sim_cpu) = (api1 - api0, lab1 - lab0, sim1 - sim0);
    let all_cpu = (cpu1 - cpu0) + api_cpu + lab_rest_cpu + wave_sim_cpu;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get()) as f64;
    let rounds = n.div_ceil(max_in_flight as usize);
    let ideal = single.as_secs_f64() * rounds as f64;
    let delta =
        |name: &str, filter: &str| metric(&after, name, filter) - metric(&base, name, filter);
    let requests = delta("ferry_controller_api_requests_total", "");
    let status_writes = delta(
        "ferry_controller_api_writes_total",
        "verb=\"status\",kind=\"VirtualMachineMigration\"",
    );
    let writes = delta("ferry_controller_api_writes_total", "");
    let p50 = quantile(&after, "ferry_controller_reconcile_duration_seconds", 0.5);
    let p99 = quantile(&after, "ferry_controller_reconcile_duration_seconds", 0.99);
    let wp50 = quantile(
        &after,
        "ferry_controller_wave_reconcile_duration_seconds",
        0.5,
    );
    let wp99 = quantile(
        &after,
        "ferry_controller_wave_reconcile_duration_seconds",
        0.99,
    );
    let sim_cpu = usage(sim.id().unwrap()).0;
    let jobs_cpu = children_cpu(sim.id().unwrap());
    let nf = n as f64;
    phase_breakdown(&ns.api(), "big").await;
    std::fs::write(scratch.join("metrics-before.txt"), &base).unwrap();
    std::fs::write(scratch.join("metrics-after.txt"), &after).unwrap();

    // A settled cluster: the wave's migrations plus copies of one of them, all Succeeded.
    let vmms: Api<VirtualMachineMigration> = ns.api();
    let done = vmms.list(&ListParams::default()).await.unwrap().items;
    let model = done
        .iter()
        .find(|v| v.phase() == Phase::Succeeded)
        .unwrap()
        .clone();
    let extra = settled.saturating_sub(done.len());
    let t = Instant::now();
    futures::stream::iter(0..extra)
        .for_each_concurrent(32, |i| {
            let (vmms, model) = (vmms.clone(), model.clone());
            async move {
                let name = format!("settled-{i:05}");
                let mut v = VirtualMachineMigration::new(&name, model.spec.clone());
                v.metadata.finalizers = Some(vec![names::FINALIZER.to_owned()]);
                v.metadata.annotations = model.metadata.annotations.clone().map(|mut a| {
                    a.remove(names::HOLD_ANNOTATION);
                    a
                });
                vmms.create(&PostParams::default(), &v).await.unwrap();
                let patch = serde_json::json!({"status": model.status});
                vmms.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap();
            }
        })
        .await;
    println!(
        "bench: {extra} settled migrations added in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    ctl.proc.terminate();
    let mut ctl = start_controller(
        &ctl_bin,
        &lab,
        &ns.name,
        &scratch.join("controller-settled.log"),
    );
    let total = vmms.list(&ListParams::default()).await.unwrap().items.len();
    let synced = eventually(
        "the controller to hold every settled migration, its caches synced",
        Duration::from_secs(900),
        || async {
            // A settled migration of the first list is not reconciled (nothing to do): held
            // and ready is synced.
            let m = http_get(ctl.metrics, "/metrics");
            (ctl.ready() && metric(&m, "ferry_controller_cached_migrations", "") >= total as f64)
                .then_some(())
        },
    )
    .await;
    synced.unwrap();
    let m0 = http_get(ctl.metrics, "/metrics");
    let window = Duration::from_secs(env_or("FERRY_BENCH_SETTLED_WINDOW", 120) as u64);
    tokio::time::sleep(window).await;
    let m1 = http_get(ctl.metrics, "/metrics");
    let settled_writes = metric(&m1, "ferry_controller_api_writes_total", "")
        - metric(&m0, "ferry_controller_api_writes_total", "");
    let settled_startup_writes = metric(&m0, "ferry_controller_api_writes_total", "");
    let per_min = settled_writes / window.as_secs_f64() * 60.0;
    let (_, settled_peak, settled_rss) = usage(ctl.proc.id().unwrap());
    ctl.proc.terminate();
    drop(sim);

    let rows = vec![
        row(
            &format!("{n}-VM wave, maxInFlight {max_in_flight}, sim speed {speed}: wall time"),
            format!("{:.0} s", wall.as_secs_f64()),
            &format!("≤ {:.0} s (ideal {:.0} s + 5 %)", ideal * 1.05, ideal),
        ),
        row(
            "  the first forecast of its end (status.forecast.endsAt) vs the actual end",
            forecast.map_or("no forecast seen".into(), |f| {
                format!(
                    "{:.0} % off (made {:.0} s in)",
                    f.error * 100.0,
                    f.made_after
                )
            }),
            "≤ 25 % of the time left",
        ),
        row(
            "  one migration alone (the per-migration floor)",
            format!("{:.1} s", single.as_secs_f64()),
            "-",
        ),
        row(
            "  ideal: floor × ceil(N / maxInFlight)",
            format!("{:.0} s ({rounds} rounds)", ideal),
            "-",
        ),
        row(
            "  wall / ideal",
            format!("{:.2}", wall.as_secs_f64() / ideal),
            "≤ 1.05",
        ),
        row(
            &format!("CPU of every process in the wave ÷ {cores:.0} cores (the machine's floor)"),
            format!("{:.0} s", all_cpu / cores),
            "-",
        ),
        row(
            "  wall / the machine's floor",
            format!("{:.2}", wall.as_secs_f64() / (all_cpu / cores)),
            "-",
        ),
        row(
            "  CPU per migration: apiserver / rest of the lab / controller / sim and its Jobs",
            format!(
                "{:.2} / {:.2} / {:.2} / {:.2} s",
                api_cpu / nf,
                lab_rest_cpu / nf,
                (cpu1 - cpu0) / nf,
                wave_sim_cpu / nf
            ),
            "-",
        ),
        row(
            "API requests per migration (controller client)",
            format!("{:.1}", requests / nf),
            "-",
        ),
        row(
            "  GETs / migration read fresh / children from the cache, per migration",
            format!(
                "{:.1} / {:.1} / {:.1} of {:.1}",
                delta("ferry_controller_api_requests_total", "verb=\"get\"") / nf,
                delta("ferry_controller_migration_reads_total", "result=\"miss\"") / nf,
                delta("ferry_controller_cache_reads_total", "result=\"hit\"") / nf,
                delta("ferry_controller_cache_reads_total", "") / nf
            ),
            "-",
        ),
        row(
            "API writes per migration (all kinds)",
            format!("{:.1}", writes / nf),
            "-",
        ),
        row(
            "status writes per migration",
            format!("{:.1}", status_writes / nf),
            "-",
        ),
        row(
            "  writes per migration by verb and kind (≥ 0.05)",
            per_series(&base, &after, "ferry_controller_api_writes_total", nf),
            "-",
        ),
        row(
            "  requests per migration by verb (≥ 0.05)",
            per_series(&base, &after, "ferry_controller_api_requests_total", nf),
            "-",
        ),
        row(
            "controller CPU seconds (wave)",
            format!(
                "{:.1} s ({:.2} s per migration)",
                cpu1 - cpu0,
                (cpu1 - cpu0) / nf
            ),
            "-",
        ),
        row(
            "sim CPU seconds (both runs)",
            format!("{sim_cpu:.1} s"),
            "-",
        ),
        row(
            "the sim's Job processes' CPU seconds (both runs)",
            format!("{jobs_cpu:.1} s"),
            "-",
        ),
        row(
            "controller peak RSS (wave)",
            format!("{peak_rss:.0} MiB"),
            "-",
        ),
        row(
            "migration reconcile latency p50 / p99",
            format!("{:.1} / {:.1} ms", p50 * 1e3, p99 * 1e3),
            "-",
        ),
        row(
            "wave reconcile latency p50 / p99",
            format!("{:.1} / {:.1} ms", wp50 * 1e3, wp99 * 1e3),
            "-",
        ),
        row(
            &format!("settled cluster of {total}: writes per minute"),
            format!(
                "{per_min:.1} ({settled_writes:.0} in {} s)",
                window.as_secs()
            ),
            "0",
        ),
        row(
            "  writes while syncing after a restart",
            format!("{settled_startup_writes:.0}"),
            "0",
        ),
        row(
            "  controller RSS (peak)",
            format!("{settled_rss:.0} MiB ({settled_peak:.0} MiB)"),
            "-",
        ),
    ];
    write_table("ferry-controller: waves at scale", "wave", &rows);
    drop(ns);
    lab.stop().unwrap();
    // FERRY_BENCH_KEEP=1 keeps the controller's and the sim's logs.
    if std::env::var_os("FERRY_BENCH_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&scratch);
    }
    let _ = std::fs::remove_dir_all(&state);
}
