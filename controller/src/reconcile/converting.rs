//! Converting: every disk converted by the Job and staged, with its size and SHA-256 recorded.
//!
//! Progress comes from the converter's record beside each staged image (bytes done, total,
//! rate): the converter has no Kubernetes API rights and needs none to report, and the
//! controller reads staging with the credentials it already holds. Pod logs, the alternative,
//! would need a `pods/log` rule for the controller and parsing of free text. No watch event
//! says a record moved, so a running conversion is looked at every
//! [`Policy::progress_requeue`](crate::policy::Policy).

use ferry_crds::{
    ConditionStatus::{True, Unknown},
    ConditionType::{self, DiskConverted},
    DiskStatus, Phase, PowerState, Progress, Reason, names,
};
use k8s_openapi::api::batch::v1::Job;

use super::checkpoint::Checkpoint;
use super::cleanup::Cleanup;
use super::credentials;
use super::io::Io;
use super::outcome::{Outcome, Record, Step, percent};
use super::scope::Scope;
use super::warm;
use super::world::{RENAME_HINT, staged_keys};
use crate::Result;
use crate::apis::job::{self as job_state, JobState};
use crate::children::{Ownership, job};
use crate::ports::{ConverterProgress, StagedObject};
use crate::problem::Problem;

/// The Converting checkpoint.
#[derive(Debug)]
pub struct Converting;

/// What Converting observes.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The conversion Job (`Absent` when the name is held by an object not this migration's:
    /// see `conflict`).
    pub job: JobState,
    /// HEAD of each disk's staged object (`Err` when S3 or its credentials failed).
    pub staged: Vec<Result<Option<StagedObject>, Problem>>,
    /// The converter's progress record of each disk (best effort: unreadable is `None`).
    pub progress: Vec<Option<ConverterProgress>>,
    /// The source VM's power state, looked at again before its disks are read (no Job yet) and
    /// once the Job ended; `None` while the Job runs (the converter checks it then).
    pub source_power: Option<Result<PowerState, Problem>>,
    /// The Job's name held by an object that is not this migration's.
    pub conflict: Option<Problem>,
    /// Whether the vSphere credentials Secret may be handed to a converter (opted in, bound to
    /// the endpoint the spec names).
    pub credentials: Result<(), Problem>,
    /// The uid of this attempt's conversion Job: the one observed as ours, else the one
    /// recorded when ferry created it (a finished Job may be gone). A staged image counts only
    /// when that Job's converter recorded it.
    pub job_uid: Option<String>,
    /// A warm migration's snapshot, looked up by the name ferry recorded until its moref and
    /// disks are recorded too: `Ok(None)` when vSphere has none of that name (yet).
    pub snapshot: Option<std::result::Result<warm::SnapshotSeen, Problem>>,
}

/// What Converting does to the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the conversion Job.
    CreateJob,
    /// A warm migration: take the snapshot whose name is recorded, of the running source.
    TakeSnapshot,
    /// A warm migration: remove its snapshot, once its disks are staged.
    RemoveSnapshot,
}

impl Checkpoint for Converting {
    const PHASE: Phase = Phase::Converting;
    const CONDITIONS: &'static [ConditionType] = &[DiskConverted];
    const RETRY_CLEANUP: &'static [Cleanup] = &[Cleanup::Job, Cleanup::Snapshot, Cleanup::Staging];
    type Observed = Observed;
    type Action = Action;

    async fn observe(io: Io<'_>) -> Result<Observed> {
        let found = io.read::<Job>(&names::job_name(io.vmm)).await?;
        let (job, conflict) = match found.as_ref().map(|j| io.own(j)) {
            Some(Ownership::Foreign(c)) => (JobState::Absent, Some(c.problem(RENAME_HINT))),
            Some(Ownership::Ours { .. }) | None => (job_state::observe(found.as_ref()), None),
        };
        let job_uid = match (&conflict, &found) {
            (None, Some(j)) => j.metadata.uid.clone(),
            _ => recorded_job_uid(io.vmm),
        };
        let login = credentials::source_login(io).await?;
        let credentials = login.as_ref().map(|_| ()).map_err(Clone::clone);
        let keys = staged_keys(io.vmm);
        let (staged, progress) = match credentials::staging_login(io).await? {
            Err(p) => (
                keys.iter().map(|_| Err(p.clone())).collect(),
                keys.iter().map(|_| None).collect(),
            ),
            Ok(login) => {
                let mut v = Vec::with_capacity(keys.len());
                let mut p = Vec::with_capacity(keys.len());
                for k in &keys {
                    v.push(io.ctx.staging.head(&login, k).await);
                    p.push(io.ctx.staging.progress(&login, k).await.ok().flatten());
                }
                (v, p)
            }
        };
        let snapshot = match (
            &login,
            warm::recorded_snapshot(io.vmm),
            job == JobState::Absent,
        ) {
            (Ok(l), Some(rec), true) if rec.moref.is_none() || !warm::disks_recorded(io.vmm) => {
                Some(super::snapshots::judged(io, l, &rec, true).await)
            }
            _ => None,
        };
        let source_power = match job {
            JobState::Absent | JobState::Complete | JobState::Failed { .. } => {
                Some(super::world::source_power(io, login).await)
            }
            JobState::Running { .. } | JobState::Deleting => None,
        };
        Ok(Observed {
            job,
            staged,
            progress,
            source_power,
            conflict,
            credentials,
            job_uid,
            snapshot,
        })
    }

    fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
        decide(scope)
    }

    /// A snapshot that could not be removed stays recorded: cleanup removes it later.
    fn on_action_failed(
        scope: &Scope<Observed>,
        planned: Outcome<Action>,
        failed: &Action,
        problem: &Problem,
    ) -> Outcome<Action> {
        let mut record = planned.record;
        if *failed == Action::RemoveSnapshot {
            record.warm = None;
        }
        Outcome::from_problem(scope, problem, Some(DiskConverted)).recording(record)
    }

    async fn execute(io: Io<'_>, _: &Observed, action: &Action) -> Result<Option<Problem>> {
        match action {
            Action::TakeSnapshot | Action::RemoveSnapshot => {
                let login = match credentials::source_login(io).await? {
                    Ok(l) => l,
                    Err(p) => return Ok(Some(p)),
                };
                let Some(rec) = warm::recorded_snapshot(io.vmm) else {
                    // The decision acts on a recorded snapshot only.
                    return Ok(None);
                };
                let vm = io.vmm.source_moref().unwrap_or_default();
                let done = match action {
                    Action::TakeSnapshot => io
                        .ctx
                        .source
                        .take_snapshot(
                            &login,
                            vm,
                            &rec.name,
                            &warm::snapshot_description(io.vmm, &io.ctx.proof, &rec.name),
                        )
                        .await
                        .map(|_| ()),
                    _ => match &rec.moref {
                        Some(m) => io.ctx.source.remove_snapshot(&login, m).await,
                        None => Ok(()),
                    },
                };
                Ok(done.err())
            }
            Action::CreateJob => {
                let image = match io.converter_image() {
                    Ok(i) => i,
                    // The decision creates the Job only with an allowed image.
                    Err(_) => return Ok(None),
                };
                let mut job = job::conversion_job(io.vmm, &image)?;
                job::apply_read_limit(&mut job, io.ctx.policy.converter_read_limit);
                Ok(io.create(job).await?.problem(RENAME_HINT))
            }
        }
    }
}

/// The uid ferry's create gave this attempt's conversion Job, from `status.children`.
fn recorded_job_uid(vmm: &ferry_crds::VirtualMachineMigration) -> Option<String> {
    let s = vmm.status.as_ref()?;
    ferry_crds::child::find(&s.children, "Job", &names::job_name(vmm))
        .filter(|r| r.attempt == s.attempts)
        .map(|r| r.uid.clone())
}

/// vSphere's name of a power state.
fn power_name(p: PowerState) -> &'static str {
    match p {
        PowerState::PoweredOn => "poweredOn",
        PowerState::PoweredOff => "poweredOff",
        PowerState::Suspended => "suspended",
    }
}

/// The per-disk status with what staging holds recorded. Pure.
fn staged_disks(scope: &Scope<Observed>, staged: &[StagedObject]) -> Vec<DiskStatus> {
    let old = scope
        .vmm
        .status
        .as_ref()
        .map(|s| s.disks.as_slice())
        .unwrap_or_default();
    staged
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let mut d = old.get(i).cloned().unwrap_or_default();
            d.index = i32::try_from(i).unwrap_or(i32::MAX);
            d.staged_object = Some(names::staging_key(&scope.vmm, i));
            d.staged_bytes = Some(o.size);
            d.checksum = o.sha256.clone();
            d.raw_checksum = o.raw_sha256.clone();
            d.virtual_size_bytes = o.virtual_size;
            d.format = Some(scope.vmm.spec.conversion.format);
            d
        })
        .collect()
}

/// Per-disk and overall progress of a running conversion from the converter's records; a disk
/// without a record counts its capacity still to do. Pure.
fn running_progress(scope: &Scope<Observed>) -> Record {
    let old = scope
        .vmm
        .status
        .as_ref()
        .map(|s| s.disks.as_slice())
        .unwrap_or_default();
    let caps: Vec<i64> = scope
        .vmm
        .status
        .as_ref()
        .and_then(|s| s.source.as_ref())
        .map(|s| s.disks.iter().map(|d| d.capacity_bytes).collect())
        .unwrap_or_default();
    let (mut done, mut total, mut rate) = (0i64, 0i64, 0i64);
    let mut disks = Vec::with_capacity(scope.world.progress.len());
    for (i, p) in scope.world.progress.iter().enumerate() {
        let (d_done, d_total, d_rate) = match p {
            Some(p) if p.bytes_total > 0 => (
                p.bytes_done.clamp(0, p.bytes_total),
                p.bytes_total,
                p.rate_bytes_per_second,
            ),
            _ => (0, caps.get(i).copied().unwrap_or(0).max(0), None),
        };
        done += d_done;
        total += d_total;
        rate += d_rate.unwrap_or(0);
        let mut d = old.get(i).cloned().unwrap_or_default();
        d.index = i32::try_from(i).unwrap_or(i32::MAX);
        d.bytes_done = Some(d_done);
        d.percent = Some(percent(d_done, d_total));
        d.rate_bytes_per_second = d_rate.filter(|r| *r > 0);
        disks.push(d);
    }
    Record::progress(disks, done, total, Some(rate))
}

/// Decides the Converting step: the first rule that applies, else what the conversion Job's
/// state says. The order is the semantics. Pure.
pub fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
    let converted = converted(scope);
    // About to hand the credentials to a converter: only opted-in, bound ones, and only to the
    // controller's image or an allowed one.
    let creating = scope.world.job == JobState::Absent && converted.is_none();
    conflict(scope)
        .or_else(|| source_power_unknown(scope))
        .or_else(|| source_powered_on(scope))
        .or_else(|| staging_unreadable(scope))
        .or_else(|| credentials_refused(scope, creating))
        .or_else(|| converter_image_refused(scope, creating))
        .or_else(|| warm_snapshot(scope, creating))
        .or_else(|| staged(scope, converted.as_deref()))
        .unwrap_or_else(|| match &scope.world.job {
            JobState::Absent => create_job(scope),
            JobState::Deleting => old_job_deleting(scope),
            JobState::Running { failed } => converting(scope, *failed),
            JobState::Complete => staged_incomplete(scope),
            JobState::Failed { reason, message } => conversion_failed(scope, reason, message),
        })
}

/// The Job's name is held by an object not this migration's: it is never read as our conversion.
fn conflict(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let p = scope.world.conflict.as_ref()?;
    Some(Outcome::from_problem(scope, p, Some(DiskConverted)))
}

/// Whether the source is still off cannot be told: nothing is copied or taken as copied blind.
fn source_power_unknown(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let Some(Err(p)) = &scope.world.source_power else {
        return None;
    };
    Some(Outcome::from_problem(scope, p, Some(DiskConverted)))
}

/// A source started again in vSphere may change its disks under the copy: nothing is imported.
/// (A warm migration's runs: its copy reads a snapshot.)
fn source_powered_on(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    if warm::is_warm(&scope.vmm) {
        return None;
    }
    let Some(Ok(state @ (PowerState::PoweredOn | PowerState::Suspended))) =
        &scope.world.source_power
    else {
        return None;
    };
    let before_read = scope.world.job == JobState::Absent;
    Some(Outcome::failure(
        Reason::SourcePoweredOn,
        say::source_powered_on(power_name(*state), before_read),
        true,
        Phase::Converting,
        DiskConverted,
    ))
}

/// Staging that cannot be read says nothing about what was converted.
fn staging_unreadable(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let p = scope.world.staged.iter().find_map(|s| s.as_ref().err())?;
    Some(Outcome::from_problem(scope, p, Some(DiskConverted)))
}

/// A converter about to be made (`creating`) gets only opted-in credentials bound to the endpoint.
fn credentials_refused(scope: &Scope<Observed>, creating: bool) -> Option<Outcome<Action>> {
    let p = scope
        .world
        .credentials
        .as_ref()
        .err()
        .filter(|_| creating)?;
    Some(Outcome::from_problem(scope, p, Some(DiskConverted)))
}

/// A converter about to be made (`creating`) runs only the controller's image or an allowed one.
fn converter_image_refused(scope: &Scope<Observed>, creating: bool) -> Option<Outcome<Action>> {
    if !creating {
        return None;
    }
    let msg = scope
        .policy
        .converter_image_for(scope.vmm.spec.conversion.image.as_deref())
        .err()?;
    Some(Outcome::failure(
        Reason::ConverterImageNotAllowed,
        msg,
        false,
        Phase::Converting,
        DiskConverted,
    ))
}

/// Every disk staged by this attempt's Job (`converted`), which ended or is not made yet: on to
/// Importing, with each image's size and checksums recorded.
fn staged(scope: &Scope<Observed>, converted: Option<&[StagedObject]>) -> Option<Outcome<Action>> {
    let images =
        converted.filter(|_| matches!(scope.world.job, JobState::Complete | JobState::Absent))?;
    let bytes: i64 = images.iter().map(|o| o.size).sum();
    let record = Record {
        disks: Some(staged_disks(scope, images)),
        progress: Some(Progress {
            percent: 0.0,
            bytes_done: 0,
            bytes_total: bytes,
            ..Progress::default()
        }),
        ..Record::default()
    };
    let msg = say::converted(scope.disk_count(), bytes);
    // A warm migration's snapshot goes once its disks are staged: the VM runs on without it.
    if let Some(rec) = warm::recorded_snapshot(&scope.vmm) {
        let mut w = warm::status(&scope.vmm);
        w.snapshot = None;
        w.rounds = 1;
        // Changes since the snapshot are the next round's.
        w.last_round_at = rec.started_at.clone().or_else(|| {
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                crate::context::whole_seconds(scope.now),
            ))
        });
        let step = match rec.moref {
            Some(_) => Step::Act(vec![Action::RemoveSnapshot]),
            None => Step::Wait {
                requeue: std::time::Duration::from_millis(50),
            },
        };
        return Some(
            Outcome::new(step, msg.clone())
                .with(DiskConverted, True, Reason::Converted, msg)
                .recording(Record {
                    warm: Some(w),
                    ..record
                }),
        );
    }
    Some(
        Outcome::new(
            Step::Advance {
                to: Phase::Importing,
            },
            msg.clone(),
        )
        .with(DiskConverted, True, Reason::Converted, msg)
        .recording(record),
    )
}

/// A warm migration reads its disks from a snapshot of the running source: its name is recorded
/// first (so that cleanup finds it whatever happens next), then it is taken, then its moref and
/// each disk's frozen file and change id are recorded; only then is the Job made.
fn warm_snapshot(scope: &Scope<Observed>, creating: bool) -> Option<Outcome<Action>> {
    if !warm::is_warm(&scope.vmm) || !creating {
        return None;
    }
    let soon = Step::Wait {
        requeue: std::time::Duration::from_millis(50),
    };
    let mut w = warm::status(&scope.vmm);
    let msg = say::taking_snapshot();
    let out = |step, w: Option<ferry_crds::WarmStatus>, disks: Option<Vec<DiskStatus>>| {
        Outcome::new(step, msg.clone())
            .with(DiskConverted, Unknown, Reason::InProgress, msg.clone())
            .recording(Record {
                warm: w,
                disks,
                ..Record::default()
            })
    };
    let Some(rec) = w.snapshot.clone() else {
        w.snapshot = Some(ferry_crds::SnapshotRecord {
            name: warm::snapshot_name(&scope.vmm),
            moref: None,
            started_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                crate::context::whole_seconds(scope.now),
            )),
        });
        return Some(out(soon, Some(w), None));
    };
    match &scope.world.snapshot {
        None => None,
        Some(Err(p)) => Some(Outcome::from_problem(scope, p, Some(DiskConverted))),
        Some(Ok(warm::SnapshotSeen::Foreign(why) | warm::SnapshotSeen::Crowded { why, .. })) => {
            Some(snapshot_refused(why))
        }
        Some(Ok(warm::SnapshotSeen::Absent { depth })) => match warm::chain_too_deep(*depth) {
            Some(why) => Some(snapshot_refused(&why)),
            None => Some(out(Step::Act(vec![Action::TakeSnapshot]), None, None)),
        },
        Some(Ok(warm::SnapshotSeen::Ours { disks, .. }))
            if !super::source_state::snapshot_changes(&scope.vmm, disks).is_empty() =>
        {
            Some(super::source_state::changed(
                super::source_state::vm_name(&scope.vmm),
                "after Preparing found it, before ferry's first snapshot",
                &super::source_state::snapshot_changes(&scope.vmm, disks),
                Phase::Converting,
                DiskConverted,
            ))
        }
        Some(Ok(warm::SnapshotSeen::Ours { moref, disks })) => {
            w.snapshot = Some(ferry_crds::SnapshotRecord {
                moref: Some(moref.clone()),
                ..rec
            });
            let disks = warm::disks_in_snapshot(&scope.vmm, disks);
            Some(out(soon, Some(w), Some(disks)))
        }
    }
}

/// A snapshot ferry will not take or use: the migration fails, retryable once the operator has
/// dealt with the source's snapshots.
fn snapshot_refused(why: &str) -> Outcome<Action> {
    Outcome::failure(
        Reason::SnapshotFailed,
        why.to_owned(),
        true,
        Phase::Converting,
        DiskConverted,
    )
}

/// No Job yet and the disks not all staged by it: make the Job. Worded as the running Job will
/// be, so that its start costs no second write.
fn create_job(scope: &Scope<Observed>) -> Outcome<Action> {
    let msg = say::converting(scope.disk_count());
    Outcome::new(Step::Act(vec![Action::CreateJob]), msg.clone()).with(
        DiskConverted,
        Unknown,
        Reason::InProgress,
        msg,
    )
}

/// The Job of an earlier attempt is still going away: its name is not free yet.
fn old_job_deleting(scope: &Scope<Observed>) -> Outcome<Action> {
    Outcome::new(
        Step::Wait {
            requeue: scope.policy.wait_requeue,
        },
        say::waiting_for_old_job(),
    )
    .with(
        DiskConverted,
        Unknown,
        Reason::InProgress,
        say::old_job_deleting(),
    )
}

/// The Job runs: its progress is looked at again soon (no event says it moved), and a converter
/// pod the Job retried is a transient error, not yet a failure.
fn converting(scope: &Scope<Observed>, failed: i32) -> Outcome<Action> {
    let n = scope.disk_count();
    let (reason, msg) = if failed > 0 {
        (Reason::TransientError, say::converter_retried(n, failed))
    } else {
        (Reason::InProgress, say::converting(n))
    };
    let record = running_progress(scope);
    let pct = record.progress.as_ref().map_or(0.0, |p| p.percent);
    // The condition's message stays put while bytes flow; the percentage goes to the
    // summary line, which is written throttled.
    Outcome::new(
        Step::Wait {
            requeue: scope.policy.progress_requeue,
        },
        say::with_percent(&msg, pct),
    )
    .with(DiskConverted, Unknown, reason, msg)
    .recording(record)
}

/// The Job completed, yet staging does not hold every image as it wrote it: converting again is
/// the operator's call.
fn staged_incomplete(scope: &Scope<Observed>) -> Outcome<Action> {
    let missing: Vec<String> = staged_objects(&scope.world)
        .enumerate()
        .filter_map(|(i, o)| match o {
            None => Some(say::not_in_staging(i)),
            Some(o) if o.sha256.is_none() || o.raw_sha256.is_none() => Some(say::no_checksum(i)),
            Some(o) if !by_our_job(&scope.world, o) => Some(say::not_by_our_job(i)),
            Some(_) => None,
        })
        .collect();
    Outcome::failure(
        Reason::ConversionFailed,
        say::conversion_incomplete(&missing),
        true,
        Phase::Converting,
        DiskConverted,
    )
}

/// The Job failed: the converter's own words, from its records, say why (the Job's condition
/// only says which exit code matched), and come first; its classification (`BadDisk`, …) is the
/// failure's cause, else the Job's reason.
fn conversion_failed(scope: &Scope<Observed>, reason: &str, message: &str) -> Outcome<Action> {
    let records = scope
        .world
        .progress
        .iter()
        .enumerate()
        .filter_map(|(i, p)| {
            let p = p.as_ref()?;
            p.error.as_deref().map(|e| (i, e, p.reason.as_deref()))
        });
    let mut said = vec![];
    let mut causes: Vec<&str> = vec![];
    for (i, error, cause) in records {
        said.push(say::converter_said(i, error));
        if let Some(c) = cause.filter(|c| !causes.contains(c)) {
            causes.push(c);
        }
    }
    let cause = if causes.is_empty() {
        Some(reason.to_owned()).filter(|r| !r.is_empty())
    } else {
        Some(causes.join("+"))
    };
    // The converter's permanent exit code matched the Job's failure policy: the same input fails
    // the same way until something changes (the disk, the spec).
    let permanent = reason == "PodFailurePolicy";
    Outcome::failure(
        Reason::ConversionFailed,
        say::conversion_failed(reason, message, &said),
        !permanent,
        Phase::Converting,
        DiskConverted,
    )
    .with_cause(cause)
}

/// What staging holds of each disk (`None`: nothing, or unreadable).
fn staged_objects(world: &Observed) -> impl Iterator<Item = Option<&StagedObject>> {
    world
        .staged
        .iter()
        .map(|s| s.as_ref().ok().and_then(Option::as_ref))
}

/// Only what this attempt's own Job recorded: an image staged by anyone else (an earlier
/// attempt, another tool, someone with the bucket's keys) is never taken as converted.
fn by_our_job(world: &Observed, o: &StagedObject) -> bool {
    world.job_uid.is_some() && o.job_uid.as_deref() == world.job_uid.as_deref()
}

/// Every disk's image with both checksums, recorded by this attempt's Job as an image of that
/// disk in the format asked for; `None` while one is not (or there are no disks).
fn converted(scope: &Scope<Observed>) -> Option<Vec<StagedObject>> {
    let world = &scope.world;
    let format = scope.vmm.spec.conversion.format;
    staged_objects(world)
        .enumerate()
        .map(|(i, o)| {
            o.filter(|o| o.sha256.is_some() && o.raw_sha256.is_some() && by_our_job(world, o))
                .filter(|o| o.format == Some(format) && of_the_disk(&scope.vmm, i, o))
                .cloned()
        })
        .collect::<Option<Vec<_>>>()
        .filter(|v| !v.is_empty())
}

/// Whether a staged image is recorded as one of disk `i`: of its datastore path, or of the
/// file its snapshot froze (a warm first copy reads that; the Job may have been made before
/// or after the frozen path was recorded).
fn of_the_disk(vmm: &ferry_crds::VirtualMachineMigration, i: usize, o: &StagedObject) -> bool {
    let Some(path) = o.source_path.as_deref() else {
        return false;
    };
    let status = vmm.status.as_ref();
    let discovered = status
        .and_then(|s| s.source.as_ref())
        .and_then(|s| s.disks.get(i))
        .map(|d| d.datastore_path.as_str());
    let frozen = status
        .and_then(|s| s.disks.get(i))
        .and_then(|d| d.snapshot_path.as_deref());
    Some(path) == discovered || Some(path) == frozen
}

/// What Converting says to people: in conditions, failures and Events.
mod say {
    pub fn taking_snapshot() -> String {
        "taking a snapshot of the running source: its disks are copied as it froze them".into()
    }

    pub fn source_powered_on(power: &str, before_read: bool) -> String {
        let when = if before_read {
            "before its disks were read"
        } else {
            "while its disks were copied"
        };
        format!(
            "the source VM is {power} again {when} (someone started it in vSphere): its disks may change under the copy, so nothing is imported; raise spec.retry to start over (ferry powers it off again), or cancel"
        )
    }

    pub fn converted(n: usize, bytes: i64) -> String {
        format!("{n} disk(s) converted and staged, {bytes} bytes, checksums recorded")
    }

    pub fn converting(n: usize) -> String {
        format!("converting {n} disk(s)")
    }

    pub fn converter_retried(n: usize, failed: i32) -> String {
        format!("converting {n} disk(s); {failed} converter attempt(s) failed and were retried")
    }

    pub fn with_percent(msg: &str, pct: f64) -> String {
        format!("{msg}: {pct:.1}%")
    }

    pub fn waiting_for_old_job() -> String {
        "waiting for the old conversion Job to go".into()
    }

    pub fn old_job_deleting() -> String {
        "an earlier conversion Job is being deleted".into()
    }

    pub fn not_in_staging(i: usize) -> String {
        format!("disk {i} is not in staging")
    }

    pub fn no_checksum(i: usize) -> String {
        format!("disk {i} has no sha256 metadata")
    }

    pub fn not_by_our_job(i: usize) -> String {
        format!("disk {i} was not recorded by this attempt's conversion Job")
    }

    pub fn conversion_incomplete(missing: &[String]) -> String {
        format!(
            "the conversion Job completed but {}; raise spec.retry to convert again",
            missing.join(", ")
        )
    }

    /// The converter's error of disk `i`, which names its disk itself when it knows it.
    pub fn converter_said(i: usize, error: &str) -> String {
        let named = error
            .strip_prefix(&format!("disk {i}"))
            .is_some_and(|rest| !rest.starts_with(|c: char| c.is_ascii_digit()));
        if named {
            error.to_owned()
        } else {
            format!("disk {i}: {error}")
        }
    }

    /// The converter's words first (what is wrong with which disk), the Job's boilerplate
    /// last.
    pub fn conversion_failed(reason: &str, message: &str, said: &[String]) -> String {
        let job = if message.is_empty() {
            format!("the conversion Job failed ({reason})")
        } else {
            format!("the conversion Job failed ({reason}: {message})")
        };
        if said.is_empty() {
            format!("{job}; see its pod logs, then raise spec.retry")
        } else {
            format!(
                "{}; {job}; see its pod logs, then raise spec.retry",
                said.join("; ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    /// The default knobs with the controller's converter image (it has none by default).
    fn policy() -> Policy {
        Policy {
            converter_image: format!("registry.example/ferry@sha256:{}", "d".repeat(64)),
            ..Policy::default()
        }
    }

    use ferry_crds::fixtures::{migration, ts};

    fn obj(sha: Option<&str>) -> Result<Option<StagedObject>, Problem> {
        Ok(Some(StagedObject {
            size: 1 << 26,
            sha256: sha.map(str::to_owned),
            raw_sha256: sha.map(|s| format!("raw-{s}")),
            virtual_size: Some(1 << 26),
            job_uid: Some(JOB_UID.into()),
            source_path: None,
            format: None,
        }))
    }

    const JOB_UID: &str = "job-of-this-attempt";

    /// The staged objects as this attempt's converter records them: disk `i`'s image of its
    /// own source path, in the format asked for (left as given where a test set them).
    fn of_their_disks(
        staged: Vec<Result<Option<StagedObject>, Problem>>,
    ) -> Vec<Result<Option<StagedObject>, Problem>> {
        let paths = crate::children::job::source_paths(&migration("m").with_disks(staged.len()));
        staged
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                s.map(|o| {
                    o.map(|mut o| {
                        o.source_path = o.source_path.or_else(|| paths.get(i).cloned());
                        o.format = o.format.or(Some(ferry_crds::DiskFormat::Raw));
                        o
                    })
                })
            })
            .collect()
    }

    fn decide_with(
        job: JobState,
        staged: Vec<Result<Option<StagedObject>, Problem>>,
        retries: u32,
    ) -> Outcome<Action> {
        let vmm = migration("m")
            .with_disks(staged.len())
            .with_phase(Phase::Converting);
        let staged = of_their_disks(staged);
        decide(&Scope {
            vmm,
            now: ts(0).0,
            policy: policy(),
            retries,
            world: Observed {
                source_power: match job {
                    JobState::Running { .. } | JobState::Deleting => None,
                    _ => Some(Ok(PowerState::PoweredOff)),
                },
                progress: staged.iter().map(|_| None).collect(),
                job,
                staged,
                conflict: None,
                credentials: Ok(()),
                job_uid: Some(JOB_UID.into()),
                snapshot: None,
            },
        })
    }

    /// A warm migration whose snapshot's name is recorded, before its Job: what it makes of the
    /// source's snapshots.
    fn decide_warm(seen: warm::SnapshotSeen) -> Outcome<Action> {
        let mut vmm = migration("m").with_disks(1).with_phase(Phase::Converting);
        vmm.spec.mode = ferry_crds::MigrationMode::Warm;
        vmm.status.get_or_insert_with(Default::default).warm =
            Some(Box::new(ferry_crds::WarmStatus {
                snapshot: Some(ferry_crds::SnapshotRecord {
                    name: warm::snapshot_name(&vmm),
                    ..Default::default()
                }),
                ..ferry_crds::WarmStatus::default()
            }));
        decide(&Scope {
            vmm,
            now: ts(0).0,
            policy: policy(),
            retries: 0,
            world: Observed {
                source_power: Some(Ok(PowerState::PoweredOn)),
                progress: vec![None],
                job: JobState::Absent,
                staged: vec![Ok(None)],
                conflict: None,
                credentials: Ok(()),
                job_uid: None,
                snapshot: Some(Ok(seen)),
            },
        })
    }

    #[test]
    fn a_warm_copy_reads_only_a_snapshot_ferry_can_prove_it_took() {
        assert_eq!(
            decide_warm(warm::SnapshotSeen::Absent { depth: 3 }).step,
            Step::Act(vec![Action::TakeSnapshot])
        );
        let frozen = |keys: &[i32]| -> Vec<ferry_vsphere::SnapshotDisk> {
            keys.iter()
                .map(|k| ferry_vsphere::SnapshotDisk {
                    key: *k,
                    datastore_path: format!("[LocalDS_0] DC0_H0_VM0/disk-{k}-snapshot.vmdk"),
                    capacity_bytes: 64 << 20,
                    change_id: Some("52 aa/1".into()),
                })
                .collect()
        };
        let ours = decide_warm(warm::SnapshotSeen::Ours {
            moref: "snapshot-9".into(),
            disks: frozen(&[2000]),
        });
        assert!(matches!(ours.step, Step::Wait { .. }), "{:?}", ours.step);
        // A disk added after Preparing found the VM is in the snapshot: no copy of an old set.
        let grown = decide_warm(warm::SnapshotSeen::Ours {
            moref: "snapshot-9".into(),
            disks: frozen(&[2000, 2001]),
        });
        assert!(
            matches!(
                grown.step,
                Step::Fail {
                    reason: Reason::SourceChanged,
                    ..
                }
            ),
            "{:?}",
            grown.step
        );
        let rec = ours.record.warm.and_then(|w| w.snapshot).unwrap();
        assert_eq!(
            rec.moref.as_deref(),
            Some("snapshot-9"),
            "its moref recorded"
        );
        for seen in [
            warm::SnapshotSeen::Foreign(
                "the source VM has a snapshot ... ferry did not take".into(),
            ),
            warm::SnapshotSeen::Absent {
                depth: warm::CHAIN_LIMIT - warm::CHAIN_HEADROOM,
            },
        ] {
            let out = decide_warm(seen.clone());
            let Step::Fail { reason, .. } = &out.step else {
                panic!("{seen:?}: {:?}", out.step);
            };
            assert_eq!(*reason, Reason::SnapshotFailed, "{seen:?}");
            assert!(
                out.record.warm.is_none(),
                "nothing recorded of it: {seen:?}"
            );
        }
    }

    #[test]
    fn table() {
        use JobState::*;
        let done = || vec![obj(Some("aa")), obj(Some("bb"))];
        let partial = || vec![obj(Some("aa")), Ok(None)];
        type Staged = Vec<Result<Option<StagedObject>, Problem>>;
        type Case = (&'static str, JobState, Staged, fn(&Step<Action>) -> bool);
        let cases: Vec<Case> = vec![
            (
                "absent job, nothing staged: create",
                Absent,
                vec![Ok(None), Ok(None)],
                |s| *s == Step::Act(vec![Action::CreateJob]),
            ),
            (
                "absent job, partial staging: create",
                Absent,
                partial(),
                |s| *s == Step::Act(vec![Action::CreateJob]),
            ),
            ("absent job, all staged: satisfied", Absent, done(), |s| {
                *s == Step::Advance {
                    to: Phase::Importing,
                }
            }),
            ("running: wait", Running { failed: 0 }, partial(), |s| {
                matches!(s, Step::Wait { .. })
            }),
            (
                "running after a failed pod: wait",
                Running { failed: 1 },
                partial(),
                |s| matches!(s, Step::Wait { .. }),
            ),
            ("deleting: wait", Deleting, partial(), |s| {
                matches!(s, Step::Wait { .. })
            }),
            ("complete and staged: advance", Complete, done(), |s| {
                *s == Step::Advance {
                    to: Phase::Importing,
                }
            }),
            ("complete, one missing: fail", Complete, partial(), |s| {
                matches!(
                    s,
                    Step::Fail {
                        reason: Reason::ConversionFailed,
                        ..
                    }
                )
            }),
            (
                "complete, no checksum: fail",
                Complete,
                vec![obj(None)],
                |s| {
                    matches!(
                        s,
                        Step::Fail {
                            reason: Reason::ConversionFailed,
                            ..
                        }
                    )
                },
            ),
            (
                "job failed: fail retriable",
                Failed {
                    reason: "BackoffLimitExceeded".into(),
                    message: String::new(),
                },
                partial(),
                |s| {
                    matches!(
                        s,
                        Step::Fail {
                            reason: Reason::ConversionFailed,
                            retriable: true,
                            resume: Phase::Converting,
                            ..
                        }
                    )
                },
            ),
            (
                "staging unreachable: retry",
                Running { failed: 0 },
                vec![Err(Problem::transient(
                    Reason::StagingUnavailable,
                    "refused",
                ))],
                |s| {
                    matches!(
                        s,
                        Step::Retry {
                            reason: Reason::StagingUnavailable,
                            ..
                        }
                    )
                },
            ),
        ];
        for (name, job, staged, ok) in cases {
            let o = decide_with(job, staged, 0);
            assert!(ok(&o.step), "{name}: {:?}", o.step);
            assert!(
                o.conditions.iter().any(|c| c.type_ == DiskConverted),
                "{name}: sets DiskConverted"
            );
        }
    }

    #[test]
    fn a_running_conversion_reports_the_converters_progress() {
        let vmm = migration("m").with_disks(2).with_phase(Phase::Converting);
        let rec = |done: i64, rate: Option<i64>| ConverterProgress {
            stage: "uploading".into(),
            bytes_done: done,
            bytes_total: 100,
            rate_bytes_per_second: rate,
            error: None,
            reason: None,
        };
        let o = decide(&Scope {
            vmm,
            now: ts(0).0,
            policy: policy(),
            retries: 0,
            world: Observed {
                job: JobState::Running { failed: 0 },
                staged: vec![Ok(None), Ok(None)],
                progress: vec![Some(rec(50, Some(10))), Some(rec(100, None))],
                source_power: None,
                conflict: None,
                credentials: Ok(()),
                job_uid: Some(JOB_UID.into()),
                snapshot: None,
            },
        });
        assert_eq!(
            o.step,
            Step::Wait {
                requeue: Policy::default().progress_requeue
            }
        );
        let p = o.record.progress.unwrap();
        assert_eq!((p.bytes_done, p.bytes_total, p.percent), (150, 200, 75.0));
        assert_eq!(p.rate_bytes_per_second, Some(10));
        assert_eq!(p.eta_seconds, Some(5));
        let disks = o.record.disks.unwrap();
        assert_eq!(disks[0].percent, Some(50.0));
        assert_eq!(disks[0].rate_bytes_per_second, Some(10));
        assert_eq!(disks[1].bytes_done, Some(100));
        assert!(o.message.ends_with("75.0%"), "{}", o.message);

        // Before the converter wrote anything, a disk counts its capacity still to do.
        let vmm = migration("m").with_disks(1).with_phase(Phase::Converting);
        let o = decide(&Scope {
            vmm,
            now: ts(0).0,
            policy: policy(),
            retries: 0,
            world: Observed {
                job: JobState::Running { failed: 0 },
                staged: vec![Ok(None)],
                progress: vec![None],
                source_power: None,
                conflict: None,
                credentials: Ok(()),
                job_uid: Some(JOB_UID.into()),
                snapshot: None,
            },
        });
        let p = o.record.progress.unwrap();
        assert_eq!((p.bytes_done, p.bytes_total), (0, 64 << 20));
    }

    #[test]
    fn a_failed_job_carries_the_converters_reason() {
        let vmm = migration("m").with_disks(1).with_phase(Phase::Converting);
        let o = decide(&Scope {
            vmm,
            now: ts(0).0,
            policy: policy(),
            retries: 0,
            world: Observed {
                job: JobState::Failed {
                    reason: "PodFailurePolicy".into(),
                    message: String::new(),
                },
                staged: vec![Ok(None)],
                progress: vec![Some(ConverterProgress {
                    stage: "failed".into(),
                    bytes_done: 0,
                    bytes_total: 0,
                    rate_bytes_per_second: None,
                    error: Some("disk 0 (ds/a.vmdk): extent a-flat.vmdk has 10 bytes, but the descriptor needs 20".into()),
                    reason: Some("BadDisk".into()),
                })],
                source_power: None,
                conflict: None,
                credentials: Ok(()),
                job_uid: Some(JOB_UID.into()),
                snapshot: None,
            },
        });
        let Step::Fail { message, .. } = &o.step else {
            panic!("{:?}", o.step)
        };
        // The converter's words first, the Job's boilerplate last; its classification is the
        // failure's cause.
        assert!(
            message.starts_with("disk 0 (ds/a.vmdk): extent"),
            "{message}"
        );
        assert!(
            message.contains("; the conversion Job failed (PodFailurePolicy)"),
            "{message}"
        );
        assert_eq!(o.cause.as_deref(), Some("BadDisk"));
        assert!(
            matches!(
                o.step,
                Step::Fail {
                    retriable: false,
                    ..
                }
            ),
            "a bad disk fails the same way again: not retriable as it is"
        );
    }

    #[test]
    fn no_job_without_usable_credentials_an_allowed_image_and_a_free_name() {
        let base = || {
            let vmm = migration("m").with_disks(1).with_phase(Phase::Converting);
            Scope {
                vmm,
                now: ts(0).0,
                policy: policy(),
                retries: 0,
                world: Observed {
                    job: JobState::Absent,
                    staged: vec![Ok(None)],
                    conflict: None,
                    credentials: Ok(()),
                    job_uid: Some(JOB_UID.into()),
                    snapshot: None,
                    progress: vec![None],
                    source_power: None,
                },
            }
        };
        assert_eq!(decide(&base()).step, Step::Act(vec![Action::CreateJob]));
        let fails_with = |scope: Scope<Observed>| match decide(&scope).step {
            Step::Fail { reason, .. } => Some(reason),
            _ => None,
        };
        let mut s = base();
        s.world.credentials = Err(Problem::permanent(
            Reason::CredentialsNotAllowed,
            "unlabelled",
        ));
        assert_eq!(fails_with(s), Some(Reason::CredentialsNotAllowed));
        let mut s = base();
        s.vmm.spec.conversion.image = Some("evil.example/x:1".into());
        assert_eq!(fails_with(s), Some(Reason::ConverterImageNotAllowed));
        let mut s = base();
        s.vmm.spec.conversion.image = Some("evil.example/x:1".into());
        s.policy.allowed_converter_images = vec!["evil.example/x:1".into()];
        assert_eq!(decide(&s).step, Step::Act(vec![Action::CreateJob]));
        let mut s = base();
        s.world.conflict = Some(Problem::permanent(Reason::TargetConflict, "Job m-convert"));
        assert_eq!(fails_with(s), Some(Reason::TargetConflict));
        // A running Job of ours is not stopped by a later change of the Secret.
        let mut s = base();
        s.world.job = JobState::Running { failed: 0 };
        s.world.credentials = Err(Problem::permanent(Reason::CredentialsNotAllowed, "x"));
        assert!(matches!(decide(&s).step, Step::Wait { .. }));
    }

    #[test]
    fn advancing_records_size_checksum_and_key_per_disk() {
        let o = decide_with(
            JobState::Complete,
            vec![obj(Some("aa")), obj(Some("bb"))],
            0,
        );
        let disks = o.record.disks.unwrap();
        assert_eq!(disks.len(), 2);
        assert_eq!(disks[1].checksum.as_deref(), Some("bb"));
        assert_eq!(disks[1].raw_checksum.as_deref(), Some("raw-bb"));
        assert_eq!(disks[1].virtual_size_bytes, Some(1 << 26));
        assert_eq!(disks[1].staged_bytes, Some(1 << 26));
        assert_eq!(
            disks[1].capacity_bytes,
            Some(64 << 20),
            "kept from Preparing"
        );
        assert!(
            disks[1]
                .staged_object
                .as_deref()
                .unwrap()
                .ends_with("/disk-1.raw")
        );
        assert_eq!(o.record.progress.unwrap().bytes_total, 2 << 26);
    }

    #[test]
    fn a_source_powered_on_again_is_never_copied_or_imported() {
        let on = |job: JobState, staged: Vec<Result<Option<StagedObject>, Problem>>| {
            let vmm = migration("m")
                .with_disks(staged.len())
                .with_phase(Phase::Converting);
            decide(&Scope {
                vmm,
                now: ts(0).0,
                policy: policy(),
                retries: 0,
                world: Observed {
                    job,
                    staged,
                    source_power: Some(Ok(PowerState::PoweredOn)),
                    progress: vec![None],
                    conflict: None,
                    credentials: Ok(()),
                    job_uid: Some(JOB_UID.into()),
                    snapshot: None,
                },
            })
        };
        for (name, job) in [
            ("before the Job", JobState::Absent),
            ("after the Job", JobState::Complete),
            (
                "the Job failed",
                JobState::Failed {
                    reason: "PodFailurePolicy".into(),
                    message: String::new(),
                },
            ),
        ] {
            let o = on(job, vec![obj(Some("aa"))]);
            assert!(
                matches!(
                    o.step,
                    Step::Fail {
                        reason: Reason::SourcePoweredOn,
                        retriable: true,
                        ..
                    }
                ),
                "{name}: {:?}",
                o.step
            );
            assert!(
                o.record.disks.is_none(),
                "{name}: nothing recorded as staged"
            );
        }
        let vmm = migration("m").with_disks(1).with_phase(Phase::Converting);
        let down = decide(&Scope {
            vmm,
            now: ts(0).0,
            policy: policy(),
            retries: 0,
            world: Observed {
                job: JobState::Complete,
                staged: vec![obj(Some("aa"))],
                source_power: Some(Err(Problem::transient(Reason::EndpointUnreachable, "down"))),
                progress: vec![None],
                conflict: None,
                credentials: Ok(()),
                job_uid: Some(JOB_UID.into()),
                snapshot: None,
            },
        });
        assert!(
            matches!(down.step, Step::Retry { .. }),
            "vCenter unreachable when looking: retried, not advanced"
        );
    }

    #[test]
    fn an_image_without_the_raw_checksum_is_not_complete() {
        let no_raw = Ok(Some(StagedObject {
            size: 1 << 26,
            sha256: Some("aa".into()),
            raw_sha256: None,
            virtual_size: None,
            job_uid: Some(JOB_UID.into()),
            source_path: None,
            format: None,
        }));
        let o = decide_with(JobState::Complete, vec![no_raw], 0);
        assert!(matches!(
            o.step,
            Step::Fail {
                reason: Reason::ConversionFailed,
                ..
            }
        ));
    }

    #[test]
    fn an_image_recorded_as_another_disks_or_in_another_format_is_not_converted() {
        let recorded_as = |path: Option<&str>, format: Option<ferry_crds::DiskFormat>| {
            let mut o = obj(Some("aa"));
            if let Ok(Some(o)) = o.as_mut() {
                o.source_path = path.map(str::to_owned);
                o.format = format;
            }
            o
        };
        let advanced = |o| {
            decide_with(JobState::Complete, vec![o], 0).step
                == Step::Advance {
                    to: Phase::Importing,
                }
        };
        assert!(advanced(recorded_as(None, None)), "its own disk, raw");
        assert!(
            !advanced(recorded_as(Some("[LocalDS_0] other/disk.vmdk"), None)),
            "another disk's image under this disk's key"
        );
        assert!(
            !advanced(recorded_as(None, Some(ferry_crds::DiskFormat::Qcow2))),
            "qcow2 where raw was asked for"
        );
    }

    #[test]
    fn images_staged_by_anyone_but_this_attempts_job_are_never_taken_as_converted() {
        let foreign = || {
            let mut o = obj(Some("aa"));
            if let Ok(Some(o)) = o.as_mut() {
                o.job_uid = Some("someone-else".into());
            }
            o
        };
        // Complete records found before any Job of ours ran: convert anyway.
        assert_eq!(
            decide_with(JobState::Absent, vec![foreign()], 0).step,
            Step::Act(vec![Action::CreateJob])
        );
        // Our Job completed, yet the record is another's: not converted.
        assert!(matches!(
            decide_with(JobState::Complete, vec![foreign()], 0).step,
            Step::Fail {
                reason: Reason::ConversionFailed,
                ref message,
                ..
            } if message.contains("not recorded by this attempt's conversion Job")
        ));
        // Ours: converted.
        assert_eq!(
            decide_with(JobState::Complete, vec![obj(Some("aa"))], 0).step,
            Step::Advance {
                to: Phase::Importing
            }
        );
    }
}
