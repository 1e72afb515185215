//! The verification run by the verification Job (`ferry-controller verify`): each imported
//! volume, mounted read-only, must hold the staged image's raw contents — the SHA-256 of its
//! first `SIZE` bytes must be the one the converter recorded. CDI does not check this for an S3
//! source; this is where ferry does, before the VM is created.
//!
//! A mismatch (or a volume that is missing or too short) is permanent: the process exits with
//! [`PERMANENT_EXIT_CODE`] and prints one line naming both sums last on stderr, which the Job's
//! `terminationMessagePolicy: FallbackToLogsOnError` hands to the controller. An I/O error is
//! transient (exit 1; the Job retries).

use std::path::{Path, PathBuf};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::Error;
pub use crate::job_contract::{PERMANENT_EXIT_CODE, TRANSIENT_EXIT_CODE};

/// One volume to check: `INDEX=PATH=SIZE=SHA256`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeSpec {
    /// The disk's index in the migration.
    pub index: usize,
    /// The image file (Filesystem volume) or the block device.
    pub path: PathBuf,
    /// How many bytes of it are the disk (the staged image's virtual size).
    pub size: u64,
    /// Expected SHA-256 of those bytes, lowercase hex.
    pub sha256: String,
}

impl VolumeSpec {
    /// Parses `INDEX=PATH=SIZE=SHA256` (the path may not contain `=`; ferry's do not).
    pub fn parse(text: &str) -> Result<Self, String> {
        let parts: Vec<&str> = text.trim().split('=').collect();
        let [index, path, size, sha] = parts[..] else {
            return Err(format!("{text:?} is not INDEX=PATH=SIZE=SHA256"));
        };
        let sha = sha.trim().to_ascii_lowercase();
        if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("{sha:?} in {text:?} is not a SHA-256 in hex"));
        }
        Ok(Self {
            index: index
                .trim()
                .parse()
                .map_err(|_| format!("{index:?} in {text:?} is not a disk index"))?,
            path: PathBuf::from(path.trim()),
            size: size
                .trim()
                .parse()
                .map_err(|_| format!("{size:?} in {text:?} is not a size in bytes"))?,
            sha256: sha,
        })
    }

    /// The argument for this volume.
    pub fn arg(&self) -> String {
        format!(
            "{}={}={}={}",
            self.index,
            self.path.display(),
            self.size,
            self.sha256
        )
    }
}

/// Arguments of `ferry-controller verify`.
#[derive(Clone, Debug, clap::Args)]
pub struct VerifyArgs {
    /// A volume: `INDEX=PATH=SIZE=SHA256`; repeat per disk.
    #[arg(long = "volume", required = true, value_parser = VolumeSpec::parse)]
    pub volumes: Vec<VolumeSpec>,
    /// Where the checksums computed are written once every volume verified (the container's
    /// termination message file: the kubelet hands it to the controller in the pod's status).
    #[arg(long)]
    pub result_file: Option<PathBuf>,
}

/// The first line of a verification result.
pub const RESULT_HEADER: &str = "ferry-verified v1";

/// The verification result as the controller reads it from the pod: the header, then one
/// `INDEX:SHA256` line per volume — 66 bytes a disk, so that 60 disks fit the kubelet's 4096
/// bytes of termination message. Pure.
pub fn render_result(verified: &[Verified]) -> String {
    let mut out = format!("{RESULT_HEADER}\n");
    for v in verified {
        out.push_str(&format!("{}:{}\n", v.disk, v.sha256));
    }
    out
}

/// The checksums a verification result reports, per disk index; `None` when `text` is not a
/// result (a failure's message, or nothing). Pure.
pub fn parse_result(text: &str) -> Option<std::collections::BTreeMap<usize, String>> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    if lines.next()? != RESULT_HEADER {
        return None;
    }
    lines
        .map(|l| -> Option<(usize, String)> {
            let (i, sha) = l.split_once(':')?;
            let sha = sha.to_ascii_lowercase();
            let hex = sha.len() == 64 && sha.bytes().all(|b| b.is_ascii_hexdigit());
            hex.then_some((i.parse().ok()?, sha))
        })
        .collect()
}

/// One verified volume; printed as a JSON line on stdout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verified {
    pub disk: usize,
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// SHA-256 of the first `size` bytes of `path` (a file at least that long, or a block device).
///
/// Errors: [`Error::Missing`], [`Error::Short`], [`Error::ReadVolume`].
pub async fn hash_prefix(index: usize, path: &Path, size: u64) -> Result<String, Error> {
    let io = |source| Error::ReadVolume {
        index,
        path: path.to_owned(),
        source,
    };
    let mut file = match tokio::fs::File::open(path).await {
        Ok(f) => f,
        Err(source) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::Missing {
                index,
                path: path.to_owned(),
                source,
            });
        }
        Err(source) => return Err(io(source)),
    };
    // A block device's metadata says 0 bytes: its end, found by seeking, is its size.
    let len = file.seek(std::io::SeekFrom::End(0)).await.map_err(io)?;
    if len < size {
        return Err(Error::Short {
            index,
            path: path.to_owned(),
            len,
            size,
        });
    }
    file.seek(std::io::SeekFrom::Start(0)).await.map_err(io)?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let want = usize::try_from(left.min(buf.len() as u64)).unwrap_or(buf.len());
        let n = file.read(&mut buf[..want]).await.map_err(io)?;
        if n == 0 {
            return Err(Error::Short {
                index,
                path: path.to_owned(),
                len: size - left,
                size,
            });
        }
        ctx.update(&buf[..n]);
        left -= n as u64;
    }
    Ok(ferry_staging::hex(ctx.finish().as_ref()))
}

/// Checks one volume.
///
/// Errors: as [`hash_prefix`], and [`Error::Mismatch`].
pub async fn verify_one(v: &VolumeSpec) -> Result<Verified, Error> {
    let actual = hash_prefix(v.index, &v.path, v.size).await?;
    if actual != v.sha256 {
        return Err(Error::Mismatch {
            index: v.index,
            size: v.size,
            expected: v.sha256.clone(),
            actual,
        });
    }
    Ok(Verified {
        disk: v.index,
        path: v.path.display().to_string(),
        size: v.size,
        sha256: actual,
    })
}

/// Verifies every volume, one JSON line each on stdout; the first failure ends the run with its
/// exit code, its message last on stderr.
pub async fn run_to_exit_code(args: VerifyArgs) -> i32 {
    let mut verified = vec![];
    for v in &args.volumes {
        match verify_one(v).await {
            Ok(line) => {
                println!("{}", serde_json::to_string(&line).unwrap_or_default());
                verified.push(line);
            }
            Err(e) => {
                eprintln!("ferry-controller verify: {e}");
                return e.exit_code();
            }
        }
    }
    if let Some(path) = &args.result_file
        && let Err(e) = std::fs::write(path, render_result(&verified))
    {
        // Without its result the controller cannot take the volumes as verified: try again.
        eprintln!(
            "ferry-controller verify: writing the result to {}: {e}",
            path.display()
        );
        return TRANSIENT_EXIT_CODE;
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_specs_parse_and_print_back() {
        let sha = "ab".repeat(32);
        let v =
            VolumeSpec::parse(&format!("1=/var/run/ferry/disk-1/disk.img=67108864={sha}")).unwrap();
        assert_eq!(
            v,
            VolumeSpec {
                index: 1,
                path: "/var/run/ferry/disk-1/disk.img".into(),
                size: 64 << 20,
                sha256: sha.clone()
            }
        );
        assert_eq!(VolumeSpec::parse(&v.arg()).unwrap(), v);
        assert!(VolumeSpec::parse("1=/p=3").is_err());
        assert!(
            VolumeSpec::parse("x=/p=3=aa")
                .unwrap_err()
                .contains("SHA-256")
        );
        assert!(
            VolumeSpec::parse(&format!("x=/p=3={sha}"))
                .unwrap_err()
                .contains("disk index")
        );
    }

    #[test]
    fn a_result_reads_back_per_disk_and_nothing_else_reads_as_one() {
        let v = |disk, sha: &str| Verified {
            disk,
            path: String::new(),
            size: 1,
            sha256: sha.to_owned(),
        };
        let (a, b) = ("ab".repeat(32), "CD".repeat(32));
        let text = render_result(&[v(0, &a), v(3, &b)]);
        let got = parse_result(&text).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[&0], a);
        assert_eq!(got[&3], b.to_ascii_lowercase());
        assert!(text.len() <= 20 + 2 * 67, "{} bytes", text.len());
        assert_eq!(parse_result(""), None);
        assert_eq!(parse_result("disk 0: checksum mismatch"), None);
        assert_eq!(parse_result(&format!("{RESULT_HEADER}\n0:zz")), None);
        assert_eq!(parse_result(RESULT_HEADER).map(|m| m.len()), Some(0));
        // 60 disks fit the kubelet's 4096 bytes of termination message.
        let many: Vec<Verified> = (0..60).map(|i| v(i, &a)).collect();
        assert!(render_result(&many).len() <= 4096);
    }

    #[tokio::test]
    async fn a_volume_verifies_on_its_first_size_bytes_only() {
        let dir = std::env::temp_dir().join(format!("ferry-verify-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let img = dir.join("disk.img");
        let content = vec![7u8; 3 << 20];
        std::fs::write(&img, &content).unwrap();
        let sha = ferry_staging::sha256_file(&img).await.unwrap();
        // CDI may grow the image to the claim's size: the tail is not the disk's.
        let mut grown = content.clone();
        grown.extend(vec![0u8; 1 << 20]);
        std::fs::write(&img, &grown).unwrap();
        let spec = VolumeSpec {
            index: 0,
            path: img.clone(),
            size: 3 << 20,
            sha256: sha.clone(),
        };
        assert_eq!(verify_one(&spec).await.unwrap().sha256, sha);

        let mut corrupt = grown.clone();
        corrupt[12345] ^= 1;
        std::fs::write(&img, &corrupt).unwrap();
        let e = verify_one(&spec).await.unwrap_err();
        assert_eq!(e.exit_code(), PERMANENT_EXIT_CODE);
        let msg = e.to_string();
        assert!(
            msg.contains(&sha) && msg.contains("checksum mismatch"),
            "{msg}"
        );

        std::fs::write(&img, &content[..1 << 20]).unwrap();
        assert!(matches!(
            verify_one(&spec).await.unwrap_err(),
            Error::Short { len, .. } if len == 1 << 20
        ));
        std::fs::remove_file(&img).unwrap();
        let missing = verify_one(&spec).await.unwrap_err();
        assert!(matches!(missing, Error::Missing { .. }));
        assert_eq!(missing.exit_code(), PERMANENT_EXIT_CODE);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
