//! Removing partial results for a cancel, a retry or a delete (the plans are pure, in
//! `intents`). The source VM is never touched here: its power goes through the power rule
//! (`power.rs`), which is done with the target before a cancel or a delete removes anything.

use ferry_crds::names;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use tracing::{info, warn};

use super::checkpoint::Io;
use super::credentials;
use super::intents::Cleanup;
use super::world::{staged_keys, vmm_uid_label};
use crate::apis::cdi::{self, DataVolume, DvState};
use crate::apis::kubevirt::{VirtualMachine, VirtualMachineInstance};
use crate::children::{is_owned_by, secret};
use crate::kubeio::delete_exact;
use crate::problem::Problem;
use crate::{Error, Result};

/// What a cleanup could not do and let go (best effort), for an Event.
pub type Unfinished = Vec<String>;

/// Carries out `plan`. Kubernetes objects and staging must go (errors are returned and the
/// reconcile is retried); staging on a gone bucket is let go, and returned for an Event.
///
/// # Errors
/// Kubernetes API errors; staging that cannot be cleaned ([`Error::Staging`]).
pub async fn run(io: Io<'_>, plan: &[Cleanup]) -> Result<Unfinished> {
    let (ctx, vmm) = (io.ctx, io.vmm);
    let m = &ctx.metrics;
    let mut unfinished = vec![];
    let n = staged_keys(vmm).len();
    for step in plan {
        match step {
            Cleanup::Job => {
                delete_owned::<Job>(io, &names::job_name(vmm)).await?;
            }
            Cleanup::VerifyJob => {
                delete_owned::<Job>(io, &names::verify_job_name(vmm)).await?;
            }
            Cleanup::Staging => {
                if let Some(p) = delete_staging(io).await? {
                    if p.transient {
                        return Err(Error::Staging(p.message));
                    }
                    warn!(migration = %vmm.name_any(), problem = %p.message, "staging could not be cleaned");
                    unfinished.push(format!("staging: {}", p.message));
                }
            }
            Cleanup::S3Secret => {
                delete_cdi_objects(io).await?;
            }
            Cleanup::UnfinishedDataVolumes | Cleanup::AllDataVolumes => {
                let dvs = io.api::<DataVolume>();
                for i in 0..n {
                    let name = names::datavolume_name(vmm, i);
                    let Some(dv) = dvs.get_opt(&name).await? else {
                        continue;
                    };
                    let keep = *step == Cleanup::UnfinishedDataVolumes
                        && cdi::observe(Some(&dv)) == DvState::Succeeded;
                    if !keep && is_owned_by(&dv.metadata, vmm) {
                        delete_exact(m, &dvs, &name, &dv.uid().unwrap_or_default()).await?;
                    }
                }
            }
            Cleanup::Vm => {
                let vms = io.api::<VirtualMachine>();
                let name = names::vm_name(vmm);
                if let Some(vm) = vms.get_opt(&name).await?
                    && is_owned_by(&vm.metadata, vmm)
                {
                    delete_exact(m, &vms, &name, &vm.uid().unwrap_or_default()).await?;
                }
            }
            Cleanup::Vmi => {
                let vmis = io.api::<VirtualMachineInstance>();
                let name = names::vm_name(vmm);
                if let Some(vmi) = vmis.get_opt(&name).await?
                    && vmm_uid_label(&vmi).is_some()
                    && vmm_uid_label(&vmi) == vmm.metadata.uid.as_deref()
                {
                    delete_exact(m, &vmis, &name, &vmi.uid().unwrap_or_default()).await?;
                }
            }
        }
    }
    Ok(unfinished)
}

/// Deletes `name` of kind `K` if it is still owned by the migration (never an object of the
/// same name that someone else made); returns whether it asked.
///
/// # Errors
/// Kubernetes API errors.
pub async fn delete_owned<K>(io: Io<'_>, name: &str) -> Result<bool>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let api = io.api::<K>();
    match api.get_opt(name).await? {
        Some(o) if is_owned_by(o.meta(), io.vmm) => {
            delete_exact(&io.ctx.metrics, &api, name, &o.uid().unwrap_or_default()).await
        }
        Some(_) | None => Ok(false),
    }
}

/// Deletes the CDI S3 Secret and the staging CA ConfigMap of the migration, where they are its.
///
/// # Errors
/// Kubernetes API errors.
pub async fn delete_cdi_objects(io: Io<'_>) -> Result<()> {
    delete_owned::<Secret>(io, &secret::s3_secret_name(io.vmm)).await?;
    delete_owned::<ConfigMap>(io, &secret::s3_ca_config_map_name(io.vmm)).await?;
    Ok(())
}

/// Deletes every staged object of the migration (absent objects and a missing bucket are fine).
///
/// # Errors
/// Kubernetes API errors reading the staging Secret; S3 failures come back as a [`Problem`].
async fn delete_staging(io: Io<'_>) -> Result<Option<Problem>> {
    let keys = staged_keys(io.vmm);
    if keys.is_empty() {
        return Ok(None);
    }
    let login = match credentials::staging_login(io).await? {
        Ok(l) => l,
        Err(p) => return Ok(Some(p)),
    };
    for k in &keys {
        if let Err(p) = io.ctx.staging.delete(&login, k).await {
            return Ok(Some(p));
        }
    }
    info!(migration = %io.vmm.name_any(), objects = keys.len(), "staging cleaned");
    Ok(None)
}
