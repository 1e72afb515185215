//! Removing partial results for a cancel, a retry or a delete (the plans are pure, in
//! `intents`); the source VM is never touched beyond its power state.

use ferry_crds::{PowerState, VirtualMachineMigration, names};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use tracing::{info, warn};

use super::execute::{delete_if_present, delete_staging};
use super::intents::Cleanup;
use super::observe::{self, api};
use crate::children::cdi::{self, DataVolume, DvState};
use crate::children::is_owned_by;
use crate::children::kubevirt::{VirtualMachine, VirtualMachineInstance};
use crate::context::Context;
use crate::{Error, Result};

/// What a cleanup could not do and let go (best effort), for an Event.
pub type Unfinished = Vec<String>;

/// Carries out `plan`. Kubernetes objects and staging must go (errors are returned and the
/// reconcile is retried); restoring the power is best effort (a source that cannot be reached
/// must not block a cancel or a delete forever), and what failed is returned for an Event.
///
/// # Errors
/// Kubernetes API errors; staging that cannot be cleaned ([`Error::Staging`]).
pub async fn run(
    ctx: &Context,
    vmm: &VirtualMachineMigration,
    plan: &[Cleanup],
) -> Result<Unfinished> {
    let mut unfinished = vec![];
    let n = observe::staged_keys(vmm).len();
    for step in plan {
        match step {
            Cleanup::Job => {
                delete_if_present(ctx, &api::<Job>(ctx, vmm), &names::job_name(vmm)).await?;
            }
            Cleanup::Staging => {
                if let Some(p) = delete_staging(ctx, vmm).await? {
                    if p.transient {
                        return Err(Error::Staging(p.message));
                    }
                    warn!(migration = %vmm.name_any(), problem = %p.message, "staging could not be cleaned");
                    unfinished.push(format!("staging: {}", p.message));
                }
            }
            Cleanup::S3Secret => {
                delete_if_present(
                    ctx,
                    &api::<Secret>(ctx, vmm),
                    &crate::children::secret::s3_secret_name(vmm),
                )
                .await?;
            }
            Cleanup::UnfinishedDataVolumes | Cleanup::AllDataVolumes => {
                let dvs = api::<DataVolume>(ctx, vmm);
                for i in 0..n {
                    let name = names::datavolume_name(vmm, i);
                    let Some(dv) = dvs.get_opt(&name).await? else {
                        continue;
                    };
                    let keep = *step == Cleanup::UnfinishedDataVolumes
                        && cdi::observe(Some(&dv)) == DvState::Succeeded;
                    if !keep && is_owned_by(&dv.metadata, vmm) {
                        delete_if_present(ctx, &dvs, &name).await?;
                    }
                }
            }
            Cleanup::Vm => {
                let vms = api::<VirtualMachine>(ctx, vmm);
                let name = names::vm_name(vmm);
                if let Some(vm) = vms.get_opt(&name).await?
                    && is_owned_by(&vm.metadata, vmm)
                {
                    delete_if_present(ctx, &vms, &name).await?;
                }
            }
            Cleanup::Vmi => {
                let vmis = api::<VirtualMachineInstance>(ctx, vmm);
                let name = names::vm_name(vmm);
                if let Some(vmi) = vmis.get_opt(&name).await?
                    && vmi.labels().get(names::MIGRATION_LABEL) == Some(&vmm.name_any())
                {
                    delete_if_present(ctx, &vmis, &name).await?;
                }
            }
            Cleanup::RestorePower => {
                if let Err(why) = restore_power(ctx, vmm).await {
                    warn!(migration = %vmm.name_any(), %why, "source power not restored");
                    unfinished.push(format!("source power: {why}"));
                }
            }
        }
    }
    Ok(unfinished)
}

/// Powers the source VM back on when it was on before ferry powered it off.
async fn restore_power(
    ctx: &Context,
    vmm: &VirtualMachineMigration,
) -> std::result::Result<(), String> {
    let Some(src) = vmm.status.as_ref().and_then(|s| s.source.as_ref()) else {
        return Ok(());
    };
    if src.power_state != Some(PowerState::PoweredOn) || !vmm.spec.source.power.power_off {
        return Ok(());
    }
    let Some(moref) = src.moref.as_deref() else {
        return Ok(());
    };
    let login = observe::source_login(ctx, vmm)
        .await
        .map_err(|e| e.to_string())?
        .map_err(|p| p.message)?;
    ctx.source
        .power_on(&login, moref)
        .await
        .map_err(|p| p.message)?;
    info!(migration = %vmm.name_any(), %moref, "source VM powered back on");
    Ok(())
}
