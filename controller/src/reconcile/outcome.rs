//! What a checkpoint decides: the step to take, the actions that step needs (of the
//! checkpoint's own action type `A`), and what to record in the status; the one mapping from a
//! [`Problem`] to a step; and the capped exponential backoff with deterministic jitter.

use std::time::Duration;

use ferry_crds::{
    ConditionStatus, ConditionType, DiscoveredSource, DiskStatus, Phase, PreflightStatus, Progress,
    Reason, SourcePowerOff,
};

use super::scope::Scope;
use crate::problem::{Problem, Tries};

/// The step a checkpoint takes now.
#[derive(Clone, Debug, PartialEq)]
pub enum Step<A> {
    /// The checkpoint's desired state holds: move on to `to`.
    Advance {
        /// The next phase.
        to: Phase,
    },
    /// Take these actions (create-if-absent, idempotent) and wait for the world to move.
    Act(Vec<A>),
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
    /// Before anything was touched, the migration may not go on yet: preflight found a
    /// Critical concern (reason `PreflightFailed`: back to `Pending`), or its source's ESXi host
    /// or a datastore has the controller's limit of copies running (`HostCopyLimit`,
    /// `DatastoreCopyLimit`: to `Queued`); checked again after `recheck` or on a spec change.
    Hold {
        /// Why.
        reason: Reason,
        /// What holds the migration, for the operator.
        message: String,
        /// When to check again.
        recheck: Duration,
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
    /// How the source was powered off (Preparing).
    pub power_off: Option<SourcePowerOff>,
    /// The preflight's concerns (Preparing).
    pub preflight: Option<PreflightStatus>,
    /// A warm migration's state (Converting, CuttingOver).
    pub warm: Option<ferry_crds::WarmStatus>,
    /// What defines the copy of the source, at the power-off it is made after (Preparing for a
    /// cold migration, CuttingOver for a warm one).
    pub source_state: Option<ferry_crds::SourceState>,
    /// What ConvertingGuest found of the guest and did (ConvertingGuest).
    pub guest: Option<ferry_crds::GuestStatus>,
    /// How the health check goes (Validating).
    pub health: Option<ferry_crds::HealthCheckStatus>,
    /// A hook's run (the checkpoints with a hook's gate: see `hooks`).
    pub hook: Option<ferry_crds::HookStatus>,
}

impl Record {
    /// The disks' copy and its sum, as Converting and Importing record them: `done` of `total`
    /// bytes at `rate` bytes per second (none when nothing moves).
    pub fn progress(disks: Vec<DiskStatus>, done: i64, total: i64, rate: Option<i64>) -> Self {
        let rate = rate.filter(|r| *r > 0);
        Record {
            disks: Some(disks),
            progress: Some(Progress {
                percent: percent(done, total),
                bytes_done: done,
                bytes_total: total,
                rate_bytes_per_second: rate,
                eta_seconds: rate.map(|r| (total - done).max(0) / r),
            }),
            ..Record::default()
        }
    }
}

/// `done` of `total` in percent, to two decimals, within 0–100; 0 of nothing.
pub fn percent(done: i64, total: i64) -> f64 {
    if total > 0 {
        ((done as f64 * 10_000.0 / total as f64).round() / 100.0).clamp(0.0, 100.0)
    } else {
        0.0
    }
}

/// A checkpoint's decision: the step, the conditions it sets, what it records, and a one-line
/// summary for people.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome<A> {
    /// The step.
    pub step: Step<A>,
    /// Conditions of this checkpoint.
    pub conditions: Vec<CondUpdate>,
    /// What to record.
    pub record: Record,
    /// `status.message`.
    pub message: String,
    /// A failure's cause, as the failing component classifies it (`status.lastFailure.cause`).
    pub cause: Option<String>,
}

impl<A> Outcome<A> {
    /// An outcome with no conditions and nothing recorded.
    pub fn new(step: Step<A>, message: impl Into<String>) -> Self {
        Self {
            step,
            conditions: vec![],
            record: Record::default(),
            message: message.into(),
            cause: None,
        }
    }

    /// A failure's cause (see [`Outcome::cause`]).
    pub fn with_cause(mut self, cause: Option<String>) -> Self {
        self.cause = cause;
        self
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
    pub fn actions(&self) -> &[A] {
        match &self.step {
            Step::Act(a) => a,
            Step::Advance { .. }
            | Step::Wait { .. }
            | Step::Retry { .. }
            | Step::Hold { .. }
            | Step::Fail { .. } => &[],
        }
    }

    /// A failure of the migration for `reason`, resuming `resume` when `spec.retry` is raised,
    /// with condition `marks` set `False` for the same reason and message.
    pub fn failure(
        reason: Reason,
        message: impl Into<String>,
        retriable: bool,
        resume: Phase,
        marks: ConditionType,
    ) -> Self {
        let message = message.into();
        Outcome::new(
            Step::Fail {
                reason,
                message: message.clone(),
                retriable,
                resume,
            },
            message.clone(),
        )
        .with(marks, ConditionStatus::False, reason, message)
    }

    /// The outcome of a [`Problem`] met in the scope's checkpoint — the one place where a problem
    /// becomes a step. Pure.
    ///
    /// # Guarantees
    /// * A transient problem is retried in the phase (`Step::Retry`) while the scope's retries are
    ///   within [`Policy::max_transient_retries`](crate::policy::Policy); past that budget it
    ///   fails, retriable, resuming this checkpoint.
    /// * A permanent problem fails at once, not retriable (nothing changes by itself), resuming
    ///   this checkpoint when `spec.retry` is raised.
    /// * `marks` (when given) is set `Unknown` while retrying and `False` on failure, with the
    ///   problem's reason and message.
    pub fn from_problem<W>(
        scope: &Scope<W>,
        problem: &Problem,
        marks: Option<ConditionType>,
    ) -> Self {
        let phase = scope.phase();
        let budget = match problem.tries {
            Tries::Policy => Some(scope.policy.max_transient_retries),
            Tries::Few => Some(crate::problem::FEW_TRIES),
            Tries::Unbounded => None,
        };
        let step = if !problem.transient {
            Step::Fail {
                reason: problem.reason,
                message: problem.message.clone(),
                retriable: false,
                resume: phase,
            }
        } else if budget.is_some_and(|b| scope.retries >= b) {
            Step::Fail {
                reason: problem.reason,
                message: format!(
                    "{} (gave up after {} retries)",
                    problem.message, scope.retries
                ),
                retriable: true,
                resume: phase,
            }
        } else {
            Step::Retry {
                reason: problem.reason,
                message: problem.message.clone(),
            }
        };
        let status = if matches!(step, Step::Retry { .. }) {
            ConditionStatus::Unknown
        } else {
            ConditionStatus::False
        };
        let out = Outcome::new(step, problem.message.clone());
        match marks {
            Some(t) => out.with(t, status, problem.reason, problem.message.clone()),
            None => out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_problem_becomes_a_retry_within_the_budget_and_a_failure_past_it() {
        use crate::policy::Policy;
        use ferry_crds::fixtures::{migration, ts};
        let scope = |retries: u32| Scope {
            vmm: migration("m").with_phase(Phase::Converting),
            now: ts(0).0,
            policy: Policy::default(),
            retries,
            world: (),
        };
        let down = Problem::transient(Reason::StagingUnavailable, "down");
        let max = Policy::default().max_transient_retries;
        type Case = (
            &'static str,
            u32,
            Problem,
            fn(&Step<()>) -> bool,
            ConditionStatus,
        );
        let cases: Vec<Case> = vec![
            (
                "transient, first time: retry",
                0,
                down.clone(),
                |s| {
                    matches!(
                        s,
                        Step::Retry {
                            reason: Reason::StagingUnavailable,
                            ..
                        }
                    )
                },
                ConditionStatus::Unknown,
            ),
            (
                "transient, last retry: retry",
                max - 1,
                down.clone(),
                |s| matches!(s, Step::Retry { .. }),
                ConditionStatus::Unknown,
            ),
            (
                "transient, budget spent: fail retriable",
                max,
                down.clone(),
                |s| {
                    matches!(
                        s,
                        Step::Fail {
                            retriable: true,
                            resume: Phase::Converting,
                            ..
                        }
                    )
                },
                ConditionStatus::False,
            ),
            (
                "permanent: fail at once, not retriable",
                0,
                Problem::permanent(Reason::LoginFailed, "no"),
                |s| {
                    matches!(
                        s,
                        Step::Fail {
                            retriable: false,
                            resume: Phase::Converting,
                            reason: Reason::LoginFailed,
                            ..
                        }
                    )
                },
                ConditionStatus::False,
            ),
        ];
        for (name, retries, p, ok, status) in cases {
            let o: Outcome<()> =
                Outcome::from_problem(&scope(retries), &p, Some(ConditionType::DiskConverted));
            assert!(ok(&o.step), "{name}: {:?}", o.step);
            assert_eq!(o.conditions.len(), 1, "{name}");
            assert_eq!(
                (
                    o.conditions[0].type_,
                    o.conditions[0].status,
                    o.conditions[0].reason
                ),
                (ConditionType::DiskConverted, status, p.reason),
                "{name}"
            );
            let unmarked: Outcome<()> = Outcome::from_problem(&scope(retries), &p, None);
            assert!(unmarked.conditions.is_empty(), "{name}");
        }
    }
}
