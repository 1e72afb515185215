//! The MigrationWave controller: one child VirtualMachineMigration per `spec.vms` entry, released
//! within `maxInFlight`, steered by the wave's paused/cancel/retry, summed up in its status.

pub mod decide;
pub mod select;

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferry_crds::{MigrationWave, VirtualMachineMigration, child_migration, intent, names};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use crate::context::Context;
use crate::kubeio::create_if_absent;
use crate::{Error, Result};

/// Metric label of this controller.
pub const CONTROLLER: &str = "wave";

/// The shortest time between two lists of a wave's children. Every change of a child triggers
/// the wave, and a list of a 1,000-VM wave is megabytes: at most this often, a slot freed waits
/// at most this long.
pub const MIN_LIST_INTERVAL: Duration = Duration::from_millis(500);

/// How long to wait before listing again, when the last list was at `last`. Pure.
pub fn wait_before_list(last: Option<Instant>, now: Instant, min: Duration) -> Option<Duration> {
    let since = now.checked_duration_since(last?)?;
    (since < min).then(|| min - since)
}

/// Reconciles one wave.
///
/// # Errors
/// Kubernetes API failures; the work queue retries.
pub async fn reconcile(wave: Arc<MigrationWave>, ctx: Arc<Context>) -> Result<Requeue> {
    let uid = wave.uid().unwrap_or_default();
    let now = Instant::now();
    if let Some(wait) = wait_before_list(ctx.last_listed(&uid, None), now, MIN_LIST_INTERVAL) {
        return Ok(Requeue::requeue(wait));
    }
    ctx.last_listed(&uid, Some(now));
    ctx.metrics.reconcile(CONTROLLER);
    let started = std::time::Instant::now();
    let result = reconcile_wave(&wave, &ctx).await;
    if result.is_ok()
        && let Some(uid) = wave.uid()
    {
        ctx.note_success(&uid);
    }
    ctx.metrics
        .wave_reconcile_seconds
        .observe(started.elapsed().as_secs_f64());
    result
}

async fn reconcile_wave(wave: &MigrationWave, ctx: &Context) -> Result<Requeue> {
    let ns = wave.namespace().ok_or(Error::MissingField {
        kind: "MigrationWave",
        field: "metadata.namespace",
    })?;
    let waves: Api<MigrationWave> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(wave) = waves.get_opt(&wave.name_any()).await? else {
        return Ok(Requeue::await_change());
    };
    if wave.metadata.deletion_timestamp.is_some() {
        return Ok(Requeue::await_change());
    }
    if let Some(selector) = &wave.spec.selector
        && wave
            .status
            .as_ref()
            .and_then(|s| s.selected_vms.as_ref())
            .is_none()
    {
        return select::resolve(&wave, selector, ctx).await;
    }
    let members = wave.members();
    let vmms: Api<VirtualMachineMigration> = Api::namespaced(ctx.client.clone(), &ns);
    let selector = format!("{}={}", names::WAVE_LABEL, wave.name_any());
    let children = vmms
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    let now = Time(crate::context::whole_seconds(ctx.clock.now()));
    let plan = decide::decide(&wave, &children, &now);
    let params = PatchParams::default();
    for i in &plan.create {
        let child = child_migration(&wave, &members[*i])?;
        create_if_absent(&ctx.metrics, &vmms, &child, names::WAVE_FIELD_MANAGER).await?;
    }
    let patches = plan
        .release
        .iter()
        .map(|n| (n, intent::release()))
        .chain(plan.cancel.iter().map(|n| (n, intent::cancel())))
        .chain(
            plan.retry
                .iter()
                .map(|n| (n, intent::retry_to(wave.spec.retry))),
        );
    for (name, patch) in patches {
        vmms.patch(name, &params, &Patch::Merge(&patch)).await?;
        ctx.metrics.write("patch", "VirtualMachineMigration");
        info!(wave = %wave.name_any(), migration = %name, %patch, "steered");
    }
    if wave.status.as_ref() != Some(&plan.status) {
        let patch = serde_json::json!({
            "apiVersion": ferry_crds::API_VERSION,
            "kind": "MigrationWave",
            "status": plan.status,
        });
        waves
            .patch_status(
                &wave.name_any(),
                &PatchParams::apply(names::WAVE_FIELD_MANAGER).force(),
                &Patch::Apply(&patch),
            )
            .await?;
        ctx.metrics.write("status", "MigrationWave");
    }
    let busy = !plan.create.is_empty() || !plan.release.is_empty();
    Ok(if busy {
        Requeue::requeue(Duration::from_millis(200))
    } else {
        Requeue::requeue(Duration::from_secs(300))
    })
}

/// What the work queue does after a failed wave reconcile: the policy's backoff per wave
/// (a conflict at once).
pub fn error_policy(wave: Arc<MigrationWave>, err: &Error, ctx: Arc<Context>) -> Requeue {
    ctx.metrics.error(CONTROLLER, err.metric_label());
    let uid = wave.uid().unwrap_or_default();
    let delay = crate::reconcile::retry_delay(err, ctx.note_failure(&uid), &ctx.policy, &uid);
    if !err.is_conflict() && !err.is_fenced() {
        warn!(wave = %wave.name_any(), error = %err, ?delay, "wave reconcile failed");
    }
    Requeue::requeue(delay)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wave_lists_its_children_at_most_every_min_interval() {
        let t0 = Instant::now();
        let min = Duration::from_millis(500);
        assert_eq!(wait_before_list(None, t0, min), None, "first list at once");
        assert_eq!(
            wait_before_list(Some(t0), t0 + Duration::from_millis(200), min),
            Some(Duration::from_millis(300))
        );
        assert_eq!(wait_before_list(Some(t0), t0 + min, min), None);
    }
}
