//! The VirtualMachineMigration reconcile. Read the migration fresh; run the pure intent chain
//! (delete → cancel → retry → pending power-on → paused → held → start); when it proceeds, the
//! current checkpoint observes the world, decides (pure), carries out its actions, and — should
//! one fail — decides again on that failure (pure). Then the status is written once (server-side
//! apply, only when it changed) and the transition's Events are published. The source VM is
//! powered back on only through the power rule (`power.rs`), before a cancel or a delete removes
//! anything.

pub mod checkpoint;
pub mod cleanup;
pub mod converting;
pub mod creating_vm;
pub mod credentials;
pub mod importing;
pub mod intents;
pub mod outcome;
pub mod power;
pub mod preparing;
pub mod scope;
pub mod starting;
pub mod status;
pub mod validating;
pub mod world;
pub mod write;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_crds::{VirtualMachineMigration, names};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::controller::Action as Requeue;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, info, warn};

use self::checkpoint::{Checkpoint, Io, Ledger, with_checkpoint};
use self::intents::Intent;
use self::outcome::{Outcome, Step, backoff};
use self::scope::Scope;
use crate::context::Context;
use crate::events::{self, Note};
use crate::policy::Policy;
use crate::{Error, Result};

/// Metric label of this controller.
pub const CONTROLLER: &str = "migration";

/// Reconciles one migration.
///
/// # Errors
/// Kubernetes API failures and cleanups that could not finish; the work queue retries.
pub async fn reconcile(obj: Arc<VirtualMachineMigration>, ctx: Arc<Context>) -> Result<Requeue> {
    ctx.metrics.reconcile(CONTROLLER);
    let started = Instant::now();
    let ns = obj.namespace().ok_or(Error::MissingField {
        kind: "VirtualMachineMigration",
        field: "metadata.namespace",
    })?;
    let api: Api<VirtualMachineMigration> = Api::namespaced(ctx.client.clone(), &ns);
    // The cache may lag behind our own last write: decisions are taken on the cached copy only
    // when it is the version our last write or fresh read returned, else on a fresh read.
    let uid = obj.uid().unwrap_or_default();
    let fresh = if ctx.is_current(&uid, obj.resource_version().as_deref()) {
        ctx.metrics.migration_read(true);
        VirtualMachineMigration::clone(&obj)
    } else {
        ctx.metrics.migration_read(false);
        let Some(fresh) = api.get_opt(&obj.name_any()).await? else {
            ctx.forget(&uid);
            return Ok(Requeue::await_change());
        };
        ctx.note_version(&uid, fresh.resource_version());
        fresh
    };
    let has_finalizer = fresh.finalizers().iter().any(|f| f == names::FINALIZER);
    let deleting = fresh.meta().deletion_timestamp.is_some();
    if !has_finalizer && !deleting {
        ctx.metrics.write("finalizer", "VirtualMachineMigration");
    }
    // The power rule may take a while (the target stopping) before a deleted migration's
    // cleanup may run; meanwhile the finalizer stays.
    if has_finalizer
        && deleting
        && let Some(wait) = delete_power(&fresh, &ctx).await?
    {
        return Ok(wait);
    }
    let c = ctx.clone();
    let result = finalizer(
        &api,
        names::FINALIZER,
        Arc::new(fresh),
        |event| async move {
            match event {
                Finalizer::Apply(vmm) => apply(&vmm, &c).await,
                Finalizer::Cleanup(vmm) => on_delete(&vmm, &c).await,
            }
        },
    )
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e)
        | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => Error::Finalizer(Box::new(other)),
    });
    if has_finalizer && deleting && result.is_ok() {
        ctx.metrics.write("finalizer", "VirtualMachineMigration");
    }
    match &result {
        Ok(_) => ctx.note_success(&uid),
        // Someone else wrote since: read fresh next time.
        Err(e) if e.is_conflict() => ctx.note_version(&uid, None),
        Err(_) => {}
    }
    ctx.metrics
        .reconcile_seconds
        .observe(started.elapsed().as_secs_f64());
    result
}

/// What the work queue does after a failed reconcile: a conflict is retried at once, anything
/// else (a Kubernetes API error, an apiserver away) with the policy's backoff per object.
pub fn error_policy(obj: Arc<VirtualMachineMigration>, err: &Error, ctx: Arc<Context>) -> Requeue {
    ctx.metrics.error(CONTROLLER, err.metric_label());
    let uid = obj.uid().unwrap_or_default();
    let delay = retry_delay(err, ctx.note_failure(&uid), &ctx.policy, &uid);
    if err.is_conflict() || err.is_fenced() {
        debug!(migration = %obj.name_any(), error = %err, "retrying");
    } else {
        warn!(migration = %obj.name_any(), error = %err, label = err.metric_label(), ?delay, "reconcile failed");
    }
    Requeue::requeue(delay)
}

/// How long to wait after a failed reconcile, the `failures`-th failure in a row of the object
/// with `uid`. Pure.
pub fn retry_delay(err: &Error, failures: u32, policy: &Policy, uid: &str) -> Duration {
    if err.is_conflict() {
        return Duration::from_millis(200);
    }
    backoff(failures, policy.backoff_base, policy.backoff_cap, uid)
}

async fn apply(vmm: &VirtualMachineMigration, ctx: &Context) -> Result<Requeue> {
    let now = Time(crate::context::whole_seconds(ctx.clock.now()));
    let intent = intents::decide(vmm);
    let ledger = Ledger::default();
    let io = Io {
        ctx,
        vmm,
        ledger: &ledger,
    };
    let mut notes = vec![];
    let mut power_record = None;
    if !matches!(intent, Intent::Proceed) {
        // A cancel, a retry, a pause, the end: the attempt's credentials are read again.
        ctx.forget_secrets(&vmm.uid().unwrap_or_default());
    }
    match &intent {
        Intent::Proceed => return proceed(io, now).await,
        Intent::Cancel { cleanup } => {
            // The target stopped and the source powered back on first; nothing is removed
            // before that (the VM stays, halted, for as long as ferry waits on it).
            let report = power::restore(io, intents::restores_on_cancel(vmm), &now).await?;
            if report.released && vmm.phase().is_checkpoint() {
                // The cancel came after Validating handed the VM over: the migration is
                // complete, and neither copy is touched.
                info!(migration = %vmm.name_any(), "cancel after the VM was released: finishing instead");
                return proceed(io, now).await;
            }
            notes.extend(report.notes(power::record(vmm)));
            if let Some(wait) = report.pending {
                let mut new = status::cancelling(vmm, report.record.as_ref(), &now);
                new.children = ferry_crds::child::apply(new.children, &ledger.take());
                write::status(ctx, &mut vmm.clone(), new, notes).await?;
                return Ok(Requeue::requeue(wait.min(ctx.policy.wait_requeue)));
            }
            let unfinished = cleanup::run(io, cleanup).await?.or_blocked()?;
            notes.extend(unfinished.iter().map(|u| events::cleanup_incomplete(u)));
            power_record = report.record;
        }
        Intent::RestorePower => {
            let report = power::restore(io, true, &now).await?;
            let mut new = status::after_power(vmm, report.record.as_ref(), &now);
            new.children = ferry_crds::child::apply(new.children, &ledger.take());
            let notes = report.notes(power::record(vmm));
            write::status(ctx, &mut vmm.clone(), new, notes).await?;
            return Ok(report.pending.map_or_else(Requeue::await_change, |wait| {
                Requeue::requeue(wait.min(ctx.policy.wait_requeue))
            }));
        }
        Intent::Retry { cleanup, .. } => {
            cleanup::run(io, cleanup).await?.or_blocked()?;
        }
        Intent::AckRetry | Intent::Paused | Intent::Held | Intent::Start | Intent::Settled => {}
    }
    if let Some(mut new) = status::after_intent(vmm, &intent, &now) {
        new.children = ferry_crds::child::apply(new.children, &ledger.take());
        status::with_power(&mut new, vmm, power_record.as_ref(), &now);
        write::status(ctx, &mut vmm.clone(), new, notes).await?;
    }
    Ok(requeue_after_intent(&intent, &ctx.policy))
}

/// Works on the current checkpoint.
async fn proceed(io: Io<'_>, now: Time) -> Result<Requeue> {
    with_checkpoint!(
        io.vmm.phase(),
        |C| step::<C>(io, now).await,
        otherwise Ok(Requeue::requeue(io.ctx.policy.wait_requeue))
    )
}

/// The power rule for a deleted migration (`None` once it is done and the cleanup may run):
/// the target stopped before the source is powered back on, as for a cancel.
async fn delete_power(vmm: &VirtualMachineMigration, ctx: &Context) -> Result<Option<Requeue>> {
    let now = Time(crate::context::whole_seconds(ctx.clock.now()));
    // The migration goes with its finalizer: what the rule halts or deletes needs no record.
    let ledger = Ledger::default();
    let io = Io {
        ctx,
        vmm,
        ledger: &ledger,
    };
    let report = power::restore(io, intents::restores_on_delete(vmm), &now).await?;
    if report.record.is_some() {
        let new = status::after_power(vmm, report.record.as_ref(), &now);
        let notes = report.notes(power::record(vmm));
        write::status(ctx, &mut vmm.clone(), new, notes).await?;
    }
    Ok(report
        .pending
        .map(|wait| Requeue::requeue(wait.min(ctx.policy.wait_requeue))))
}

/// When to look again after carrying out `intent`. Pure.
fn requeue_after_intent(intent: &Intent, policy: &Policy) -> Requeue {
    match intent {
        Intent::Retry { .. } | Intent::Start | Intent::Proceed => {
            Requeue::requeue(policy.wait_requeue)
        }
        Intent::AckRetry => Requeue::requeue(Duration::from_millis(100)),
        Intent::Cancel { .. }
        | Intent::RestorePower
        | Intent::Paused
        | Intent::Held
        | Intent::Settled => Requeue::await_change(),
    }
}

/// One reconcile of checkpoint `C`: observe, decide, act, decide on a failed action, write.
async fn step<C: Checkpoint>(io: Io<'_>, now: Time) -> Result<Requeue> {
    let (ctx, vmm) = (io.ctx, io.vmm);
    let observed = C::observe(io).await?;
    let scope = Scope::new(vmm.clone(), now.0, ctx.policy.clone(), observed);
    let outcome = act::<C>(io, &scope, C::decide(&scope)).await?;
    if matches!(outcome.step, Step::Fail { .. }) {
        // The CDI copy of the staging keys outlives no failure: a retry that imports again
        // makes it anew (Succeeded and Cancelled remove it too).
        cleanup::delete_cdi_objects(io).await?;
    }
    if ends_attempt(&outcome.step) {
        // A failure may be the credentials' (a rotated password, a revoked opt-in): the next
        // try reads them again. At the end they are dropped from memory.
        ctx.forget_secrets(&vmm.uid().unwrap_or_default());
    }
    let mut notes = vec![];
    let (mut requeue, retrying) = requeue_after_step(&outcome.step, &scope);
    notes.extend(retrying);
    let mut new = status::after_outcome(vmm, &outcome, &now);
    // What this reconcile created, proved or deleted: recorded with its one status write.
    new.children = ferry_crds::child::apply(new.children, &io.ledger.take());
    if power::is_pending(new.source_power_restore.as_ref()) {
        // A failure whose source is to be powered back on: the power rule goes on at once.
        requeue = Requeue::requeue(Duration::from_millis(50));
    }
    write::status(ctx, &mut vmm.clone(), new, notes).await?;
    Ok(requeue)
}

/// Carries out `planned`'s actions in order; the first that fails turns the outcome into
/// [`Checkpoint::on_action_failed`]'s.
async fn act<C: Checkpoint>(
    io: Io<'_>,
    scope: &Scope<C::Observed>,
    planned: Outcome<C::Action>,
) -> Result<Outcome<C::Action>> {
    let actions = planned.actions().to_vec();
    for action in &actions {
        if let Some(problem) = C::execute(io, &scope.world, action).await? {
            info!(migration = %io.vmm.name_any(), ?action, reason = %problem.reason, "action failed");
            return Ok(C::on_action_failed(scope, planned, action, &problem));
        }
    }
    Ok(planned)
}

/// Whether `step` ends the attempt's use of its credentials: a failure (transient or not), or
/// the end of the migration. Pure.
fn ends_attempt<A>(step: &Step<A>) -> bool {
    match step {
        Step::Retry { .. } | Step::Fail { .. } => true,
        Step::Advance { to } => to.is_terminal(),
        Step::Act(_) | Step::Wait { .. } => false,
    }
}

/// When to look again after `step`, and the Event of a transient retry. Pure.
fn requeue_after_step<A, W>(step: &Step<A>, scope: &Scope<W>) -> (Requeue, Option<Note>) {
    match step {
        Step::Retry { reason, message } => {
            let uid = scope.vmm.metadata.uid.as_deref().unwrap_or_default();
            let p = &scope.policy;
            let delay = backoff(scope.retries, p.backoff_base, p.backoff_cap, uid);
            let note = events::retrying(
                scope.phase(),
                *reason,
                message,
                delay.as_secs(),
                scope.retries,
            );
            (Requeue::requeue(delay), Some(note))
        }
        Step::Wait { requeue } => (Requeue::requeue(*requeue), None),
        // A power-off or the end of staging shows in no watch; children's creation does, but
        // looking again soon costs one read.
        Step::Act(_) => (Requeue::requeue(Duration::from_secs(1)), None),
        Step::Advance { .. } => (Requeue::requeue(Duration::from_millis(50)), None),
        Step::Fail { .. } => (Requeue::await_change(), None),
    }
}

async fn on_delete(vmm: &VirtualMachineMigration, ctx: &Context) -> Result<Requeue> {
    // The migration goes with its finalizer: what cleanup deleted needs no record.
    let ledger = Ledger::default();
    let io = Io {
        ctx,
        vmm,
        ledger: &ledger,
    };
    let report = cleanup::run(io, &intents::delete_cleanup(vmm)).await?;
    let mut notes: Vec<Note> = report
        .unfinished
        .iter()
        .map(|u| events::cleanup_incomplete(u))
        .collect();
    if let Some(blocked) = report.blocked {
        // Everything else is gone by now; staging holds the finalizer until it can be cleaned,
        // or until the owner lets it go.
        if !intents::abandons_cleanup(vmm) {
            let now = Time(crate::context::whole_seconds(ctx.clock.now()));
            let new = status::cleanup_blocked(vmm, &blocked.message, &now);
            if write::status(ctx, &mut vmm.clone(), new, vec![]).await? {
                write::publish(ctx, vmm, &[events::cleanup_blocked(&blocked.message)]).await;
            }
            return Err(Error::Staging(blocked.message));
        }
        warn!(migration = %vmm.name_any(), left = blocked.left.len(), "cleanup abandoned by its owner; staging left behind");
        notes.extend(events::cleanup_abandoned(&blocked.message, &blocked.left));
    }
    notes.push(events::deleted(vmm.phase()));
    write::publish(ctx, vmm, &notes).await;
    if let Some(uid) = vmm.uid() {
        ctx.forget(&uid);
    }
    info!(migration = %vmm.name_any(), phase = %vmm.phase(), "cleaned up; releasing the finalizer");
    Ok(Requeue::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::{Phase, Reason};

    #[test]
    fn credentials_are_read_again_after_a_failure_and_dropped_at_the_end() {
        let retry = Step::<()>::Retry {
            reason: Reason::LoginFailed,
            message: String::new(),
        };
        let fail = Step::<()>::Fail {
            reason: Reason::LoginFailed,
            message: String::new(),
            retriable: true,
            resume: Phase::Preparing,
        };
        assert!(ends_attempt(&retry) && ends_attempt(&fail));
        for to in Phase::ALL.into_iter().filter(|p| p.is_terminal()) {
            assert!(ends_attempt(&Step::<()>::Advance { to }), "{to:?}");
        }
        assert!(!ends_attempt(&Step::<()>::Advance {
            to: Phase::Converting
        }));
        assert!(!ends_attempt(&Step::<()>::Act(vec![()])));
        assert!(!ends_attempt(&Step::<()>::Wait {
            requeue: Duration::from_secs(1)
        }));
    }

    #[test]
    fn api_errors_back_off_per_object_and_conflicts_retry_at_once() {
        let p = Policy::default();
        let api = |code| {
            Error::Kube(kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..kube::core::Status::default()
            })))
        };
        assert_eq!(
            retry_delay(&api(409), 5, &p, "u"),
            Duration::from_millis(200)
        );
        let delays: Vec<Duration> = (0..12)
            .map(|n| retry_delay(&api(503), n, &p, "u"))
            .collect();
        assert!(delays[0] <= p.backoff_base, "{delays:?}");
        assert!(delays[3] > delays[0] * 4, "doubles: {delays:?}");
        assert!(
            delays.iter().all(|d| *d <= p.backoff_cap),
            "capped: {delays:?}"
        );
        assert!(
            delays[11] >= p.backoff_cap * 3 / 4,
            "reaches the cap: {delays:?}"
        );
    }
}
