//! The MigrationWave controller: one child VirtualMachineMigration per `spec.vms` entry, released
//! within `maxInFlight`, steered by the wave's paused/cancel/retry, summed up in its status.

pub mod decide;

use std::sync::Arc;
use std::time::Duration;

use ferry_crds::{MigrationWave, VirtualMachineMigration, child_migration, names};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action as Requeue;
use kube::{Api, ResourceExt};
use tracing::{info, warn};

use crate::context::Context;
use crate::error::is_already_exists;
use crate::{Error, Result};

/// Metric label of this controller.
pub const CONTROLLER: &str = "wave";

/// Reconciles one wave.
///
/// # Errors
/// Kubernetes API failures; the work queue retries.
pub async fn reconcile(wave: Arc<MigrationWave>, ctx: Arc<Context>) -> Result<Requeue> {
    ctx.metrics.reconcile(CONTROLLER);
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
        let child = child_migration(&wave, &wave.spec.vms[*i])?;
        let pp = PostParams {
            field_manager: Some(names::WAVE_FIELD_MANAGER.to_owned()),
            ..PostParams::default()
        };
        match vmms.create(&pp, &child).await {
            Ok(_) => ctx.metrics.write("create", "VirtualMachineMigration"),
            Err(e) if is_already_exists(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    for name in &plan.release {
        let patch =
            serde_json::json!({"metadata": {"annotations": {names::HOLD_ANNOTATION: null}}});
        vmms.patch(name, &params, &Patch::Merge(&patch)).await?;
        ctx.metrics.write("patch", "VirtualMachineMigration");
        info!(wave = %wave.name_any(), migration = %name, "released");
    }
    for name in &plan.cancel {
        vmms.patch(
            name,
            &params,
            &Patch::Merge(&serde_json::json!({"spec": {"cancel": true}})),
        )
        .await?;
        ctx.metrics.write("patch", "VirtualMachineMigration");
    }
    for name in &plan.retry {
        vmms.patch(
            name,
            &params,
            &Patch::Merge(&serde_json::json!({"spec": {"retry": wave.spec.retry}})),
        )
        .await?;
        ctx.metrics.write("patch", "VirtualMachineMigration");
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

/// What the work queue does after a failed wave reconcile.
pub fn error_policy(wave: Arc<MigrationWave>, err: &Error, ctx: Arc<Context>) -> Requeue {
    ctx.metrics.error(CONTROLLER, err.metric_label());
    if !err.is_conflict() {
        warn!(wave = %wave.name_any(), error = %err, "wave reconcile failed");
    }
    Requeue::requeue(Duration::from_secs(if err.is_conflict() { 1 } else { 5 }))
}
