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
    Phase, PowerState, Reason, ToolsState, names,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::checkpoint::Checkpoint;
use super::cleanup::Cleanup;
use super::credentials;
use super::io::Io;
use super::outcome::{Outcome, Record, Step};
use super::preparing::{Action as PowerAction, PowerOffStep, power_off_step};
use super::scope::Scope;
use super::warm;
use super::world::{self, RENAME_HINT, staged_keys};
use crate::Result;
use crate::apis::job::JobState;
use crate::children::cutover_job::{self, CutoverVolume};
use crate::convert::delta::{DeltaResult, parse_result};
use crate::problem::Problem;

/// The CuttingOver checkpoint.
#[derive(Debug)]
pub struct CuttingOver;

/// What CuttingOver observes.
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    /// The source's power and Tools, looked at once the cutover is due.
    pub source: Option<std::result::Result<(PowerState, ToolsState), Problem>>,
    /// The cutover Job (`Absent` when its name is held by an object not ours: `conflict`).
    pub job: JobState,
    /// The Job's name held by someone else's object.
    pub conflict: Option<Problem>,
    /// What its last failed pod said.
    pub message: Option<String>,
    /// Once complete: what a pod of it that ran ferry's delta program reported.
    pub reported: Option<DeltaResult>,
    /// Per disk, whether its claim is a block device; read only when the Job is to be made.
    pub block: Vec<bool>,
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
}

impl Checkpoint for CuttingOver {
    const PHASE: Phase = Phase::CuttingOver;
    const CONDITIONS: &'static [ConditionType] = &[CutOver];
    const RETRY_CLEANUP: &'static [Cleanup] = &[Cleanup::CutoverJob];
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
        let source = if begun || due {
            Some(match credentials::source_login(io).await? {
                Ok(login) => {
                    io.ctx
                        .source
                        .power(&login, &world::source_moref(io.vmm).unwrap_or_default())
                        .await
                }
                Err(p) => Err(p),
            })
        } else {
            None
        };
        let seen =
            world::reporting_job(io, &names::cutover_job_name(io.vmm), cutover_job::CONTAINER)
                .await?;
        let state = seen.state;
        let conflict = seen.conflict.map(|c| c.problem(RENAME_HINT));
        let message = seen.failure;
        let reported = seen.report.and_then(|m| parse_result(&m));
        let block = if begun && state == JobState::Absent && conflict.is_none() {
            world::block_claims(io, staged_keys(io.vmm).len()).await?
        } else {
            vec![]
        };
        Ok(Observed {
            source,
            job: state,
            conflict,
            message,
            reported,
            block,
        })
    }

    fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
        decide(scope)
    }

    async fn execute(io: Io<'_>, observed: &Observed, action: &Action) -> Result<Option<Problem>> {
        let moref = world::source_moref(io.vmm).unwrap_or_default();
        match action {
            Action::ShutdownGuest | Action::PowerOff => {
                let login = match credentials::source_login(io).await? {
                    Ok(l) => l,
                    Err(p) => return Ok(Some(p)),
                };
                let done = if *action == Action::ShutdownGuest {
                    io.ctx.source.shutdown_guest(&login, &moref).await
                } else {
                    io.ctx.source.power_off(&login, &moref).await
                };
                Ok(done.err())
            }
            Action::CreateJob => {
                let Ok(volumes) = volumes(io.vmm, &observed.block) else {
                    // The decision creates the Job only with every disk's change id recorded.
                    return Ok(None);
                };
                let Ok(image) = io
                    .ctx
                    .policy
                    .converter_image_for(io.vmm.spec.conversion.image.as_deref())
                else {
                    // Converting refused a disallowed image before anything was copied.
                    return Ok(None);
                };
                let job = cutover_job::cutover_job(io.vmm, &volumes, &image)?;
                Ok(io.create(job).await?.problem(RENAME_HINT))
            }
        }
    }
}

/// What the cutover Job writes: per disk its claim, device key, the first copy's change id and
/// the VM's own disk. Pure.
///
/// # Errors
/// The disks whose change id or device key is not recorded.
pub fn volumes(
    vmm: &ferry_crds::VirtualMachineMigration,
    block: &[bool],
) -> std::result::Result<Vec<CutoverVolume>, String> {
    let status = vmm.status.as_ref();
    let disks = status.map(|s| s.disks.as_slice()).unwrap_or_default();
    let source = status
        .and_then(|s| s.source.as_ref())
        .map(|s| s.disks.as_slice())
        .unwrap_or_default();
    let mut out = vec![];
    let mut missing = vec![];
    for i in 0..staged_keys(vmm).len() {
        let d = disks.get(i);
        match (
            d.and_then(|d| d.device_key),
            d.and_then(|d| d.change_id.clone()),
            source.get(i),
        ) {
            (Some(device_key), Some(change_id), Some(src)) => out.push(CutoverVolume {
                index: i,
                claim: names::datavolume_name(vmm, i),
                block: block.get(i).copied().unwrap_or(false),
                device_key,
                change_id,
                datastore_path: src.datastore_path.clone(),
            }),
            _ => missing.push(format!("disk {i}")),
        }
    }
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing.join(", "))
    }
}

/// Decides the CuttingOver step: the first rule that applies. Pure.
pub fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
    conflict(scope)
        .or_else(|| waiting(scope))
        .or_else(|| begin(scope))
        .or_else(|| source_unknown(scope))
        .or_else(|| source_on(scope))
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
    let requeue = at.as_ref().map_or(Duration::from_secs(300), |t| {
        Duration::try_from(t.0.duration_since(scope.now))
            .unwrap_or_default()
            .min(Duration::from_secs(300))
            + Duration::from_millis(100)
    });
    let msg = say::waiting(at.as_ref());
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

fn source_unknown(scope: &Scope<Observed>) -> Option<Outcome<Action>> {
    let Some(Err(p)) = &scope.world.source else {
        return None;
    };
    Some(Outcome::from_problem(scope, p, Some(CutOver)))
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
    if let Err(missing) = volumes(&scope.vmm, &scope.world.block) {
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
            to: Phase::CreatingVM,
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

    pub(super) fn waiting(at: Option<&Time>) -> String {
        match at {
            Some(t) => format!(
                "first copy imported and verified; the source runs on until the cutover at {}",
                t.0
            ),
            None => "first copy imported and verified; the source runs on until the cutover (set spec.warm.cutover: true, or spec.warm.cutoverAt)".into(),
        }
    }

    pub(super) fn beginning() -> String {
        "cutting over: the source is powered off, then what changed since the first copy is copied"
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
        format!("cutting over: copying what changed on {disks} disk(s) since the first copy")
    }

    pub(super) fn old_job_deleting() -> String {
        "waiting for the previous cutover Job to go away".into()
    }

    pub(super) fn job_failed(reason: &str, message: &str) -> String {
        format!("the cutover Job failed ({reason}): {message}")
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
        format!("cut over: {bytes} bytes changed since the first copy, copied and read back")
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
        s.source = Some(DiscoveredSource {
            moref: Some("vm-1".into()),
            disks: vec![DiscoveredDisk {
                datastore_path: "[ds] vm/disk1.vmdk".into(),
                ..DiscoveredDisk::default()
            }],
            ..DiscoveredSource::default()
        });
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
            job: JobState::Absent,
            conflict: None,
            message: None,
            reported: None,
            block: vec![false],
        }
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
        vmm.status.as_mut().unwrap().warm = Some(ferry_crds::WarmStatus {
            cutover_started_at: Some(fixtures::t0()),
            ..Default::default()
        });
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
        let v = volumes(&warm_vmm(), &[true]).unwrap();
        assert_eq!(v[0].change_id, "52 aa/1");
        assert_eq!(v[0].datastore_path, "[ds] vm/disk1.vmdk");
        assert!(v[0].block);
        let mut bare = warm_vmm();
        bare.status.as_mut().unwrap().disks[0].change_id = None;
        assert_eq!(volumes(&bare, &[]).unwrap_err(), "disk 0");
    }
}
