//! CuttingOver (warm migrations only): the first copy is imported and verified while the
//! source runs on; at the cutover (`spec.warm.cutoverAt`, or `spec.warm.cutover: true`) the
//! source is powered off as Preparing powers a cold one off (the guest asked first, hard after
//! the grace), and the cutover Job copies what changed since the first copy's change id from the
//! powered-off disks into the volumes, reading each area back. Then on to CreatingVM.
//!
//! Never two live copies: the target VM does not exist yet; Starting checks again that the
//! source is off before it starts the target. A source powered on by someone while its last
//! changes are copied fails the cutover (the copy is no longer the final state).

use std::time::Duration;

use ferry_crds::{
    ConditionStatus::{True, Unknown},
    ConditionType::{self, CutOver},
    HookPoint, Phase, PowerState, Reason, ToolsState, names,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::checkpoint::Checkpoint;
use super::cleanup::Cleanup;
use super::credentials;
use super::hooks;
use super::io::Io;
use super::outcome::{Outcome, Record, Step};
use super::precopy;
use super::scope::Scope;
use super::snapshots;
use super::source_power_off::{PowerAction, PowerOffStep, power_off_step};
use super::volumes;
use super::warm;
use super::world::{self, RENAME_HINT, staged_keys};
use crate::Result;
use crate::apis::cdi::DataVolume;
use crate::apis::job::JobState;
use crate::children::{Ownership, cutover_job};
use crate::problem::Problem;
use ferry_convert::delta::{DeltaResult, parse_result};

/// The CuttingOver checkpoint.
#[derive(Debug)]
pub struct CuttingOver;

/// What CuttingOver observes.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The source's power and Tools, looked at once the cutover is due.
    pub source: Option<std::result::Result<(PowerState, ToolsState), Problem>>,
    /// The source's marks (its disks, their change ids, its configuration's version), looked at
    /// with its power once the cutover is due.
    pub marks: Option<std::result::Result<crate::ports::Marks, Problem>>,
    /// The cutover Job (`Absent` when its name is held by an object not ours: `conflict`).
    pub job: JobState,
    /// The Job's name held by someone else's object.
    pub conflict: Option<Problem>,
    /// What its last failed pod said.
    pub message: Option<String>,
    /// Once complete: what a pod of it that ran ferry's delta program reported.
    pub reported: Option<DeltaResult>,
    /// Per disk, whether its claim is a block device; read only when a Job is to be made.
    pub block: Vec<bool>,
    /// Before the cutover began: the precopy round's Job and snapshot.
    pub round: Option<RoundSeen>,
    /// The migration's DataVolumes that are gone, being deleted, or held by an object not its
    /// own: the first copy and its precopy rounds were in them.
    pub lost: Vec<String>,
    /// The `preCutover` hook's Job, read while the hook holds the begun cutover.
    pub hook: Option<hooks::Seen>,
}

/// A precopy round as observed.
#[derive(Clone, Debug, PartialEq)]
pub struct RoundSeen {
    /// The round's Job (`Absent` when its name is held by an object not ours: `conflict`).
    pub job: JobState,
    /// The Job's name held by someone else's object.
    pub conflict: Option<Problem>,
    /// What its last failed pod said.
    pub failure: Option<String>,
    /// Once complete: what a pod of it that ran ferry's delta program reported.
    pub reported: Option<DeltaResult>,
    /// The round's recorded snapshot as ferry judges it (with its disks when ferry's); looked
    /// at when one is recorded and no Job of the round runs.
    pub snapshot: Option<std::result::Result<warm::SnapshotSeen, Problem>>,
}

/// What CuttingOver does to the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Ask the source's guest to shut down (VMware Tools).
    ShutdownGuest,
    /// Power the source off hard.
    PowerOff,
    /// Create the cutover Job.
    CreateJob,
    /// Create the `preCutover` hook's Job.
    RunPreCutoverHook,
    /// Take the precopy round's snapshot (its name recorded).
    TakeSnapshot,
    /// Create the precopy round's Job.
    CreateRoundJob,
    /// End the round: its Job deleted, its snapshot (when ferry's) removed.
    EndRound,
}

impl Checkpoint for CuttingOver {
    const PHASE: Phase = Phase::CuttingOver;
    const CONDITIONS: &'static [ConditionType] = &[CutOver];
    const RETRY_CLEANUP: &'static [Cleanup] =
        &[Cleanup::CutoverJob, Cleanup::PrecopyJob, Cleanup::Snapshot];
    type Observed = Observed;
    type Action = Action;

    async fn observe(io: Io<'_>) -> Result<Observed> {
        let now = Time(io.ctx.clock.now());
        let begun = warm::status(io.vmm).cutover_started_at.is_some();
        let due = io
            .vmm
            .spec
            .warm
            .as_ref()
            .is_some_and(|w| w.cutover_due(&now));
        let (source, marks) = if begun || due {
            match credentials::source_login(io).await? {
                Ok(login) => {
                    let moref = io.vmm.source_moref().unwrap_or_default();
                    let power = io.ctx.source.power(&login, moref).await;
                    let marks = io.ctx.source.marks(&login, moref).await;
                    (Some(power), Some(marks))
                }
                Err(p) => (Some(Err(p.clone())), Some(Err(p))),
            }
        } else {
            (None, None)
        };
        let seen =
            world::reporting_job(io, &names::cutover_job_name(io.vmm), cutover_job::CONTAINER)
                .await?;
        let state = seen.state;
        let conflict = seen.conflict.map(|c| c.problem(RENAME_HINT));
        let message = seen.failure;
        let reported = seen.report.and_then(|m| parse_result(&m));
        let round = if begun {
            None
        } else {
            Some(observe_round(io).await?)
        };
        let round_job_due = round.as_ref().is_some_and(|r| {
            r.job == JobState::Absent
                && matches!(r.snapshot, Some(Ok(warm::SnapshotSeen::Ours { .. })))
        });
        let block = if (begun && state == JobState::Absent && conflict.is_none()) || round_job_due {
            world::block_claims(io, staged_keys(io.vmm).len()).await?
        } else {
            vec![]
        };
        let hook = if begun && runs_pre_hook(io.vmm) {
            hooks::observe(io, HookPoint::PreCutover).await?
        } else {
            None
        };
        Ok(Observed {
            source,
            marks,
            job: state,
            conflict,
            message,
            reported,
            block,
            round,
            lost: lost_volumes(io).await?,
            hook,
        })
    }

    /// A round that could not be ended keeps its record (its snapshot stays recorded for the
    /// next try, and for cleanup).
    fn on_action_failed(
        scope: &Scope<Observed>,
        planned: Outcome<Action>,
        failed: &Action,
        problem: &Problem,
    ) -> Outcome<Action> {
        let mut record = planned.record;
        if *failed == Action::EndRound {
            record.warm = None;
            record.disks = None;
        }
        Outcome::from_problem(scope, problem, Some(CutOver)).recording(record)
    }

    fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
        decide(scope)
    }

    async fn execute(io: Io<'_>, observed: &Observed, action: &Action) -> Result<Option<Problem>> {
        let moref = io.vmm.source_moref().unwrap_or_default();
        match action {
            Action::RunPreCutoverHook => hooks::create(io, HookPoint::PreCutover).await,
            Action::ShutdownGuest | Action::PowerOff => {
                let login = match credentials::source_login(io).await? {
                    Ok(l) => l,
                    Err(p) => return Ok(Some(p)),
                };
                let done = if *action == Action::ShutdownGuest {
                    io.ctx.source.shutdown_guest(&login, moref).await
                } else {
                    io.ctx.source.power_off(&login, moref).await
                };
                Ok(done.err())
            }
            Action::TakeSnapshot => {
                let (Some(rec), Ok(login)) = (
                    warm::status(io.vmm).snapshot,
                    credentials::source_login(io).await?,
                ) else {
                    // The decision takes a recorded snapshot, with credentials it just used.
                    return Ok(None);
                };
                let description = warm::snapshot_description(io.vmm, &io.ctx.proof, &rec.name);
                Ok(io
                    .ctx
                    .source
                    .take_snapshot(&login, moref, &rec.name, &description)
                    .await
                    .err())
            }
            Action::CreateRoundJob => {
                let Some(RoundSeen {
                    snapshot: Some(Ok(warm::SnapshotSeen::Ours { moref: snap, disks })),
                    ..
                }) = &observed.round
                else {
                    return Ok(None);
                };
                let (Ok(volumes), Ok(image)) = (
                    precopy::volumes(io.vmm, &observed.block, disks),
                    io.converter_image(),
                ) else {
                    // The decision makes the Job only with every disk in the snapshot.
                    return Ok(None);
                };
                let job = cutover_job::precopy_job(io.vmm, &volumes, &image, snap)?;
                Ok(io.create(job).await?.problem(RENAME_HINT))
            }
            Action::EndRound => {
                // In the foreground: its pods gone before the next copy (or the cutover) writes.
                super::cleanup::delete_writer_job(io, &names::precopy_job_name(io.vmm)).await?;
                // The round's snapshot, removed as cleanup removes it: only once judged ferry's.
                Ok(super::cleanup::remove_snapshot(io).await?.map(|(_, p)| p))
            }
            Action::CreateJob => {
                let Ok(volumes) = warm::volumes(io.vmm, &observed.block) else {
                    // The decision creates the Job only with every disk's change id recorded.
                    return Ok(None);
                };
                let Ok(image) = io.converter_image() else {
                    // Converting refused a disallowed image before anything was copied.
                    return Ok(None);
                };
                let job = cutover_job::cutover_job(io.vmm, &volumes, &image)?;
                Ok(io.create(job).await?.problem(RENAME_HINT))
            }
        }
    }
}

/// The precopy round's Job, and its recorded snapshot when no Job of the round runs.
async fn observe_round(io: Io<'_>) -> Result<RoundSeen> {
    let seen = world::reporting_job(
        io,
        &names::precopy_job_name(io.vmm),
        cutover_job::PRECOPY_CONTAINER,
    )
    .await?;
    let job = seen.state;
    let snapshot = match warm::status(io.vmm).snapshot {
        Some(rec) if !matches!(job, JobState::Running { .. } | JobState::Deleting) => {
            Some(match credentials::source_login(io).await? {
                Ok(login) => snapshots::judged(io, &login, &rec, true).await,
                Err(p) => Err(p),
            })
        }
        _ => None,
    };
    Ok(RoundSeen {
        job,
        conflict: seen.conflict.map(|c| c.problem(RENAME_HINT)),
        failure: seen.failure,
        reported: seen.report.and_then(|m| parse_result(&m)),
        snapshot,
    })
}

/// Before the cutover began: the precopy rounds. A round in flight is taken through (snapshot,
/// Job, end) or — once the cutover is due — cut short; a round is started when due. `None`
/// when nothing of a round is to be done (the cutover's own rules follow). Pure.
fn round(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let seen = scope.world.round.as_ref()?;
    if let Some(p) = &seen.conflict {
        return Some(Outcome::from_problem(scope, p, Some(CutOver)));
    }
    let r = Round::of(scope);
    let Some(rec) = r.w.snapshot.clone() else {
        return r.between(&seen.job);
    };
    // The cutover is due once its source is looked at (see `observe`).
    if scope.world.source.is_some() {
        return Some(r.abandon(None, precopy::say::cut_short(r.n)));
    }
    match &seen.job {
        JobState::Deleting => Some(r.waiting(
            Step::Wait {
                requeue: scope.policy.wait_requeue,
            },
            say::old_round_deleting(),
        )),
        JobState::Running { .. } => Some(r.waiting(
            Step::Wait {
                requeue: scope.policy.progress_requeue,
            },
            precopy::say::copying(r.n, scope.disk_count()),
        )),
        JobState::Failed { reason, message } => Some(r.fail(say::round_job_failed(
            reason,
            seen.failure.as_deref().unwrap_or(message.as_str()),
        ))),
        JobState::Complete => Some(r.copied(seen, &rec)),
        JobState::Absent => r.snapshot_step(seen, rec),
    }
}

/// Round `n` of a warm migration as the rules see it, and the outcomes they end in.
struct Round<'a> {
    scope: &'a Scope<Observed>,
    w: ferry_crds::WarmStatus,
    n: i32,
    now: Time,
}

impl<'a> Round<'a> {
    fn of(scope: &'a Scope<Observed>) -> Self {
        let w = warm::status(&scope.vmm);
        let n = w.rounds + 1;
        let now = Time(crate::context::whole_seconds(scope.now));
        Round { scope, w, n, now }
    }

    fn waiting(&self, step: Step<Action>, msg: String) -> Outcome<Action> {
        Outcome::new(step, msg.clone()).with(CutOver, Unknown, Reason::WaitingForCutover, msg)
    }

    /// Again in a moment: a record was written that the next step acts on.
    fn soon(&self, w: ferry_crds::WarmStatus, msg: String) -> Outcome<Action> {
        let step = Step::Wait {
            requeue: Duration::from_millis(50),
        };
        self.waiting(step, msg).recording(Record {
            warm: Some(w),
            ..Record::default()
        })
    }

    fn end(
        &self,
        w: ferry_crds::WarmStatus,
        disks: Option<Vec<ferry_crds::DiskStatus>>,
        msg: String,
    ) -> Outcome<Action> {
        self.waiting(Step::Act(vec![Action::EndRound]), msg)
            .recording(Record {
                warm: Some(w),
                disks,
                ..Record::default()
            })
    }

    fn abandon(&self, why: Option<String>, msg: String) -> Outcome<Action> {
        self.end(
            precopy::abandoned(&self.scope.vmm, &self.now, why),
            None,
            msg,
        )
    }

    fn fail(&self, why: String) -> Outcome<Action> {
        let msg = precopy::say::failed(self.n, &why);
        self.abandon(Some(why), msg)
    }

    /// No round's snapshot recorded: a Job of an ended round goes first; a round starts when
    /// due (its snapshot's name recorded before it is taken) and the cutover is not.
    fn between(&self, job: &JobState) -> Option<Outcome<Action>> {
        let vmm = &self.scope.vmm;
        match job {
            // A Job of a round that ended is still going: no other copy starts until it is gone.
            JobState::Deleting => Some(self.waiting(
                Step::Wait {
                    requeue: self.scope.policy.wait_requeue,
                },
                say::old_round_deleting(),
            )),
            // A round's Job left by a crash after its round was recorded ended.
            JobState::Running { .. } | JobState::Complete | JobState::Failed { .. } => {
                Some(self.waiting(Step::Act(vec![Action::EndRound]), say::old_round_deleting()))
            }
            JobState::Absent
                if self.scope.world.source.is_none() && precopy::due(vmm, &self.w, &self.now) =>
            {
                let mut w = self.w.clone();
                w.snapshot = Some(ferry_crds::SnapshotRecord {
                    name: precopy::snapshot_name(vmm, self.n),
                    moref: None,
                    started_at: Some(self.now.clone()),
                });
                w.next_round_at = None;
                Some(self.soon(w, precopy::say::taking_snapshot(self.n)))
            }
            JobState::Absent => None,
        }
    }

    /// The round's Job completed: with every disk reported and the snapshot still ferry's,
    /// the round counts and the change ids move on; else it failed.
    fn copied(&self, seen: &RoundSeen, rec: &ferry_crds::SnapshotRecord) -> Outcome<Action> {
        let vmm = &self.scope.vmm;
        let all = (0..staged_keys(vmm).len()).all(|i| {
            seen.reported
                .as_ref()
                .is_some_and(|r| r.disks.contains_key(&i))
        });
        match (&seen.reported, &seen.snapshot) {
            (Some(reported), Some(Ok(warm::SnapshotSeen::Ours { disks, .. }))) if all => {
                match precopy::completed(vmm, reported, disks, &self.now) {
                    Ok((w, disks)) => self.end(w, Some(disks), precopy::say::ending(self.n)),
                    Err(why) => self.fail(why),
                }
            }
            (_, Some(Err(p))) if p.transient => Outcome::from_problem(self.scope, p, Some(CutOver)),
            _ if !all => self.fail(say::no_report(&names::precopy_job_name(vmm))),
            _ => self.fail(say::snapshot_gone(&rec.name)),
        }
    }

    /// The round's snapshot recorded, no Job: take the snapshot, record its moref, then make
    /// the Job — each once the last is seen done. Someone else's snapshot under the round's
    /// name is neither read nor removed.
    fn snapshot_step(
        &self,
        seen: &RoundSeen,
        rec: ferry_crds::SnapshotRecord,
    ) -> Option<Outcome<Action>> {
        let (scope, n) = (self.scope, self.n);
        match seen.snapshot.as_ref()? {
            Err(p) if p.transient => Some(Outcome::from_problem(scope, p, Some(CutOver))),
            Err(p) => Some(self.fail(p.message.clone())),
            Ok(warm::SnapshotSeen::Foreign(why) | warm::SnapshotSeen::Crowded { why, .. }) => {
                Some(Outcome::failure(
                    Reason::SnapshotFailed,
                    precopy::say::refused(n, why),
                    true,
                    Phase::CuttingOver,
                    CutOver,
                ))
            }
            Ok(warm::SnapshotSeen::Absent { .. }) if rec.moref.is_some() => {
                Some(self.fail(say::snapshot_gone(&rec.name)))
            }
            Ok(warm::SnapshotSeen::Absent { depth }) => Some(match warm::chain_too_deep(*depth) {
                Some(why) => self.fail(why),
                None => self.waiting(
                    Step::Act(vec![Action::TakeSnapshot]),
                    precopy::say::taking_snapshot(n),
                ),
            }),
            Ok(warm::SnapshotSeen::Ours { moref, .. }) if rec.moref.is_none() => {
                let mut w = self.w.clone();
                w.snapshot = Some(ferry_crds::SnapshotRecord {
                    moref: Some(moref.clone()),
                    ..rec
                });
                Some(self.soon(w, precopy::say::taking_snapshot(n)))
            }
            Ok(warm::SnapshotSeen::Ours { disks, .. })
                if !super::source_state::snapshot_changes(&scope.vmm, disks).is_empty() =>
            {
                Some(super::source_state::changed(
                    super::source_state::vm_name(&scope.vmm),
                    &format!("before precopy round {n}"),
                    &super::source_state::snapshot_changes(&scope.vmm, disks),
                    Phase::CuttingOver,
                    CutOver,
                ))
            }
            Ok(warm::SnapshotSeen::Ours { disks, .. }) => Some(
                match precopy::volumes(&scope.vmm, &scope.world.block, disks) {
                    Ok(_) => self.waiting(
                        Step::Act(vec![Action::CreateRoundJob]),
                        precopy::say::copying(n, scope.disk_count()),
                    ),
                    Err(why) => self.fail(why),
                },
            ),
        }
    }
}

/// Decides the CuttingOver step: the first rule that applies. Pure.
pub fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
    conflict(scope)
        .or_else(|| volumes_lost(scope))
        .or_else(|| round(scope))
        .or_else(|| waiting(scope))
        .or_else(|| begin(scope))
        .or_else(|| pre_hook(scope))
        .or_else(|| source_unknown(scope))
        .or_else(|| disks_changed(scope))
        .or_else(|| source_on(scope))
        .or_else(|| record_final_state(scope))
        .unwrap_or_else(|| match &scope.world.job {
            JobState::Absent => create_job(scope),
            JobState::Deleting => Outcome::new(
                Step::Wait {
                    requeue: scope.policy.wait_requeue,
                },
                say::old_job_deleting(),
            ),
            JobState::Running { .. } => {
                let msg = say::copying(scope.disk_count());
                Outcome::new(
                    Step::Wait {
                        requeue: scope.policy.progress_requeue,
                    },
                    msg.clone(),
                )
                .with(CutOver, Unknown, Reason::InProgress, msg)
            }
            JobState::Failed { reason, message } => Outcome::failure(
                Reason::CutoverFailed,
                say::job_failed(
                    reason,
                    scope.world.message.as_deref().unwrap_or(message.as_str()),
                ),
                true,
                Phase::CuttingOver,
                CutOver,
            ),
            JobState::Complete => cut_over(scope),
        })
}

fn conflict(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let p = scope.world.conflict.as_ref()?;
    Some(Outcome::from_problem(scope, p, Some(CutOver)))
}

/// The migration's DataVolumes not there as its own (read from the cache, which asks the
/// apiserver for a recorded child it does not hold).
async fn lost_volumes(io: Io<'_>) -> Result<Vec<String>> {
    let mut lost = vec![];
    for i in 0..staged_keys(io.vmm).len() {
        let name = names::datavolume_name(io.vmm, i);
        let kept = match io.read::<DataVolume>(&name).await? {
            Some(d) => {
                d.metadata.deletion_timestamp.is_none()
                    && matches!(io.own(&d), Ownership::Ours { .. })
            }
            None => false,
        };
        if !kept {
            lost.push(name);
        }
    }
    Ok(lost)
}

/// A DataVolume deleted after its import took the first copy and every precopy round with it:
/// a cutover has nothing to copy onto, and the source is not powered off for one. Importing
/// again would not mend it: the change ids recorded since the first copy would then skip the
/// rounds' changes, and the disk would be silently wrong. Only a new migration copies afresh.
fn volumes_lost(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    if scope.world.lost.is_empty() {
        return None;
    }
    Some(Outcome::failure(
        Reason::CutoverFailed,
        say::volumes_lost(&scope.world.lost),
        false,
        Phase::CuttingOver,
        CutOver,
    ))
}

fn begun(scope: &Scope<Observed>) -> bool {
    warm::status(&scope.vmm).cutover_started_at.is_some()
}

/// Not due yet: the source runs on; looked at again at `cutoverAt` (a spec change — the
/// operator's `cutover: true` — is an event of its own).
fn waiting(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    if begun(scope) || scope.world.source.is_some() {
        return None;
    }
    let at = scope
        .vmm
        .spec
        .warm
        .as_ref()
        .and_then(|w| w.cutover_at.clone());
    let w = warm::status(&scope.vmm);
    let next = precopy::next_round_at(&scope.vmm, &w);
    let until = |t: &Time| {
        Duration::try_from(t.0.duration_since(scope.now)).unwrap_or_default()
            + Duration::from_millis(100)
    };
    let requeue = [at.as_ref(), next.as_ref()]
        .into_iter()
        .flatten()
        .map(until)
        .fold(Duration::from_secs(300), Duration::min);
    let msg = say::waiting(at.as_ref(), w.rounds, next.as_ref());
    Some(Outcome::new(Step::Wait { requeue }, msg.clone()).with(
        CutOver,
        Unknown,
        Reason::WaitingForCutover,
        msg,
    ))
}

/// Due: the cutover's start is recorded first, so that it is never taken back (the source is
/// powered off from here on, whatever `spec.warm` says later).
fn begin(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    if begun(scope) {
        return None;
    }
    let mut w = warm::status(&scope.vmm);
    w.cutover_started_at = Some(Time(crate::context::whole_seconds(scope.now)));
    let msg = say::beginning();
    Some(
        Outcome::new(
            Step::Wait {
                requeue: Duration::from_millis(50),
            },
            msg.clone(),
        )
        .with(CutOver, Unknown, Reason::InProgress, msg)
        .recording(Record {
            warm: Some(w),
            ..Record::default()
        }),
    )
}

/// Whether the `preCutover` hook holds the cutover: one is pending, and neither the source's
/// power-off nor the cutover Job has begun. Pure.
fn runs_pre_hook(vmm: &ferry_crds::VirtualMachineMigration) -> bool {
    vmm.status
        .as_ref()
        .is_none_or(|s| s.source_power_off.is_none())
        && hooks::pending(vmm, HookPoint::PreCutover).is_some()
}

/// The cutover began: the `preCutover` hook runs before the source is powered off, and must
/// succeed for the cutover to go on.
fn pre_hook(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    if !runs_pre_hook(&scope.vmm) || scope.world.job != JobState::Absent {
        return None;
    }
    hooks::decide(
        scope,
        HookPoint::PreCutover,
        scope.world.hook.as_ref(),
        Action::RunPreCutoverHook,
        CutOver,
        Phase::CuttingOver,
    )
}

fn source_unknown(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let Some(Err(p)) = &scope.world.source else {
        return None;
    };
    Some(Outcome::from_problem(scope, p, Some(CutOver)))
}

/// The source's disks are not the ones the first copy and its rounds copied (one added,
/// removed or resized since Preparing found them): no cutover copies an old set, and the source
/// is not powered off for one.
fn disks_changed(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let marks = match scope.world.marks.as_ref()? {
        Ok(m) => m,
        Err(p) => return Some(Outcome::from_problem(scope, p, Some(CutOver))),
    };
    let copied = scope
        .vmm
        .status
        .as_ref()
        .and_then(|s| s.source.as_ref())
        .map(|s| s.disks.as_slice())
        .unwrap_or_default();
    let mut changes = super::source_state::disk_set_changes(copied, &marks.state.disks);
    let counted = marks.state.num_virtual_disks;
    if counted.is_some_and(|n| usize::try_from(n).ok() != Some(copied.len())) && changes.is_empty()
    {
        changes.push(format!(
            "vSphere counts {} disks, {} copied",
            counted.unwrap_or_default(),
            copied.len()
        ));
    }
    (!changes.is_empty()).then(|| {
        super::source_state::changed(
            super::source_state::vm_name(&scope.vmm),
            "while it was copied ahead of its cutover",
            &changes,
            Phase::CuttingOver,
            CutOver,
        )
    })
}

/// The source is off for the cutover and its Job is not made yet: what defines the copy the Job
/// makes is recorded first, to be read again before the migrated VM is made.
fn record_final_state(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let Some(Ok(marks)) = &scope.world.marks else {
        return None;
    };
    if scope.world.job != JobState::Absent
        || super::source_state::recorded_by(&scope.vmm, Phase::CuttingOver).is_some()
    {
        return None;
    }
    let msg = say::recording_final_state();
    Some(
        Outcome::new(
            Step::Wait {
                requeue: Duration::from_millis(50),
            },
            msg.clone(),
        )
        .with(CutOver, Unknown, Reason::InProgress, msg)
        .recording(Record {
            source_state: Some(super::source_state::recorded(
                &scope.vmm,
                &marks.state,
                Phase::CuttingOver,
            )),
            ..Record::default()
        }),
    )
}

/// The source still runs: powered off as Preparing powers a cold one off, before the Job is
/// made. Once the Job exists, a running source is someone's doing: the copy is not final.
fn source_on(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let Some(Ok((power @ (PowerState::PoweredOn | PowerState::Suspended), tools))) =
        &scope.world.source
    else {
        return None;
    };
    if scope.world.job != JobState::Absent {
        return Some(Outcome::failure(
            Reason::SourcePoweredOn,
            say::powered_on_during_copy(),
            true,
            Phase::CuttingOver,
            CutOver,
        ));
    }
    // The operator said ferry must not switch the source off: they do it, then retry.
    if !scope.vmm.spec.source.power.power_off {
        return Some(Outcome::failure(
            Reason::SourcePoweredOn,
            say::kept_on(),
            true,
            Phase::CuttingOver,
            CutOver,
        ));
    }
    let (step, message, power_off) =
        match power_off_step(&scope.vmm, scope.now, Some(*power), Some(*tools)) {
            PowerOffStep::Act(action, done) => {
                let act = match action {
                    PowerAction::ShutdownGuest => Action::ShutdownGuest,
                    PowerAction::PowerOff => Action::PowerOff,
                };
                (
                    Step::Act(vec![act]),
                    say::powering_off(act == Action::ShutdownGuest),
                    Some(done),
                )
            }
            PowerOffStep::Wait { left } => (
                Step::Wait {
                    requeue: left.min(scope.policy.source_poll) + Duration::from_millis(100),
                },
                say::waiting_for_shutdown(left.as_secs()),
                None,
            ),
        };
    Some(
        Outcome::new(step, message.clone())
            .with(CutOver, Unknown, Reason::InProgress, message)
            .recording(Record {
                power_off,
                ..Record::default()
            }),
    )
}

fn create_job(scope: &Scope<Observed>) -> Outcome<Action> {
    if let Err(missing) = warm::volumes(&scope.vmm, &scope.world.block) {
        return Outcome::failure(
            Reason::CutoverFailed,
            say::unrecorded(&missing),
            false,
            Phase::CuttingOver,
            CutOver,
        );
    }
    let msg = say::copying(scope.disk_count());
    Outcome::new(Step::Act(vec![Action::CreateJob]), msg.clone()).with(
        CutOver,
        Unknown,
        Reason::InProgress,
        msg,
    )
}

/// The Job completed: done only when ferry's delta program reported every disk (its read-back
/// matched), and the source is still off.
fn cut_over(scope: &Scope<Observed>) -> Outcome<Action> {
    let n = staged_keys(&scope.vmm).len();
    let Some(reported) = scope
        .world
        .reported
        .as_ref()
        .filter(|r| (0..n).all(|i| r.disks.contains_key(&i)))
    else {
        return Outcome::failure(
            Reason::CutoverFailed,
            say::no_report(&names::cutover_job_name(&scope.vmm)),
            true,
            Phase::CuttingOver,
            CutOver,
        );
    };
    let bytes: u64 = reported.disks.values().map(|(b, _)| *b).sum();
    let mut w = warm::status(&scope.vmm);
    w.cutover_bytes = Some(i64::try_from(bytes).unwrap_or(i64::MAX));
    let msg = say::cut_over(bytes);
    Outcome::new(
        Step::Advance {
            to: volumes::after_the_copy(&scope.vmm),
        },
        msg.clone(),
    )
    .with(CutOver, True, Reason::CutOver, msg)
    .recording(Record {
        warm: Some(w),
        ..Record::default()
    })
}

/// What CuttingOver tells people.
mod say {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    pub(super) fn volumes_lost(names: &[String]) -> String {
        format!(
            "DataVolume(s) {} were deleted after the import: the first copy and its precopy rounds went with them, so there is nothing to cut over onto; delete this migration and create it again to copy the VM afresh",
            names.join(", ")
        )
    }

    pub(super) fn waiting(at: Option<&Time>, rounds: i32, next: Option<&Time>) -> String {
        let copied = match (rounds, next) {
            (r, Some(n)) => format!("{r} round(s) copied, the next at {}", n.0),
            (r, None) => format!("{r} round(s) copied"),
        };
        match at {
            Some(t) => format!(
                "imported and verified, {copied}; the source runs on until the cutover at {}",
                t.0
            ),
            None => format!(
                "imported and verified, {copied}; the source runs on until the cutover (set spec.warm.cutover: true, or spec.warm.cutoverAt)"
            ),
        }
    }

    pub(super) fn beginning() -> String {
        "cutting over: the source is powered off, then what changed since the last round is copied"
            .into()
    }

    pub(super) fn powering_off(shutdown: bool) -> String {
        if shutdown {
            "cutting over: asked the source's guest to shut down".into()
        } else {
            "cutting over: powering the source off".into()
        }
    }

    pub(super) fn waiting_for_shutdown(left: u64) -> String {
        format!(
            "cutting over: waiting for the source's guest to shut down ({left}s left before a hard power-off)"
        )
    }

    pub(super) fn copying(disks: usize) -> String {
        format!("cutting over: copying what changed on {disks} disk(s) since the last round")
    }

    pub(super) fn old_round_deleting() -> String {
        "waiting for the last precopy round's Job to go away".into()
    }

    pub(super) fn snapshot_gone(name: &str) -> String {
        format!(
            "the round's snapshot {name:?} is gone from the source before its changes were read"
        )
    }

    pub(super) fn old_job_deleting() -> String {
        "waiting for the previous cutover Job to go away".into()
    }

    pub(super) fn job_failed(reason: &str, message: &str) -> String {
        format!("the cutover Job failed ({reason}): {message}")
    }

    pub(super) fn recording_final_state() -> String {
        "cutting over: the source is off; recording its disks and configuration as the copy will hold them".into()
    }

    pub(super) fn round_job_failed(reason: &str, message: &str) -> String {
        format!("the round's Job failed ({reason}): {message}")
    }

    pub(super) fn powered_on_during_copy() -> String {
        "the source was powered on while its last changes were copied: the copy is not its final state; power it off and raise spec.retry".into()
    }

    pub(super) fn kept_on() -> String {
        "the cutover needs the source off and spec.source.power.powerOff is false: power it off in vSphere, then raise spec.retry".into()
    }

    pub(super) fn unrecorded(missing: &str) -> String {
        format!(
            "no change id recorded for {missing}: the first copy must be taken again (retry from Preparing by cancelling and retrying)"
        )
    }

    pub(super) fn no_report(job: &str) -> String {
        format!(
            "the cutover Job {job} completed without ferry's report of every disk: nothing is taken as copied"
        )
    }

    pub(super) fn cut_over(bytes: u64) -> String {
        format!("cut over: {bytes} bytes changed since the last round, copied and read back")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use ferry_crds::{
        DiscoveredDisk, DiscoveredSource, DiskStatus, MigrationMode, WarmSpec, fixtures,
    };

    fn warm_vmm() -> ferry_crds::VirtualMachineMigration {
        let mut vmm = fixtures::migration("m");
        vmm.spec.mode = MigrationMode::Warm;
        vmm.spec.warm = Some(WarmSpec::default());
        let s = vmm.status.get_or_insert_with(Default::default);
        s.phase = Phase::CuttingOver;
        s.source = Some(Box::new(DiscoveredSource {
            moref: Some("vm-1".into()),
            disks: vec![DiscoveredDisk {
                key: 2000,
                datastore_path: "[ds] vm/disk1.vmdk".into(),
                capacity_bytes: 1 << 30,
                ..DiscoveredDisk::default()
            }],
            ..DiscoveredSource::default()
        }));
        s.disks = vec![DiskStatus {
            index: 0,
            staged_object: Some("k".into()),
            change_id: Some("52 aa/1".into()),
            device_key: Some(2000),
            ..DiskStatus::default()
        }];
        vmm
    }

    fn world() -> Observed {
        Observed {
            source: None,
            marks: None,
            job: JobState::Absent,
            conflict: None,
            message: None,
            reported: None,
            block: vec![false],
            round: None,
            lost: vec![],
            hook: None,
        }
    }

    fn round_seen(job: JobState, snapshot: Option<warm::SnapshotSeen>) -> Observed {
        Observed {
            round: Some(RoundSeen {
                job,
                conflict: None,
                failure: None,
                reported: None,
                snapshot: snapshot.map(Ok),
            }),
            ..world()
        }
    }

    fn frozen(id: &str) -> Vec<ferry_vsphere::SnapshotDisk> {
        vec![ferry_vsphere::SnapshotDisk {
            key: 2000,
            datastore_path: "[ds] vm/disk1-snap.vmdk".into(),
            capacity_bytes: 1 << 30,
            change_id: Some(id.into()),
        }]
    }

    #[test]
    fn a_precopy_round_snapshots_copies_then_ends_and_moves_the_change_ids_on() {
        let mut vmm = warm_vmm();
        let t0 = fixtures::t0();
        let earlier = Time(t0.0.checked_sub(Duration::from_secs(7200)).unwrap());
        vmm.status.as_mut().unwrap().warm = Some(Box::new(ferry_crds::WarmStatus {
            rounds: 1,
            last_round_at: Some(earlier),
            ..Default::default()
        }));
        // Due (an hour after the last round): its snapshot's name recorded first.
        let o = decide(&scope(vmm.clone(), round_seen(JobState::Absent, None)));
        let w = o.record.warm.clone().unwrap();
        let rec = w.snapshot.clone().expect("the round's snapshot named");
        assert!(rec.name.ends_with("-2"), "{}", rec.name);
        assert_eq!(o.conditions[0].reason, Reason::WaitingForCutover);
        vmm.status.as_mut().unwrap().warm = Some(Box::new(w));
        // Not there yet: taken.
        let o = decide(&scope(
            vmm.clone(),
            round_seen(
                JobState::Absent,
                Some(warm::SnapshotSeen::Absent { depth: 0 }),
            ),
        ));
        assert_eq!(o.step, Step::Act(vec![Action::TakeSnapshot]));
        // Ferry's (by its stamp): its moref recorded, then the round's Job made.
        let ours = warm::SnapshotSeen::Ours {
            moref: "snapshot-7".into(),
            disks: frozen("52 aa/2"),
        };
        let o = decide(&scope(
            vmm.clone(),
            round_seen(JobState::Absent, Some(ours.clone())),
        ));
        let w = o.record.warm.clone().unwrap();
        assert_eq!(
            w.snapshot.as_ref().unwrap().moref.as_deref(),
            Some("snapshot-7")
        );
        vmm.status.as_mut().unwrap().warm = Some(Box::new(w));
        let o = decide(&scope(
            vmm.clone(),
            round_seen(JobState::Absent, Some(ours.clone())),
        ));
        assert_eq!(o.step, Step::Act(vec![Action::CreateRoundJob]));
        // Running: the source runs on, the round waits.
        let o = decide(&scope(
            vmm.clone(),
            round_seen(JobState::Running { failed: 0 }, None),
        ));
        assert!(matches!(o.step, Step::Wait { .. }));
        // Reported: the round ends, the change ids move on to the round's.
        let mut done = round_seen(JobState::Complete, Some(ours.clone()));
        done.round.as_mut().unwrap().reported = Some(DeltaResult {
            disks: [(0, (5 << 20, "ab".into()))].into(),
        });
        let o = decide(&scope(vmm.clone(), done.clone()));
        assert_eq!(o.step, Step::Act(vec![Action::EndRound]));
        let w = o.record.warm.clone().unwrap();
        assert_eq!((w.rounds, w.snapshot.clone()), (2, None));
        assert_eq!(w.last_delta_bytes, Some(5 << 20));
        assert!(w.predicted_cutover_copy_seconds.is_some() && w.next_round_at.is_some());
        assert_eq!(
            o.record.disks.unwrap()[0].change_id.as_deref(),
            Some("52 aa/2")
        );
        // Its Job failed: the round ends, the change ids stay, the failure is said.
        let o = decide(&scope(
            vmm.clone(),
            round_seen(
                JobState::Failed {
                    reason: "BackoffLimitExceeded".into(),
                    message: "FileFault".into(),
                },
                Some(ours),
            ),
        ));
        assert_eq!(o.step, Step::Act(vec![Action::EndRound]));
        assert!(o.record.disks.is_none());
        let w = o.record.warm.unwrap();
        assert_eq!(w.rounds, 1);
        assert!(w.last_round_failure.unwrap().contains("FileFault"));
        // The cutover comes: the round in flight is cut short before anything else.
        let mut cut = round_seen(JobState::Running { failed: 0 }, None);
        cut.source = Some(Ok((PowerState::PoweredOn, ToolsState::Running)));
        let o = decide(&scope(vmm.clone(), cut));
        assert_eq!(o.step, Step::Act(vec![Action::EndRound]));
        assert!(o.record.warm.unwrap().snapshot.is_none());
        // A round's Job still going away holds the cutover's Job back.
        vmm.status.as_mut().unwrap().warm.as_mut().unwrap().snapshot = None;
        let mut going = round_seen(JobState::Deleting, None);
        going.source = Some(Ok((PowerState::PoweredOff, ToolsState::NotRunning)));
        let o = decide(&scope(vmm, going));
        assert!(matches!(o.step, Step::Wait { .. }), "{o:?}");
    }

    fn scope(vmm: ferry_crds::VirtualMachineMigration, w: Observed) -> Scope<Observed> {
        Scope::new(vmm, fixtures::t0().0, Policy::default(), w)
    }

    #[test]
    fn the_source_runs_on_until_the_cutover_is_asked_for() {
        let o = decide(&scope(warm_vmm(), world()));
        assert!(matches!(o.step, Step::Wait { .. }), "{o:?}");
        assert_eq!(o.conditions[0].reason, Reason::WaitingForCutover);
        assert!(o.record.power_off.is_none());
    }

    #[test]
    fn a_datavolume_deleted_after_the_import_fails_the_cutover_before_the_source_is_touched() {
        let lost = || Observed {
            source: Some(Ok((PowerState::PoweredOn, ToolsState::Running))),
            lost: vec!["m-disk-0".to_owned()],
            ..world()
        };
        let mut due = warm_vmm();
        due.spec.warm.as_mut().unwrap().cutover = true;
        let mut begun = due.clone();
        begun.status.as_mut().unwrap().warm = Some(Box::new(ferry_crds::WarmStatus {
            cutover_started_at: Some(fixtures::t0()),
            ..Default::default()
        }));
        for (what, vmm, w) in [
            ("waiting for the cutover", warm_vmm(), lost()),
            (
                "in a precopy round",
                warm_vmm(),
                Observed {
                    lost: vec!["m-disk-0".to_owned()],
                    ..round_seen(JobState::Running { failed: 0 }, None)
                },
            ),
            ("the cutover due, the source on", due, lost()),
            ("the cutover begun", begun, lost()),
        ] {
            let o = decide(&scope(vmm, w));
            match &o.step {
                Step::Fail {
                    reason: Reason::CutoverFailed,
                    retriable: false,
                    message,
                    ..
                } => assert!(
                    message.contains("m-disk-0") && message.contains("create it again"),
                    "{what}: {message}"
                ),
                other => panic!("{what}: {other:?}"),
            }
            assert!(
                o.record.power_off.is_none(),
                "{what}: the source is not touched"
            );
        }
    }

    fn marks(keys: &[(i32, i64)], power: PowerState) -> crate::ports::Marks {
        crate::ports::Marks {
            power,
            state: ferry_crds::SourceState {
                read_at: "2026-12-06T10:00:00Z".into(),
                change_version: Some("v1".into()),
                num_virtual_disks: Some(i32::try_from(keys.len()).unwrap()),
                disks: keys
                    .iter()
                    .map(|(key, cap)| ferry_crds::SourceDiskState {
                        key: *key,
                        file: format!("[ds] vm/disk{key}.vmdk"),
                        capacity_bytes: *cap,
                        change_id: Some("52 aa/9".into()),
                    })
                    .collect(),
                ..Default::default()
            },
        }
    }

    fn begun(vmm: &ferry_crds::VirtualMachineMigration) -> ferry_crds::VirtualMachineMigration {
        let mut v = vmm.clone();
        v.spec.warm.as_mut().unwrap().cutover = true;
        v.status.as_mut().unwrap().warm = Some(Box::new(ferry_crds::WarmStatus {
            cutover_started_at: Some(fixtures::t0()),
            ..Default::default()
        }));
        v
    }

    #[test]
    fn a_disk_added_while_the_source_ran_fails_the_cutover_before_the_source_is_touched() {
        for (what, keys) in [
            ("added", vec![(2000, 1 << 30), (2001, 16 << 20)]),
            ("resized", vec![(2000, 2 << 30)]),
            ("removed and another added", vec![(2002, 1 << 30)]),
        ] {
            let o = decide(&scope(
                begun(&warm_vmm()),
                Observed {
                    source: Some(Ok((PowerState::PoweredOn, ToolsState::Running))),
                    marks: Some(Ok(marks(&keys, PowerState::PoweredOn))),
                    ..world()
                },
            ));
            let Step::Fail {
                reason, retriable, ..
            } = &o.step
            else {
                panic!("{what}: {:?}", o.step);
            };
            assert_eq!(
                (*reason, *retriable),
                (Reason::SourceChanged, true),
                "{what}"
            );
            assert!(o.actions().is_empty(), "{what}: not powered off");
            assert!(o.record.power_off.is_none(), "{what}");
        }
    }

    #[test]
    fn off_for_the_cutover_the_source_is_recorded_before_the_job_is_made() {
        let vmm = begun(&warm_vmm());
        let off = || Observed {
            source: Some(Ok((PowerState::PoweredOff, ToolsState::NotRunning))),
            marks: Some(Ok(marks(&[(2000, 1 << 30)], PowerState::PoweredOff))),
            ..world()
        };
        let o = decide(&scope(vmm.clone(), off()));
        assert!(o.actions().is_empty(), "{:?}", o.step);
        let rec = o.record.source_state.clone().expect("recorded");
        assert_eq!(rec.recorded_in, Phase::CuttingOver);
        assert_eq!(rec.disks[0].change_id.as_deref(), Some("52 aa/9"));
        let mut recorded = vmm.clone();
        recorded.status.as_mut().unwrap().source_state = Some(Box::new(rec));
        let o = decide(&scope(recorded, off()));
        assert_eq!(o.actions(), vec![Action::CreateJob], "{:?}", o.step);
    }

    #[test]
    fn a_warm_pre_cutover_hook_runs_once_the_cutover_began_and_before_the_power_off() {
        let mut vmm = begun(&warm_vmm());
        vmm.spec.hooks = Some(ferry_crds::fixtures::pre_cutover_hooks());
        vmm.status.as_mut().unwrap().attempts = 1;
        let on = |job: JobState| Observed {
            source: Some(Ok((PowerState::PoweredOn, ToolsState::Running))),
            marks: Some(Ok(marks(&[(2000, 1 << 30)], PowerState::PoweredOn))),
            hook: Some(hooks::Seen {
                job,
                failure: None,
                conflict: None,
            }),
            ..world()
        };
        let o = decide(&scope(vmm.clone(), on(JobState::Absent)));
        assert_eq!(o.step, Step::Act(vec![Action::RunPreCutoverHook]));
        assert!(o.record.power_off.is_none());
        let o = decide(&scope(
            vmm.clone(),
            on(JobState::Failed {
                reason: "DeadlineExceeded".into(),
                message: "Job was active longer than specified deadline".into(),
            }),
        ));
        let Step::Fail { reason, resume, .. } = &o.step else {
            panic!("{:?}", o.step)
        };
        assert_eq!((*reason, *resume), (Reason::HookFailed, Phase::CuttingOver));
        assert!(o.actions().is_empty() && o.record.power_off.is_none());
        // Its success recorded: the source is shut down.
        let done = decide(&scope(vmm.clone(), on(JobState::Complete)))
            .record
            .hook
            .unwrap();
        vmm.status.as_mut().unwrap().hooks = vec![done];
        let o = decide(&scope(vmm, on(JobState::Complete)));
        assert_eq!(o.step, Step::Act(vec![Action::ShutdownGuest]));
    }

    #[test]
    fn the_cutover_is_recorded_then_the_source_powered_off_then_the_job_made() {
        let mut vmm = warm_vmm();
        vmm.spec.warm.as_mut().unwrap().cutover = true;
        let on = Observed {
            source: Some(Ok((PowerState::PoweredOn, ToolsState::Running))),
            ..world()
        };
        let o = decide(&scope(vmm.clone(), on.clone()));
        assert!(
            o.record.warm.unwrap().cutover_started_at.is_some(),
            "recorded first"
        );
        assert!(matches!(o.step, Step::Wait { .. }));
        vmm.status.as_mut().unwrap().warm = Some(Box::new(ferry_crds::WarmStatus {
            cutover_started_at: Some(fixtures::t0()),
            ..Default::default()
        }));
        // Taken back after it began: the cutover goes on.
        vmm.spec.warm.as_mut().unwrap().cutover = false;
        let o = decide(&scope(vmm.clone(), on));
        assert_eq!(o.step, Step::Act(vec![Action::ShutdownGuest]));
        assert!(o.record.power_off.unwrap().shutdown_guest_at.is_some());
        let off = Observed {
            source: Some(Ok((PowerState::PoweredOff, ToolsState::NotRunning))),
            ..world()
        };
        let o = decide(&scope(vmm.clone(), off.clone()));
        assert_eq!(o.step, Step::Act(vec![Action::CreateJob]));
        let mut hands_off = vmm.clone();
        hands_off.spec.source.power.power_off = false;
        let o = decide(&scope(
            hands_off,
            Observed {
                source: Some(Ok((PowerState::PoweredOn, ToolsState::Running))),
                ..world()
            },
        ));
        assert!(
            matches!(
                o.step,
                Step::Fail {
                    reason: Reason::SourcePoweredOn,
                    ..
                }
            ),
            "powerOff: false is never overridden by the cutover: {o:?}"
        );
        let running = Observed {
            source: Some(Ok((PowerState::PoweredOn, ToolsState::Running))),
            job: JobState::Running { failed: 0 },
            ..world()
        };
        let o = decide(&scope(vmm.clone(), running));
        assert!(
            matches!(
                o.step,
                Step::Fail {
                    reason: Reason::SourcePoweredOn,
                    ..
                }
            ),
            "a source powered on under the last copy: {o:?}"
        );
        let done = Observed {
            job: JobState::Complete,
            reported: Some(DeltaResult {
                disks: [(0, (3 << 20, "ab".into()))].into(),
            }),
            ..off.clone()
        };
        let o = decide(&scope(vmm.clone(), done));
        assert_eq!(
            o.step,
            Step::Advance {
                to: Phase::CreatingVM
            }
        );
        assert_eq!(o.record.warm.unwrap().cutover_bytes, Some(3 << 20));
        let unreported = Observed {
            job: JobState::Complete,
            ..off
        };
        let o = decide(&scope(vmm, unreported));
        assert!(
            matches!(
                o.step,
                Step::Fail {
                    reason: Reason::CutoverFailed,
                    ..
                }
            ),
            "a Job that exited 0 without ferry's report is no cutover: {o:?}"
        );
    }

    #[test]
    fn the_cutover_volumes_name_each_disks_change_id_and_the_vms_own_disk() {
        let v = warm::volumes(&warm_vmm(), &[true]).unwrap();
        assert_eq!(v[0].change_id, "52 aa/1");
        assert_eq!(v[0].datastore_path, "[ds] vm/disk1.vmdk");
        assert!(v[0].block);
        let mut bare = warm_vmm();
        bare.status.as_mut().unwrap().disks[0].change_id = None;
        assert_eq!(warm::volumes(&bare, &[]).unwrap_err(), "disk 0");
    }
}
