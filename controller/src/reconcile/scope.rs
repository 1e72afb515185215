//! The scope of one reconcile: the migration as just read, the clock, the policy knobs and what
//! was observed of the world for the current checkpoint. Plain data; every decision is a pure
//! function of it.

use std::time::Duration;

use ferry_crds::{DiscoveredSource, Phase, PowerState, Reason, VirtualMachineMigration};
use k8s_openapi::jiff::Timestamp;

use crate::children::{cdi::DvState, job::JobState};

/// Something in the world that stops a step, classified once where it is observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The condition reason that tells the operator what is wrong.
    pub reason: Reason,
    /// What happened and what to do about it.
    pub message: String,
    /// Whether trying again later, with nothing else changed, may succeed.
    pub transient: bool,
}

impl Problem {
    /// A problem that retrying may fix.
    pub fn transient(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            transient: true,
        }
    }

    /// A problem that needs the operator.
    pub fn permanent(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            transient: false,
        }
    }
}

/// Knobs of the decisions; defaults suit production, tests shorten them.
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
        }
    }
}

/// What the Preparing checkpoint found.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceFacts {
    /// The VM as read now (its power state is the current one).
    pub vm: DiscoveredSource,
    /// Why its disk layout cannot be migrated (empty when it can).
    pub layout_problems: Vec<String>,
    /// The staging bucket: reachable and present, or why not.
    pub bucket: Result<(), Problem>,
    /// A VirtualMachine with the target name that this migration does not own.
    pub target_taken: bool,
}

/// A staged disk image, as a HEAD request sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StagedObject {
    /// Size in bytes.
    pub size: i64,
    /// SHA-256 from the object's metadata, lowercase hex.
    pub sha256: Option<String>,
}

/// The KubeVirt VirtualMachine with the target name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmState {
    /// None.
    Absent,
    /// One that this migration does not own.
    Foreign,
    /// Ours, with its current run strategy.
    Ours {
        /// `spec.runStrategy`.
        run_strategy: Option<String>,
    },
}

/// The VirtualMachineInstance of the target VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmiState {
    /// None (not started yet, or between restarts).
    Absent,
    /// Present in `phase`, with whether the guest agent is connected.
    Present {
        /// VMI phase.
        phase: String,
        /// Condition `AgentConnected` is `True`.
        agent_connected: bool,
        /// KubeVirt's reason for the phase, if any.
        reason: Option<String>,
    },
}

/// What was observed of the world for the current checkpoint, read fresh in this reconcile.
#[derive(Clone, Debug, PartialEq)]
pub enum World {
    /// The phase needs no observation (Pending, Queued, terminal).
    Nothing,
    /// vSphere inventory, power state, bucket, target name.
    Preparing(Result<SourceFacts, Problem>),
    /// The conversion Job and the staged objects (one per disk, `Err` when S3 failed).
    Converting {
        /// The conversion Job.
        job: JobState,
        /// HEAD of each disk's staged object.
        staged: Vec<Result<Option<StagedObject>, Problem>>,
    },
    /// The CDI Secret (and whether the staging credentials could be read) and the DataVolumes.
    Importing {
        /// The staging credentials could be read (needed only to create the CDI Secret).
        credentials: Result<(), Problem>,
        /// The CDI S3 Secret exists.
        secret_present: bool,
        /// One per disk.
        dvs: Vec<DvState>,
    },
    /// The VirtualMachine.
    CreatingVM(VmState),
    /// The VirtualMachine and its instance.
    Starting(VmState, VmiState),
    /// The instance, and whether staging leftovers (objects, CDI Secret) remain.
    Validating {
        /// The VirtualMachine.
        vm: VmState,
        /// Its instance.
        vmi: VmiState,
        /// Staged objects or the CDI Secret still exist.
        leftovers: Result<bool, Problem>,
    },
}

/// Everything one reconcile decides from.
#[derive(Clone, Debug)]
pub struct Scope {
    /// The migration, read fresh.
    pub vmm: VirtualMachineMigration,
    /// Now, from the injected clock.
    pub now: Timestamp,
    /// The knobs.
    pub policy: Policy,
    /// Transient failures already retried in the current phase.
    pub retries: u32,
    /// The world, for the current phase.
    pub world: World,
}

impl Scope {
    /// `status.phase`.
    pub fn phase(&self) -> Phase {
        self.vmm.phase()
    }

    /// When the current phase was entered (from the history), if recorded.
    pub fn phase_entered(&self) -> Option<Timestamp> {
        let s = self.vmm.status.as_ref()?;
        let last = s.history.last()?;
        (last.phase == s.phase).then_some(last.entered_at.0)
    }

    /// How long the migration has been in its phase (zero when unknown).
    pub fn in_phase_for(&self) -> Duration {
        self.phase_entered()
            .and_then(|t| self.now.duration_since(t).try_into().ok())
            .unwrap_or(Duration::ZERO)
    }

    /// How long to wait before looking again when nothing may happen in a watch before
    /// `timeout` (in the phase) runs out: the safety-net requeue, or just past the deadline.
    pub fn requeue_within(&self, timeout: Duration) -> Duration {
        let left = timeout.saturating_sub(self.in_phase_for()) + Duration::from_secs(1);
        self.policy.wait_requeue.min(left)
    }

    /// The discovered source, if Preparing recorded it.
    pub fn source(&self) -> Option<&DiscoveredSource> {
        self.vmm.status.as_ref()?.source.as_ref()
    }

    /// Number of disks discovered.
    pub fn disk_count(&self) -> usize {
        self.source().map_or(0, |s| s.disks.len())
    }

    /// The power state the VM had before ferry touched it.
    pub fn original_power(&self) -> Option<PowerState> {
        self.source()?.power_state
    }
}
