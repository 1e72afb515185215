//! What a checkpoint decides: the step to take, the actions that step needs, and what to
//! record in the status. Plus the capped exponential backoff with deterministic jitter.

use std::time::Duration;

use ferry_crds::{
    ConditionStatus, ConditionType, DiscoveredSource, DiskStatus, Phase, Progress, Reason,
    RunStrategy,
};

/// One idempotent action on the world; the executor turns it into API calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Power the source VM off.
    PowerOff,
    /// Create the conversion Job.
    CreateJob,
    /// Create the CDI S3 Secret from the staging credentials.
    CreateS3Secret,
    /// Create the DataVolume of disk `n`.
    CreateDataVolume(usize),
    /// Create the KubeVirt VirtualMachine.
    CreateVm,
    /// Set the VirtualMachine's run strategy.
    SetRunStrategy(RunStrategy),
    /// Finish up: delete the staged objects and the CDI S3 Secret, and release the VirtualMachine
    /// and its DataVolumes from the migration's ownership (deleting the migration record later
    /// must not delete the migrated VM).
    Finish,
}

/// The step a checkpoint takes now.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// The checkpoint's desired state holds: move on to `to`.
    Advance {
        /// The next phase.
        to: Phase,
    },
    /// Take these actions (create-if-absent, idempotent) and wait for the world to move.
    Act(Vec<Action>),
    /// Work is under way; look again after `requeue` at the latest.
    Wait {
        /// Safety-net requeue (watch events normally come first).
        requeue: Duration,
    },
    /// A transient failure: stay in the phase and try again after a backoff.
    Retry {
        /// Why.
        reason: Reason,
        /// Details for the operator.
        message: String,
    },
    /// A permanent failure: the migration fails; `resume` is the checkpoint a retry goes back to.
    Fail {
        /// Why, for `lastFailure` and the conditions.
        reason: Reason,
        /// What happened and what to do about it.
        message: String,
        /// Whether a plain retry may help (`lastFailure.retriable`).
        retriable: bool,
        /// The checkpoint that a raised `spec.retry` resumes.
        resume: Phase,
    },
}

/// A condition the checkpoint sets.
#[derive(Clone, Debug, PartialEq)]
pub struct CondUpdate {
    /// Which.
    pub type_: ConditionType,
    /// True, False, Unknown.
    pub status: ConditionStatus,
    /// Why.
    pub reason: Reason,
    /// Details.
    pub message: String,
}

impl CondUpdate {
    /// A condition update.
    pub fn new(
        type_: ConditionType,
        status: ConditionStatus,
        reason: Reason,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_,
            status,
            reason,
            message: message.into(),
        }
    }
}

/// What a checkpoint learnt, to record in the status.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    /// The discovered source (Preparing).
    pub source: Option<DiscoveredSource>,
    /// Per-disk status, whole list.
    pub disks: Option<Vec<DiskStatus>>,
    /// Overall progress.
    pub progress: Option<Progress>,
}

/// A checkpoint's decision: the step, the conditions it sets, what it records, and a one-line
/// summary for people.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// The step.
    pub step: Step,
    /// Conditions of this checkpoint.
    pub conditions: Vec<CondUpdate>,
    /// What to record.
    pub record: Record,
    /// `status.message`.
    pub message: String,
}

impl Outcome {
    /// An outcome with no conditions and nothing recorded.
    pub fn new(step: Step, message: impl Into<String>) -> Self {
        Self {
            step,
            conditions: vec![],
            record: Record::default(),
            message: message.into(),
        }
    }

    /// Adds a condition update.
    pub fn with(
        mut self,
        type_: ConditionType,
        status: ConditionStatus,
        reason: Reason,
        message: impl Into<String>,
    ) -> Self {
        self.conditions
            .push(CondUpdate::new(type_, status, reason, message));
        self
    }

    /// Sets what to record.
    pub fn recording(mut self, record: Record) -> Self {
        self.record = record;
        self
    }

    /// The actions of the step (none unless it is [`Step::Act`]).
    pub fn actions(&self) -> &[Action] {
        match &self.step {
            Step::Act(a) => a,
            _ => &[],
        }
    }
}

/// A transient problem within the retry budget is retried; past it, the migration fails
/// (retriable, so that `spec.retry` can take it up again). Pure.
pub fn transient_or_fail(
    retries: u32,
    max: u32,
    reason: Reason,
    message: String,
    resume: Phase,
) -> Step {
    if retries >= max {
        Step::Fail {
            reason,
            message: format!("{message} (gave up after {retries} retries)"),
            retriable: true,
            resume,
        }
    } else {
        Step::Retry { reason, message }
    }
}

/// Delay before in-phase retry number `retry` (0 for the first): `base · 2^retry`, capped at
/// `cap`, minus up to a quarter of it as jitter derived from `seed` (the migration's uid), so
/// that migrations failing together do not retry together. Pure and deterministic.
pub fn backoff(retry: u32, base: Duration, cap: Duration, seed: &str) -> Duration {
    let exp = base.saturating_mul(2u32.saturating_pow(retry.min(20)));
    let capped = exp.min(cap);
    let h = seed
        .bytes()
        .chain(retry.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    let quarter = capped / 4;
    let jitter_ms = if quarter.as_millis() == 0 {
        0
    } else {
        h % (quarter.as_millis() as u64 + 1)
    };
    capped.saturating_sub(Duration::from_millis(jitter_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let base = Duration::from_secs(2);
        let cap = Duration::from_secs(60);
        let d: Vec<_> = (0..8).map(|r| backoff(r, base, cap, "uid")).collect();
        for (r, d) in d.iter().enumerate() {
            let nominal = (base * 2u32.pow(r as u32)).min(cap);
            assert!(
                *d <= nominal && *d >= nominal * 3 / 4,
                "retry {r}: {d:?} vs {nominal:?}"
            );
        }
        assert_eq!(
            backoff(3, base, cap, "a"),
            backoff(3, base, cap, "a"),
            "deterministic"
        );
    }

    proptest! {
        #[test]
        fn backoff_stays_within_three_quarters_and_the_cap(retry in 0u32..100, seed in ".{0,40}", base_ms in 1u64..10_000, cap_ms in 1u64..600_000) {
            let base = Duration::from_millis(base_ms);
            let cap = Duration::from_millis(cap_ms);
            let d = backoff(retry, base, cap, &seed);
            let nominal = base.saturating_mul(2u32.saturating_pow(retry.min(20))).min(cap);
            prop_assert!(d <= nominal);
            prop_assert!(d >= nominal - nominal / 4);
        }
    }

    #[test]
    fn transient_problems_fail_once_the_budget_is_spent() {
        let s = transient_or_fail(
            2,
            3,
            Reason::EndpointUnreachable,
            "down".into(),
            Phase::Preparing,
        );
        assert_eq!(
            s,
            Step::Retry {
                reason: Reason::EndpointUnreachable,
                message: "down".into()
            }
        );
        let s = transient_or_fail(
            3,
            3,
            Reason::EndpointUnreachable,
            "down".into(),
            Phase::Preparing,
        );
        assert!(matches!(
            s,
            Step::Fail {
                retriable: true,
                resume: Phase::Preparing,
                ..
            }
        ));
    }
}
