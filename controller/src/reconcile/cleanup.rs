//! Removing partial results for a cancel, a retry or a delete (the plans are pure, in
//! `intents`; the steps are [`Cleanup`]). The source VM is never touched here: its power goes through the power rule
//! (`power.rs`), which is done with the target before a cancel or a delete removes anything.

use ferry_crds::{VirtualMachineMigration, names};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use tracing::{info, warn};

use super::credentials;
use super::io::Io;
use super::world::{VmiState, classify_vmi, recorded_vm_uid, staged_keys, staging_location};
use crate::apis::cdi::{self, DataVolume, DvState};
use crate::apis::kubevirt::{VirtualMachine, VirtualMachineInstance};
use crate::children::{Ownership, secret};
use crate::kubeio::delete_exact;
use crate::problem::Problem;
use crate::{Error, Result};

/// A partial result to remove.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cleanup {
    /// The conversion Job (and its pods).
    Job,
    /// The staged objects in S3.
    Staging,
    /// The verification Job (and its pods).
    VerifyJob,
    /// The CDI S3 Secret.
    S3Secret,
    /// DataVolumes that did not succeed.
    UnfinishedDataVolumes,
    /// Every DataVolume.
    AllDataVolumes,
    /// The VirtualMachine.
    Vm,
    /// The VirtualMachineInstance (KubeVirt starts a new one under Always).
    Vmi,
    /// A warm migration's cutover Job (and its pods).
    CutoverJob,
    /// The guest conversion Job (and its pods).
    GuestJob,
    /// A warm migration's precopy round's Job (and its pods).
    PrecopyJob,
    /// The `preCutover` hook's Job (and its pods).
    PreCutoverHookJob,
    /// The `postCutover` hook's Job (and its pods).
    PostCutoverHookJob,
    /// The snapshot a warm migration took of the source and recorded (judged ferry's by its
    /// creation stamp).
    Snapshot,
}

/// What a cleanup could not do and let go (best effort), for an Event.
pub type Unfinished = Vec<String>;

/// What a cleanup did not finish.
#[derive(Debug, Default)]
pub struct Report {
    /// What it let go (best effort: staging on a gone bucket), for an Event.
    pub unfinished: Unfinished,
    /// Staging it could not clean for a reason that may pass (unreachable, refused): the rest of
    /// the plan was carried out; this part is to be tried again.
    pub blocked: Option<Blocked>,
}

/// Staging a cleanup could not remove, and what is left there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Blocked {
    /// Why (the problem's message: never a credential nor an endpoint's userinfo).
    pub message: String,
    /// The objects left behind, as `s3://BUCKET/KEY` (each image and its record).
    pub left: Vec<String>,
}

impl Report {
    /// The unfinished list, or the blocked staging as an error (retried with backoff).
    ///
    /// # Errors
    /// [`Error::Staging`] when staging is blocked.
    pub fn or_blocked(self) -> Result<Unfinished> {
        match self.blocked {
            Some(b) => Err(Error::Staging(b.message)),
            None => Ok(self.unfinished),
        }
    }
}

/// Carries out `plan`, every step of it: Kubernetes objects must go (an API error is returned
/// and the reconcile retried); staging that cannot be cleaned for now is reported as
/// [`Report::blocked`] once the other steps are done (a delete never waits on staging to remove
/// its Jobs, DataVolumes and Secrets); staging on a gone bucket is let go.
///
/// # Errors
/// Kubernetes API errors.
pub async fn run(io: Io<'_>, plan: &[Cleanup]) -> Result<Report> {
    let vmm = io.vmm;
    let mut report = Report::default();
    for step in plan {
        match step {
            Cleanup::Job => {
                delete_owned::<Job>(io, &names::job_name(vmm)).await?;
            }
            Cleanup::VerifyJob => {
                delete_owned::<Job>(io, &names::verify_job_name(vmm)).await?;
            }
            Cleanup::CutoverJob => {
                delete_owned::<Job>(io, &names::cutover_job_name(vmm)).await?;
            }
            Cleanup::GuestJob => {
                delete_owned::<Job>(io, &names::guest_job_name(vmm)).await?;
            }
            Cleanup::PreCutoverHookJob => {
                let name = names::hook_job_name(vmm, ferry_crds::HookPoint::PreCutover);
                delete_owned::<Job>(io, &name).await?;
            }
            Cleanup::PostCutoverHookJob => {
                let name = names::hook_job_name(vmm, ferry_crds::HookPoint::PostCutover);
                delete_owned::<Job>(io, &name).await?;
            }
            Cleanup::PrecopyJob => {
                delete_writer_job(io, &names::precopy_job_name(vmm)).await?;
            }
            Cleanup::Snapshot => {
                if let Some((what, p)) = remove_snapshot(io).await? {
                    report.note(vmm, p, vec![what.clone()], &what);
                }
            }
            Cleanup::Staging => {
                if let Some(p) = delete_staging(io).await? {
                    report.note(vmm, p, left_in_staging(vmm), "staging");
                }
            }
            Cleanup::S3Secret => {
                delete_cdi_objects(io).await?;
            }
            Cleanup::UnfinishedDataVolumes | Cleanup::AllDataVolumes => {
                delete_datavolumes(io, *step == Cleanup::UnfinishedDataVolumes).await?;
            }
            Cleanup::Vm => delete_vm(io).await?,
            Cleanup::Vmi => delete_vmi(io).await?,
        }
    }
    Ok(report)
}

impl Report {
    /// A step that could not finish: a transient problem blocks the cleanup (`left` is what it
    /// leaves behind until it passes); a permanent one is noted as unfinished (`what`: its
    /// subject) and the cleanup goes on.
    fn note(&mut self, vmm: &VirtualMachineMigration, p: Problem, left: Vec<String>, what: &str) {
        if p.transient {
            self.blocked = Some(Blocked {
                message: p.message,
                left,
            });
        } else {
            warn!(migration = %vmm.name_any(), problem = %p.message, "{what} could not be cleaned up");
            self.unfinished.push(format!("{what}: {}", p.message));
        }
    }
}

/// The migration's DataVolumes that ferry made, all of them or (`keep_imported`) those whose
/// import has not succeeded.
async fn delete_datavolumes(io: Io<'_>, keep_imported: bool) -> Result<()> {
    let dvs = io.api::<DataVolume>();
    for i in 0..staged_keys(io.vmm).len() {
        let name = names::datavolume_name(io.vmm, i);
        let Some(dv) = dvs.get_opt(&name).await? else {
            continue;
        };
        let keep = keep_imported && cdi::observe(Some(&dv)) == DvState::Succeeded;
        if !keep {
            delete_if_ours(io, &dvs, &dv).await?;
        }
    }
    Ok(())
}

/// The VirtualMachine ferry made, unless the migration released it.
async fn delete_vm(io: Io<'_>) -> Result<()> {
    let vms = io.api::<VirtualMachine>();
    // A VM the migration recorded releasing is the user's now. One whose owner reference
    // someone else removed was never handed over: it goes as ours does.
    if let Some(vm) = vms.get_opt(&names::vm_name(io.vmm)).await?
        && !io.released(&vm)
    {
        delete_if_ours(io, &vms, &vm).await?;
    }
    Ok(())
}

/// The instance of the VirtualMachine ferry made (KubeVirt makes the VM its owner), no other.
async fn delete_vmi(io: Io<'_>) -> Result<()> {
    let vmis = io.api::<VirtualMachineInstance>();
    let name = names::vm_name(io.vmm);
    if let Some(vmi) = vmis.get_opt(&name).await?
        && classify_vmi(Some(&vmi), recorded_vm_uid(io.vmm)) != VmiState::Absent
    {
        let uid = vmi.uid().unwrap_or_default();
        delete_exact(&io.ctx.metrics, &vmis, &name, &uid).await?;
    }
    Ok(())
}

/// What the migration staged, as `s3://BUCKET/KEY` (each image and the record beside it), at
/// the location it recorded when it started. Pure.
pub fn left_in_staging(vmm: &ferry_crds::VirtualMachineMigration) -> Vec<String> {
    let bucket = &staging_location(vmm).bucket;
    staged_keys(vmm)
        .iter()
        .flat_map(|k| [k.clone(), ferry_staging::record_key(k)])
        .map(|k| format!("s3://{bucket}/{k}"))
        .collect()
}

/// Deletes `name` of kind `K` if it is the migration's own (by ferry's record of its create,
/// see [`crate::children::proof`]; never an object of the same name that someone else made,
/// whatever its labels and owner references say); returns whether it asked.
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
        Some(o) => delete_if_ours(io, &api, &o).await,
        None => Ok(false),
    }
}

/// Deletes the Job `name` in the foreground when it is the migration's own (see
/// [`crate::kubeio::delete_exact_foreground`]): a Job writing into the volumes, whose pods must
/// be gone before another copy writes there. Returns whether it asked.
///
/// # Errors
/// Kubernetes API errors.
pub async fn delete_writer_job(io: Io<'_>, name: &str) -> Result<bool> {
    let api = io.api::<Job>();
    let Some(job) = api.get_opt(name).await? else {
        return Ok(false);
    };
    match io.own(&job) {
        Ownership::Ours { .. } => {
            let asked = crate::kubeio::delete_exact_foreground(
                &io.ctx.metrics,
                &api,
                name,
                &job.uid().unwrap_or_default(),
            )
            .await?;
            io.forget("Job", name);
            Ok(asked)
        }
        Ownership::Foreign(_) => Ok(false),
    }
}

/// Deletes `obj` (with its uid as precondition) when it is the migration's own, and forgets its
/// record; returns whether it asked.
async fn delete_if_ours<K>(io: Io<'_>, api: &kube::Api<K>, obj: &K) -> Result<bool>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    match io.own(obj) {
        Ownership::Ours { .. } => {
            let name = obj.name_any();
            let asked =
                delete_exact(&io.ctx.metrics, api, &name, &obj.uid().unwrap_or_default()).await?;
            io.forget(&K::kind(&()), &name);
            Ok(asked)
        }
        Ownership::Foreign(_) => Ok(false),
    }
}

/// Deletes `name` of kind `K` if it is the migration's own: with no read when the migration
/// recorded its create (the recorded uid is the delete's precondition), else as
/// [`delete_owned`] does (an object made just before a crash carries only its stamp). Returns
/// whether it asked.
///
/// # Errors
/// Kubernetes API errors.
pub async fn delete_recorded<K>(io: Io<'_>, name: &str) -> Result<bool>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let kind = K::kind(&());
    let recorded = io.record(&kind, name).map(|r| r.uid.clone());
    if let Some(uid) = recorded
        && delete_exact(&io.ctx.metrics, &io.api::<K>(), name, &uid).await?
    {
        io.forget(&kind, name);
        return Ok(true);
    }
    // No record, or the recorded object is gone (or another holds the name): look.
    delete_owned::<K>(io, name).await
}

/// Deletes the CDI S3 Secret and the staging CA ConfigMap of the migration, where they are its.
///
/// # Errors
/// Kubernetes API errors.
pub async fn delete_cdi_objects(io: Io<'_>) -> Result<()> {
    let secret_name = secret::s3_secret_name(io.vmm);
    let ca_name = secret::s3_ca_config_map_name(io.vmm);
    let (secret_recorded, ca_recorded) = (
        io.record(&<Secret as kube::Resource>::kind(&()), &secret_name)
            .is_some(),
        io.record(&<ConfigMap as kube::Resource>::kind(&()), &ca_name)
            .is_some(),
    );
    delete_recorded::<Secret>(io, &secret_name).await?;
    if ca_needs_deleting(secret_recorded, ca_recorded) {
        delete_recorded::<ConfigMap>(io, &ca_name).await?;
    }
    Ok(())
}

/// Whether the CA ConfigMap may exist to be deleted. It is made (or found ours, and then
/// recorded) before the Secret in the same step, and both records land in that reconcile's
/// one status write: a recorded Secret beside no recorded ConfigMap means staging had no CA,
/// so there is nothing to look for. Without the Secret's record (a crash before any record)
/// the ConfigMap is looked for by name. Pure.
fn ca_needs_deleting(secret_recorded: bool, ca_recorded: bool) -> bool {
    ca_recorded || !secret_recorded
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
    let at = staging_location(io.vmm);
    let login = match credentials::staging_login_at(io, at).await? {
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

/// Removes the snapshot the migration recorded taking, once judged ferry's
/// ([`super::warm::judge`]: the recorded moref, or the recorded name with ferry's creation
/// stamp); a snapshot ferry cannot prove it took is left alone, whatever its name. What was
/// left and why, when ferry's own could not be removed.
pub(super) async fn remove_snapshot(io: Io<'_>) -> Result<Option<(String, Problem)>> {
    let Some(rec) = super::warm::recorded_snapshot(io.vmm) else {
        return Ok(None);
    };
    let vm = io.vmm.source_moref().unwrap_or_default();
    let what = format!("snapshot {:?} of the source VM {vm}", rec.name);
    let login = match credentials::source_login(io).await? {
        Ok(l) => l,
        Err(p) => return Ok(Some((what, p))),
    };
    let problem = match super::snapshots::judged(io, &login, &rec, false).await {
        Ok(
            super::warm::SnapshotSeen::Ours { moref, .. }
            | super::warm::SnapshotSeen::Crowded { moref, .. },
        ) => {
            let p = io.ctx.source.remove_snapshot(&login, &moref).await.err();
            if p.is_none() {
                info!(migration = %io.vmm.name_any(), snapshot = %rec.name, "snapshot removed");
            }
            p
        }
        Ok(super::warm::SnapshotSeen::Absent { .. }) => None,
        Ok(super::warm::SnapshotSeen::Foreign(why)) => {
            info!(migration = %io.vmm.name_any(), snapshot = %rec.name, %why, "a snapshot of ferry's name left alone: not ferry's");
            None
        }
        Err(p) => Some(p),
    };
    Ok(problem.map(|p| (what, p)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ca_config_map_is_looked_for_unless_the_records_say_none_was_made() {
        assert!(
            !ca_needs_deleting(true, false),
            "the Secret made, no CA: staging had none"
        );
        assert!(ca_needs_deleting(true, true));
        assert!(ca_needs_deleting(false, true));
        assert!(
            ca_needs_deleting(false, false),
            "no record at all: a crash before any"
        );
    }
}
