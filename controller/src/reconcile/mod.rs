//! The VirtualMachineMigration reconcile: read the migration and the world fresh, run the pure
//! intent policies and the current checkpoint's pure decision, write the status once (server-side
//! apply, only when it changed), then carry out the decision's actions idempotently.

pub mod cleanup;
pub mod converting;
pub mod creating_vm;
pub mod decision;
pub mod edges;
pub mod execute;
pub mod importing;
pub mod intents;
pub mod observe;
pub mod preparing;
pub mod scope;
pub mod starting;
pub mod status;
pub mod validating;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_crds::{
    ConditionStatus, Phase, VirtualMachineMigration, VirtualMachineMigrationStatus as Status, names,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Api, Resource, ResourceExt};
use tracing::{debug, info, warn};

use self::decision::{Outcome, Step, backoff, transient_or_fail};
use self::intents::{Cleanup, Intent};
use self::scope::Scope;
use crate::context::Context;
use crate::events::{self, Note};
use crate::{Error, Result};

/// Metric label of this controller.
pub const CONTROLLER: &str = "migration";

/// Runs the checkpoint decision of the scope's phase. Pure.
pub fn decide(scope: &Scope) -> Outcome {
    match scope.phase() {
        Phase::Preparing => preparing::decide(scope),
        Phase::Converting => converting::decide(scope),
        Phase::Importing => importing::decide(scope),
        Phase::CreatingVM => creating_vm::decide(scope),
        Phase::Starting => starting::decide(scope),
        Phase::Validating => validating::decide(scope),
        _ => Outcome::new(
            Step::Wait {
                requeue: scope.policy.wait_requeue,
            },
            "",
        ),
    }
}

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
    // The cache may lag behind our own last write; decisions are taken on a fresh read.
    let Some(fresh) = api.get_opt(&obj.name_any()).await? else {
        if let Some(uid) = obj.uid() {
            ctx.forget(&uid);
        }
        return Ok(Requeue::await_change());
    };
    let has_finalizer = fresh.finalizers().iter().any(|f| f == names::FINALIZER);
    let deleting = fresh.meta().deletion_timestamp.is_some();
    if !has_finalizer && !deleting {
        ctx.metrics.write("finalizer", "VirtualMachineMigration");
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
    ctx.metrics
        .reconcile_seconds
        .observe(started.elapsed().as_secs_f64());
    result
}

/// What the work queue does after a failed reconcile.
pub fn error_policy(obj: Arc<VirtualMachineMigration>, err: &Error, ctx: Arc<Context>) -> Requeue {
    ctx.metrics.error(CONTROLLER, err.metric_label());
    if err.is_conflict() {
        debug!(migration = %obj.name_any(), "conflict; retrying");
        return Requeue::requeue(Duration::from_millis(200));
    }
    warn!(migration = %obj.name_any(), error = %err, label = err.metric_label(), "reconcile failed");
    Requeue::requeue(Duration::from_secs(5))
}

async fn publish(ctx: &Context, vmm: &VirtualMachineMigration, notes: &[Note]) {
    let reference = vmm.object_ref(&());
    for n in notes {
        match ctx.recorder.publish(&n.to_event(), &reference).await {
            Ok(()) => ctx.metrics.write("create", "Event"),
            Err(e) => {
                warn!(migration = %vmm.name_any(), error = %e, reason = %n.reason, "publishing an event")
            }
        }
    }
}

/// Writes `new` as the status of `vmm` when it is worth a write (see
/// [`status::worth_writing`]; `force` skips the progress throttle), with server-side apply under
/// the controller's field manager and `vmm`'s resourceVersion as precondition. On success `vmm`
/// carries the written status and its new resourceVersion, and the transition's Events are
/// published. Returns whether it wrote.
async fn write_status(
    ctx: &Context,
    vmm: &mut VirtualMachineMigration,
    new: Status,
) -> Result<bool> {
    let uid = vmm.uid().unwrap_or_default();
    if !status::worth_writing(vmm.status.as_ref(), &new, ctx.since_progress_write(&uid)) {
        return Ok(false);
    }
    let api: Api<VirtualMachineMigration> =
        Api::namespaced(ctx.client.clone(), &vmm.namespace().unwrap_or_default());
    let patch = serde_json::json!({
        "apiVersion": ferry_crds::API_VERSION,
        "kind": "VirtualMachineMigration",
        "metadata": {"name": vmm.name_any(), "resourceVersion": vmm.resource_version()},
        "status": new,
    });
    let params = PatchParams::apply(names::CONTROLLER_FIELD_MANAGER).force();
    let written = match api
        .patch_status(&vmm.name_any(), &params, &Patch::Apply(&patch))
        .await
    {
        Ok(w) => w,
        Err(kube::Error::Api(s)) if s.code == 409 => return Err(Error::Conflict),
        Err(e) => return Err(e.into()),
    };
    ctx.metrics.write("status", "VirtualMachineMigration");
    ctx.note_write(&uid);
    let old = vmm.status.clone().unwrap_or_default();
    if old.phase != new.phase {
        info!(migration = %vmm.name_any(), from = %old.phase, to = %new.phase, "phase");
        if let Some(entered) = old
            .history
            .last()
            .filter(|h| h.phase == old.phase)
            .map(|h| h.entered_at.0)
            && let Ok(d) = Duration::try_from(ctx.clock.now().duration_since(entered))
        {
            ctx.metrics.phase_left(old.phase.as_str(), d.as_secs_f64());
        }
    }
    let notes = events::notes(&old, &new);
    vmm.metadata.resource_version = written.metadata.resource_version;
    vmm.status = Some(new);
    publish(ctx, vmm, &notes).await;
    Ok(true)
}

async fn apply(vmm: &VirtualMachineMigration, ctx: &Context) -> Result<Requeue> {
    let now = Time(crate::context::whole_seconds(ctx.clock.now()));
    let mut vmm = vmm.clone();
    match intents::decide(&vmm) {
        Intent::Cancel { cleanup } => {
            let unfinished = cleanup::run(ctx, &vmm, &cleanup).await?;
            let new = status::cancelled(&vmm, &now);
            write_status(ctx, &mut vmm, new).await?;
            let notes: Vec<Note> = unfinished.iter().map(|u| cleanup_warning(u)).collect();
            publish(ctx, &vmm, &notes).await;
            Ok(Requeue::await_change())
        }
        Intent::Retry { resume, cleanup } => {
            cleanup::run(ctx, &vmm, &cleanup).await?;
            let new = status::retried(&vmm, resume, &now);
            write_status(ctx, &mut vmm, new).await?;
            Ok(Requeue::requeue(ctx.policy.wait_requeue))
        }
        Intent::AckRetry => {
            let new = status::acknowledged(&vmm, &now);
            write_status(ctx, &mut vmm, new).await?;
            Ok(Requeue::requeue(Duration::from_millis(100)))
        }
        Intent::Paused => {
            let new = status::paused(&vmm, &now);
            write_status(ctx, &mut vmm, new).await?;
            Ok(Requeue::await_change())
        }
        Intent::Held => {
            let new = status::held(&vmm, &now);
            write_status(ctx, &mut vmm, new).await?;
            Ok(Requeue::await_change())
        }
        Intent::Start => {
            let new = status::started(&vmm, &now);
            write_status(ctx, &mut vmm, new).await?;
            Ok(Requeue::requeue(ctx.policy.wait_requeue))
        }
        Intent::Settled => {
            let new = status::settled(&vmm, &now);
            write_status(ctx, &mut vmm, new).await?;
            Ok(Requeue::await_change())
        }
        Intent::Proceed => proceed(vmm, ctx, now).await,
    }
}

fn cleanup_warning(what: &str) -> Note {
    Note {
        warning: true,
        reason: "CleanupIncomplete".into(),
        action: "Cleanup".into(),
        note: what.to_owned(),
    }
}

async fn proceed(mut vmm: VirtualMachineMigration, ctx: &Context, now: Time) -> Result<Requeue> {
    let world = observe::world(ctx, &vmm).await?;
    let uid = vmm.uid().unwrap_or_default();
    let phase = vmm.phase();
    let retries = vmm
        .status
        .as_ref()
        .map_or(0, |s| u32::try_from(s.retries).unwrap_or(0));
    let scope = Scope {
        vmm: vmm.clone(),
        now: now.0,
        policy: ctx.policy.clone(),
        retries,
        world,
    };
    let outcome = decide(&scope);
    if let Step::Fail { .. } = outcome.step
        && intents::restores_on_failure(&vmm)
    {
        let unfinished = cleanup::run(ctx, &vmm, &[Cleanup::RestorePower]).await?;
        let notes: Vec<Note> = unfinished.iter().map(|u| cleanup_warning(u)).collect();
        publish(ctx, &vmm, &notes).await;
    }
    let new = status::after_outcome(&vmm, &outcome, &now);
    write_status(ctx, &mut vmm, new).await?;
    // Actions come after the status: what they rely on (the discovered source, the original
    // power state) is recorded before anything changes in the world.
    if let Some(problem) = execute::run(ctx, &vmm, outcome.actions()).await? {
        let failed_at = outcome.actions().first().map_or(phase, execute::phase_of);
        let step = if problem.transient {
            transient_or_fail(
                retries,
                ctx.policy.max_transient_retries,
                problem.reason,
                problem.message.clone(),
                failed_at,
            )
        } else {
            Step::Fail {
                reason: problem.reason,
                message: problem.message.clone(),
                retriable: true,
                resume: failed_at,
            }
        };
        let cond_status = if matches!(step, Step::Retry { .. }) {
            ConditionStatus::Unknown
        } else {
            ConditionStatus::False
        };
        let mut o = Outcome::new(step, problem.message.clone());
        if let Some(t) = status::conditions_of(phase).last() {
            o = o.with(*t, cond_status, problem.reason, problem.message.clone());
        }
        let new = status::after_outcome(&vmm, &o, &now);
        write_status(ctx, &mut vmm, new).await?;
        return Ok(requeue_for(ctx, &vmm, &o.step, &uid, phase, retries).await);
    }
    Ok(requeue_for(ctx, &vmm, &outcome.step, &uid, phase, retries).await)
}

/// When to look again after `step`; `retries` is the count of transient retries before this one.
async fn requeue_for(
    ctx: &Context,
    vmm: &VirtualMachineMigration,
    step: &Step,
    uid: &str,
    phase: Phase,
    retries: u32,
) -> Requeue {
    match step {
        Step::Retry { reason, message } => {
            let n = retries;
            let delay = backoff(n, ctx.policy.backoff_base, ctx.policy.backoff_cap, uid);
            publish(
                ctx,
                vmm,
                &[events::retrying(
                    phase,
                    *reason,
                    message,
                    delay.as_secs(),
                    n,
                )],
            )
            .await;
            Requeue::requeue(delay)
        }
        Step::Wait { requeue } => Requeue::requeue(*requeue),
        // A power-off or the end of staging shows in no watch; children's creation does, but
        // looking again soon costs one read.
        Step::Act(_) => Requeue::requeue(Duration::from_secs(1)),
        Step::Advance { .. } => Requeue::requeue(Duration::from_millis(50)),
        Step::Fail { .. } => Requeue::await_change(),
    }
}

async fn on_delete(vmm: &VirtualMachineMigration, ctx: &Context) -> Result<Requeue> {
    let plan = intents::delete_cleanup(vmm);
    let unfinished = cleanup::run(ctx, vmm, &plan).await?;
    let mut notes: Vec<Note> = unfinished.iter().map(|u| cleanup_warning(u)).collect();
    notes.push(Note {
        warning: false,
        reason: "Deleted".into(),
        action: "Cleanup".into(),
        note: format!("cleaned up in {}", vmm.phase()),
    });
    publish(ctx, vmm, &notes).await;
    if let Some(uid) = vmm.uid() {
        ctx.forget(&uid);
    }
    info!(migration = %vmm.name_any(), phase = %vmm.phase(), "cleaned up; releasing the finalizer");
    Ok(Requeue::await_change())
}
