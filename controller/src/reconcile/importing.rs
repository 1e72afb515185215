//! Importing: one CDI DataVolume per staged disk, all `Succeeded`, then every imported volume's
//! bytes checked against the staged image's checksum by the verification Job.
//!
//! CDI's failure contract: a transient importer failure shows as `restartCount` rising with the
//! `Running` condition `False` (reason `Error` with the importer's message; `CrashLoopBackOff`
//! in CDI before 2021) while the phase stays `ImportInProgress`; CDI restarts the importer
//! itself. A permanent one is phase `Failed`. ferry gives up after
//! [`Policy::max_import_restarts`](super::scope::Policy) restarts of one disk.
//!
//! On a StorageClass that binds on first consumer CDI reports `PendingPopulation` (populators:
//! the claim binds once populated) or `WaitForFirstConsumer` (no populators: the importer runs
//! once a consumer bound the claim); ferry's verification Job is that consumer, as Forklift's
//! conversion pod is. Without populators its first run only binds the claims (it reads while CDI
//! writes) and is replaced by a real verification once the imports are done.

use ferry_crds::{
    ConditionStatus::{True, Unknown},
    ConditionType::{self, DiskImported},
    DiskStatus, Phase, Reason, VirtualMachineMigration, names,
};
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use std::collections::BTreeMap;

use super::checkpoint::Checkpoint;
use super::cleanup::Cleanup;
use super::credentials;
use super::io::Io;
use super::outcome::{Outcome, Record, Step};
use super::scope::Scope;
use super::volumes::{after_the_copy, verify_volumes};
use super::world::{self, staged_keys};
use crate::Result;
use crate::apis::cdi::{self, DvState};
use crate::apis::job::JobState;
use crate::children::verify_job::{self, Role};
use crate::children::{datavolume, secret};
use crate::ports::StagingLogin;
use crate::problem::Problem;

/// The Importing checkpoint.
#[derive(Debug)]
pub struct Importing;

/// What Importing observes.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The staging login the CDI Secret is made from, and whose CA (if any) the DataVolumes
    /// name; `Ok(None)` once every DataVolume exists (not read then).
    pub credentials: Result<Option<StagingLogin>, Problem>,
    /// The CDI S3 Secret exists (taken as so, unread, once every DataVolume exists).
    pub secret_present: bool,
    /// One per disk.
    pub dvs: Vec<DvState>,
    /// Per disk, the uid of its DataVolume when it is this migration's (`None`: absent, or
    /// another's).
    pub dv_uids: Vec<Option<String>>,
    /// A child name (CDI Secret or CA ConfigMap, a DataVolume) held by an object that is not
    /// this migration's: never read as progress.
    pub conflict: Option<Problem>,
    /// The verification Job.
    pub verify: Verification,
    /// Per disk, whether its claim is a block device (`volumeMode: Block`); read only once the
    /// verification Job is to be made (empty before).
    pub block: Vec<bool>,
}

/// The verification Job as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verification {
    /// Where it stands.
    pub job: JobState,
    /// What its result is worth.
    pub role: Role,
    /// What its last failed pod said (both checksums, on a mismatch).
    pub message: Option<String>,
    /// Once it completed: the checksum of each disk, as reported by a pod of this Job that ran
    /// ferry's verify program (`None`: no such pod reported any).
    pub reported: Option<BTreeMap<usize, String>>,
    /// The uids of the DataVolumes it was made to check, in disk order (`None`: not recorded).
    pub made_for: Option<Vec<String>>,
}

impl Default for Verification {
    fn default() -> Self {
        Self {
            job: JobState::Absent,
            role: Role::Verify,
            message: None,
            reported: None,
            made_for: None,
        }
    }
}

/// What Importing does to the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the CDI S3 Secret from the staging credentials (after the CA ConfigMap, when
    /// staging has a private CA: a present Secret means its ConfigMap is there too).
    CreateS3Secret,
    /// Create the DataVolume of disk `n`.
    CreateDataVolume(usize),
    /// Create the verification Job.
    CreateVerifyJob(Role),
    /// Delete the verification Job (one that only bound the claims, or one made for DataVolumes
    /// since replaced).
    DeleteVerifyJob,
}

impl Checkpoint for Importing {
    const PHASE: Phase = Phase::Importing;
    const CONDITIONS: &'static [ConditionType] = &[DiskImported];
    const RETRY_CLEANUP: &'static [Cleanup] = &[Cleanup::VerifyJob, Cleanup::UnfinishedDataVolumes];
    type Observed = Observed;
    type Action = Action;

    async fn observe(io: Io<'_>) -> Result<Observed> {
        let (ours, mut conflicts) = world::own_datavolumes(io).await?;
        let dvs: Vec<DvState> = ours.iter().map(|d| cdi::observe(d.as_ref())).collect();
        let dv_uids: Vec<Option<String>> = ours.iter().map(|d| d.as_ref()?.uid()).collect();
        // The CDI Secret (and CA ConfigMap) and the staging credentials they are made from
        // matter only until every DataVolume exists. The Secret is there when the migration
        // recorded creating it: Preparing found its name free, and a create that finds it taken
        // reads who holds it (ours by its stamp after a crash, or a conflict).
        let (secret_present, credentials) = if dvs.is_empty() || dvs.contains(&DvState::Absent) {
            let attempt = io.vmm.status.as_ref().map_or(0, |s| s.attempts);
            let recorded = io
                .record("Secret", &secret::s3_secret_name(io.vmm))
                .is_some_and(|r| r.attempt == attempt);
            (recorded, credentials::staging_login(io).await?.map(Some))
        } else {
            (true, Ok(None))
        };
        let (verify, verify_conflict) = verification(io).await?;
        conflicts.extend(verify_conflict);
        let wants_job = verify.job == JobState::Absent
            && !dvs.is_empty()
            && dvs
                .iter()
                .all(|d| matches!(d, DvState::Succeeded | DvState::AwaitingConsumer { .. }));
        let block = if wants_job {
            world::block_claims(io, dvs.len()).await?
        } else {
            vec![]
        };
        Ok(Observed {
            credentials,
            secret_present,
            dvs,
            dv_uids,
            verify,
            block,
            conflict: conflicts.first().map(|c| c.problem(world::RENAME_HINT)),
        })
    }

    fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
        decide(scope)
    }

    async fn execute(io: Io<'_>, observed: &Observed, action: &Action) -> Result<Option<Problem>> {
        match action {
            Action::CreateS3Secret => return create_s3_secret(io, observed).await,
            Action::CreateDataVolume(i) => return create_data_volume(io, observed, *i).await,
            Action::CreateVerifyJob(role) => {
                let volumes = match verify_volumes(io.vmm, &observed.block, &observed.dv_uids) {
                    Ok(v) => v,
                    // The decision creates the Job only with every checksum in hand.
                    Err(_) => return Ok(None),
                };
                let image = match io.converter_image() {
                    Ok(i) => i,
                    // Converting refused a disallowed image before anything was imported.
                    Err(_) => return Ok(None),
                };
                let job = verify_job::verification_job(io.vmm, &volumes, *role, &image)?;
                return Ok(io.create(job).await?.problem(world::RENAME_HINT));
            }
            Action::DeleteVerifyJob => {
                super::cleanup::delete_owned::<Job>(io, &names::verify_job_name(io.vmm)).await?;
            }
        }
        Ok(None)
    }
}

/// Creates the CDI S3 Secret from the staging credentials, after the CA ConfigMap when staging
/// has a private CA.
async fn create_s3_secret(io: Io<'_>, observed: &Observed) -> Result<Option<Problem>> {
    let login = match &observed.credentials {
        Ok(Some(l)) => l,
        // The decision asks for the Secret only with the credentials in hand.
        Ok(None) => return Ok(None),
        Err(p) => return Ok(Some(p.clone())),
    };
    if let Some(pem) = &login.ca_bundle {
        let made = io.create(secret::cdi_ca_config_map(io.vmm, pem)?).await?;
        if let Some(p) = made.problem(world::RENAME_HINT) {
            return Ok(Some(p));
        }
    }
    let creds = secret::S3Credentials {
        access_key_id: login.access_key_id.clone(),
        secret_access_key: login.secret_access_key.clone(),
    };
    let made = io.create(secret::cdi_s3_secret(io.vmm, &creds)?).await?;
    Ok(made.problem(world::RENAME_HINT))
}

/// Creates the DataVolume of disk `i`, naming the CA ConfigMap when staging has a private CA.
async fn create_data_volume(io: Io<'_>, observed: &Observed, i: usize) -> Result<Option<Problem>> {
    let ca = match &observed.credentials {
        Ok(Some(l)) => l
            .ca_bundle
            .as_ref()
            .map(|_| secret::s3_ca_config_map_name(io.vmm)),
        Ok(None) => None,
        Err(p) => return Ok(Some(p.clone())),
    };
    let cap = io
        .vmm
        .status
        .as_ref()
        .and_then(|s| s.source.as_ref())
        .and_then(|s| s.disks.get(i))
        .map_or(0, |d| d.capacity_bytes);
    let dv = datavolume::data_volume(
        io.vmm,
        i,
        cap,
        &secret::s3_secret_name(io.vmm),
        ca.as_deref(),
    )?;
    Ok(io.create(dv).await?.problem(world::RENAME_HINT))
}

/// The verification Job of the migration, with its role and (once failed) the message of its
/// last failed pod.
async fn verification(io: Io<'_>) -> Result<(Verification, Option<crate::children::Conflict>)> {
    // A Job under the verification Job's name that is not ours says nothing about our volumes.
    let seen =
        world::reporting_job(io, &names::verify_job_name(io.vmm), verify_job::CONTAINER).await?;
    let role = Role::parse(
        seen.job
            .as_ref()
            .and_then(|j| j.annotations().get(verify_job::ROLE_ANNOTATION))
            .map(String::as_str),
    );
    Ok((
        Verification {
            job: seen.state,
            role,
            message: seen.failure,
            reported: seen
                .report
                .and_then(|m| ferry_convert::verify::parse_result(&m)),
            made_for: seen.job.as_ref().and_then(verify_job::made_for),
        },
        seen.conflict,
    ))
}

/// Whether the checksums a pod of the verification Job `reported` are, for every disk, the raw
/// checksum recorded when its image was staged: Succeeded requires a verification ferry's own
/// program ran and reported, not a Job that merely exited 0. Pure.
///
/// # Errors
/// What is missing or differs, for the failure's message.
pub fn verified_by_ferry(
    vmm: &VirtualMachineMigration,
    reported: Option<&BTreeMap<usize, String>>,
) -> std::result::Result<(), String> {
    let Some(reported) = reported else {
        return Err(say::no_verify_report());
    };
    let disks = vmm
        .status
        .as_ref()
        .map(|s| s.disks.as_slice())
        .unwrap_or_default();
    let mut wrong = vec![];
    for i in 0..staged_keys(vmm).len() {
        let expected = disks.get(i).and_then(|d| d.raw_checksum.as_deref());
        match (expected, reported.get(&i)) {
            (Some(e), Some(r)) if e.eq_ignore_ascii_case(r) => {}
            (_, None) => wrong.push(say::no_checksum_reported(i)),
            (e, Some(r)) => wrong.push(say::checksum_differs(i, r, e)),
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        Err(wrong.join("; "))
    }
}

/// Bytes CDI copies for disk `i`: the staged image's size, else the disk's capacity.
fn disk_size(old: &[DiskStatus], i: usize) -> i64 {
    old.get(i)
        .and_then(|d| d.staged_bytes.or(d.capacity_bytes))
        .unwrap_or(0)
        .max(0)
}

/// Per-disk import status and overall progress (rate and ETA averaged over the time spent in
/// Importing). Pure.
fn progress(scope: &Scope<Observed>, dvs: &[DvState]) -> Record {
    let old = scope
        .vmm
        .status
        .as_ref()
        .map(|s| s.disks.as_slice())
        .unwrap_or_default();
    let secs = scope.in_phase_for().as_secs_f64();
    let mut disks = Vec::with_capacity(dvs.len());
    let (mut done, mut total) = (0i64, 0i64);
    for (i, dv) in dvs.iter().enumerate() {
        let size = disk_size(old, i);
        let (phase, pct) = match dv {
            DvState::Absent => (None, 0.0),
            DvState::Deleting => (Some("Deleting".to_owned()), 0.0),
            DvState::InProgress { phase, percent, .. } => {
                (Some(phase.clone()), percent.unwrap_or(0.0))
            }
            DvState::AwaitingConsumer { populator: true } => {
                (Some("PendingPopulation".to_owned()), 0.0)
            }
            DvState::AwaitingConsumer { populator: false } => {
                (Some("WaitForFirstConsumer".to_owned()), 0.0)
            }
            DvState::Paused => (Some("Paused".to_owned()), 0.0),
            DvState::Succeeded => (Some("Succeeded".to_owned()), 100.0),
            DvState::Failed { .. } => (Some("Failed".to_owned()), 0.0),
        };
        let bytes = (size as f64 * pct / 100.0).round() as i64;
        done += bytes;
        total += size;
        let mut d = old.get(i).cloned().unwrap_or_default();
        d.index = i32::try_from(i).unwrap_or(i32::MAX);
        d.data_volume = Some(names::datavolume_name(&scope.vmm, i));
        d.import_phase = phase;
        d.bytes_done = Some(bytes);
        d.percent = Some((pct * 100.0).round() / 100.0);
        d.rate_bytes_per_second =
            (secs >= 1.0 && bytes > 0 && pct < 100.0).then(|| (bytes as f64 / secs) as i64);
        disks.push(d);
    }
    let rate = (secs >= 1.0 && done > 0).then(|| (done as f64 / secs) as i64);
    Record::progress(disks, done, total, rate)
}

/// Decides the Importing step: the first rule that applies, else the imports go on. The order is
/// the semantics. Every outcome records the imports' progress. Pure.
pub fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
    let record = progress(scope, &scope.world.dvs);
    conflict(scope)
        .or_else(|| datavolume_failed(scope))
        .or_else(|| stale_verification(scope))
        .or_else(|| verification_failed(scope))
        .or_else(|| verify_step(scope))
        .or_else(|| credentials_missing(scope))
        .unwrap_or_else(|| importing(scope, &record))
        .recording(record)
}

/// A child's name is held by an object not this migration's: it is never read as progress.
fn conflict(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let p = scope.world.conflict.as_ref()?;
    Some(Outcome::from_problem(scope, p, Some(DiskImported)))
}

/// A DataVolume CDI gave up on, whose importer restarted past ferry's patience, or paused by
/// something else will not finish by itself: the first such disk fails the import.
fn datavolume_failed(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let name = |i| names::datavolume_name(&scope.vmm, i);
    scope.world.dvs.iter().enumerate().find_map(|(i, dv)| {
        let msg = match dv {
            DvState::Failed { message } => say::datavolume_failed(&name(i), message),
            DvState::InProgress {
                restarts, failing, ..
            } if *restarts > scope.policy.max_import_restarts => {
                say::importer_gave_up(&name(i), *restarts, failing.as_deref())
            }
            DvState::Paused => say::datavolume_paused(&name(i)),
            _ => return None,
        };
        Some(Outcome::failure(
            Reason::ImportFailed,
            msg,
            true,
            Phase::Importing,
            DiskImported,
        ))
    })
}

/// A verification Job made for other DataVolumes than those under its names now (one was
/// deleted, by someone or by a retry's cleanup, and made again, or is being deleted) read bytes
/// that are gone: whatever it reports, passed or failed, it goes, and a new one checks the
/// volumes there are. A Job that does not say what it was made for (an older ferry's) goes too:
/// one more verification costs minutes, a wrong one a VM.
fn stale_verification(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let verify = &scope.world.verify;
    if matches!(verify.job, JobState::Absent | JobState::Deleting) {
        return None;
    }
    let now = scope
        .world
        .dvs
        .iter()
        .zip(&scope.world.dv_uids)
        .map(|(dv, uid)| match dv {
            DvState::Absent | DvState::Deleting => None,
            _ => uid.as_deref(),
        });
    if verify_job::made_for_these(verify.made_for.as_deref(), now) {
        return None;
    }
    let msg = say::stale_verification(&names::verify_job_name(&scope.vmm));
    Some(
        Outcome::new(Step::Act(vec![Action::DeleteVerifyJob]), msg.clone()).with(
            DiskImported,
            Unknown,
            Reason::InProgress,
            msg,
        ),
    )
}

/// A verification Job that failed fails the import, whatever the imports say (one that only
/// bound the claims ran while CDI wrote: its failure means nothing).
fn verification_failed(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let verify = &scope.world.verify;
    if verify.role == Role::Bind {
        return None;
    }
    let JobState::Failed { reason, message } = &verify.job else {
        return None;
    };
    let said = verify.message.as_deref().unwrap_or_default();
    if said.contains("checksum mismatch") {
        return Some(Outcome::failure(
            Reason::ChecksumMismatch,
            say::checksum_mismatch(said),
            true,
            Phase::Importing,
            DiskImported,
        ));
    }
    let detail = if said.is_empty() {
        message.as_str()
    } else {
        said
    };
    let job = names::verify_job_name(&scope.vmm);
    Some(Outcome::failure(
        Reason::ImportFailed,
        say::verification_failed(&job, reason, detail),
        true,
        Phase::Importing,
        DiskImported,
    ))
}

/// Every DataVolume is imported (`done`) or waits for a first consumer: the verification Job
/// (created, replaced, waited for) decides the step.
fn verify_step(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let dvs = &scope.world.dvs;
    let done = !dvs.is_empty() && dvs.iter().all(|d| *d == DvState::Succeeded);
    let awaiting = !dvs.is_empty()
        && dvs
            .iter()
            .all(|d| matches!(d, DvState::Succeeded | DvState::AwaitingConsumer { .. }));
    if !(done || awaiting) {
        return None;
    }
    let n = scope.disk_count();
    let verify = &scope.world.verify;
    Some(match (&verify.job, verify.role) {
        (JobState::Absent, _) => create_verify_job(scope, done),
        (JobState::Deleting, _) => wait(scope, say::verify_job_going()),
        (_, Role::Bind) if done => replace_binding_job(scope),
        (_, Role::Bind) => wait(scope, say::claims_bound(n)),
        (JobState::Running { .. }, Role::Verify) if done => wait(scope, say::verifying(n)),
        (JobState::Running { .. } | JobState::Complete, Role::Verify) if !done => {
            wait(scope, say::populating(n))
        }
        (JobState::Complete, Role::Verify) => verified(scope),
        // Running while importing is covered above; a failed verification before this point.
        (JobState::Running { .. } | JobState::Failed { .. }, Role::Verify) => {
            wait(scope, say::verifying(n))
        }
    })
}

/// The imports go on while the verification Job (or CDI) works: `msg` says how.
fn wait(scope: &Scope<Observed>, msg: String) -> Outcome<Action> {
    Outcome::new(
        Step::Wait {
            requeue: scope.policy.wait_requeue,
        },
        msg.clone(),
    )
    .with(DiskImported, Unknown, Reason::InProgress, msg)
}

/// No verification Job yet: one that checks every disk against the checksum recorded when it was
/// staged, or, while a claim waits for a first consumer without populators, one that only binds
/// the claims (it would read while CDI writes). Without the recorded checksums there is nothing
/// to check against: converting again records them.
fn create_verify_job(scope: &Scope<Observed>, done: bool) -> Outcome<Action> {
    if let Err(which) = verify_volumes(&scope.vmm, &scope.world.block, &scope.world.dv_uids) {
        return Outcome::failure(
            Reason::ImportFailed,
            say::no_raw_checksum(&which),
            true,
            Phase::Converting,
            DiskImported,
        );
    }
    let legacy_wffc = scope
        .world
        .dvs
        .contains(&DvState::AwaitingConsumer { populator: false });
    let role = if legacy_wffc {
        Role::Bind
    } else {
        Role::Verify
    };
    let n = scope.disk_count();
    let msg = if done {
        say::verifying(n)
    } else {
        say::first_consumer(n)
    };
    Outcome::new(Step::Act(vec![Action::CreateVerifyJob(role)]), msg.clone()).with(
        DiskImported,
        Unknown,
        Reason::InProgress,
        msg,
    )
}

/// The imports are done: the Job that only bound the claims goes, for a real verification.
fn replace_binding_job(scope: &Scope<Observed>) -> Outcome<Action> {
    Outcome::new(
        Step::Act(vec![Action::DeleteVerifyJob]),
        say::replacing_binding_job(),
    )
    .with(
        DiskImported,
        Unknown,
        Reason::InProgress,
        say::verifying(scope.disk_count()),
    )
}

/// A completed verification counts only when ferry's own program reported every disk's staged
/// checksum, not when some Job merely exited 0: then on to the VM.
fn verified(scope: &Scope<Observed>) -> Outcome<Action> {
    if let Err(why) = verified_by_ferry(&scope.vmm, scope.world.verify.reported.as_ref()) {
        return Outcome::failure(
            Reason::ImportFailed,
            say::not_verified_by_ferry(&names::verify_job_name(&scope.vmm), &why),
            true,
            Phase::Importing,
            DiskImported,
        );
    }
    let msg = say::imported(scope.disk_count());
    // A warm migration's source still runs: its cutover comes first.
    let to = if super::warm::is_warm(&scope.vmm) {
        Phase::CuttingOver
    } else {
        after_the_copy(&scope.vmm)
    };
    Outcome::new(Step::Advance { to }, msg.clone()).with(DiskImported, True, Reason::Imported, msg)
}

/// The CDI Secret is made from the staging credentials: without them no DataVolume reads staging.
fn credentials_missing(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    if scope.world.secret_present {
        return None;
    }
    let p = scope.world.credentials.as_ref().err()?;
    Some(Outcome::from_problem(scope, p, Some(DiskImported)))
}

/// The imports go on: the CDI Secret first, then every missing DataVolume; an importer that CDI
/// restarts is a transient error, CDI's to handle.
fn importing(scope: &Scope<Observed>, record: &Record) -> Outcome<Action> {
    let dvs = &scope.world.dvs;
    let n = dvs.len();
    let secret = (!scope.world.secret_present).then_some(Action::CreateS3Secret);
    let actions: Vec<Action> = secret
        .into_iter()
        .chain(
            dvs.iter()
                .enumerate()
                .filter(|(_, d)| **d == DvState::Absent)
                .map(|(i, _)| Action::CreateDataVolume(i)),
        )
        .collect();
    let pct = record.progress.as_ref().map_or(0.0, |p| p.percent);
    let restarting = restarting(dvs);
    // The condition's message stays put while bytes flow (a write per percent would follow);
    // the percentage goes to the summary line, which is written throttled.
    let (reason, cond_msg) = if restarting.is_empty() {
        (Reason::InProgress, say::importing(n))
    } else {
        (
            Reason::TransientError,
            say::importing_restarting(n, &restarting),
        )
    };
    let step = if actions.is_empty() {
        Step::Wait {
            requeue: scope.policy.wait_requeue,
        }
    } else {
        Step::Act(actions)
    };
    Outcome::new(step, say::importing_percent(n, pct)).with(DiskImported, Unknown, reason, cond_msg)
}

/// What each importer that is down or was restarted said, for the condition.
fn restarting(dvs: &[DvState]) -> Vec<String> {
    dvs.iter()
        .enumerate()
        .filter_map(|(i, d)| match d {
            DvState::InProgress {
                restarts, failing, ..
            } if *restarts > 0 => Some(say::importer_restarted(i, *restarts, failing.as_deref())),
            // Down before its first restart, or not started at all (unschedulable, its Secret).
            DvState::InProgress {
                failing: Some(m), ..
            } => Some(say::importer_down(i, m)),
            _ => None,
        })
        .collect()
}

/// What Importing says to people: in conditions, failures and Events.
mod say {
    pub fn datavolume_failed(name: &str, message: &str) -> String {
        format!("DataVolume {name} failed: {message}; fix the cause, then raise spec.retry")
    }

    pub fn importer_gave_up(name: &str, restarts: i32, last: Option<&str>) -> String {
        format!(
            "the importer of DataVolume {name} restarted {restarts} times{}; raise spec.retry to import again",
            last.map(|m| format!(" (last: {m})")).unwrap_or_default()
        )
    }

    pub fn datavolume_paused(name: &str) -> String {
        format!(
            "DataVolume {name} is Paused: a multi-stage import waits for its next checkpoint, and ferry asks for none (something else changed it); raise spec.retry to import again"
        )
    }

    pub fn checksum_mismatch(said: &str) -> String {
        format!(
            "an imported volume differs from its staged image ({said}); the copy was damaged on its way in; raise spec.retry to import every disk again"
        )
    }

    pub fn verification_failed(job: &str, reason: &str, detail: &str) -> String {
        format!(
            "the verification Job {job} failed ({reason}{}{detail}); see its pod, then raise spec.retry",
            if detail.is_empty() { "" } else { ": " }
        )
    }

    pub fn no_raw_checksum(which: &str) -> String {
        format!(
            "{which}: no raw-contents checksum was recorded when staged, so the import cannot be verified; raise spec.retry to convert again"
        )
    }

    pub fn no_verify_report() -> String {
        "no pod of it that ran ferry's verify program reported checksums".into()
    }

    pub fn no_checksum_reported(i: usize) -> String {
        format!("disk {i}: no checksum reported")
    }

    pub fn checksum_differs(i: usize, reported: &str, staged: Option<&str>) -> String {
        format!(
            "disk {i}: reported {reported}, staged {}",
            staged.unwrap_or("nothing")
        )
    }

    pub fn verifying(n: usize) -> String {
        format!("verifying the checksums of {n} imported disk(s)")
    }

    pub fn first_consumer(n: usize) -> String {
        format!(
            "the claims bind on first consumer: the verification Job is it, CDI imports {n} disk(s) meanwhile"
        )
    }

    pub fn verify_job_going() -> String {
        "waiting for the previous verification Job to go".into()
    }

    pub fn stale_verification(job: &str) -> String {
        format!(
            "the DataVolumes the verification Job {job} was made for were replaced: it goes, and a new one checks the volumes there are"
        )
    }

    pub fn replacing_binding_job() -> String {
        "imports done; replacing the Job that bound the claims with the verification".into()
    }

    pub fn claims_bound(n: usize) -> String {
        format!("the claims were bound by the verification Job; CDI imports {n} disk(s)")
    }

    pub fn populating(n: usize) -> String {
        format!("CDI populates {n} disk(s); the verification Job reads them once bound")
    }

    pub fn not_verified_by_ferry(job: &str, why: &str) -> String {
        format!(
            "the verification Job {job} completed, but {why}: the imported volumes are not taken as verified; delete that Job if it is not ferry's, then raise spec.retry"
        )
    }

    pub fn imported(n: usize) -> String {
        format!("{n} DataVolume(s) imported, checksums verified")
    }

    pub fn importing(n: usize) -> String {
        format!("importing {n} disk(s)")
    }

    pub fn importing_restarting(n: usize, restarting: &[String]) -> String {
        format!("importing {n} disk(s); {}", restarting.join("; "))
    }

    pub fn importing_percent(n: usize, pct: f64) -> String {
        format!("importing {n} disk(s): {pct:.1}%")
    }

    pub fn importer_restarted(i: usize, restarts: i32, failing: Option<&str>) -> String {
        format!(
            "disk {i}: importer restarted {restarts} time(s){}",
            failing.map(|m| format!(": {m}")).unwrap_or_default()
        )
    }

    pub fn importer_down(i: usize, message: &str) -> String {
        format!("disk {i}: {message}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use ferry_crds::fixtures::{migration, ts};
    use proptest::prelude::*;

    fn running(pct: f64, restarts: i32) -> DvState {
        DvState::InProgress {
            phase: "ImportInProgress".into(),
            percent: Some(pct),
            restarts,
            failing: (restarts > 0).then(|| "boom".into()),
        }
    }

    fn sha(i: usize) -> String {
        format!("{i:064x}")
    }

    fn scope_verifying(
        dvs: Vec<DvState>,
        secret_present: bool,
        credentials: Result<(), Problem>,
        verify: Verification,
    ) -> Scope<Observed> {
        let mut vmm = migration("m")
            .with_disks(dvs.len())
            .with_phase(Phase::Importing);
        if let Some(s) = vmm.status.as_mut() {
            ferry_crds::history::record_phase(&mut s.history, Phase::Importing, 1, &ts(0));
            for (i, d) in s.disks.iter_mut().enumerate() {
                d.virtual_size_bytes = Some(64 << 20);
                d.raw_checksum = Some(sha(i));
            }
        }
        let block = vec![false; dvs.len()];
        let dv_uids = dvs
            .iter()
            .enumerate()
            .map(|(i, d)| (*d != DvState::Absent).then(|| dv_uid(i)))
            .collect();
        Scope {
            vmm,
            now: ts(10).0,
            policy: Policy::default(),
            retries: 0,
            world: Observed {
                credentials: credentials.map(|()| None),
                secret_present,
                dvs,
                dv_uids,
                verify,
                block,
                conflict: None,
            },
        }
    }

    /// The uid of disk `i`'s DataVolume, as the cases observe it.
    fn dv_uid(i: usize) -> String {
        format!("dv-uid-{i}")
    }

    /// What a verification Job made for `n` disks' DataVolumes, as the cases observe them,
    /// records.
    fn made_for(n: usize) -> Option<Vec<String>> {
        Some((0..n).map(dv_uid).collect())
    }

    fn scope_with(
        dvs: Vec<DvState>,
        secret_present: bool,
        credentials: Result<(), Problem>,
    ) -> Scope<Observed> {
        scope_verifying(dvs, secret_present, credentials, Verification::default())
    }

    fn decide_with(dvs: Vec<DvState>) -> Outcome<Action> {
        decide(&scope_with(dvs, true, Ok(())))
    }

    /// The Job as observed; a completed one reported every disk's staged checksum, as ferry's
    /// verify program does.
    fn job(job: JobState, role: Role, message: Option<&str>) -> Verification {
        let reported = (job == JobState::Complete).then(|| (0..4).map(|i| (i, sha(i))).collect());
        Verification {
            job,
            role,
            message: message.map(str::to_owned),
            reported,
            made_for: None,
        }
    }

    /// Decides with the Job `v`, made for the DataVolumes observed unless `v` says otherwise.
    fn verifying(dvs: Vec<DvState>, mut v: Verification) -> Outcome<Action> {
        if v.made_for.is_none() {
            v.made_for = made_for(dvs.len());
        }
        decide(&scope_verifying(dvs, true, Ok(()), v))
    }

    #[test]
    fn imported_volumes_are_verified_before_the_vm_is_created() {
        use DvState::*;
        let failed = |reason: &str| JobState::Failed {
            reason: reason.into(),
            message: String::new(),
        };
        type Case = (
            &'static str,
            Vec<DvState>,
            Verification,
            fn(&Step<Action>) -> bool,
        );
        let cases: Vec<Case> = vec![
            (
                "all imported, no Job: create the verification",
                vec![Succeeded, Succeeded],
                Verification::default(),
                |s| *s == Step::Act(vec![Action::CreateVerifyJob(Role::Verify)]),
            ),
            (
                "verification running: wait",
                vec![Succeeded],
                job(JobState::Running { failed: 0 }, Role::Verify, None),
                |s| matches!(s, Step::Wait { .. }),
            ),
            (
                "verified: create the VM",
                vec![Succeeded, Succeeded],
                job(JobState::Complete, Role::Verify, None),
                |s| {
                    *s == Step::Advance {
                        to: Phase::CreatingVM,
                    }
                },
            ),
            (
                "mismatch: fail with both sums",
                vec![Succeeded],
                job(
                    failed("PodFailurePolicy"),
                    Role::Verify,
                    Some(
                        "ferry-controller verify: disk 0: checksum mismatch: the imported volume's first 67108864 bytes have SHA-256 aa, the staged image's raw contents bb",
                    ),
                ),
                |s| {
                    matches!(s, Step::Fail { reason: Reason::ChecksumMismatch, retriable: true, resume: Phase::Importing, message }
                        if message.contains("SHA-256 aa") && message.contains("contents bb"))
                },
            ),
            (
                "verification failed otherwise: ImportFailed",
                vec![Succeeded],
                job(
                    failed("BackoffLimitExceeded"),
                    Role::Verify,
                    Some("disk 0: reading /x: EIO"),
                ),
                |s| matches!(s, Step::Fail { reason: Reason::ImportFailed, message, .. } if message.contains("EIO")),
            ),
            (
                "populators: the Job is the first consumer",
                vec![AwaitingConsumer { populator: true }, Succeeded],
                Verification::default(),
                |s| *s == Step::Act(vec![Action::CreateVerifyJob(Role::Verify)]),
            ),
            (
                "populators: the Job waits for the claims",
                vec![AwaitingConsumer { populator: true }],
                job(JobState::Running { failed: 0 }, Role::Verify, None),
                |s| matches!(s, Step::Wait { .. }),
            ),
            (
                "populators: a Job done before the DataVolume says so waits for it",
                vec![AwaitingConsumer { populator: true }],
                job(JobState::Complete, Role::Verify, None),
                |s| matches!(s, Step::Wait { .. }),
            ),
            (
                "no populators: the first Job only binds",
                vec![AwaitingConsumer { populator: false }, Succeeded],
                Verification::default(),
                |s| *s == Step::Act(vec![Action::CreateVerifyJob(Role::Bind)]),
            ),
            (
                "no populators: a binding Job's failure while importing means nothing",
                vec![running(30.0, 0)],
                job(
                    failed("PodFailurePolicy"),
                    Role::Bind,
                    Some("checksum mismatch"),
                ),
                |s| matches!(s, Step::Wait { .. }),
            ),
            (
                "no populators: imports done, the binding Job goes",
                vec![Succeeded],
                job(JobState::Complete, Role::Bind, None),
                |s| *s == Step::Act(vec![Action::DeleteVerifyJob]),
            ),
            (
                "no populators: a failed binding Job goes too",
                vec![Succeeded],
                job(
                    failed("PodFailurePolicy"),
                    Role::Bind,
                    Some("checksum mismatch"),
                ),
                |s| *s == Step::Act(vec![Action::DeleteVerifyJob]),
            ),
            (
                "the binding Job being deleted: wait",
                vec![Succeeded],
                job(JobState::Deleting, Role::Bind, None),
                |s| matches!(s, Step::Wait { .. }),
            ),
            (
                "a Paused DataVolume fails",
                vec![Paused],
                Verification::default(),
                |s| {
                    matches!(
                        s,
                        Step::Fail {
                            reason: Reason::ImportFailed,
                            ..
                        }
                    )
                },
            ),
        ];
        for (name, dvs, v, ok) in cases {
            let o = verifying(dvs, v);
            assert!(ok(&o.step), "{name}: {:?}", o.step);
            assert!(
                o.conditions.iter().any(|c| c.type_ == DiskImported),
                "{name}: sets DiskImported"
            );
        }
    }

    #[test]
    fn the_verification_needs_the_recorded_raw_checksums() {
        let mut scope = scope_with(vec![DvState::Succeeded], true, Ok(()));
        if let Some(s) = scope.vmm.status.as_mut() {
            s.disks[0].raw_checksum = None;
        }
        let o = decide(&scope);
        assert!(
            matches!(o.step, Step::Fail { reason: Reason::ImportFailed, resume: Phase::Converting, ref message, .. } if message.contains("disk 0")),
            "{:?}",
            o.step
        );
    }

    #[test]
    fn the_importers_message_shows_while_it_restarts() {
        let o = decide_with(vec![DvState::InProgress {
            phase: "ImportInProgress".into(),
            percent: Some(12.0),
            restarts: 2,
            failing: Some("Unable to connect to s3 data source: 503".into()),
        }]);
        let c = &o.conditions[0];
        assert_eq!(c.reason, Reason::TransientError);
        assert!(
            c.message
                .contains("restarted 2 time(s): Unable to connect to s3 data source: 503"),
            "{}",
            c.message
        );
    }

    #[test]
    fn table() {
        use DvState::*;
        assert_eq!(
            decide_with(vec![Succeeded, Succeeded]).step,
            Step::Act(vec![Action::CreateVerifyJob(Role::Verify)])
        );
        assert_eq!(
            decide_with(vec![Absent, Absent]).step,
            Step::Act(vec![
                Action::CreateDataVolume(0),
                Action::CreateDataVolume(1)
            ])
        );
        assert_eq!(
            decide_with(vec![Succeeded, Absent]).step,
            Step::Act(vec![Action::CreateDataVolume(1)])
        );
        assert!(matches!(
            decide_with(vec![running(45.0, 0), Succeeded]).step,
            Step::Wait { .. }
        ));
        assert!(matches!(
            decide_with(vec![Deleting]).step,
            Step::Wait { .. }
        ));
        let transient = decide_with(vec![running(40.0, 1)]);
        assert!(
            matches!(transient.step, Step::Wait { .. }),
            "CDI restarts the importer itself"
        );
        assert_eq!(transient.conditions[0].reason, Reason::TransientError);
        let gave_up = decide_with(vec![running(
            40.0,
            Policy::default().max_import_restarts + 1,
        )]);
        assert!(matches!(
            gave_up.step,
            Step::Fail {
                reason: Reason::ImportFailed,
                resume: Phase::Importing,
                ..
            }
        ));
        let failed = decide_with(vec![
            Failed {
                message: "checksum".into(),
            },
            Succeeded,
        ]);
        assert!(matches!(
            failed.step,
            Step::Fail {
                reason: Reason::ImportFailed,
                retriable: true,
                ..
            }
        ));
        assert_eq!(
            failed.conditions[0].status,
            ferry_crds::ConditionStatus::False
        );
    }

    #[test]
    fn the_cdi_secret_comes_first_and_waits_for_credentials() {
        let o = decide(&scope_with(vec![DvState::Absent], false, Ok(())));
        assert_eq!(
            o.step,
            Step::Act(vec![Action::CreateS3Secret, Action::CreateDataVolume(0)])
        );
        let o = decide(&scope_with(
            vec![DvState::Absent],
            false,
            Err(Problem::transient(Reason::SecretNotFound, "no secret")),
        ));
        assert!(matches!(
            o.step,
            Step::Retry {
                reason: Reason::SecretNotFound,
                ..
            }
        ));
    }

    #[test]
    fn a_datavolume_of_another_migration_is_a_conflict_not_an_import() {
        let mut scope = scope_with(vec![DvState::Absent], true, Ok(()));
        scope.world.conflict = Some(Problem::permanent(
            Reason::TargetConflict,
            "DataVolume m-disk-0 already exists and was made by an earlier migration",
        ));
        let o = decide(&scope);
        assert!(matches!(
            o.step,
            Step::Fail {
                reason: Reason::TargetConflict,
                retriable: false,
                ..
            }
        ));
        assert_eq!(o.conditions[0].reason, Reason::TargetConflict);
    }

    #[test]
    fn progress_is_weighted_by_disk_size_with_rate_and_eta() {
        let o = decide_with(vec![running(50.0, 0), DvState::Succeeded]);
        let p = o.record.progress.unwrap();
        assert_eq!(p.bytes_total, 2 * (64 << 20));
        assert_eq!(p.percent, 75.0);
        assert_eq!(p.bytes_done, (64 << 20) * 3 / 2);
        assert_eq!(p.rate_bytes_per_second, Some((64 << 20) * 3 / 2 / 10));
        assert_eq!(
            p.eta_seconds,
            Some(3),
            "a quarter left at a tenth of the total per second"
        );
        let disks = o.record.disks.unwrap();
        assert_eq!(disks[0].import_phase.as_deref(), Some("ImportInProgress"));
        assert_eq!(disks[0].data_volume.as_deref(), Some("m-disk-0"));
        assert_eq!(disks[1].percent, Some(100.0));
    }

    fn dv_state() -> impl Strategy<Value = DvState> {
        prop_oneof![
            Just(DvState::Absent),
            Just(DvState::Deleting),
            Just(DvState::Succeeded),
            Just(DvState::Paused),
            any::<bool>().prop_map(|populator| DvState::AwaitingConsumer { populator }),
            "[a-z]{0,8}".prop_map(|m| DvState::Failed { message: m }),
            (0.0f64..100.0, 0i32..6, any::<bool>()).prop_map(|(p, r, f)| DvState::InProgress {
                phase: "ImportInProgress".into(),
                percent: Some(p),
                restarts: r,
                failing: f.then(|| "x".into())
            }),
        ]
    }

    proptest! {
        #[test]
        fn every_observed_state_leads_to_exactly_the_right_kind_of_step(dvs in proptest::collection::vec(dv_state(), 1..5)) {
            let o = decide_with(dvs.clone());
            let max = Policy::default().max_import_restarts;
            let failed = dvs.iter().any(|d| match d {
                DvState::Failed { .. } | DvState::Paused => true,
                DvState::InProgress { restarts, .. } => *restarts > max,
                _ => false,
            });
            let ready_for_the_job = dvs
                .iter()
                .all(|d| matches!(d, DvState::Succeeded | DvState::AwaitingConsumer { .. }));
            let role = if dvs.contains(&DvState::AwaitingConsumer { populator: false }) {
                Role::Bind
            } else {
                Role::Verify
            };
            match &o.step {
                Step::Fail { reason, .. } => prop_assert!(failed && *reason == Reason::ImportFailed),
                Step::Advance { .. } => prop_assert!(false, "never without a verification"),
                Step::Hold { .. } => prop_assert!(false, "only preflight holds"),
                Step::Act(actions) if ready_for_the_job => {
                    prop_assert!(!failed);
                    prop_assert_eq!(actions, &vec![Action::CreateVerifyJob(role)]);
                }
                Step::Act(actions) => {
                    prop_assert!(!failed);
                    for a in actions {
                        let Action::CreateDataVolume(i) = a else { return Err(TestCaseError::fail("only DV creation")) };
                        prop_assert_eq!(&dvs[*i], &DvState::Absent);
                    }
                    prop_assert_eq!(actions.len(), dvs.iter().filter(|d| **d == DvState::Absent).count());
                }
                Step::Wait { .. } => prop_assert!(!failed && !dvs.contains(&DvState::Absent) && !ready_for_the_job),
                Step::Retry { .. } => prop_assert!(false, "the CDI secret exists here"),
            }
            let p = o.record.progress.unwrap();
            prop_assert!((0.0..=100.0).contains(&p.percent));
            prop_assert!(p.bytes_done <= p.bytes_total);
        }
    }

    #[test]
    fn a_completed_verification_without_ferrys_checksums_fails_importing() {
        use DvState::Succeeded;
        let complete = |reported: Option<BTreeMap<usize, String>>| Verification {
            job: JobState::Complete,
            role: Role::Verify,
            message: None,
            reported,
            made_for: None,
        };
        let ok = verifying(
            vec![Succeeded, Succeeded],
            complete(Some([(0, sha(0)), (1, sha(1))].into())),
        );
        assert_eq!(
            ok.step,
            Step::Advance {
                to: Phase::CreatingVM
            }
        );
        for (what, reported, says) in [
            (
                "a Job that exited 0 and said nothing",
                None,
                "reported checksums",
            ),
            (
                "one disk missing",
                Some([(0, sha(0))].into()),
                "disk 1: no checksum reported",
            ),
            (
                "another disk's sum",
                Some([(0, sha(0)), (1, sha(7))].into()),
                "disk 1: reported",
            ),
        ] {
            let o = verifying(vec![Succeeded, Succeeded], complete(reported));
            assert!(
                matches!(&o.step, Step::Fail { reason: Reason::ImportFailed, message, resume: Phase::Importing, .. }
                    if message.contains(says)),
                "{what}: {:?}",
                o.step
            );
        }
    }
    #[test]
    fn a_verification_made_for_replaced_datavolumes_goes_whatever_it_says() {
        use DvState::*;
        let failed = JobState::Failed {
            reason: "BackoffLimitExceeded".into(),
            message: "claim m-disk-1 not found".into(),
        };
        let other = Some(vec![dv_uid(0), "an-earlier-uid".to_owned()]);
        type Case = (
            &'static str,
            Vec<DvState>,
            JobState,
            Role,
            Option<Vec<String>>,
        );
        let stale: Vec<Case> = vec![
            (
                "passed, then disk 1's DataVolume was made again: its pass was of gone bytes",
                vec![Succeeded, Succeeded],
                JobState::Complete,
                Role::Verify,
                other.clone(),
            ),
            (
                "failed because disk 1's DataVolume went under it: not a failed import",
                vec![Succeeded, Succeeded],
                failed.clone(),
                Role::Verify,
                other.clone(),
            ),
            (
                "running while disk 1's DataVolume is made again",
                vec![Succeeded, running(10.0, 0)],
                JobState::Running { failed: 0 },
                Role::Verify,
                other,
            ),
            (
                "disk 1's DataVolume is being deleted",
                vec![Succeeded, Deleting],
                failed.clone(),
                Role::Verify,
                made_for(2),
            ),
            (
                "disk 1's DataVolume is gone",
                vec![Succeeded, Absent],
                JobState::Complete,
                Role::Verify,
                made_for(2),
            ),
            (
                "a binding Job whose claim was made again",
                vec![AwaitingConsumer { populator: false }; 2],
                JobState::Running { failed: 0 },
                Role::Bind,
                Some(vec!["an-earlier-uid".to_owned(), dv_uid(1)]),
            ),
        ];
        for (what, dvs, state, role, made) in stale {
            let mut v = job(state, role, Some("checksum mismatch: aa, bb"));
            v.made_for = made;
            let o = verifying(dvs, v);
            assert_eq!(o.step, Step::Act(vec![Action::DeleteVerifyJob]), "{what}");
            let c = o.conditions.first().unwrap();
            assert_eq!(
                (c.status, c.reason),
                (Unknown, Reason::InProgress),
                "{what}: the import goes on"
            );
            assert!(o.message.contains("m-verify"), "{what}: {}", o.message);
        }
        // A Job that does not say what it was made for (an older ferry's) is checked again.
        let mut unrecorded = job(JobState::Complete, Role::Verify, None);
        unrecorded.made_for = None;
        let scope = scope_verifying(vec![Succeeded], true, Ok(()), unrecorded);
        assert_eq!(
            decide(&scope).step,
            Step::Act(vec![Action::DeleteVerifyJob])
        );
        // Once the old Job is going, the new DataVolume imports; once it is gone and every disk
        // is imported again, a new verification is made.
        let going = job(JobState::Deleting, Role::Verify, None);
        assert_eq!(
            verifying(vec![Succeeded, Absent], going.clone()).step,
            Step::Act(vec![Action::CreateDataVolume(1)])
        );
        assert!(matches!(
            verifying(vec![Succeeded, Succeeded], going).step,
            Step::Wait { .. }
        ));
        assert_eq!(
            verifying(vec![Succeeded, Succeeded], Verification::default()).step,
            Step::Act(vec![Action::CreateVerifyJob(Role::Verify)])
        );
    }
}
