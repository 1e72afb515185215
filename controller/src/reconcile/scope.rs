//! The scope of one reconcile: the migration as just read, the clock, the policy knobs and what
//! the current checkpoint observed of the world (`W`, the checkpoint's own observation). Plain
//! data; every decision is a pure function of it.

use std::time::Duration;

use ferry_crds::{DiscoveredSource, Phase, PowerState, VirtualMachineMigration};
use k8s_openapi::jiff::Timestamp;

use crate::policy::Policy;

/// Everything one reconcile decides from.
#[derive(Clone, Debug)]
pub struct Scope<W> {
    /// The migration, read fresh.
    pub vmm: VirtualMachineMigration,
    /// Now, from the injected clock.
    pub now: Timestamp,
    /// The knobs.
    pub policy: Policy,
    /// Transient failures already retried in the current phase (`status.retries`).
    pub retries: u32,
    /// What the current checkpoint observed.
    pub world: W,
}

impl<W> Scope<W> {
    /// The scope of `vmm` with `world` observed, `retries` read from its status.
    pub fn new(vmm: VirtualMachineMigration, now: Timestamp, policy: Policy, world: W) -> Self {
        let retries = vmm
            .status
            .as_ref()
            .map_or(0, |s| u32::try_from(s.retries).unwrap_or(0));
        Self {
            vmm,
            now,
            policy,
            retries,
            world,
        }
    }

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
        self.vmm.status.as_ref()?.source.as_deref()
    }

    /// Number of disks discovered.
    pub fn disk_count(&self) -> usize {
        self.source().map_or(0, |s| s.disks.len())
    }

    /// The power state the VM had before ferry touched it, once recorded.
    pub fn original_power(&self) -> Option<PowerState> {
        self.source()?.power_state
    }
}
