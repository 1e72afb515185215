//! The knobs of the decisions: defaults suit production, tests shorten them, the binary's flags
//! set them.

use std::time::Duration;

/// Decision knobs.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// First delay of an in-phase retry.
    pub backoff_base: Duration,
    /// Longest delay of an in-phase retry.
    pub backoff_cap: Duration,
    /// Transient failures tolerated in one phase before the migration fails.
    pub max_transient_retries: u32,
    /// Importer restarts (CDI `restartCount`) tolerated per disk before the import is failed.
    pub max_import_restarts: i32,
    /// How long `Starting` may wait for the VMI to run.
    pub start_timeout: Duration,
    /// How long `Validating` may wait for the guest agent.
    pub agent_timeout: Duration,
    /// Safety-net requeue while waiting on children (watch events normally come first).
    pub wait_requeue: Duration,
    /// How often a running conversion's progress is read from staging (no watch event says it
    /// moved).
    pub progress_requeue: Duration,
    /// Cap on each converter's datastore read rate, bytes per second (protects the source's
    /// storage); `None`: no cap.
    pub converter_read_limit: Option<u64>,
    /// Cap on the conversion Job's work volume (`sizeLimit`), bytes; `None`: what the disks may
    /// need at worst. A disk whose qcow2 copy cannot fit fails at once, naming the sizes.
    pub converter_scratch_max: Option<u64>,
    /// How often the source is looked at while its guest shuts down (vSphere sends no events
    /// ferry watches).
    pub source_poll: Duration,
    /// How long a KubeVirt error state (printableStatus ErrorUnschedulable, ErrorPvcNotFound,
    /// DataVolumeError, CrashLoopBackOff, ErrImagePull, ImagePullBackOff) may last in Starting or
    /// Validating before the migration fails with it (a node may free up meanwhile).
    pub kubevirt_error_grace: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            backoff_base: Duration::from_secs(2),
            backoff_cap: Duration::from_secs(300),
            max_transient_retries: 8,
            max_import_restarts: 3,
            start_timeout: Duration::from_secs(600),
            agent_timeout: Duration::from_secs(900),
            wait_requeue: Duration::from_secs(60),
            progress_requeue: Duration::from_secs(3),
            converter_read_limit: None,
            converter_scratch_max: None,
            source_poll: Duration::from_secs(5),
            kubevirt_error_grace: Duration::from_secs(20),
        }
    }
}
