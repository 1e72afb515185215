//! The vocabulary of the Kubernetes Events ferry publishes on a migration: reasons and actions
//! as enums, so that the controller never writes a free string and tools can match on them.

use std::fmt;

use crate::{Phase, Reason};

/// `reason` of an Event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventReason {
    /// The migration entered this phase (named after it: `Converting`, `Succeeded`, …).
    Entered(Phase),
    /// A condition reason: the reason of a failure or of a transient error being retried.
    Condition(Reason),
    /// A raised `spec.retry` was taken up.
    RetryRequested,
    /// A cleanup let something go (best effort: the source's power, staging on a gone bucket).
    CleanupIncomplete,
    /// The migration was deleted and its partial results removed.
    Deleted,
    /// The owner abandoned a blocked cleanup: the Event lists what was left behind.
    CleanupAbandoned,
    /// The operator accepted Critical preflight concerns (spec.preflight.accept): the Event
    /// names them, the migration going on despite them.
    ConcernsAccepted,
}

impl EventReason {
    /// The CamelCase reason written on the Event.
    pub fn as_str(self) -> &'static str {
        match self {
            EventReason::Entered(p) => p.as_str(),
            EventReason::Condition(r) => r.as_str(),
            EventReason::RetryRequested => "RetryRequested",
            EventReason::CleanupIncomplete => "CleanupIncomplete",
            EventReason::Deleted => "Deleted",
            EventReason::CleanupAbandoned => "CleanupAbandoned",
            EventReason::ConcernsAccepted => "ConcernsAccepted",
        }
    }
}

impl fmt::Display for EventReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `action` of an Event: what the controller did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, strum::IntoStaticStr)]
pub enum EventAction {
    /// Moved to the next phase.
    Transition,
    /// Failed the migration.
    Fail,
    /// Cancelled it.
    Cancel,
    /// Finished it.
    Complete,
    /// Retried (a raised `spec.retry`, or a transient failure within the phase).
    Retry,
    /// Removed partial results.
    Cleanup,
    /// Weighed preflight's concerns.
    Preflight,
}

impl EventAction {
    /// The action written on the Event.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_read_as_the_phase_or_condition_reason_they_carry() {
        assert_eq!(EventReason::Entered(Phase::Importing).as_str(), "Importing");
        assert_eq!(
            EventReason::Condition(Reason::ImportFailed).to_string(),
            "ImportFailed"
        );
        assert_eq!(EventReason::CleanupIncomplete.as_str(), "CleanupIncomplete");
    }
}
