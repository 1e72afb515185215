//! The VirtualMachineMigration reconcile. Read the migration fresh; run the pure intent chain
//! (delete → cancel → retry → pending power-on → paused → held → start); when it proceeds, the
//! current checkpoint observes the world, decides (pure), carries out its actions, and — should
//! one fail — decides again on that failure (pure). Then the status is written once (server-side
//! apply, only when it changed) and the transition's Events are published. The source VM is
//! powered back on only through the power rule (`power.rs`), before a cancel or a delete removes
//! anything.

pub mod by_phase;
pub mod checkpoint;
pub mod cleanup;
pub mod console;
pub mod converting;
pub mod converting_guest;
pub mod creating_vm;
pub mod credentials;
pub mod cutting_over;
pub mod health_gate;
pub mod hooks;
pub mod importing;
pub mod intents;
pub mod io;
pub mod outcome;
pub mod power;
pub mod precopy;
pub mod preflight;
pub mod preparing;
pub mod scope;
pub mod settled;
pub mod snapshots;
pub mod source_power_off;
pub mod source_state;
pub mod starting;
pub mod status;
pub mod validating;
pub mod vm_start;
pub mod volumes;
pub mod warm;
pub mod world;
pub mod write;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_crds::{VirtualMachineMigration, VirtualMachineMigrationStatus as VmmStatus, names};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, info, warn};

use self::by_phase::with_checkpoint;
use self::checkpoint::Checkpoint;
use self::cleanup::Cleanup;
use self::intents::Intent;
use self::io::{Io, Ledger};
use self::outcome::{Outcome, Step};
use self::scope::Scope;
pub use self::settled::settled;
use crate::context::Context;
use crate::events::{self, Note};
use crate::freshness::Cached;
use crate::pacing::{backoff, retry_delay};
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
    let uid = obj.uid().unwrap_or_default();
    let Some(mut fresh) = to_decide_on(&obj, &ctx, &api, &uid).await? else {
        return Ok(Requeue::await_change());
    };
    let mut has_finalizer = fresh.finalizers().iter().any(|f| f == names::FINALIZER);
    let deleting = fresh.meta().deletion_timestamp.is_some();
    if !has_finalizer && !deleting {
        // Added here rather than by kube-runtime's helper, which answers "await the change":
        // the patch returns the object, so this reconcile goes on with it and the next one
        // needs no fresh read.
        fresh = add_finalizer(&api, &fresh).await?;
        ctx.note_version(&uid, fresh.resource_version());
        ctx.metrics.write("finalizer", "VirtualMachineMigration");
        has_finalizer = true;
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

/// The copy of `obj` to decide on: the cached one when it is known to be current (or this
/// process never touched it), else a fresh read; `None` when there is nothing to decide now (a
/// settled or cut-down copy, a copy behind our own write whose event is coming, or gone).
///
/// The cache may lag behind our own last write: decisions are taken on the cached copy when
/// it is at or after the version our last write or fresh read returned; a copy behind our
/// write waits for that write's event; with nothing known, the migration is read fresh.
async fn to_decide_on(
    obj: &VirtualMachineMigration,
    ctx: &Context,
    api: &Api<VirtualMachineMigration>,
    uid: &str,
) -> Result<Option<VirtualMachineMigration>> {
    if settled::is_slim(obj) {
        // A settled migration, cut down in the cache (`settled::slim`): nothing to do, nothing
        // read, nothing remembered of it; a newer version comes whole as an event of its own.
        ctx.metrics.migration_read(true);
        ctx.forget(uid);
        return Ok(None);
    }
    let cached = ctx.cached(uid, obj.resource_version().as_deref());
    if cached == Cached::Behind {
        // Our write's event brings a reconcile of its own, on a copy that has the write.
        ctx.metrics.migration_read(true);
        return Ok(None);
    }
    // A migration this process never wrote nor read, without a status, is taken as cached too:
    // a copy that lags can only lack the finalizer (its patch has the resourceVersion as
    // precondition) or a status (whose write has it too). Once ferry wrote it (the finalizer,
    // the first status), a status-less copy is one that lags behind that write, and is read.
    let untouched =
        obj.status.is_none() && obj.meta().deletion_timestamp.is_none() && !ctx.knows_version(uid);
    let decidable = matches!(cached, Cached::Current | Cached::Ahead);
    if !decidable && settled_as_cached(obj, ctx) {
        // Nothing to do on the cached copy, so nothing is read: a newer version (a retry
        // raised, a deletion) arrives as an event of its own. A restart among 10,000 finished
        // migrations reads none of them.
        ctx.metrics.migration_read(true);
        return Ok(None);
    }
    if untouched || decidable {
        ctx.metrics.migration_read(true);
        return Ok(Some(VirtualMachineMigration::clone(obj)));
    }
    ctx.metrics.migration_read(false);
    let Some(fresh) = api.get_opt(&obj.name_any()).await? else {
        ctx.forget(uid);
        return Ok(None);
    };
    ctx.note_version(uid, fresh.resource_version());
    Ok(Some(fresh))
}

/// Adds ferry's finalizer to `vmm` (with its resourceVersion as precondition); returns the
/// object as written.
///
/// # Errors
/// [`Error::Conflict`] when it changed since it was read; other Kubernetes API errors.
async fn add_finalizer(
    api: &Api<VirtualMachineMigration>,
    vmm: &VirtualMachineMigration,
) -> Result<VirtualMachineMigration> {
    let mut finalizers = vmm.finalizers().to_vec();
    finalizers.push(names::FINALIZER.to_owned());
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": vmm.resource_version()},
    });
    match api
        .patch(
            &vmm.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(written) => Ok(written),
        Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::Conflict),
        Err(e) => Err(e.into()),
    }
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

/// Whether the cached copy of a migration is finished and settled: ferry's finalizer on, not
/// being deleted, no intent but [`Intent::Settled`], and a status that intent would not change.
/// Pure but for the clock.
fn settled_as_cached(vmm: &VirtualMachineMigration, ctx: &Context) -> bool {
    let now = Time(crate::context::whole_seconds(ctx.clock.now()));
    settled(vmm, &now)
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
    if !matches!(intent, Intent::Proceed) {
        // A cancel, a retry, a pause, the end: the attempt's credentials are read again.
        ctx.forget_attempt(&vmm.uid().unwrap_or_default());
    }
    if let Some(wait) = held_for_policies(io, &intent, &now).await? {
        return Ok(wait);
    }
    let (mut notes, mut power_record) = (vec![], None);
    match &intent {
        Intent::Proceed => return proceed(io, now, None, vec![]).await,
        Intent::Cancel { cleanup } => match cancel(io, cleanup, &now).await? {
            Ok((n, record)) => (notes, power_record) = (n, record),
            Err(requeue) => return Ok(requeue),
        },
        Intent::RestorePower => return restore_power(io, &now).await,
        Intent::Retry { cleanup, .. } => {
            cleanup::run(io, cleanup).await?.or_blocked()?;
        }
        Intent::AckRetry | Intent::Paused | Intent::Held | Intent::Start | Intent::Settled => {}
    }
    if let Some(wait) = not_due_yet(io, &intent, &now) {
        return Ok(wait);
    }
    // A migration paused before it started, or held by a wave that was paused (planned) when
    // it made it, is preflighted, nothing touched, on a schedule.
    let paused_preflight = match intent {
        Intent::Paused => vmm.phase() == ferry_crds::Phase::Pending,
        Intent::Held => vmm.preflight_while_held(),
        _ => false,
    };
    let uid = vmm.uid().unwrap_or_default();
    let ran = ctx.preflight_ran(&uid, vmm.metadata.generation);
    let mut fresh_preflight = None;
    if paused_preflight
        && preflight::recheck_in(vmm, &now, ctx.policy.preflight_recheck, ran.as_ref()).is_none()
    {
        ctx.note_preflight(&uid, vmm.metadata.generation, now.clone());
        fresh_preflight = Some(preflight_only(io, &now).await?);
    }
    if let Some(mut new) = status::after_intent(vmm, &intent, &now) {
        new.children = ferry_crds::child::apply(new.children, &ledger.take());
        if let Some(p) = fresh_preflight {
            new.preflight = Some(p);
        }
        status::with_power(&mut new, vmm, power_record.as_ref(), &now);
        if matches!(intent, Intent::Start) && new.phase.is_checkpoint() {
            // Nothing to wait for: the first checkpoint starts in this reconcile, and one
            // status write carries both.
            return proceed(io, now, Some(new), notes).await;
        }
        write::status(ctx, &mut vmm.clone(), new, notes).await?;
    }
    if paused_preflight {
        return Ok(Requeue::requeue(ctx.policy.preflight_recheck));
    }
    Ok(requeue_after_intent(&intent, &ctx.policy))
}

/// Nothing is started or retried while ferry's admission policies are not in force (a
/// cancel, a pause, a delete and work under way go on: they were allowed when they began):
/// the migration says so, and is looked at again later.
async fn held_for_policies(io: Io<'_>, intent: &Intent, now: &Time) -> Result<Option<Requeue>> {
    if !matches!(intent, Intent::Start | Intent::Retry { .. }) {
        return Ok(None);
    }
    let Some(why) = io.ctx.guard.why_not() else {
        return Ok(None);
    };
    if let Some(new) = status::held_for_policies(io.vmm, &why, now) {
        let note = crate::events::held_for_policies(new.message.as_deref().unwrap_or_default());
        write::status(io.ctx, &mut io.vmm.clone(), new, vec![note]).await?;
    }
    Ok(Some(Requeue::requeue(crate::admission_guard::RECHECK)))
}

/// A cancel: the target stopped and the source powered back on first, then the cleanup. `Ok`
/// with the notes and the power record when the cleanup is done; `Err` with the requeue when
/// the power rule waits (nothing is removed before: the VM stays, halted, for as long as ferry
/// waits on it) or the cancel came too late to undo anything.
async fn cancel(
    io: Io<'_>,
    cleanup: &[Cleanup],
    now: &Time,
) -> Result<std::result::Result<(Vec<Note>, Option<ferry_crds::source::SourcePowerRestore>), Requeue>>
{
    let (ctx, vmm) = (io.ctx, io.vmm);
    // A copy slot granted and not yet shown by a status is free again at once, not after the
    // grant's TTL: a cancelled migration copies nothing more.
    ctx.slots.give_back(&vmm.uid().unwrap_or_default());
    let report = power::restore(io, intents::restores_on_cancel(vmm), now).await?;
    if report.released && vmm.phase().is_checkpoint() {
        // The cancel came after Validating handed the VM over: the migration is complete, and
        // neither copy is touched.
        info!(migration = %vmm.name_any(), "cancel after the VM was released: finishing instead");
        return Ok(Err(proceed(io, now.clone(), None, vec![]).await?));
    }
    let mut notes = report.notes(power::record(vmm));
    if let Some(wait) = report.pending {
        let mut new = status::cancelling(vmm, report.record.as_ref(), now);
        new.children = ferry_crds::child::apply(new.children, &io.ledger.take());
        write::status(ctx, &mut vmm.clone(), new, notes).await?;
        return Ok(Err(Requeue::requeue(wait.min(ctx.policy.wait_requeue))));
    }
    let unfinished = cleanup::run(io, cleanup).await?.or_blocked()?;
    notes.extend(unfinished.iter().map(|u| events::cleanup_incomplete(u)));
    Ok(Ok((notes, report.record)))
}

/// The source powered back on under the power rule, the status saying how far it got.
async fn restore_power(io: Io<'_>, now: &Time) -> Result<Requeue> {
    let (ctx, vmm) = (io.ctx, io.vmm);
    let report = power::restore(io, true, now).await?;
    let mut new = status::after_power(vmm, report.record.as_ref(), now);
    new.children = ferry_crds::child::apply(new.children, &io.ledger.take());
    let notes = report.notes(power::record(vmm));
    write::status(ctx, &mut vmm.clone(), new, notes).await?;
    Ok(report.pending.map_or_else(Requeue::await_change, |wait| {
        Requeue::requeue(wait.min(ctx.policy.wait_requeue))
    }))
}

/// A start that waits, nothing read nor written: still no copy slot, or held by preflight and
/// not due for another look. A start due for its look is noted here: Preparing looks at the
/// source again now, and the next look is an interval later, whether or not its findings
/// change the status.
fn not_due_yet(io: Io<'_>, intent: &Intent, now: &Time) -> Option<Requeue> {
    let (ctx, vmm) = (io.ctx, io.vmm);
    if !matches!(intent, Intent::Start) {
        return None;
    }
    if status::waits_for_copy_slot(vmm) {
        let place = crate::copy_slots::Place::of(vmm).unwrap_or_default();
        if ctx.copy_slot(vmm, &place) != crate::copy_slots::Verdict::Free {
            return Some(Requeue::requeue(ctx.policy.copy_slot_recheck));
        }
        // A slot is held for it now: Preparing looks at the source again and goes on.
    }
    if !preflight::held(vmm) {
        return None;
    }
    let uid = vmm.uid().unwrap_or_default();
    let ran = ctx.preflight_ran(&uid, vmm.metadata.generation);
    if let Some(wait) = preflight::waiting(vmm, now, ctx.policy.preflight_recheck, ran.as_ref()) {
        return Some(Requeue::requeue(wait));
    }
    ctx.note_preflight(&uid, vmm.metadata.generation, now.clone());
    None
}

/// Preflight alone: what Preparing would observe, weighed, touching nothing.
async fn preflight_only(io: Io<'_>, now: &Time) -> Result<ferry_crds::PreflightStatus> {
    let observed = <preparing::Preparing as Checkpoint>::observe(io).await?;
    let (concerns, claims) = match &observed.facts {
        Ok(f) => (
            preflight::concerns(io.vmm, f),
            preflight::claims_need(io.vmm, &f.vm.disks),
        ),
        Err(p) => (preflight::unavailable(p), Default::default()),
    };
    let previous = io.vmm.status.as_ref().and_then(|s| s.preflight.as_ref());
    Ok(preflight::record(io.vmm, concerns, claims, now, previous))
}

/// Most checkpoints one reconcile works on (see [`proceed`]).
const MAX_CHECKPOINTS_PER_RECONCILE: usize = 4;

/// Works on the current checkpoint and — while one hands over to the next with nothing to wait
/// for — on the next ones in the same reconcile, then writes the status once: the phases a
/// migration passes through without waiting cost no write of their own. `start` is a status
/// not written yet to begin from (the one an intent made), with its Events.
async fn proceed(
    io: Io<'_>,
    now: Time,
    start: Option<VmmStatus>,
    mut notes: Vec<Note>,
) -> Result<Requeue> {
    let (ctx, vmm) = (io.ctx, io.vmm);
    let mut current = vmm.clone();
    let unwritten = start.is_some();
    if let Some(s) = start {
        current.status = Some(s);
    }
    for _ in 0..MAX_CHECKPOINTS_PER_RECONCILE {
        let here = Io {
            vmm: &current,
            ..io
        };
        let Some(stepped) = with_checkpoint!(
            current.phase(),
            |C| Some(step::<C>(here, &now).await?),
            otherwise None
        ) else {
            break;
        };
        notes.extend(stepped.notes);
        if !stepped.hands_over {
            let mut new = stepped.status;
            if stepped.held {
                // Held in Pending as it was: the look in Preparing leaves no trace in the
                // history, and a recheck that finds the same writes nothing.
                new = status::held_as_before(vmm.status.as_ref(), new);
            }
            let written = write::status(ctx, &mut vmm.clone(), new, notes).await?;
            return Ok(written.requeue(stepped.requeue));
        }
        current.status = Some(stepped.status);
    }
    // Handed over as often as one reconcile may (or to no checkpoint): write, and go on soon.
    if unwritten || current.status != vmm.status {
        let new = current.status.unwrap_or_default();
        write::status(ctx, &mut vmm.clone(), new, notes).await?;
        return Ok(Requeue::requeue(Duration::from_millis(50)));
    }
    Ok(Requeue::requeue(ctx.policy.wait_requeue))
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

/// What one checkpoint's step made of the migration.
struct Stepped {
    /// The status it leads to (not written yet).
    status: VmmStatus,
    /// The checkpoint is done and the next one may start in the same reconcile.
    hands_over: bool,
    /// When to look again (`None`: on a change only).
    requeue: Option<Duration>,
    /// Events beyond the status transition's.
    notes: Vec<Note>,
    /// Preflight sent the migration back to Pending.
    held: bool,
}

/// One step of checkpoint `C`: observe, decide, act, decide on a failed action.
async fn step<C: Checkpoint>(io: Io<'_>, now: &Time) -> Result<Stepped> {
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
        ctx.forget_attempt(&vmm.uid().unwrap_or_default());
    }
    let (mut requeue, retrying) = requeue_after_step(&outcome.step, &scope);
    let mut new = status::after_outcome(vmm, &outcome, now);
    let mut notes: Vec<Note> = retrying.into_iter().collect();
    if let Some(codes) = newly_accepted(vmm, &new) {
        notes.push(events::concerns_accepted(&codes));
    }
    // What this reconcile created, proved or deleted: recorded with its one status write.
    new.children = ferry_crds::child::apply(new.children, &io.ledger.take());
    let power_pending = power::is_pending(new.source_power_restore.as_deref());
    if power_pending {
        // A failure whose source is to be powered back on: the power rule goes on at once.
        requeue = Some(Duration::from_millis(50));
    }
    let hands_over =
        matches!(outcome.step, Step::Advance { to } if to.is_checkpoint()) && !power_pending;
    Ok(Stepped {
        status: new,
        hands_over,
        requeue,
        notes,
        held: matches!(outcome.step, Step::Hold { .. }),
    })
}

/// The Critical concerns `new` accepts that `vmm`'s status did not yet (for the audit Event).
/// Pure.
fn newly_accepted(
    vmm: &VirtualMachineMigration,
    new: &VmmStatus,
) -> Option<Vec<ferry_crds::ConcernCode>> {
    let before = vmm
        .status
        .as_ref()
        .and_then(|s| s.preflight.as_ref())
        .map(|p| p.accepted.clone())
        .unwrap_or_default();
    let codes: Vec<_> = new
        .preflight
        .as_ref()?
        .accepted
        .iter()
        .filter(|c| !before.contains(c))
        .copied()
        .collect();
    (!codes.is_empty()).then_some(codes)
}

/// Carries out `planned`'s actions in order; the first that fails turns the outcome into
/// [`Checkpoint::on_action_failed`]'s, and all done into [`Checkpoint::on_actions_done`]'s.
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
    Ok(if actions.is_empty() {
        planned
    } else {
        C::on_actions_done(scope, planned)
    })
}

/// Whether `step` ends the attempt's use of its credentials: a failure (transient or not), or
/// the end of the migration. Pure.
fn ends_attempt<A>(step: &Step<A>) -> bool {
    match step {
        Step::Retry { .. } | Step::Fail { .. } | Step::Hold { .. } => true,
        Step::Advance { to } => to.is_terminal(),
        Step::Act(_) | Step::Wait { .. } => false,
    }
}

/// When to look again after `step` (`None`: on a change only), and the Event of a transient
/// retry. Pure.
fn requeue_after_step<A, W>(step: &Step<A>, scope: &Scope<W>) -> (Option<Duration>, Option<Note>) {
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
            (Some(delay), Some(note))
        }
        Step::Wait { requeue } => (Some(*requeue), None),
        // A power-off or the end of staging shows in no watch; children's creation does, but
        // looking again soon costs one read.
        Step::Act(_) => (Some(Duration::from_secs(1)), None),
        Step::Advance { .. } => (Some(Duration::from_millis(50)), None),
        Step::Hold { recheck, .. } => (Some(*recheck), None),
        Step::Fail { .. } => (None, None),
    }
}

async fn on_delete(vmm: &VirtualMachineMigration, ctx: &Context) -> Result<Requeue> {
    // Its copy slot, granted and not yet shown by a status, is free again at once.
    ctx.slots.give_back(&vmm.uid().unwrap_or_default());
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
            if write::status(ctx, &mut vmm.clone(), new, vec![])
                .await?
                .wrote()
            {
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
