//! The converter's arguments: the disks to convert, the format, where to stage; each also from
//! the Job's environment (`job_contract`), credentials never among them.

use std::path::PathBuf;

use crate::job_contract::{env, extra_env};
use ferry_vsphere::DatastorePath;

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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::Credentials;
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
            "args::tests::env_child",
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
}
