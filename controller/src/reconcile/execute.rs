//! Carrying out a decision's actions, each once and idempotently: create-if-absent with
//! deterministic names, deletes that accept "already gone".

use std::fmt::Debug;

use ferry_crds::{Phase, Reason, VirtualMachineMigration, names};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::info;

use super::decision::Action;
use super::observe::{self, api};
use super::scope::Problem;
use crate::children::cdi::{self, DataVolume};
use crate::children::kubevirt::{self, VirtualMachine};
use crate::children::{is_owned_by, job, secret};
use crate::context::Context;
use crate::error::{is_already_exists, is_not_found};
use crate::{Error, Result};

/// Creates `obj` unless an object of that name exists; returns whether it created it.
///
/// # Errors
/// Kubernetes API errors other than "already exists".
pub async fn create_if_absent<K>(ctx: &Context, api: &Api<K>, obj: &K) -> Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
{
    match api
        .create(
            &PostParams {
                field_manager: Some(names::CONTROLLER_FIELD_MANAGER.to_owned()),
                ..PostParams::default()
            },
            obj,
        )
        .await
    {
        Ok(_) => {
            ctx.metrics.write("create", &K::kind(&()));
            info!(kind = %K::kind(&()), name = %obj.name_any(), "created");
            Ok(true)
        }
        Err(e) if is_already_exists(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Deletes `name` (background propagation) if it exists; returns whether it asked.
///
/// # Errors
/// Kubernetes API errors other than "not found".
pub async fn delete_if_present<K>(ctx: &Context, api: &Api<K>, name: &str) -> Result<bool>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => {
            ctx.metrics.write("delete", &K::kind(&()));
            info!(kind = %K::kind(&()), %name, "deleted");
            Ok(true)
        }
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn rejected(e: &kube::Error) -> Option<String> {
    match e {
        kube::Error::Api(s) if matches!(s.code, 400 | 403 | 422) => Some(s.message.clone()),
        _ => None,
    }
}

/// Carries out `actions` for `vmm` in order. A [`Problem`] is returned when an action failed in
/// a way the migration must record (vSphere refused to power off, the API rejected the VM).
///
/// # Errors
/// Kubernetes API errors (the work queue retries the reconcile).
pub async fn run(
    ctx: &Context,
    vmm: &VirtualMachineMigration,
    actions: &[Action],
) -> Result<Option<Problem>> {
    for a in actions {
        if let Some(p) = run_one(ctx, vmm, a).await? {
            return Ok(Some(p));
        }
    }
    Ok(None)
}

async fn run_one(
    ctx: &Context,
    vmm: &VirtualMachineMigration,
    action: &Action,
) -> Result<Option<Problem>> {
    match action {
        Action::PowerOff => {
            let login = match observe::source_login(ctx, vmm).await? {
                Ok(l) => l,
                Err(p) => return Ok(Some(p)),
            };
            let moref = vmm
                .status
                .as_ref()
                .and_then(|s| s.source.as_ref())
                .and_then(|s| s.moref.clone())
                .unwrap_or_default();
            if let Err(p) = ctx.source.power_off(&login, &moref).await {
                return Ok(Some(p));
            }
            info!(migration = %vmm.name_any(), %moref, "source VM powered off");
        }
        Action::CreateJob => {
            create_if_absent(ctx, &api::<Job>(ctx, vmm), &job::conversion_job(vmm)?).await?;
        }
        Action::CreateS3Secret => {
            let login = match observe::staging_login(ctx, vmm).await? {
                Ok(l) => l,
                Err(p) => return Ok(Some(p)),
            };
            let creds = secret::S3Credentials {
                access_key_id: login.access_key_id,
                secret_access_key: login.secret_access_key,
            };
            create_if_absent(
                ctx,
                &api::<Secret>(ctx, vmm),
                &secret::cdi_s3_secret(vmm, &creds)?,
            )
            .await?;
        }
        Action::CreateDataVolume(i) => {
            let cap = vmm
                .status
                .as_ref()
                .and_then(|s| s.source.as_ref())
                .and_then(|s| s.disks.get(*i))
                .map_or(0, |d| d.capacity_bytes);
            let dv = cdi::data_volume(vmm, *i, cap, &secret::s3_secret_name(vmm))?;
            create_if_absent(ctx, &api::<DataVolume>(ctx, vmm), &dv).await?;
        }
        Action::CreateVm => {
            let vm = kubevirt::virtual_machine(vmm)?;
            match create_if_absent(ctx, &api::<VirtualMachine>(ctx, vmm), &vm).await {
                Ok(_) => {}
                Err(Error::Kube(e)) if rejected(&e).is_some() => {
                    let msg = rejected(&e).unwrap_or_default();
                    return Ok(Some(Problem::permanent(
                        Reason::VMCreateFailed,
                        format!("the VirtualMachine was rejected: {msg}"),
                    )));
                }
                Err(e) => return Err(e),
            }
        }
        Action::SetRunStrategy(s) => {
            let patch =
                serde_json::json!({"spec": {"runStrategy": kubevirt::run_strategy_name(*s)}});
            api::<VirtualMachine>(ctx, vmm)
                .patch(
                    &names::vm_name(vmm),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
            ctx.metrics.write("patch", "VirtualMachine");
        }
        Action::Finish => return finish(ctx, vmm).await,
    }
    Ok(None)
}

/// Deletes the staged objects and the CDI Secret, and releases the VM and DataVolumes.
async fn finish(ctx: &Context, vmm: &VirtualMachineMigration) -> Result<Option<Problem>> {
    if let Some(p) = delete_staging(ctx, vmm).await? {
        return Ok(Some(p));
    }
    delete_if_present(ctx, &api::<Secret>(ctx, vmm), &secret::s3_secret_name(vmm)).await?;
    let release = serde_json::json!({"metadata": {"ownerReferences": null}});
    let vms = api::<VirtualMachine>(ctx, vmm);
    if let Some(vm) = vms.get_opt(&names::vm_name(vmm)).await?
        && is_owned_by(&vm.metadata, vmm)
    {
        vms.patch(
            &vm.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&release),
        )
        .await?;
        ctx.metrics.write("patch", "VirtualMachine");
    }
    let dvs = api::<DataVolume>(ctx, vmm);
    for i in 0..observe::staged_keys(vmm).len() {
        let name = names::datavolume_name(vmm, i);
        if let Some(dv) = dvs.get_opt(&name).await?
            && is_owned_by(&dv.metadata, vmm)
        {
            dvs.patch(&name, &PatchParams::default(), &Patch::Merge(&release))
                .await?;
            ctx.metrics.write("patch", "DataVolume");
        }
    }
    Ok(None)
}

/// Deletes every staged object of the migration (absent objects and a missing bucket are fine).
///
/// # Errors
/// Kubernetes API errors reading the staging Secret; S3 failures come back as a [`Problem`].
pub async fn delete_staging(
    ctx: &Context,
    vmm: &VirtualMachineMigration,
) -> Result<Option<Problem>> {
    let keys = observe::staged_keys(vmm);
    if keys.is_empty() {
        return Ok(None);
    }
    let login = match observe::staging_login(ctx, vmm).await? {
        Ok(l) => l,
        Err(p) => return Ok(Some(p)),
    };
    for k in &keys {
        if let Err(p) = ctx.staging.delete(&login, k).await {
            return Ok(Some(p));
        }
    }
    info!(migration = %vmm.name_any(), objects = keys.len(), "staging cleaned");
    Ok(None)
}

/// The checkpoint a failed action belongs to, for the record.
pub fn phase_of(action: &Action) -> Phase {
    match action {
        Action::PowerOff => Phase::Preparing,
        Action::CreateJob => Phase::Converting,
        Action::CreateS3Secret | Action::CreateDataVolume(_) => Phase::Importing,
        Action::CreateVm => Phase::CreatingVM,
        Action::SetRunStrategy(_) => Phase::Starting,
        Action::Finish => Phase::Validating,
    }
}
