//! The hooks' gate (`spec.hooks`): a checkpoint that reaches a hook's point runs its Job once
//! per attempt and goes on only once the run is recorded `Succeeded` in `status.hooks`. The
//! record, not the Job, opens the gate: a Job deleted after it succeeded is not run again, and
//! one of an earlier attempt (a retry that starts over) does not count.
//!
//! Where the gates stand: `preCutover` in Preparing for a cold migration (after every check,
//! before the source's power-off) and in CuttingOver for a warm one (after the cutover began,
//! before its power-off); `postCutover` in Validating, once the guest passed its readiness check
//! and before the health check. A pure decision ([`decide`]) on the status and the Job as read
//! ([`observe`], the only I/O besides [`create`]).

use ferry_crds::{
    ConditionStatus::Unknown, ConditionType, Hook, HookPoint, HookState, HookStatus, Phase, Reason,
    VirtualMachineMigration, names,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::io::Io;
use super::outcome::{Outcome, Record, Step};
use super::scope::Scope;
use super::world;
use crate::Result;
use crate::apis::job::JobState;
use crate::children::hook_job;
use crate::problem::Problem;

/// The hook's Job as read.
#[derive(Clone, Debug, PartialEq)]
pub struct Seen {
    /// Where it stands.
    pub job: JobState,
    /// Once failed: what its pod said (termination message or log's end).
    pub failure: Option<String>,
    /// Its name held by an object that is not this migration's.
    pub conflict: Option<Problem>,
}

/// This attempt's record of the hook at `point`. Pure.
fn recorded(vmm: &VirtualMachineMigration, point: HookPoint) -> Option<&HookStatus> {
    let s = vmm.status.as_ref()?;
    s.hooks
        .iter()
        .find(|h| h.point == point && h.attempt == s.attempts)
}

/// The hook at `point` that still holds `vmm`: one is set and this attempt has not recorded it
/// succeeded. Pure.
pub fn pending(vmm: &VirtualMachineMigration, point: HookPoint) -> Option<&Hook> {
    let hook = vmm.spec.hooks.as_ref()?.at(point)?;
    let done = recorded(vmm, point).is_some_and(|h| h.state == HookState::Succeeded);
    (!done).then_some(hook)
}

/// Reads the hook's Job when the hook at `point` is pending (`None` otherwise: no read).
///
/// # Errors
/// Kubernetes API errors.
pub async fn observe(io: Io<'_>, point: HookPoint) -> Result<Option<Seen>> {
    if pending(io.vmm, point).is_none() {
        return Ok(None);
    }
    let name = names::hook_job_name(io.vmm, point);
    let seen = world::reporting_job(io, &name, hook_job::CONTAINER).await?;
    Ok(Some(Seen {
        job: seen.state,
        failure: seen.failure,
        conflict: seen.conflict.map(|c| c.problem(world::RENAME_HINT)),
    }))
}

/// Creates the hook's Job (the decision asks only while the hook is pending).
///
/// # Errors
/// Kubernetes API errors; a migration without uid or namespace.
pub async fn create(io: Io<'_>, point: HookPoint) -> Result<Option<Problem>> {
    let Some(hook) = pending(io.vmm, point) else {
        return Ok(None);
    };
    let job = hook_job::hook_job(io.vmm, point, hook)?;
    Ok(io.create(job).await?.problem(world::RENAME_HINT))
}

/// What the gate at `point` decides, `None` when it is open (no hook, or it succeeded in this
/// attempt): run its Job (`create`, the checkpoint's action for it), wait for it, record its
/// success, or fail the migration (resuming `resume`, condition `marks` False). Pure.
pub fn decide<W, A>(
    scope: &Scope<W>,
    point: HookPoint,
    seen: Option<&Seen>,
    create: A,
    marks: ConditionType,
    resume: Phase,
) -> Option<Outcome<A>> {
    let hook = pending(&scope.vmm, point)?;
    let job = names::hook_job_name(&scope.vmm, point);
    let now = Time(crate::context::whole_seconds(scope.now));
    let attempt = scope.vmm.status.as_ref().map_or(0, |s| s.attempts);
    let before = recorded(&scope.vmm, point);
    let record = |state: HookState, message: String| Record {
        hook: Some(HookStatus {
            point,
            attempt,
            job: job.clone(),
            state,
            started_at: before
                .and_then(|h| h.started_at.clone())
                .or_else(|| Some(now.clone())),
            finished_at: (state != HookState::Running).then(|| now.clone()),
            message,
        }),
        ..Record::default()
    };
    let Some(seen) = seen else {
        // Not read this time (the checkpoint reads it whenever it is pending): look again.
        return Some(Outcome::new(
            Step::Wait {
                requeue: scope.policy.wait_requeue,
            },
            say::running(point, &job, hook),
        ));
    };
    if let Some(p) = &seen.conflict {
        return Some(Outcome::from_problem(scope, p, Some(marks)));
    }
    let running = |step: Step<A>| {
        let msg = say::running(point, &job, hook);
        Outcome::new(step, msg.clone())
            .with(marks, Unknown, Reason::HookRunning, msg)
            .recording(record(HookState::Running, String::new()))
    };
    Some(match &seen.job {
        JobState::Absent => running(Step::Act(vec![create])),
        JobState::Deleting | JobState::Running { .. } => running(Step::Wait {
            requeue: scope.policy.wait_requeue,
        }),
        JobState::Complete => {
            let msg = say::succeeded(point, &job);
            // Recorded first; the next reconcile (right after the write) goes past the gate.
            Outcome::new(
                Step::Wait {
                    requeue: std::time::Duration::ZERO,
                },
                msg.clone(),
            )
            .with(marks, Unknown, Reason::InProgress, msg)
            .recording(record(HookState::Succeeded, String::new()))
        }
        JobState::Failed { reason, message } => {
            let said = seen.failure.as_deref().unwrap_or(message);
            let msg = say::failed(point, &job, reason, said);
            Outcome::failure(Reason::HookFailed, msg.clone(), true, resume, marks)
                .recording(record(HookState::Failed, said.to_owned()))
        }
    })
}

/// What the gate tells people.
mod say {
    use ferry_crds::{Hook, HookPoint};

    pub(super) fn running(point: HookPoint, job: &str, hook: &Hook) -> String {
        format!(
            "running the {} hook (Job {job}, image {})",
            point.field(),
            hook.image
        )
    }

    pub(super) fn succeeded(point: HookPoint, job: &str) -> String {
        format!("the {} hook succeeded (Job {job})", point.field())
    }

    pub(super) fn failed(point: HookPoint, job: &str, reason: &str, said: &str) -> String {
        let said = said.trim();
        let then = match point {
            HookPoint::PreCutover => "the source was not touched for the cutover",
            HookPoint::PostCutover => "the migrated VM did not pass",
        };
        if said.is_empty() {
            format!(
                "the {} hook failed (Job {job}: {reason}); {then}",
                point.field()
            )
        } else {
            format!(
                "the {} hook failed (Job {job}: {reason}): {said}; {then}",
                point.field()
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use ferry_crds::fixtures::{migration, ts};

    fn with_hook(point: HookPoint) -> VirtualMachineMigration {
        let mut vmm = migration("m").with_phase(Phase::Preparing);
        let hook = Hook {
            image: "img".into(),
            command: vec!["true".into()],
            args: vec![],
            timeout_seconds: 60,
        };
        let mut hooks = ferry_crds::Hooks::default();
        match point {
            HookPoint::PreCutover => hooks.pre_cutover = Some(hook),
            HookPoint::PostCutover => hooks.post_cutover = Some(hook),
        }
        vmm.spec.hooks = Some(hooks);
        vmm.status.get_or_insert_with(Default::default).attempts = 1;
        vmm
    }

    fn scope(vmm: VirtualMachineMigration) -> Scope<()> {
        Scope::new(vmm, ts(10).0, Policy::default(), ())
    }

    fn seen(job: JobState) -> Seen {
        Seen {
            job,
            failure: None,
            conflict: None,
        }
    }

    const PRE: HookPoint = HookPoint::PreCutover;

    #[test]
    fn a_hook_runs_once_its_success_is_recorded_and_then_the_gate_is_open() {
        let vmm = with_hook(PRE);
        let s = scope(vmm.clone());
        let d = |j: JobState| {
            decide(
                &s,
                PRE,
                Some(&seen(j)),
                'c',
                ConditionType::Validated,
                Phase::Preparing,
            )
        };
        let o = d(JobState::Absent).unwrap();
        assert_eq!(o.step, Step::Act(vec!['c']));
        assert_eq!(o.conditions[0].reason, Reason::HookRunning);
        assert_eq!(o.record.hook.as_ref().unwrap().state, HookState::Running);
        let o = d(JobState::Running { failed: 0 }).unwrap();
        assert!(matches!(o.step, Step::Wait { .. }));
        let o = d(JobState::Complete).unwrap();
        let rec = o.record.hook.clone().unwrap();
        assert_eq!((rec.state, rec.attempt), (HookState::Succeeded, 1));
        assert!(rec.finished_at.is_some());
        // Recorded: open, whatever the Job is now (even gone), with nothing read.
        let mut after = vmm.clone();
        after.status.as_mut().unwrap().hooks = vec![rec.clone()];
        assert!(pending(&after, PRE).is_none());
        let s2 = scope(after.clone());
        assert!(
            decide(
                &s2,
                PRE,
                None,
                'c',
                ConditionType::Validated,
                Phase::Preparing
            )
            .is_none()
        );
        // A retry that starts over (a new attempt) runs it again.
        after.status.as_mut().unwrap().attempts = 2;
        assert!(pending(&after, PRE).is_some());
        // No hook: open.
        let none = migration("m");
        assert!(pending(&none, PRE).is_none());
    }

    #[test]
    fn a_failed_hook_fails_the_migration_with_what_it_said() {
        let s = scope(with_hook(PRE));
        let mut failed = seen(JobState::Failed {
            reason: "BackoffLimitExceeded".into(),
            message: "Job has reached the specified backoff limit".into(),
        });
        failed.failure = Some("app still has 3 writers\n".into());
        let o = decide(
            &s,
            PRE,
            Some(&failed),
            'c',
            ConditionType::Validated,
            Phase::Preparing,
        )
        .unwrap();
        let Step::Fail {
            reason,
            message,
            retriable,
            resume,
        } = &o.step
        else {
            panic!("{:?}", o.step)
        };
        assert_eq!(*reason, Reason::HookFailed);
        assert!(*retriable);
        assert_eq!(*resume, Phase::Preparing);
        assert!(message.contains("preCutover hook failed"), "{message}");
        assert!(message.contains("app still has 3 writers"), "{message}");
        assert!(message.contains("not touched"), "{message}");
        let rec = o.record.hook.unwrap();
        assert_eq!(rec.state, HookState::Failed);
        assert_eq!(rec.message, "app still has 3 writers\n");
    }
}
