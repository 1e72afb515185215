//! The data path at the machine's speed: 1 GiB and 8 GiB disks (a flat extent, and a sparse
//! VMDK with 50% zeros), raw and qcow2 output. For each case, in the same run:
//!
//! * the floor: a plain download of the same file over the same `/folder` URL to local disk,
//!   plus `qemu-img convert` of that file (what a converter that moved nothing twice would
//!   still have to do);
//! * ferry's time in Converting: a migration through the release controller, the converter Job
//!   (run by ferry-sim) and staging, timed from the phase the migration shows;
//! * the ratio (targets: ≤ 1.5× for flat→raw, ≤ 2× otherwise), the converter's peak scratch,
//!   peak RSS (its own and its largest qemu-img) and the bytes it sent to S3 (its report line);
//! * what the lab's S3 costs, beside the floor (which uploads nothing): the upload
//!   floor, a multipart upload of the floor's qemu-img output (the staged image's bytes) to the
//!   same lab S3 (ferry-lab-s3), with the converter's part size and parts in flight, completion included; and
//!   the ratio of Converting to download + upload;
//! * the converter's own time on the disk (its report line, from the disk's start to its
//!   `Staged` record), so that the rest of Converting (the Job's start, the vSphere login, the
//!   controller noticing the Job's end) shows as the difference.
//!
//! Prints a table and writes `target/bench/datapath.{txt,json}`. One 8 GiB disk exists at a
//! time and is deleted after its cases. `FERRY_BENCH_SIZES=1` (or `8`) runs the 1 GiB (or 8 GiB) cases only.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use ferry_crds::{DiskFormat, Phase, VmSelector};
use ferry_harness::DiskKind;

#[derive(Debug, Default, serde::Serialize)]
struct Row {
    case: String,
    download_s: f64,
    qemu_s: f64,
    floor_s: f64,
    converting_s: f64,
    ratio: f64,
    upload_s: f64,
    ratio_with_upload: f64,
    converter_disk_s: f64,
    /// CPU seconds while converting: the converter (its summary line), its qemu-img runs, the
    /// lab process (vcsim serving the datastore, with the apiserver it hosts) and the lab's S3 (ferry-lab-s3).
    converter_cpu_s: f64,
    qemu_cpu_s: f64,
    lab_cpu_s: f64,
    s3_cpu_s: f64,
    target: f64,
    scratch_peak_bytes: u64,
    rss_bytes: u64,
    qemu_rss_bytes: u64,
    sent_bytes: u64,
    downloaded_bytes: u64,
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

fn mib(b: u64) -> String {
    format!("{:.0} MiB", b as f64 / (1u64 << 20) as f64)
}

/// The floor: download `files` (datastore paths) to `dir` over the `/folder` service, then
/// `qemu-img convert` the last (the `.vmdk` the disk names) to `format`; then, apart from the
/// floor, the upload of that output to the lab's S3 ([`upload_floor`]).
/// `(download s, qemu s, upload s)`.
async fn floor(env: &Env, files: &[String], dir: &Path, format: DiskFormat) -> (f64, f64, f64) {
    let info = &env.lab.info;
    ferry_vsphere::tls::install_default_provider();
    let ep = ferry_vsphere::Endpoint {
        url: info.vcenter.url.clone(),
        username: info.vcenter.username.clone(),
        password: info.vcenter.password.clone().into(),
        tls: ferry_vsphere::TlsPolicy::Insecure,
    };
    let s = ferry_vsphere::Session::connect(&ep).await.unwrap();
    let t = Instant::now();
    let mut local = vec![];
    for f in files {
        let name = f.rsplit('/').next().unwrap();
        let dest = dir.join(name);
        s.download(f, &info.vcenter.datacenter, &dest, |_, _| {})
            .await
            .unwrap();
        local.push(dest);
    }
    let download = t.elapsed().as_secs_f64();
    let _ = s.logout().await;
    let out = dir.join(format!("floor.{}", format.as_str()));
    let t = Instant::now();
    let st = std::process::Command::new("qemu-img")
        .args(["convert", "-O", format.as_str()])
        .arg(local.last().unwrap())
        .arg(&out)
        .status()
        .unwrap();
    assert!(st.success());
    let qemu = t.elapsed().as_secs_f64();
    for p in &local {
        let _ = std::fs::remove_file(p);
    }
    let upload = upload_floor(env, &out).await;
    let _ = std::fs::remove_file(&out);
    (download, qemu, upload)
}

/// What the lab's S3 costs: `file` uploaded to the lab's S3 as the converter uploads an image (parts
/// of [`part_size`], [`parts_in_flight`] at once, read in order, the multipart upload completed),
/// then deleted. Seconds from the upload's creation to its completion. The file was just written
/// by qemu-img, so it is read from the page cache as the converter's parts come from memory.
///
/// [`part_size`]: ferry_convert::part_size
/// [`parts_in_flight`]: ferry_convert::parts_in_flight
async fn upload_floor(env: &Env, file: &Path) -> f64 {
    use futures::StreamExt;
    use tokio::io::AsyncReadExt;
    let s3 = &env.lab.info.s3;
    let staging = ferry_staging::Staging::new(ferry_staging::StagingConfig {
        endpoint: s3.endpoint.clone(),
        bucket: s3.bucket.clone(),
        region: s3.region.clone(),
        access_key: s3.access_key.clone(),
        secret_key: s3.secret_key.clone().into(),
        prefix: String::new(),
        ca_bundle: None,
    })
    .unwrap();
    let size = std::fs::metadata(file).unwrap().len();
    let part = ferry_convert::part_size(size);
    let key = format!("bench-upload-floor/{}", env.ns.name);
    let t = Instant::now();
    let up = staging
        .create_multipart(&key, &Default::default())
        .await
        .unwrap();
    let f = tokio::fs::File::open(file).await.unwrap();
    let count = size.div_ceil(part).max(1);
    let parts = futures::stream::unfold((f, 0u64), move |(mut f, i)| async move {
        if i == count {
            return None;
        }
        let mut buf = vec![0u8; part.min(size - i * part) as usize];
        f.read_exact(&mut buf).await.unwrap();
        Some(((i as usize, bytes::Bytes::from(buf)), (f, i + 1)))
    });
    let ids: Vec<_> = parts
        .map(|(i, b)| {
            let (staging, up) = (&staging, &up);
            async move { staging.put_part(up, i, b).await.unwrap() }
        })
        .buffered(ferry_convert::parts_in_flight(part))
        .collect()
        .await;
    staging.complete_multipart(&up, ids).await.unwrap();
    let secs = t.elapsed().as_secs_f64();
    staging.delete(&key).await.unwrap();
    secs
}

/// The converter's report lines (`{"summary":true,...}` and the disk line) from the sim's log
/// of the conversion Job.
fn converter_report(env: &Env, job: &str) -> (serde_json::Value, serde_json::Value) {
    let dir = env.volumes.join("_jobs").join(&env.ns.name).join(job);
    let mut summary = serde_json::Value::Null;
    let mut disk = serde_json::Value::Null;
    for e in std::fs::read_dir(&dir).unwrap().flatten() {
        for line in std::fs::read_to_string(e.path())
            .unwrap_or_default()
            .lines()
        {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
                if v.get("summary").is_some() {
                    summary = v;
                } else if v.get("sha256").is_some() {
                    disk = v;
                }
            }
        }
    }
    (summary, disk)
}

/// CPU seconds (user + system) a process has used, 0 when unknown.
fn process_cpu(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1.to_owned();
            let f: Vec<f64> = rest
                .split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|v| v.parse().ok())
                .collect();
            Some(f.iter().sum::<f64>() / 100.0)
        })
        .unwrap_or(0.0)
}

/// The pid of the lab's S3 server (a child of the lab process), if it runs.
fn s3_server_pid(lab_pid: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(e.path().join("stat")).ok()?;
        let (head, rest) = stat.rsplit_once(')')?;
        let ppid: u32 = rest.split_whitespace().nth(1)?.parse().ok()?;
        (head.ends_with("(ferry-lab-s3") && ppid == lab_pid).then_some(pid)
    })
}

/// Bytes free on the filesystem of `path` (`df`), 0 when unknown.
fn free_bytes(path: &Path) -> u64 {
    std::process::Command::new("df")
        .args(["-B1", "--output=avail"])
        .arg(path)
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .nth(1)
                .and_then(|l| l.trim().parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sizes: Vec<u64> = match std::env::var("FERRY_BENCH_SIZES").ok().as_deref() {
        Some("1") => vec![1024],
        Some("8") => vec![8192],
        _ => vec![1024, 8192],
    };
    let mut env = Env::new("bench-datapath", 8).await;
    env.start_sim();
    env.start_controller();
    let mut rows: Vec<Row> = vec![];
    let mut skipped: Vec<String> = vec![];
    for &mib_size in &sizes {
        // At once: the source disk, the staged image, the S3 server's open upload, the
        // floor's download and qemu-img output (one after the other), and some margin.
        let need = (mib_size << 20) * 3 + (4 << 30);
        let free = free_bytes(&env.scratch);
        if free < need {
            let why = format!(
                "{} cases not run: {} free on the shared disk, they need about {}",
                gib(mib_size << 20),
                gib(free),
                gib(need)
            );
            println!("{why}");
            skipped.push(why);
            continue;
        }
        for (kind, zero_every, label) in [
            (DiskKind::Flat, 1, "flat"),
            (DiskKind::Sparse, 2, "sparse 50% zero"),
        ] {
            let vm = env.lab.claim_vm().unwrap();
            let dir = env
                .scratch
                .join(format!("{label}-{mib_size}").replace(' ', "-"));
            let disk = ferry_harness::put_disk(&vm, &dir, mib_size, 9, kind, zero_every).unwrap();
            // The raw reference is not needed here: only the datastore copy stays.
            let _ = std::fs::remove_file(&disk.raw);
            let ds = &vm.disks[0].datastore_path;
            let files = match kind {
                DiskKind::Flat => vec![ds.replace(".vmdk", "-flat.vmdk"), ds.clone()],
                _ => vec![ds.clone()],
            };
            for format in [DiskFormat::Raw, DiskFormat::Qcow2] {
                let case = format!("{} {label} → {}", gib(mib_size << 20), format.as_str());
                let (download_s, qemu_s, upload_s) = floor(&env, &files, &dir, format).await;
                let name = format!(
                    "b-{}-{}-{}",
                    mib_size,
                    label.split(' ').next().unwrap(),
                    format.as_str()
                );
                let mut vmm = env.migration(&name);
                vmm.spec.source.vm = VmSelector::by_name(vm.name.clone());
                vmm.spec.conversion.format = format;
                vmm.spec.target.name = Some(name.clone());
                env.create(&vmm).await;
                let lab_pid = env.lab.info.pid;
                let s3_pid = s3_server_pid(lab_pid);
                let (mut entered, mut left) = (None, None);
                let mut cpu_at_entry = (0.0, 0.0);
                let deadline = Instant::now() + Duration::from_secs(900);
                while left.is_none() {
                    let v = env.get(&name).await;
                    match v.phase() {
                        Phase::Converting if entered.is_none() => {
                            entered = Some(Instant::now());
                            cpu_at_entry = (process_cpu(lab_pid), s3_pid.map_or(0.0, process_cpu));
                        }
                        Phase::Converting => {}
                        Phase::Failed | Phase::RolledBack => {
                            panic!("{case}: failed:\n{}", serde_yaml_status(&v))
                        }
                        Phase::Importing
                        | Phase::CuttingOver
                        | Phase::ConvertingGuest
                        | Phase::CreatingVM
                        | Phase::Starting
                        | Phase::Validating
                        | Phase::Succeeded
                        | Phase::Cancelled
                            if entered.is_some() =>
                        {
                            left = Some(Instant::now())
                        }
                        Phase::Pending
                        | Phase::Queued
                        | Phase::Preparing
                        | Phase::Importing
                        | Phase::CuttingOver
                        | Phase::ConvertingGuest
                        | Phase::CreatingVM
                        | Phase::Starting
                        | Phase::Validating
                        | Phase::Succeeded
                        | Phase::Cancelled => {}
                    }
                    assert!(Instant::now() < deadline, "{case}: timed out");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let converting_s = (left.unwrap() - entered.unwrap()).as_secs_f64();
                let lab_cpu_s = process_cpu(lab_pid) - cpu_at_entry.0;
                let s3_cpu_s = s3_pid.map_or(0.0, process_cpu) - cpu_at_entry.1;
                let (summary, line) = converter_report(&env, &format!("{name}-convert"));
                // Done with it: the import is not measured here, and its volume is not kept.
                env.api().delete(&name, &Default::default()).await.unwrap();
                env.wait_gone(&name, 300).await;
                let floor_s = download_s + qemu_s;
                let target = if kind == DiskKind::Flat && format == DiskFormat::Raw {
                    1.5
                } else {
                    2.0
                };
                let n =
                    |v: &serde_json::Value, k: &str| v.get(k).and_then(|x| x.as_u64()).unwrap_or(0);
                let f = |v: &serde_json::Value, k: &str| {
                    v.get(k).and_then(|x| x.as_f64()).unwrap_or(0.0)
                };
                let row = Row {
                    case,
                    download_s,
                    qemu_s,
                    floor_s,
                    converting_s,
                    ratio: converting_s / floor_s,
                    upload_s,
                    ratio_with_upload: converting_s / (download_s + upload_s),
                    converter_disk_s: f(&line, "seconds"),
                    converter_cpu_s: f(&summary, "cpuSeconds"),
                    qemu_cpu_s: f(&summary, "qemuCpuSeconds"),
                    lab_cpu_s,
                    s3_cpu_s,
                    target,
                    scratch_peak_bytes: n(&summary, "scratchPeakBytes"),
                    rss_bytes: n(&summary, "peakRssBytes"),
                    qemu_rss_bytes: n(&summary, "peakQemuRssBytes"),
                    sent_bytes: n(&line, "sent"),
                    downloaded_bytes: n(&line, "downloaded"),
                };
                println!("{row:?}");
                rows.push(row);
                write_out(&table(&rows, &skipped), &rows);
            }
            let _ = std::fs::remove_dir_all(&dir);
            // The datastore copy goes too: one large disk at a time.
            for f in std::fs::read_dir(vm.disks[0].local_path.parent().unwrap())
                .unwrap()
                .flatten()
            {
                if f.path().extension().is_some_and(|e| e == "vmdk") {
                    let _ = std::fs::write(f.path(), b"");
                }
            }
        }
    }
    let txt = table(&rows, &skipped);
    print!("\n{txt}");
    write_out(&txt, &rows);
}

/// Writes `target/bench/datapath.{txt,json}` (also after each case: a run cut short keeps what
/// it measured).
fn write_out(txt: &str, rows: &[Row]) {
    let out = ferry_harness::repo_root().join("target/bench");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("datapath.txt"), txt).unwrap();
    std::fs::write(
        out.join("datapath.json"),
        serde_json::to_string_pretty(rows).unwrap(),
    )
    .unwrap();
}

/// The table of `rows`, its legend, the CPU split and the cases not run.
fn table(rows: &[Row], skipped: &[String]) -> String {
    let mut txt = String::new();
    txt.push_str(&format!(
        "{:<32} {:>8} {:>8} {:>8} {:>11} {:>6} {:>7} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10}\n",
        "case",
        "download",
        "qemu-img",
        "floor",
        "Converting",
        "ratio",
        "target",
        "upload",
        "÷(dl+up)",
        "converter",
        "scratch",
        "RSS",
        "qemu RSS",
        "sent S3",
        "read DS"
    ));
    for r in rows {
        txt.push_str(&format!(
            "{:<32} {:>7.2}s {:>7.2}s {:>7.2}s {:>10.2}s {:>5.2}× {:>7} {:>7.2}s {:>8.2}× {:>8.2}s {:>9} {:>9} {:>9} {:>10} {:>10} {}\n",
            r.case,
            r.download_s,
            r.qemu_s,
            r.floor_s,
            r.converting_s,
            r.ratio,
            format!("≤{}×", r.target),
            r.upload_s,
            r.ratio_with_upload,
            r.converter_disk_s,
            mib(r.scratch_peak_bytes),
            mib(r.rss_bytes),
            mib(r.qemu_rss_bytes),
            gib(r.sent_bytes),
            gib(r.downloaded_bytes),
            if r.ratio <= r.target { "ok" } else { "MISSED" }
        ));
    }
    txt.push_str(
        "floor: download + qemu-img (the ratio's denominator); upload: the same bytes as the \
         staged image sent to the lab's S3 (ferry-lab-s3) as the converter sends them (not in the floor); \
         ÷(dl+up): Converting / (download + upload); converter: its own time on the disk (the \
         rest of Converting is the Job's start, the login and the controller noticing the end)\n",
    );
    txt.push_str(&format!(
        "\nCPU seconds while converting (2 cores shared with other work):\n{:<32} {:>10} {:>9} {:>9} {:>9} {:>9}\n",
        "case", "Converting", "converter", "qemu-img", "lab+vcsim", "lab S3"
    ));
    for r in rows {
        txt.push_str(&format!(
            "{:<32} {:>9.2}s {:>8.2}s {:>8.2}s {:>8.2}s {:>8.2}s\n",
            r.case, r.converting_s, r.converter_cpu_s, r.qemu_cpu_s, r.lab_cpu_s, r.s3_cpu_s
        ));
    }
    for why in skipped {
        txt.push_str(&format!("{why}\n"));
    }
    txt
}
