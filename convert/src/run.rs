//! One run of the converter: staging opened, what is staged already skipped, the other disks
//! converted a few at a time, and the exit code the Job's pod failure policy reads.

use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;

use crate::{Credentials, Error};
use ferry_staging::{self as staging, DiskRecord, Staging};
use ferry_vsphere::Endpoint;

use crate::args::{ConvertArgs, DiskSpec};
use crate::report::{
    ConvertReport, DataPath, DiskReport, DiskStatus, RunSummary, cpu_seconds, peak_rss,
};
use crate::source::open_source;
use crate::{disk, qemu, remote, scratch};

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
    let outcome = match Credentials::from_env() {
        Ok(creds) => run(args, creds).await,
        Err(e) => Err(e),
    };
    Error::exit_code_of("convert", outcome)
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
