//! The converter run by the conversion Job (`ferry-controller convert`): for each disk, download
//! it from the datastore, `qemu-img convert` it, and upload it to staging with its SHA-256.
//!
//! Idempotent: a disk whose staged object already carries matching metadata is skipped, so a
//! Job re-run after a crash only does the work that is missing.

mod error;
mod qemu;
mod vmdk;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use secrecy::SecretString;
use serde::Serialize;

pub use error::{Error, TRANSIENT_EXIT_CODE};
pub use vmdk::{DescriptorError, Extent, extents, is_descriptor};

use crate::children::job::env;
use crate::staging::{self, META_SHA256, Staging, StagingConfig};
use crate::tls::CaBundle;
use crate::vsphere::{self, DatastorePath, Endpoint, Session, Thumbprint, TlsPolicy};

/// Environment variables of the converter beyond the Job contract in [`crate::children::job::env`].
pub mod extra_env {
    /// Datacenter inventory path (`dcPath`); found from the VM when unset.
    pub const DATACENTER: &str = "FERRY_DATACENTER";
    /// Disks, one `[INDEX=]DATASTORE_PATH=STAGING_KEY` per line.
    pub const DISKS: &str = "FERRY_DISKS";
    /// Prefix of the staging keys (empty: the keys are full).
    pub const S3_PREFIX: &str = "FERRY_S3_PREFIX";
    /// Scratch directory; a private subdirectory is made in it per run and removed afterwards.
    pub const WORK_DIR: &str = "FERRY_WORK_DIR";
    /// The qemu-img program.
    pub const QEMU_IMG: &str = "FERRY_QEMU_IMG";
}

/// Metadata keys of a staged disk image (besides [`META_SHA256`]).
pub const META_SOURCE_PATH: &str = "source-path";
pub const META_FORMAT: &str = "format";
pub const META_VIRTUAL_SIZE: &str = "virtual-size";

/// Output image format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputFormat {
    Raw,
    Qcow2,
}

impl OutputFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Raw => "raw",
            Self::Qcow2 => "qcow2",
        }
    }
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

/// A secret argument: held in a [`SecretString`] so that `Debug` never shows it.
fn secret(s: &str) -> Result<SecretString, std::convert::Infallible> {
    Ok(SecretString::from(s))
}

/// Arguments of `ferry-controller convert`; every one can come from the environment, so a Job
/// passes credentials with `valueFrom.secretKeyRef`.
#[derive(Clone, Debug, clap::Args)]
pub struct ConvertArgs {
    /// vSphere SDK URL, e.g. https://vcenter.example.com/sdk.
    #[arg(long, env = env::VSPHERE_URL)]
    pub vsphere_url: String,
    #[arg(long, env = env::VSPHERE_USERNAME)]
    pub username: String,
    #[arg(long, env = env::VSPHERE_PASSWORD, hide_env_values = true, value_parser = secret)]
    pub password: SecretString,
    /// Pinned SHA-1 or SHA-256 thumbprint of the vSphere certificate.
    #[arg(long, env = env::VSPHERE_THUMBPRINT)]
    pub thumbprint: Option<String>,
    /// PEM bundle of the CAs that sign the vSphere certificate (a CA-signed vCenter).
    #[arg(long, env = env::VSPHERE_CACERT)]
    pub cacert: Option<String>,
    /// Skip TLS verification of vSphere (labs only).
    #[arg(long, env = env::VSPHERE_INSECURE)]
    pub insecure: bool,
    /// The VM's moref; used to find the datacenter when --datacenter is not given.
    #[arg(long, env = env::VM_MOREF)]
    pub vm_moref: Option<String>,
    /// Datacenter inventory path, the `dcPath` of datastore downloads.
    #[arg(long, env = extra_env::DATACENTER)]
    pub datacenter: Option<String>,
    /// A disk: `[INDEX=]DATASTORE_PATH=STAGING_KEY`; repeat per disk (one per line in the env).
    #[arg(long = "disk", env = extra_env::DISKS, value_delimiter = '\n', required = true, value_parser = DiskSpec::parse)]
    pub disks: Vec<DiskSpec>,
    #[arg(long, env = env::FORMAT, value_enum, default_value_t = OutputFormat::Raw)]
    pub format: OutputFormat,
    #[arg(long, env = env::S3_ENDPOINT)]
    pub s3_endpoint: String,
    #[arg(long, env = env::S3_BUCKET)]
    pub s3_bucket: String,
    #[arg(long, env = env::S3_REGION, default_value = "us-east-1")]
    pub s3_region: String,
    #[arg(long, env = env::S3_ACCESS_KEY_ID, hide_env_values = true)]
    pub s3_access_key: String,
    #[arg(long, env = env::S3_SECRET_ACCESS_KEY, hide_env_values = true, value_parser = secret)]
    pub s3_secret_key: SecretString,
    #[arg(long, env = extra_env::S3_PREFIX, default_value = "")]
    pub s3_prefix: String,
    /// PEM bundle of the CAs that sign an https S3 endpoint's certificate (a private CA).
    #[arg(long, env = env::S3_CACERT)]
    pub s3_cacert: Option<String>,
    #[arg(long, env = extra_env::WORK_DIR, default_value = "/tmp/ferry-convert")]
    pub work_dir: PathBuf,
    #[arg(long, env = extra_env::QEMU_IMG, default_value = "qemu-img")]
    pub qemu_img: PathBuf,
}

impl ConvertArgs {
    /// The TLS policy the arguments ask for: a thumbprint, else a CA bundle, else `insecure`;
    /// none of them means the platform trust store.
    pub fn tls_policy(&self) -> Result<TlsPolicy, Error> {
        let given = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .map(str::to_owned)
        };
        match (given(&self.thumbprint), given(&self.cacert)) {
            (Some(t), _) => Thumbprint::parse(&t)
                .map(TlsPolicy::Thumbprint)
                .map_err(|e| Error::Usage(e.to_string())),
            (None, Some(pem)) => CaBundle::from_pem(&pem)
                .map(TlsPolicy::CaBundle)
                .map_err(|e| Error::Usage(format!("--cacert: {e}"))),
            (None, None) if self.insecure => Ok(TlsPolicy::Insecure),
            (None, None) => Ok(TlsPolicy::SystemRoots),
        }
    }

    fn endpoint(&self) -> Result<Endpoint, Error> {
        Ok(Endpoint {
            url: self.vsphere_url.clone(),
            username: self.username.clone(),
            password: self.password.clone(),
            tls: self.tls_policy()?,
        })
    }

    fn staging_config(&self) -> StagingConfig {
        StagingConfig {
            endpoint: self.s3_endpoint.clone(),
            bucket: self.s3_bucket.clone(),
            region: self.s3_region.clone(),
            access_key: self.s3_access_key.clone(),
            secret_key: self.s3_secret_key.clone(),
            prefix: self.s3_prefix.clone(),
            ca_bundle: self
                .s3_cacert
                .clone()
                .filter(|c| !c.trim().is_empty()),
        }
    }
}

/// What happened to one disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskStatus {
    /// Downloaded, converted and uploaded by this run.
    Converted,
    /// Already staged with matching metadata; nothing done.
    Skipped,
}

/// One disk's result; printed as one JSON line on stdout.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskReport {
    pub disk: usize,
    pub datastore_path: String,
    pub key: String,
    pub status: DiskStatus,
    pub format: OutputFormat,
    /// Bytes of the staged image.
    pub size: u64,
    pub sha256: String,
    /// Virtual size of the image, when known (always for converted disks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub virtual_size: Option<u64>,
    /// Bytes downloaded from the datastore.
    pub downloaded: u64,
    pub seconds: f64,
}

/// The result of a run, disk by disk.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ConvertReport {
    pub disks: Vec<DiskReport>,
}

/// Whether a staged object is the finished result of this disk in this format.
pub fn already_staged(obj: &staging::StagedObject, disk: &DiskSpec, format: OutputFormat) -> bool {
    let sha_ok = obj
        .sha256
        .as_deref()
        .is_some_and(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()));
    sha_ok
        && obj.metadata.get(META_SOURCE_PATH).map(String::as_str)
            == Some(disk.datastore_path.as_str())
        && obj.metadata.get(META_FORMAT).map(String::as_str) == Some(format.as_str())
}

/// Runs the conversion of every disk in `args`, printing one JSON line per disk on stdout.
///
/// Guarantees: idempotent (already staged disks are skipped without logging in to vSphere);
/// a staged object only ever appears complete and with its metadata; the private work directory
/// is removed whatever the outcome.
///
/// Errors: the first failure, classified ([`Error::exit_code`]).
pub async fn run(args: ConvertArgs) -> Result<ConvertReport, Error> {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let work = args
        .work_dir
        .join(format!("run-{}-{stamp}", std::process::id()));
    tokio::fs::create_dir_all(&work)
        .await
        .map_err(|source| Error::Io {
            path: work.clone(),
            source,
        })?;
    let result = convert_all(&args, &work).await;
    if let Err(e) = tokio::fs::remove_dir_all(&work).await {
        tracing::warn!(dir = %work.display(), error = %e, "could not remove the work directory");
    }
    result
}

/// Runs [`run`] and turns the outcome into a process exit code, the error on stderr.
pub async fn run_to_exit_code(args: ConvertArgs) -> i32 {
    match run(args).await {
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

struct Source {
    session: Session,
    datacenter: String,
}

async fn convert_all(args: &ConvertArgs, work: &Path) -> Result<ConvertReport, Error> {
    let endpoint = args.endpoint()?;
    let staging = Staging::new(args.staging_config()).map_err(|source| Error::Staging {
        context: "staging configuration".into(),
        source,
    })?;
    // Checked up front: some S3 servers create a missing bucket on PUT instead of refusing.
    match staging.bucket_exists().await {
        Ok(true) => {}
        Ok(false) => {
            let source = staging::Error::NoSuchBucket {
                bucket: args.s3_bucket.clone(),
                endpoint: args.s3_endpoint.clone(),
            };
            return Err(Error::Staging {
                context: "staging".into(),
                source,
            });
        }
        Err(source) => {
            return Err(Error::Staging {
                context: "staging".into(),
                source,
            });
        }
    }
    let mut source: Option<Source> = None;
    let mut report = ConvertReport::default();
    let outcome: Result<(), Error> = async {
        for (pos, disk) in args.disks.iter().enumerate() {
            let index = disk.index.unwrap_or(pos);
            let started = Instant::now();
            let staged = staging
                .head(&disk.key)
                .await
                .map_err(|source| Error::Staging {
                    context: format!("staged object {}", disk.key),
                    source,
                })?;
            let line = match staged.filter(|o| already_staged(o, disk, args.format)) {
                Some(obj) => DiskReport {
                    disk: index,
                    datastore_path: disk.datastore_path.clone(),
                    key: disk.key.clone(),
                    status: DiskStatus::Skipped,
                    format: args.format,
                    size: obj.size,
                    sha256: obj.sha256.clone().unwrap_or_default(),
                    virtual_size: obj
                        .metadata
                        .get(META_VIRTUAL_SIZE)
                        .and_then(|v| v.parse().ok()),
                    downloaded: 0,
                    seconds: started.elapsed().as_secs_f64(),
                },
                None => {
                    // Logged in only when some disk needs work: a re-run with everything staged
                    // does not touch vSphere at all.
                    let src = match source.take() {
                        Some(s) => s,
                        None => open_source(args, &endpoint).await?,
                    };
                    let line = convert_one(args, &src, &staging, disk, index, work, started).await;
                    source = Some(src);
                    line?
                }
            };
            println!("{}", serde_json::to_string(&line).unwrap_or_default());
            report.disks.push(line);
        }
        Ok(())
    }
    .await;
    if let Some(src) = source {
        let _ = src.session.logout().await;
    }
    outcome.map(|()| report)
}

async fn open_source(args: &ConvertArgs, endpoint: &Endpoint) -> Result<Source, Error> {
    let login = |source| Error::Vsphere {
        disk: "login".into(),
        source,
    };
    let session = Session::connect(endpoint).await.map_err(login)?;
    let datacenter = match (
        args.datacenter.as_deref().filter(|d| !d.is_empty()),
        args.vm_moref.as_deref(),
    ) {
        (Some(dc), _) => dc.to_owned(),
        (None, Some(moref)) if !moref.is_empty() => {
            let vm = session.vm_info(moref).await.map_err(login)?;
            vm.ok_or_else(|| login(vsphere::Error::NotFound(format!("VM {moref}"))))?
                .datacenter
        }
        _ => {
            let _ = session.logout().await;
            return Err(Error::Usage(format!(
                "no datacenter: set --datacenter ({}) or --vm-moref ({})",
                extra_env::DATACENTER,
                env::VM_MOREF
            )));
        }
    };
    Ok(Source {
        session,
        datacenter,
    })
}

async fn convert_one(
    args: &ConvertArgs,
    src: &Source,
    staging: &Staging,
    disk: &DiskSpec,
    index: usize,
    work: &Path,
    started: Instant,
) -> Result<DiskReport, Error> {
    let name = format!("disk {index} ({})", disk.datastore_path);
    let vs = |source| Error::Vsphere {
        disk: name.clone(),
        source,
    };
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Io { path, source }
    };
    let ds = DatastorePath::parse(&disk.datastore_path).map_err(|e| Error::Usage(e.to_string()))?;
    let dir = work.join(format!("disk-{index}"));
    tokio::fs::create_dir_all(&dir).await.map_err(io(&dir))?;

    let vmdk = dir.join(ds.file_name());
    let mut downloaded = download(src, &ds.to_string(), &vmdk, &name)
        .await
        .map_err(vs)?;
    if tokio::fs::metadata(&vmdk).await.map_err(io(&vmdk))?.len() <= vmdk::MAX_DESCRIPTOR_BYTES {
        let text = tokio::fs::read(&vmdk).await.map_err(io(&vmdk))?;
        if is_descriptor(&text) {
            let bad = |detail: String| Error::BadDisk {
                disk: name.clone(),
                detail,
            };
            for extent in
                extents(&String::from_utf8_lossy(&text)).map_err(|e| bad(e.to_string()))?
            {
                let local = dir.join(&extent.file);
                downloaded += download(src, &ds.sibling(&extent.file).to_string(), &local, &name)
                    .await
                    .map_err(vs)?;
                // qemu-img reads a short flat extent as zeros: a silent wrong copy. Refuse it.
                let len = tokio::fs::metadata(&local).await.map_err(io(&local))?.len();
                if let Some(min) = extent.min_len().filter(|min| len < *min) {
                    return Err(bad(format!(
                        "extent {} has {len} bytes, but the descriptor needs {min}; the disk is incomplete",
                        extent.file
                    )));
                }
            }
        }
    }

    let out = dir.join(format!("converted.{}", args.format.as_str()));
    qemu::convert(&args.qemu_img, &vmdk, &out, args.format).await?;
    let virtual_size = qemu::virtual_size(&args.qemu_img, &out, args.format).await?;
    let sha256 = staging::sha256_file(&out)
        .await
        .map_err(|source| Error::Staging {
            context: format!("{name}: checksum"),
            source,
        })?;
    let metadata: BTreeMap<String, String> = [
        (META_SHA256, sha256.clone()),
        (META_SOURCE_PATH, disk.datastore_path.clone()),
        (META_FORMAT, args.format.as_str().to_owned()),
        (META_VIRTUAL_SIZE, virtual_size.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    let staged = staging
        .put_file(&disk.key, &out, &metadata)
        .await
        .map_err(|source| Error::Staging {
            context: format!("{name}: upload to {}", disk.key),
            source,
        })?;
    tokio::fs::remove_dir_all(&dir).await.map_err(io(&dir))?;
    Ok(DiskReport {
        disk: index,
        datastore_path: disk.datastore_path.clone(),
        key: disk.key.clone(),
        status: DiskStatus::Converted,
        format: args.format,
        size: staged.size,
        sha256,
        virtual_size: Some(virtual_size),
        downloaded,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Downloads one datastore file, logging progress every 10% of a large one.
async fn download(
    src: &Source,
    path: &str,
    dest: &Path,
    disk: &str,
) -> Result<u64, vsphere::Error> {
    let mut next_tenth = 1u64;
    src.session
        .download(path, &src.datacenter, dest, |done, total| {
            if let Some(total) = total.filter(|t| *t >= 64 << 20) {
                while next_tenth <= 10 && done * 10 >= total * next_tenth {
                    tracing::info!(
                        disk,
                        file = path,
                        percent = next_tenth * 10,
                        bytes = done,
                        "downloading"
                    );
                    next_tenth += 1;
                }
            }
        })
        .await
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
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
        match Cli::try_parse_from(argv) {
            Ok(cli) => {
                let a = cli.args;
                let tls = match a.tls_policy() {
                    Ok(TlsPolicy::Thumbprint(_)) => "thumbprint",
                    Ok(TlsPolicy::CaBundle(_)) => "cabundle",
                    Ok(TlsPolicy::Insecure) => "insecure",
                    Ok(TlsPolicy::SystemRoots) => "system",
                    Err(_) => "invalid",
                };
                let disks: Vec<String> = a
                    .disks
                    .iter()
                    .map(|d| format!("{:?}|{}|{}", d.index, d.datastore_path, d.key))
                    .collect();
                println!(
                    "RESULT url={} user={} pass={} moref={:?} dc={:?} format={} region={} bucket={} ak={} sk={} tls={tls} work={} disks={}",
                    a.vsphere_url,
                    a.username,
                    a.password.expose_secret(),
                    a.vm_moref,
                    a.datacenter,
                    a.format.as_str(),
                    a.s3_region,
                    a.s3_bucket,
                    a.s3_access_key,
                    a.s3_secret_key.expose_secret(),
                    a.work_dir.display(),
                    disks.join(";")
                );
                assert!(
                    !format!("{a:?}").contains(a.password.expose_secret()),
                    "Debug shows the password"
                );
            }
            Err(e) => println!("RESULT error={:?}", e.kind()),
        }
    }

    /// Runs [`env_child`] in a child process with exactly `env` set (setting variables in this
    /// process would need `unsafe`, which the workspace forbids).
    fn parse_in_child(env: &[(&str, &str)], flags: &str) -> String {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = std::process::Command::new(exe);
        cmd.args([
            "--exact",
            "convert::tests::env_child",
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
                "format=qcow2 region=us-east-1 bucket=b ak=AK sk=SK tls=thumbprint work=/scratch"
            ),
            "{r}"
        );
        assert!(
            r.ends_with(
                "disks=Some(0)|[ds] a/a.vmdk|k/disk-0.qcow2;Some(1)|[ds] a/b.vmdk|k/disk-1.qcow2"
            ),
            "{r}"
        );

        // The Job's "true" turns insecure on; flags beat the environment.
        env.retain(|(k, _)| *k != env::VSPHERE_THUMBPRINT);
        env.push((env::VSPHERE_INSECURE, "true"));
        env.push((extra_env::DATACENTER, "DC0"));
        let r = parse_in_child(&env, "--format raw --disk [ds]x.vmdk=x.raw");
        assert!(
            r.contains("dc=Some(\"DC0\") format=raw") && r.contains("tls=insecure"),
            "{r}"
        );
        assert!(r.ends_with("disks=None|[ds]x.vmdk|x.raw"), "{r}");

        env.retain(|(k, _)| *k != env::VSPHERE_INSECURE);
        env.push((env::VSPHERE_INSECURE, "false"));
        assert!(parse_in_child(&env, "").contains("tls=system"));
        // The Secret's cacert (a CA-signed vCenter) wins over insecure, a thumbprint over both.
        let ca = include_str!("../testdata/test-ca.pem");
        env.push((env::VSPHERE_CACERT, ca));
        env.push((env::VSPHERE_INSECURE, "true"));
        assert!(parse_in_child(&env, "").contains("tls=cabundle"));
        env.push((env::VSPHERE_THUMBPRINT, sha1.as_str()));
        assert!(parse_in_child(&env, "").contains("tls=thumbprint"));
        env.retain(|(k, _)| ![env::VSPHERE_CACERT, env::VSPHERE_THUMBPRINT].contains(k));
        env.push((env::VSPHERE_CACERT, "not a certificate"));
        assert!(parse_in_child(&env, "").contains("tls=invalid"));
        env.retain(|(k, _)| ![env::VSPHERE_CACERT, env::VSPHERE_INSECURE].contains(k));
        env.push((env::VSPHERE_INSECURE, "false"));
        env.push((env::VSPHERE_THUMBPRINT, "not-a-thumbprint"));
        assert!(parse_in_child(&env, "").contains("tls=invalid"));

        env.retain(|(k, _)| *k != extra_env::DISKS);
        assert_eq!(parse_in_child(&env, ""), "error=MissingRequiredArgument");
    }

    #[test]
    fn only_matching_metadata_counts_as_already_staged() {
        let disk = DiskSpec {
            index: None,
            datastore_path: "[ds] a/a.vmdk".into(),
            key: "k".into(),
        };
        let sha = "0".repeat(64);
        let obj = |pairs: &[(&str, &str)]| staging::StagedObject {
            key: "k".into(),
            size: 1,
            sha256: pairs
                .iter()
                .find(|(k, _)| *k == "sha256")
                .map(|(_, v)| v.to_string()),
            metadata: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        let good = [
            ("sha256", sha.as_str()),
            ("source-path", "[ds] a/a.vmdk"),
            ("format", "raw"),
        ];
        assert!(already_staged(&obj(&good), &disk, OutputFormat::Raw));
        assert!(!already_staged(&obj(&good), &disk, OutputFormat::Qcow2));
        assert!(
            !already_staged(&obj(&good[1..]), &disk, OutputFormat::Raw),
            "no checksum"
        );
        assert!(!already_staged(
            &obj(&[good[0], ("source-path", "[ds] other.vmdk"), good[2]]),
            &disk,
            OutputFormat::Raw
        ));
        assert!(
            !already_staged(
                &obj(&[("sha256", "abc"), good[1], good[2]]),
                &disk,
                OutputFormat::Raw
            ),
            "bad checksum"
        );
    }

    #[test]
    fn report_lines_are_camel_case_json() {
        let line = DiskReport {
            disk: 0,
            datastore_path: "[ds] a.vmdk".into(),
            key: "k".into(),
            status: DiskStatus::Skipped,
            format: OutputFormat::Raw,
            size: 5,
            sha256: "s".into(),
            virtual_size: None,
            downloaded: 0,
            seconds: 0.5,
        };
        let v: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&line).unwrap()).unwrap();
        assert_eq!(v["datastorePath"], "[ds] a.vmdk");
        assert_eq!(v["status"], "skipped");
        assert_eq!(v["format"], "raw");
        assert!(v.get("virtualSize").is_none());
    }
}
