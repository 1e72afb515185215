//! The converter's errors, mapped to the exit codes the conversion Job's failure policy reads.

pub use crate::job_contract::{PERMANENT_EXIT_CODE, TRANSIENT_EXIT_CODE};
use ferry_staging as staging;
use ferry_vsphere as vsphere;

/// Everything that can stop a conversion run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The arguments cannot work (bad disk pair, bad thumbprint, no datacenter).
    #[error("invalid arguments: {0}")]
    Usage(String),
    /// `disk` names it: `disk N (datastore path)`.
    #[error("{disk}: {source}")]
    Vsphere {
        disk: String,
        source: vsphere::Error,
    },
    #[error("{context}: {source}")]
    Staging {
        context: String,
        source: staging::Error,
    },
    /// `qemu-img` could not be started or failed.
    #[error("qemu-img {what} failed: {detail}")]
    Qemu {
        what: String,
        detail: String,
        missing: bool,
    },
    /// The downloaded VMDK is not something we can follow.
    /// `disk` names it: `disk N (datastore path)`.
    #[error("{disk}: {detail}")]
    BadDisk { disk: String, detail: String },
    /// The source VM is not off: its disks may change under the copy.
    #[error(
        "the source VM {moref} is {state}, not poweredOff: its disks may change under the copy, so none is staged"
    )]
    SourcePoweredOn { moref: String, state: &'static str },
    /// The snapshot being read was removed: its file is the running VM's disk again.
    #[error(
        "the snapshot {snapshot} of VM {moref} was removed during the copy: its disk may have changed under it, so none is staged"
    )]
    SnapshotGone { moref: String, snapshot: String },
    #[error("{path}: {source}")]
    Io {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// The bytes of an image did not add up (a bug or a source that changed underneath).
    #[error("upload: {0}")]
    Upload(String),
    /// A volume does not read back what a warm round wrote to it: its storage lost a write.
    #[error("verification: {0}")]
    Verify(String),
    /// Guest conversion: virt-v2v failed, or a volume holds bytes ferry cannot account for.
    #[error("guest conversion: {0}")]
    Guest(String),
    /// Verification: the imported volume's bytes differ from the staged image's.
    #[error(
        "disk {index}: checksum mismatch: the imported volume's first {size} bytes have SHA-256 {actual}, the staged image's raw contents {expected}"
    )]
    Mismatch {
        index: usize,
        size: u64,
        expected: String,
        actual: String,
    },
    /// Verification: the volume holds less than the image.
    #[error(
        "disk {index}: the imported volume {path} holds {len} bytes, fewer than the image's {size}"
    )]
    Short {
        index: usize,
        path: std::path::PathBuf,
        len: u64,
        size: u64,
    },
    /// Verification: nothing at the volume's path.
    #[error("disk {index}: no imported image at {path}: {source}")]
    Missing {
        index: usize,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// Verification: reading the volume failed.
    #[error("disk {index}: reading {path}: {source}")]
    ReadVolume {
        index: usize,
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl From<super::qcow2::EncodeError> for Error {
    fn from(e: super::qcow2::EncodeError) -> Self {
        Error::Upload(e.to_string())
    }
}

impl Error {
    /// Whether a new attempt may succeed with the same arguments.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Usage(_)
            | Error::BadDisk { .. }
            | Error::SourcePoweredOn { .. }
            | Error::SnapshotGone { .. }
            | Error::Verify(_)
            | Error::Guest(_)
            | Error::Mismatch { .. }
            | Error::Short { .. }
            | Error::Missing { .. } => false,
            Error::Upload(_) | Error::ReadVolume { .. } => true,
            Error::Vsphere { source, .. } => source.is_transient(),
            Error::Staging { source, .. } => source.is_transient(),
            // A missing qemu-img is an image problem; a failed conversion may be a full disk.
            Error::Qemu { missing, .. } => !missing,
            Error::Io { .. } => true,
        }
    }

    /// The process exit code: [`TRANSIENT_EXIT_CODE`] or the Job's permanent code.
    pub fn exit_code(&self) -> i32 {
        if self.is_transient() {
            TRANSIENT_EXIT_CODE
        } else {
            PERMANENT_EXIT_CODE
        }
    }

    /// What a Job's program (`ferry-controller PROGRAM`) exits with after `outcome`: 0, or this
    /// error's code with the error said on stderr, where the pod's log keeps it.
    pub fn exit_code_of<T>(program: &str, outcome: Result<T, Error>) -> i32 {
        let Err(e) = outcome else {
            return 0;
        };
        let kind = if e.is_transient() {
            "transient"
        } else {
            "permanent"
        };
        eprintln!(
            "ferry-controller {program}: {kind} failure ({}): {e}",
            e.reason()
        );
        e.exit_code()
    }

    /// A short, stable label: the inner edge's reason where there is one.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Usage(_) => "Usage",
            Error::Vsphere { source, .. } => source.reason(),
            Error::Staging { source, .. } => source.reason(),
            Error::Qemu { .. } => "QemuImg",
            Error::BadDisk { .. } => "BadDisk",
            Error::SourcePoweredOn { .. } => "SourcePoweredOn",
            Error::SnapshotGone { .. } => "SnapshotGone",
            Error::Io { .. } => "Io",
            Error::Upload(_) => "Upload",
            Error::Verify(_) | Error::Mismatch { .. } => "Mismatch",
            Error::Guest(_) => "GuestConversion",
            Error::Short { .. } => "Short",
            Error::Missing { .. } => "Missing",
            Error::ReadVolume { .. } => "Io",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_split_permanent_from_transient() {
        let cases: Vec<(Error, i32)> = vec![
            (Error::Usage("x".into()), PERMANENT_EXIT_CODE),
            (
                Error::Vsphere {
                    disk: "d".into(),
                    source: vsphere::Error::BadCredentials { user: "u".into() },
                },
                PERMANENT_EXIT_CODE,
            ),
            (
                Error::Vsphere {
                    disk: "d".into(),
                    source: vsphere::Error::Unreachable {
                        url: "u".into(),
                        detail: "refused".into(),
                    },
                },
                TRANSIENT_EXIT_CODE,
            ),
            (
                Error::Staging {
                    context: "c".into(),
                    source: staging::Error::NoSuchBucket {
                        bucket: "b".into(),
                        endpoint: "e".into(),
                    },
                },
                PERMANENT_EXIT_CODE,
            ),
            (
                Error::Staging {
                    context: "c".into(),
                    source: staging::Error::Unreachable {
                        endpoint: "e".into(),
                        detail: "d".into(),
                    },
                },
                TRANSIENT_EXIT_CODE,
            ),
            (
                Error::Qemu {
                    what: "convert".into(),
                    detail: "not found".into(),
                    missing: true,
                },
                PERMANENT_EXIT_CODE,
            ),
            (
                Error::Qemu {
                    what: "convert".into(),
                    detail: "No space".into(),
                    missing: false,
                },
                TRANSIENT_EXIT_CODE,
            ),
            (
                Error::BadDisk {
                    disk: "d".into(),
                    detail: "x".into(),
                },
                PERMANENT_EXIT_CODE,
            ),
            (
                Error::SourcePoweredOn {
                    moref: "vm-1".into(),
                    state: "poweredOn",
                },
                PERMANENT_EXIT_CODE,
            ),
        ];
        for (e, code) in cases {
            assert_eq!(e.exit_code(), code, "{e}");
        }
        assert_ne!(PERMANENT_EXIT_CODE, TRANSIENT_EXIT_CODE);
        // clap exits 2 on usage errors; the permanent code must not be confused with it... or be it.
        assert_ne!(TRANSIENT_EXIT_CODE, 2);
    }
}
