//! The phases of a migration: `status.phase` is the checkpoint the controller is trying to leave.

use std::{fmt, str::FromStr};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Error;

/// Where a `VirtualMachineMigration` stands. The six checkpoints (`Preparing` … `Validating`) each
/// name the desired state the controller is making true; `Succeeded`, `Failed` and `Cancelled`
/// (and `RolledBack`) are terminal until `spec.retry` is raised.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::EnumCount,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
pub enum Phase {
    /// Accepted; the controller has not started work yet.
    #[default]
    Pending,
    /// Held by its MigrationWave until the wave's in-flight budget lets it start.
    Queued,
    /// Finding the source VM, validating it, recording and (if asked) switching off its power.
    Preparing,
    /// Converting every disk and uploading it to the staging bucket with its checksum.
    Converting,
    /// Importing every staged disk into a DataVolume.
    Importing,
    /// A warm migration's cutover: waiting for its time, then the source powered off and what
    /// changed since the first copy written into the volumes. A cold migration skips it.
    CuttingOver,
    /// Inspecting the imported guest and, when `spec.conversion.guest` asks for it, converting
    /// it to run on KubeVirt (`virt-v2v-in-place`) in a Job. A migration whose
    /// `conversion.guest` is `Never` skips it.
    ConvertingGuest,
    /// Creating the KubeVirt VirtualMachine on the imported volumes.
    CreatingVM,
    /// Starting the VirtualMachine and waiting for its instance to run.
    Starting,
    /// Waiting for the guest agent to connect.
    Validating,
    /// The VM runs in KubeVirt; staging has been cleaned up.
    Succeeded,
    /// Stopped on a permanent error; raise spec.retry to resume from the failed checkpoint.
    Failed,
    /// Stopped on request (spec.cancel); partial results were cleaned up.
    Cancelled,
    /// The migrated VM failed its health check (`spec.target.healthCheck`) and was rolled back:
    /// the target stopped and proven not running, then the source powered back on; the target's
    /// volumes and halted VM kept. A retry starts over from the source as it is now.
    RolledBack,
}

/// Where a [`Phase`] stands in a migration's life ([`Phase::stage`]): waiting to start, at one
/// of the checkpoints, or ended one of three ways. A wave counts its migrations by it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Accepted, not started.
    Pending,
    /// Held by its wave.
    Queued,
    /// At one of the checkpoints: work has started and not ended.
    InFlight,
    /// Ended: the VM runs in KubeVirt.
    Succeeded,
    /// Ended on a permanent error.
    Failed,
    /// Ended on request.
    Cancelled,
}

impl Phase {
    /// Every phase, in lifecycle order (the declaration's, derived).
    pub const ALL: [Phase; <Phase as strum::EnumCount>::COUNT] =
        crate::listed::array(<Phase as strum::VariantArray>::VARIANTS);

    /// The checkpoints a migration passes through, in order: the phases
    /// [`Phase::is_checkpoint`] names, as the compiler checks (a cold migration skips
    /// `CuttingOver`).
    pub const CHECKPOINTS: [Phase; 8] = [
        Phase::Preparing,
        Phase::Converting,
        Phase::Importing,
        Phase::CuttingOver,
        Phase::ConvertingGuest,
        Phase::CreatingVM,
        Phase::Starting,
        Phase::Validating,
    ];

    /// The checkpoints, in order (see [`Phase::CHECKPOINTS`]).
    pub fn checkpoints() -> &'static [Phase] {
        &Self::CHECKPOINTS
    }

    /// The phase's name as written in `status.phase`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Where the phase stands in a migration's life: the one match over every phase that
    /// whatever treats the checkpoints alike (a wave's counts, the cockpit's totals and
    /// colours, which phases are terminal) matches instead of listing them again.
    pub const fn stage(self) -> Stage {
        match self {
            Phase::Pending => Stage::Pending,
            Phase::Queued => Stage::Queued,
            Phase::Preparing
            | Phase::Converting
            | Phase::Importing
            | Phase::CuttingOver
            | Phase::ConvertingGuest
            | Phase::CreatingVM
            | Phase::Starting
            | Phase::Validating => Stage::InFlight,
            Phase::Succeeded => Stage::Succeeded,
            // A rollback is a failure the gate caught: retried, counted and shown as one (the
            // cockpit gives it its own colour).
            Phase::Failed | Phase::RolledBack => Stage::Failed,
            Phase::Cancelled => Stage::Cancelled,
        }
    }

    /// `Succeeded`, `Failed` or `Cancelled`: the controller takes no further step unless
    /// `spec.retry` is raised.
    pub const fn is_terminal(self) -> bool {
        match self.stage() {
            Stage::Succeeded | Stage::Failed | Stage::Cancelled => true,
            Stage::Pending | Stage::Queued | Stage::InFlight => false,
        }
    }

    /// This phase's position in [`Phase::ALL`], for tables indexed by phase.
    pub const fn index(self) -> usize {
        self as usize
    }

    /// One of the checkpoints (`Preparing` … `Validating`).
    pub const fn is_checkpoint(self) -> bool {
        match self.stage() {
            Stage::InFlight => true,
            Stage::Pending
            | Stage::Queued
            | Stage::Succeeded
            | Stage::Failed
            | Stage::Cancelled => false,
        }
    }

    /// Work has started and not ended: what a wave counts against `maxInFlight`.
    pub fn is_in_flight(self) -> bool {
        self.is_checkpoint()
    }

    /// Position of a checkpoint in [`Phase::CHECKPOINTS`] (0 for `Preparing`), `None` otherwise.
    pub fn checkpoint_index(self) -> Option<usize> {
        Self::CHECKPOINTS.iter().position(|p| *p == self)
    }

    /// The phase that follows a checkpoint when its desired state holds: the next checkpoint, or
    /// `Succeeded` after `Validating`. `Pending` and `Queued` lead to `Preparing`; terminal
    /// phases have no successor. (A cold migration's Importing goes on to `ConvertingGuest`, and
    /// a migration whose guest is not converted goes on to `CreatingVM`.)
    pub fn next(self) -> Option<Phase> {
        match self {
            Phase::Pending | Phase::Queued => Some(Phase::Preparing),
            Phase::Preparing => Some(Phase::Converting),
            Phase::Converting => Some(Phase::Importing),
            Phase::Importing => Some(Phase::CuttingOver),
            Phase::CuttingOver => Some(Phase::ConvertingGuest),
            Phase::ConvertingGuest => Some(Phase::CreatingVM),
            Phase::CreatingVM => Some(Phase::Starting),
            Phase::Starting => Some(Phase::Validating),
            Phase::Validating => Some(Phase::Succeeded),
            Phase::Succeeded | Phase::Failed | Phase::Cancelled | Phase::RolledBack => None,
        }
    }
}

// CHECKPOINTS holds exactly the phases `is_checkpoint` names, in lifecycle order.
const _: () = {
    let mut next = 0;
    let mut i = 0;
    while i < Phase::ALL.len() {
        if Phase::ALL[i].is_checkpoint() {
            assert!(
                Phase::CHECKPOINTS[next] as usize == i,
                "CHECKPOINTS out of step"
            );
            next += 1;
        }
        i += 1;
    }
    assert!(
        next == Phase::CHECKPOINTS.len(),
        "CHECKPOINTS lists a phase that is not one"
    );
};

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Phase {
    type Err = Error;

    /// Parses a phase name; case-insensitive, so that filters typed by people work.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Phase::ALL
            .into_iter()
            .find(|p| p.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| Error::UnknownPhase(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_phases_are_exactly_succeeded_failed_cancelled_rolled_back() {
        let terminal: Vec<_> = Phase::ALL.into_iter().filter(|p| p.is_terminal()).collect();
        assert_eq!(
            terminal,
            [
                Phase::Succeeded,
                Phase::Failed,
                Phase::Cancelled,
                Phase::RolledBack
            ]
        );
    }

    #[test]
    fn next_walks_the_checkpoints_in_order_and_ends_in_succeeded() {
        let mut walked = vec![];
        let mut p = Phase::Pending;
        while let Some(n) = p.next() {
            walked.push(n);
            p = n;
        }
        let mut expected = Phase::CHECKPOINTS.to_vec();
        expected.push(Phase::Succeeded);
        assert_eq!(walked, expected);
        assert_eq!(Phase::Queued.next(), Some(Phase::Preparing));
        assert_eq!(Phase::Failed.next(), None);
        assert_eq!(Phase::Cancelled.next(), None);
    }

    #[test]
    fn serialized_name_display_and_parse_agree() {
        for p in Phase::ALL {
            let json = serde_json::to_value(p).unwrap_or_default();
            assert_eq!(json, serde_json::Value::String(p.as_str().to_owned()));
            assert_eq!(p.to_string(), p.as_str());
            assert_eq!(p.as_str().parse::<Phase>().ok(), Some(p));
            assert_eq!(p.as_str().to_lowercase().parse::<Phase>().ok(), Some(p));
        }
        assert!("Running".parse::<Phase>().is_err());
    }

    #[test]
    fn only_checkpoints_are_in_flight() {
        for p in Phase::ALL {
            assert_eq!(p.is_in_flight(), Phase::CHECKPOINTS.contains(&p), "{p}");
        }
    }
}
