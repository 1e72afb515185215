//! A checkpoint is one module: what it observes of the world, its pure decision, the
//! conditions it sets, what a retry of it removes, its actions and how they are carried out.
//! The reconcile core reaches a phase's checkpoint only through `by_phase::with_checkpoint!`,
//! the one place that maps phases to modules — adding a checkpoint is adding a file and a line
//! there.

use std::fmt::Debug;
use std::future::Future;

use ferry_crds::{ConditionType, Phase};

use super::cleanup::Cleanup;
use super::io::Io;
use super::outcome::Outcome;
use super::scope::Scope;
use crate::Result;
use crate::problem::Problem;

/// One checkpoint of the state machine.
pub trait Checkpoint {
    /// The phase it is the checkpoint of.
    const PHASE: Phase;
    /// The conditions it sets, the main one last (the one a failed action marks).
    const CONDITIONS: &'static [ConditionType];
    /// What a retry resuming this checkpoint removes first: its partial results.
    const RETRY_CLEANUP: &'static [Cleanup];
    /// What it reads of the world, fresh in every reconcile (credentials it will act with
    /// included, so that acting never reads them again).
    type Observed: Debug + Send + Sync;
    /// What it may do to the world; each action idempotent.
    type Action: Clone + Debug + PartialEq + Send + Sync;

    /// Reads what the decision needs.
    ///
    /// # Errors
    /// Kubernetes API errors (problems of vSphere and S3 are part of the observation).
    fn observe(io: Io<'_>) -> impl Future<Output = Result<Self::Observed>> + Send;

    /// The decision. Pure.
    fn decide(scope: &Scope<Self::Observed>) -> Outcome<Self::Action>;

    /// Carries out one action, idempotently. `Some(problem)` when it failed in a way the
    /// migration must record (vSphere refused, the API rejected an object).
    ///
    /// # Errors
    /// Kubernetes API errors (the work queue retries the reconcile).
    fn execute(
        io: Io<'_>,
        observed: &Self::Observed,
        action: &Self::Action,
    ) -> impl Future<Output = Result<Option<Problem>>> + Send;

    /// What the outcome becomes when `failed`, one of `planned`'s actions, met `problem`. Pure.
    ///
    /// The default: the problem decides the step ([`Outcome::from_problem`]) and marks the main
    /// condition; what `planned` recorded (discovered source, progress) is kept.
    fn on_action_failed(
        scope: &Scope<Self::Observed>,
        planned: Outcome<Self::Action>,
        failed: &Self::Action,
        problem: &Problem,
    ) -> Outcome<Self::Action> {
        let _ = failed;
        Outcome::from_problem(scope, problem, Self::CONDITIONS.last().copied())
            .recording(planned.record)
    }

    /// What the outcome becomes when every one of `planned`'s actions succeeded. Pure.
    ///
    /// The default: `planned` as it is (an `Act` waits for the world to move). A checkpoint
    /// whose action completes it, with nothing left to wait for, advances here instead: one
    /// status write for the act and the step it completes, not two.
    fn on_actions_done(
        scope: &Scope<Self::Observed>,
        planned: Outcome<Self::Action>,
    ) -> Outcome<Self::Action> {
        let _ = scope;
        planned
    }
}
