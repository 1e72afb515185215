//! The contract between the controller's Job builders (`controller/src/children/`: `job.rs`,
//! `verify_job.rs`, `cutover_job.rs`) and the programs their Jobs run (`ferry-controller
//! convert`, `verify`, `delta`): the program, its environment, its exit codes and its work
//! volume. Both sides import it and it imports nothing, so neither side reaches into the other.
//! The record each disk's converter writes beside its image is the other half of the contract:
//! `ferry_staging::DiskRecord` (`staging/src/record.rs`).

/// The program both Jobs run, looked up on the image's `PATH`.
pub const CONVERTER_PROGRAM: &str = "ferry-controller";

/// Exit code of a failure that retrying may mend (a network error, a full disk): the pod is
/// retried within the Job's `backoffLimit`.
pub const TRANSIENT_EXIT_CODE: i32 = 1;
/// Exit code with which a program says "retrying cannot help" (bad credentials, a missing disk,
/// a checksum that differs): the Job fails at once through its pod failure policy.
pub const PERMANENT_EXIT_CODE: i32 = 3;

/// The conversion Job's work volume (its `sizeLimit`): room for the NBD sockets, since no data
/// path keeps a local copy of a disk.
pub const WORK_BYTES: u64 = 16 << 20;

/// Environment variable names of the converter contract.
pub mod env {
    /// vSphere SDK URL.
    pub const VSPHERE_URL: &str = "FERRY_VSPHERE_URL";
    /// vSphere user (from the Secret).
    pub const VSPHERE_USERNAME: &str = "FERRY_VSPHERE_USERNAME";
    /// vSphere password (from the Secret).
    pub const VSPHERE_PASSWORD: &str = "FERRY_VSPHERE_PASSWORD";
    /// Pinned TLS thumbprint, when set.
    pub const VSPHERE_THUMBPRINT: &str = "FERRY_VSPHERE_THUMBPRINT";
    /// PEM CA bundle of a CA-signed vSphere certificate, when set.
    pub const VSPHERE_CACERT: &str = "FERRY_VSPHERE_CACERT";
    /// `"true"` to skip TLS verification.
    pub const VSPHERE_INSECURE: &str = "FERRY_VSPHERE_INSECURE";
    /// Managed object reference of the VM, e.g. `vm-42`.
    pub const VM_MOREF: &str = "FERRY_VM_MOREF";
    /// Output format: `raw` or `qcow2`.
    pub const FORMAT: &str = "FERRY_FORMAT";
    /// S3 endpoint URL.
    pub const S3_ENDPOINT: &str = "FERRY_S3_ENDPOINT";
    /// Bucket.
    pub const S3_BUCKET: &str = "FERRY_S3_BUCKET";
    /// Region used to sign.
    pub const S3_REGION: &str = "FERRY_S3_REGION";
    /// Access key id (from the Secret).
    pub const S3_ACCESS_KEY_ID: &str = "FERRY_S3_ACCESS_KEY_ID";
    /// Secret access key (from the Secret).
    pub const S3_SECRET_ACCESS_KEY: &str = "FERRY_S3_SECRET_ACCESS_KEY";
    /// PEM CA bundle of a private-CA https S3 endpoint, when set.
    pub const S3_CACERT: &str = "FERRY_S3_CACERT";
    /// The uid of the Job the converter runs in (the downward API reads the Job controller's
    /// label on the pod): every record it writes carries it, and the controller trusts a staged
    /// image only from the Job it recorded creating.
    pub const JOB_UID: &str = "FERRY_JOB_UID";
}

/// Environment variables of the converter that the Job sets only when it needs them (the
/// command line takes them too).
pub mod extra_env {
    /// Datacenter inventory path (`dcPath`); found from the VM when unset.
    pub const DATACENTER: &str = "FERRY_DATACENTER";
    /// Disks, one `[INDEX=]DATASTORE_PATH=STAGING_KEY` per line.
    pub const DISKS: &str = "FERRY_DISKS";
    /// Prefix of the staging keys (empty: the keys are full).
    pub const S3_PREFIX: &str = "FERRY_S3_PREFIX";
    /// The work volume. Nothing is written to it (no data path keeps a local copy); the run
    /// reports the most it held.
    pub const WORK_DIR: &str = "FERRY_WORK_DIR";
    /// The qemu-img program.
    pub const QEMU_IMG: &str = "FERRY_QEMU_IMG";
    /// Cap on the bytes read from the datastore per second; unset: none.
    pub const MAX_READ_RATE: &str = "FERRY_MAX_READ_RATE";
    /// A warm round's snapshot (its moref); unset at cutover.
    pub const SNAPSHOT: &str = "FERRY_SNAPSHOT";
    /// A warm round's disks, one `INDEX:DEVICE_KEY:TARGET:CHANGE_ID:DATASTORE_PATH` per line.
    pub const DELTA_DISKS: &str = "FERRY_DELTA_DISKS";
}
