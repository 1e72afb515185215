//! The converter run by the conversion Job (`ferry-controller convert`): each disk of a VM read
//! off the datastore and staged in S3 with its SHA-256, in as few passes as the formats allow.
//!
//! | input | output | passes | local copy |
//! |---|---|---|---|
//! | flat extent (ESXi) | raw | one: ranges fetched in parallel → hashed → multipart upload | none |
//! | sparse / stream-optimized VMDK | raw | one: qemu-img reads the VMDK over NBD (ranges) and writes raw into the NBD sink → hashed → upload | none |
//! | flat extent | qcow2 | one: ranges fetched in parallel → [`qcow2`] writer → hashed → upload | none |
//! | sparse / stream-optimized VMDK | qcow2 | one: qemu-img's raw output as above → [`qcow2`] writer → hashed → upload | none |
//!
//! qcow2 is written by ferry, not qemu-img: qemu-img rewrites qcow2 metadata (L1/L2 tables,
//! refcounts, the header) until it exits, so its image could only be uploaded from a finished
//! local copy, read a second time. ferry's writer decides the whole layout first from where the
//! data is and writes the file front to back as the raw contents go by (hashed on the way: the
//! verification Job compares the imported volume with that hash). Zeros are not moved where
//! the source tells where data is: a flat extent's allocated areas come from vSphere's
//! `QueryChangedDiskAreas` (holes are made locally, never downloaded), a sparse VMDK's from its
//! own grain tables (qemu-img reads only allocated grains; `qemu-img map` lays out the qcow2).
//!
//! Disks of a VM run [`scratch::PARALLEL_DISKS`] at a time, parts of a disk several at a time;
//! memory is bounded by the parts in flight ([`upload::parts_in_flight`]).
//!
//! Restartable: each disk has a record beside its image ([`ferry_staging::DiskRecord`]); a disk
//! whose record says `Staged` is skipped, a previous run's open multipart upload is aborted
//! before the disk is done again, and an image is only ever taken as complete with its record.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod credentials;
pub mod delta;
mod disk;
mod error;
pub mod guest;
pub mod job_contract;
mod map;
mod nbd;
pub mod qcow2;
mod qemu;
mod remote;
pub mod scratch;
mod upload;
pub mod verify;
mod vmdk;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use serde::Serialize;

pub use credentials::Credentials;
pub use error::{Error, TRANSIENT_EXIT_CODE};
pub use map::{DiskMap, Piece};
pub use upload::{RECORD_INTERVAL, part_size, parts_in_flight};
pub use vmdk::{DescriptorError, Extent, extents, is_descriptor};

use crate::job_contract::{env, extra_env};
use ferry_staging::{self as staging, DiskRecord, Staging};
use ferry_vsphere::{self as vsphere, DatastorePath, Endpoint, Session, VmInfo};

/// User metadata of a staged disk image (fixed when its upload starts; the checksum is in its
/// record).
pub const META_SOURCE_PATH: &str = "source-path";
pub const META_FORMAT: &str = "format";
pub const META_VIRTUAL_SIZE: &str = "virtual-size";

/// The staged images' format: the API's type, read from `--format` by its lowercase name.
pub use ferry_crds::DiskFormat;

/// `--format`'s parser: the format names [`DiskFormat`] has, listed in `--help`.
fn format_parser() -> impl clap::builder::TypedValueParser<Value = DiskFormat> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(DiskFormat::NAMES)
        .try_map(|name| name.parse::<DiskFormat>())
}

/// One disk to convert: `[INDEX=]DATASTORE_PATH=STAGING_KEY`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskSpec {
    /// The disk's position among the VM's disks; its position in the list when not given.
    pub index: Option<usize>,
    pub datastore_path: String,
    pub key: String,
}

impl DiskSpec {
    /// Parses `[ds] dir/disk.vmdk=ns/vm/uid/disk-0.raw` or `0=[ds] dir/disk.vmdk=...`. The key
    /// is what follows the last `=` (datastore paths may contain `=`; generated keys do not).
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (front, key) = text
            .rsplit_once('=')
            .ok_or_else(|| format!("{text:?} is not DATASTORE_PATH=STAGING_KEY"))?;
        let (index, path) = match front.split_once('=') {
            Some((i, p)) if !front.starts_with('[') => (
                Some(
                    i.trim()
                        .parse::<usize>()
                        .map_err(|_| format!("{i:?} in {text:?} is not a disk index"))?,
                ),
                p,
            ),
            _ => (None, front),
        };
        DatastorePath::parse(path).map_err(|e| e.to_string())?;
        if key.trim().is_empty() {
            return Err(format!("{text:?} has an empty staging key"));
        }
        Ok(Self {
            index,
            datastore_path: path.trim().to_owned(),
            key: key.trim().to_owned(),
        })
    }
}

/// Arguments of `ferry-controller convert`; every one can come from the environment. The
/// credentials and their endpoints are no arguments: they come only from the Job's environment,
/// by `secretKeyRef`, read as the controller reads the Secrets ([`Credentials`]).
#[derive(Clone, Debug, clap::Args)]
pub struct ConvertArgs {
    /// The VM's moref; used to find the datacenter when --datacenter is not given.
    #[arg(long, env = env::VM_MOREF)]
    pub vm_moref: Option<String>,
    /// Datacenter inventory path, the `dcPath` of datastore downloads.
    #[arg(long, env = extra_env::DATACENTER)]
    pub datacenter: Option<String>,
    /// A disk: `[INDEX=]DATASTORE_PATH=STAGING_KEY`; repeat per disk (one per line in the env).
    #[arg(long = "disk", env = extra_env::DISKS, value_delimiter = '\n', required = true, value_parser = DiskSpec::parse)]
    pub disks: Vec<DiskSpec>,
    #[arg(long, env = env::FORMAT, value_parser = format_parser(), default_value = "raw")]
    pub format: DiskFormat,
    #[arg(long, env = env::S3_REGION, default_value = "us-east-1")]
    pub s3_region: String,
    #[arg(long, env = extra_env::S3_PREFIX, default_value = "")]
    pub s3_prefix: String,
    #[arg(long, env = extra_env::WORK_DIR, default_value = "/tmp/ferry-convert")]
    pub work_dir: PathBuf,
    #[arg(long, env = extra_env::QEMU_IMG, default_value = "qemu-img")]
    pub qemu_img: PathBuf,
    /// Cap on the datastore read rate, bytes per second (protects the source's storage).
    #[arg(long, env = extra_env::MAX_READ_RATE)]
    pub max_read_rate: Option<u64>,
    /// The uid of the Job this run belongs to: written into every record, and only images
    /// recorded by this same Job are taken as already staged.
    #[arg(long, env = env::JOB_UID)]
    pub job_uid: Option<String>,
    /// A snapshot of the VM (its moref) whose frozen disks the `--disk` paths name: a warm
    /// migration's first round, read while the VM runs. Without one the VM must be off.
    #[arg(long, env = extra_env::SNAPSHOT)]
    pub snapshot: Option<String>,
}

/// What happened to one disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskStatus {
    /// Read, converted and uploaded by this run.
    Converted,
    /// Already staged (its record says so); nothing done.
    Skipped,
}

/// How a disk's bytes went (see the table in the module documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DataPath {
    /// Flat extent → raw: ranges straight into the upload.
    FlatStream,
    /// qemu-img from the NBD source into the NBD sink (raw output).
    QemuSink,
    /// Flat extent → qcow2: ranges into ferry's qcow2 writer, straight into the upload.
    FlatQcow2,
    /// qemu-img from the NBD source into the NBD sink (raw), then ferry's qcow2 writer.
    QemuSinkQcow2,
    /// Nothing moved (skipped).
    None,
}

/// One disk's result; printed as one JSON line on stdout.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskReport {
    pub disk: usize,
    pub datastore_path: String,
    pub key: String,
    pub status: DiskStatus,
    pub format: DiskFormat,
    pub path: DataPath,
    /// Bytes of the staged image.
    pub size: u64,
    pub sha256: String,
    /// SHA-256 of the image's raw contents (what the imported volume holds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_sha256: Option<String>,
    /// Virtual size of the image, when known (always for converted disks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub virtual_size: Option<u64>,
    /// Bytes read from the datastore.
    pub downloaded: u64,
    /// Bytes sent to S3.
    pub sent: u64,
    /// Whether the source said where the data is (holes not downloaded).
    pub allocation_known: bool,
    pub seconds: f64,
}

/// The result of a run, disk by disk.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ConvertReport {
    pub disks: Vec<DiskReport>,
}

/// The last line a run prints: what it cost the machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    pub summary: bool,
    /// Peak resident memory of the converter process (VmHWM).
    pub peak_rss_bytes: u64,
    /// Peak resident memory of the largest qemu-img it ran.
    pub peak_qemu_rss_bytes: u64,
    /// Most bytes the work directory held at once, sampled while disks were converted.
    pub scratch_peak_bytes: u64,
    pub sent_bytes: u64,
    pub downloaded_bytes: u64,
    /// CPU time of the converter process (user + system), and of the qemu-img runs it waited
    /// for: where a data path's time goes on a machine with few cores.
    pub cpu_seconds: f64,
    pub qemu_cpu_seconds: f64,
}

/// `(own, waited-for children's)` CPU seconds (user + system) from `/proc/self/stat`; zeros when
/// unknown.
pub fn cpu_seconds() -> (f64, f64) {
    // Linux's USER_HZ: 100 on every architecture the converter image is built for.
    const TICKS: f64 = 100.0;
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (0.0, 0.0);
    };
    // Fields after the command (which may hold spaces) in parentheses; utime is field 14.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = rest
        .split_whitespace()
        .skip(11)
        .take(4)
        .map(|v| v.parse().unwrap_or(0.0))
        .collect();
    match f.as_slice() {
        [u, s, cu, cs] => ((u + s) / TICKS, (cu + cs) / TICKS),
        _ => (0.0, 0.0),
    }
}

/// Peak resident set (VmHWM) of a process from `/proc/<pid>/status`, 0 when unknown.
pub fn peak_rss(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Runs the conversion of every disk in `args` with `creds`, printing one JSON line per disk on
/// stdout and a [`RunSummary`] line last.
///
/// Guarantees: idempotent (staged disks are skipped without logging in to vSphere); an image
/// only counts as staged with its `Staged` record; a previous run's open upload is aborted;
/// nothing is written to the work directory (its use is measured: `scratchPeakBytes`).
///
/// Errors: the first failure, classified ([`Error::exit_code`]), after every disk that had
/// started has finished or failed.
pub async fn run(args: ConvertArgs, creds: Credentials) -> Result<ConvertReport, Error> {
    convert_all(&args, &creds).await
}

/// Reads the credentials from the process's environment ([`Credentials::from_env`]: the Job's
/// `secretKeyRef`s), runs [`run`] and turns the outcome into a process exit code, the error on
/// stderr.
pub async fn run_to_exit_code(args: ConvertArgs) -> i32 {
    match Credentials::from_env() {
        Ok(creds) => exit_code(run(args, creds).await),
        Err(e) => exit_code(Err(e)),
    }
}

fn exit_code(outcome: Result<ConvertReport, Error>) -> i32 {
    match outcome {
        Ok(_) => 0,
        Err(e) => {
            let kind = if e.is_transient() {
                "transient"
            } else {
                "permanent"
            };
            eprintln!(
                "ferry-controller convert: {kind} failure ({}): {e}",
                e.reason()
            );
            e.exit_code()
        }
    }
}

/// A logged-in source and what it said about the VM.
pub(crate) struct Source {
    pub session: Arc<Session>,
    pub datacenter: String,
    pub vm: Option<VmInfo>,
    /// The snapshot read instead of the VM's disks, and its disks (a warm first round).
    pub snapshot: Option<(String, Vec<vsphere::SnapshotDisk>)>,
}

/// Fails unless the disks read cannot change: the source VM powered off, or — reading a
/// snapshot — that snapshot still there (a snapshot removed hands its file back to the running
/// VM, which writes it). Checked before each disk is read and after it was uploaded, so that a
/// VM someone powers on, or a snapshot someone removes, during the copy never yields a staged
/// image.
pub(crate) async fn ensure_off(src: &Source, disk: &str) -> Result<(), Error> {
    let Some(vm) = src.vm.as_ref() else {
        return Ok(());
    };
    let vs = |source| Error::Vsphere {
        disk: disk.to_owned(),
        source,
    };
    if let Some((snapshot, _)) = &src.snapshot {
        let all = src.session.snapshots(&vm.moref).await.map_err(vs)?;
        return if all.iter().any(|s| &s.moref == snapshot) {
            Ok(())
        } else {
            Err(Error::SnapshotGone {
                moref: vm.moref.clone(),
                snapshot: snapshot.clone(),
            })
        };
    }
    let state = src
        .session
        .power_state(&vm.moref)
        .await
        .map_err(|source| Error::Vsphere {
            disk: disk.to_owned(),
            source,
        })?;
    match state {
        vsphere::PowerState::PoweredOff => Ok(()),
        other => Err(Error::SourcePoweredOn {
            moref: vm.moref.clone(),
            state: other.as_str(),
        }),
    }
}

async fn convert_all(args: &ConvertArgs, creds: &Credentials) -> Result<ConvertReport, Error> {
    let endpoint = creds.endpoint()?;
    let staging = open_staging(args, creds).await?;
    let mut report = ConvertReport::default();
    let todo = skip_staged(args, &staging, &mut report).await?;
    let mut summary = RunSummary {
        summary: true,
        ..RunSummary::default()
    };
    if !todo.is_empty() {
        // Logged in only when some disk needs work: a re-run with everything staged does not
        // touch vSphere at all.
        let converted = convert_disks(args, &endpoint, &staging, todo, &mut summary).await?;
        report.disks.extend(converted);
    }
    report.disks.sort_by_key(|d| d.disk);
    summary.peak_rss_bytes = peak_rss("self");
    (summary.cpu_seconds, summary.qemu_cpu_seconds) = cpu_seconds();
    summary.sent_bytes = report.disks.iter().map(|d| d.sent).sum();
    summary.downloaded_bytes = report.disks.iter().map(|d| d.downloaded).sum();
    println!("{}", serde_json::to_string(&summary).unwrap_or_default());
    Ok(report)
}

/// The staging the credentials name, once its bucket is known to exist: some S3 servers create
/// a missing bucket on PUT instead of refusing.
async fn open_staging(args: &ConvertArgs, creds: &Credentials) -> Result<Staging, Error> {
    let config = creds.staging_config(&args.s3_region, &args.s3_prefix)?;
    let staging = Staging::new(config).map_err(|source| Error::Staging {
        context: "staging configuration".into(),
        source,
    })?;
    match staging.bucket_exists().await {
        Ok(true) => Ok(staging),
        Ok(false) => {
            let source = staging::Error::NoSuchBucket {
                bucket: creds.s3.bucket.clone(),
                endpoint: creds.s3.endpoint.clone(),
            };
            Err(Error::Staging {
                context: "staging".into(),
                source,
            })
        }
        Err(source) => Err(Error::Staging {
            context: "staging".into(),
            source,
        }),
    }
}

/// A disk still to convert: its index, what it is, and its record from an earlier run.
type Todo<'a> = (usize, &'a DiskSpec, Option<DiskRecord>);

/// Reports (and prints) each disk this same Job already staged, as its record and image show;
/// returns the others.
async fn skip_staged<'a>(
    args: &'a ConvertArgs,
    staging: &Staging,
    report: &mut ConvertReport,
) -> Result<Vec<Todo<'a>>, Error> {
    let mut todo = Vec::new();
    for (pos, disk) in args.disks.iter().enumerate() {
        let index = disk.index.unwrap_or(pos);
        let started = Instant::now();
        let s3 = |source| Error::Staging {
            context: format!("staged object {}", disk.key),
            source,
        };
        let record = staging.record(&disk.key).await.map_err(s3)?;
        let image = staging.head(&disk.key).await.map_err(s3)?;
        let format = args.format;
        match (&record, &image) {
            (Some(r), Some(img))
                if r.is_staged(&disk.datastore_path, format, img.size)
                    && r.job_uid == args.job_uid =>
            {
                let line = DiskReport {
                    disk: index,
                    datastore_path: disk.datastore_path.clone(),
                    key: disk.key.clone(),
                    status: DiskStatus::Skipped,
                    format: args.format,
                    path: DataPath::None,
                    size: img.size,
                    sha256: r.sha256.clone().unwrap_or_default(),
                    raw_sha256: r.raw_contents_sha256(),
                    virtual_size: r.virtual_size,
                    downloaded: 0,
                    sent: 0,
                    allocation_known: false,
                    seconds: started.elapsed().as_secs_f64(),
                };
                println!("{}", serde_json::to_string(&line).unwrap_or_default());
                report.disks.push(line);
            }
            _ => todo.push((index, disk, record)),
        }
    }
    Ok(todo)
}

/// Converts the disks of `todo`, [`scratch::PARALLEL_DISKS`] at a time, each one's line printed
/// as it is done; notes in `summary` what the work directory and qemu-img held. Returns the
/// first error once every disk that started has finished or failed.
async fn convert_disks(
    args: &ConvertArgs,
    endpoint: &Endpoint,
    staging: &Staging,
    todo: Vec<Todo<'_>>,
    summary: &mut RunSummary,
) -> Result<Vec<DiskReport>, Error> {
    let src = Arc::new(open_source(args, endpoint).await?);
    let throttle = args
        .max_read_rate
        .filter(|r| *r > 0)
        .map(|r| Arc::new(remote::Throttle::new(r)));
    let scratch_peak = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = tokio::spawn(scratch::watch(args.work_dir.clone(), scratch_peak.clone()));
    let ctx = disk::Ctx {
        args,
        src: src.clone(),
        staging: staging.clone(),
        throttle,
    };
    let results: Vec<Result<DiskReport, Error>> = futures::stream::iter(todo)
        .map(|(index, disk, record)| {
            let ctx = &ctx;
            async move {
                let r = ctx.convert(index, disk, record).await;
                if let Ok(line) = &r {
                    println!("{}", serde_json::to_string(line).unwrap_or_default());
                }
                r
            }
        })
        .buffer_unordered(scratch::PARALLEL_DISKS)
        .collect()
        .await;
    sampler.abort();
    let _ = src.session.logout().await;
    summary.scratch_peak_bytes = scratch_peak.load(std::sync::atomic::Ordering::Relaxed);
    summary.peak_qemu_rss_bytes = qemu::peak_child_rss();
    results.into_iter().collect()
}

async fn open_source(args: &ConvertArgs, endpoint: &Endpoint) -> Result<Source, Error> {
    let login = |source| Error::Vsphere {
        disk: "login".into(),
        source,
    };
    let session = Session::connect(endpoint).await.map_err(login)?;
    let vm = match args.vm_moref.as_deref().filter(|m| !m.is_empty()) {
        Some(moref) => match session.vm_info(moref).await {
            Ok(Some(vm)) => Some(vm),
            Ok(None) => {
                let _ = session.logout().await;
                return Err(login(vsphere::Error::NotFound(format!("VM {moref}"))));
            }
            Err(e) => {
                let _ = session.logout().await;
                return Err(login(e));
            }
        },
        None => None,
    };
    let datacenter = match (args.datacenter.as_deref().filter(|d| !d.is_empty()), &vm) {
        (Some(dc), _) => dc.to_owned(),
        (None, Some(vm)) => vm.datacenter.clone(),
        (None, None) => {
            let _ = session.logout().await;
            return Err(Error::Usage(format!(
                "no datacenter: set --datacenter ({}) or --vm-moref ({})",
                extra_env::DATACENTER,
                env::VM_MOREF
            )));
        }
    };
    let snapshot = match (args.snapshot.as_deref().filter(|s| !s.is_empty()), &vm) {
        (None, _) => None,
        (Some(snap), Some(vm)) => match session.snapshot_disks(snap).await {
            Ok(disks) => Some((snap.to_owned(), disks)),
            Err(e) => {
                let _ = session.logout().await;
                return Err(match e {
                    vsphere::Error::NotFound(_) => Error::SnapshotGone {
                        moref: vm.moref.clone(),
                        snapshot: snap.to_owned(),
                    },
                    other => login(other),
                });
            }
        },
        (Some(_), None) => {
            let _ = session.logout().await;
            return Err(Error::Usage(format!(
                "--snapshot ({}) needs --vm-moref ({})",
                extra_env::SNAPSHOT,
                env::VM_MOREF
            )));
        }
    };
    Ok(Source {
        session: Arc::new(session),
        datacenter,
        vm,
        snapshot,
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use ferry_vsphere::TlsPolicy;
    use secrecy::ExposeSecret;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: ConvertArgs,
    }

    /// The child half of [`every_argument_can_come_from_the_environment`]: parses with the
    /// environment it was started with and prints the outcome. Does nothing in a normal run.
    #[test]
    fn env_child() {
        let Ok(flags) = std::env::var("FERRY_TEST_ENV_CHILD") else {
            return;
        };
        let argv: Vec<&str> = std::iter::once("convert")
            .chain(flags.split_whitespace())
            .collect();
        let a = match Cli::try_parse_from(argv) {
            Ok(cli) => cli.args,
            Err(e) => {
                println!("RESULT error={:?}", e.kind());
                return;
            }
        };
        let c = match Credentials::from_env() {
            Ok(c) => c,
            Err(e) => {
                println!("RESULT credentials={e}");
                return;
            }
        };
        let (e, s3) = (c.endpoint().unwrap(), &c.s3);
        let tls = match e.tls {
            TlsPolicy::Thumbprint(_) => "thumbprint",
            TlsPolicy::CaBundle(_) => "cabundle",
            TlsPolicy::Insecure => "insecure",
            TlsPolicy::SystemRoots => "system",
        };
        let disks: Vec<String> = a
            .disks
            .iter()
            .map(|d| format!("{:?}|{}|{}", d.index, d.datastore_path, d.key))
            .collect();
        println!(
            "RESULT url={} user={} pass={} moref={:?} dc={:?} format={} region={} endpoint={} bucket={} ak={} sk={} tls={tls} work={} disks={}",
            e.url,
            e.username,
            e.password.expose_secret(),
            a.vm_moref,
            a.datacenter,
            a.format.as_str(),
            a.s3_region,
            s3.endpoint,
            s3.bucket,
            s3.access_key_id,
            s3.secret_access_key.expose_secret(),
            a.work_dir.display(),
            disks.join(";")
        );
        assert!(
            !format!("{c:?}").contains(e.password.expose_secret()),
            "Debug shows the password"
        );
    }

    /// Runs [`env_child`] in a child process with exactly `env` set (setting variables in this
    /// process would need `unsafe`, which the workspace forbids).
    fn parse_in_child(env: &[(&str, &str)], flags: &str) -> String {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = std::process::Command::new(exe);
        cmd.args([
            "--exact",
            "tests::env_child",
            "--nocapture",
            "--test-threads=1",
        ]);
        for (k, _) in std::env::vars() {
            if k.starts_with("FERRY_") {
                cmd.env_remove(k);
            }
        }
        cmd.env("FERRY_TEST_ENV_CHILD", flags)
            .envs(env.iter().copied());
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "child failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text.lines()
            .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_owned()))
            .unwrap_or_else(|| panic!("no result in {text}"))
    }

    #[test]
    fn every_argument_can_come_from_the_environment() {
        let sha1 = "ab".repeat(20);
        let base = [
            (env::VSPHERE_URL, "https://vc/sdk"),
            (env::VSPHERE_USERNAME, "u"),
            (env::VSPHERE_PASSWORD, "p4ss"),
            (env::VM_MOREF, "vm-42"),
            (env::FORMAT, "qcow2"),
            (env::S3_ENDPOINT, "http://127.0.0.1:9000"),
            (env::S3_BUCKET, "b"),
            (env::S3_ACCESS_KEY_ID, "AK"),
            (env::S3_SECRET_ACCESS_KEY, "SK"),
            (
                extra_env::DISKS,
                "0=[ds] a/a.vmdk=k/disk-0.qcow2\n1=[ds] a/b.vmdk=k/disk-1.qcow2",
            ),
        ];
        // FERRY_DISKS holds one disk per line, as a Job's env value can.
        let mut env: Vec<(&str, &str)> = base.to_vec();
        env.extend([
            (env::VSPHERE_THUMBPRINT, sha1.as_str()),
            (extra_env::WORK_DIR, "/scratch"),
        ]);
        let r = parse_in_child(&env, "");
        assert!(
            r.contains("url=https://vc/sdk user=u pass=p4ss moref=Some(\"vm-42\") dc=None"),
            "{r}"
        );
        assert!(
            r.contains(
                "format=qcow2 region=us-east-1 endpoint=http://127.0.0.1:9000 bucket=b ak=AK sk=SK tls=thumbprint work=/scratch"
            ),
            "{r}"
        );
        assert!(
            r.ends_with(
                "disks=Some(0)|[ds] a/a.vmdk|k/disk-0.qcow2;Some(1)|[ds] a/b.vmdk|k/disk-1.qcow2"
            ),
            "{r}"
        );

        // The Secrets' values as their owners slip (a newline, "TRUE", a trailing "/") read as
        // the controller reads them; flags beat the environment.
        env.retain(|(k, _)| {
            ![
                env::VSPHERE_THUMBPRINT,
                env::VSPHERE_PASSWORD,
                env::VSPHERE_URL,
            ]
            .contains(k)
        });
        env.extend([
            (env::VSPHERE_INSECURE, "TRUE"),
            (env::VSPHERE_PASSWORD, "p4ss\n"),
            (env::VSPHERE_URL, "https://vc/\n"),
            (extra_env::DATACENTER, "DC0"),
        ]);
        let r = parse_in_child(&env, "--format raw --disk [ds]x.vmdk=x.raw");
        assert!(
            r.starts_with("url=https://vc/sdk user=u pass=p4ss ")
                && r.contains("dc=Some(\"DC0\") format=raw")
                && r.contains("tls=insecure"),
            "{r}"
        );
        assert!(r.ends_with("disks=None|[ds]x.vmdk|x.raw"), "{r}");

        // A value no process can use is refused naming its variable and key, never the value.
        env.retain(|(k, _)| *k != env::VSPHERE_INSECURE);
        env.push((env::VSPHERE_INSECURE, "yes-please"));
        let r = parse_in_child(&env, "");
        assert!(
            r.starts_with("credentials=")
                && r.contains(env::VSPHERE_INSECURE)
                && !r.contains("yes-please"),
            "{r}"
        );

        env.retain(|(k, _)| *k != extra_env::DISKS);
        assert_eq!(parse_in_child(&env, ""), "error=MissingRequiredArgument");
    }

    #[test]
    fn report_lines_are_camel_case_json() {
        let line = DiskReport {
            disk: 0,
            datastore_path: "[ds] a.vmdk".into(),
            key: "k".into(),
            status: DiskStatus::Skipped,
            format: DiskFormat::Raw,
            path: DataPath::FlatStream,
            size: 5,
            sha256: "s".into(),
            raw_sha256: None,
            virtual_size: None,
            downloaded: 0,
            sent: 5,
            allocation_known: true,
            seconds: 0.5,
        };
        let v: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&line).unwrap()).unwrap();
        assert_eq!(v["datastorePath"], "[ds] a.vmdk");
        assert_eq!(v["status"], "skipped");
        assert_eq!(v["format"], "raw");
        assert_eq!(v["path"], "flat-stream");
        assert_eq!(v["allocationKnown"], true);
        assert!(v.get("virtualSize").is_none());
    }
}
