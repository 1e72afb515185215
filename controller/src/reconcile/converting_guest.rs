//! ConvertingGuest: the imported and verified guest converted to run on KubeVirt by the guest
//! Job (`virt-v2v-in-place` on overlays, landed through a journal on each volume: all or
//! nothing, see `ferry_convert::guest`), when `spec.conversion.guest` asks for it. A migration
//! whose `conversion.guest` is `Never` never enters it (Importing goes on to CreatingVM).
//!
//! Done when ferry's own program reported the outcome: what it found (the operating system),
//! what it did, and each volume's checksum after the conversion, recorded in `status.guest` —
//! "verified" from here on means those bytes. A failed Job leaves the verified bytes, or a
//! landing its next attempt (a retry) completes; the Job's own pod attempts do the same.

use ferry_crds::{
    ConditionStatus::{True, Unknown},
    ConditionType::{self, GuestConverted},
    GuestStatus, GuestVolume, Phase, Reason, names,
};

use super::checkpoint::Checkpoint;
use super::cleanup::Cleanup;
use super::io::Io;
use super::outcome::{Outcome, Record, Step};
use super::scope::Scope;
use super::volumes::verify_volumes;
use super::world;
use crate::Result;
use crate::apis::job::JobState;
use crate::children::{guest_job, verify_job};
use crate::problem::Problem;
use ferry_convert::guest::Outcome as Converted;

/// The ConvertingGuest checkpoint.
#[derive(Debug)]
pub struct ConvertingGuest;

/// What ConvertingGuest observes.
#[derive(Clone, Debug)]
pub struct Observed {
    /// Where the guest Job stands.
    pub job: JobState,
    /// What its last failed pod said.
    pub failure: Option<String>,
    /// Once complete: the outcome a pod of it that ran ferry's program reported.
    pub reported: Option<Converted>,
    /// Its name held by an object that is not this migration's.
    pub conflict: Option<Problem>,
    /// Per disk, whether its claim is a block device; read only when the Job is to be made.
    pub block: Vec<bool>,
    /// Per disk, the uid of the migration's own DataVolume under its name (`None`: absent or
    /// being deleted; one that is not ferry's is a `conflict`).
    pub dv_uids: Vec<Option<String>>,
    /// The uids of the DataVolumes the guest Job was made for (its annotation).
    pub made_for: Option<Vec<String>>,
}

/// What ConvertingGuest does to the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the guest Job.
    CreateJob,
}

impl Checkpoint for ConvertingGuest {
    const PHASE: Phase = Phase::ConvertingGuest;
    const CONDITIONS: &'static [ConditionType] = &[GuestConverted];
    // The volumes keep the verified bytes or a landing the next Job completes: only the Job goes.
    const RETRY_CLEANUP: &'static [Cleanup] = &[Cleanup::GuestJob];
    type Observed = Observed;
    type Action = Action;

    async fn observe(io: Io<'_>) -> Result<Observed> {
        let seen =
            world::reporting_job(io, &names::guest_job_name(io.vmm), guest_job::CONTAINER).await?;
        let (ours, foreign) = world::own_datavolumes(io).await?;
        let conflict = seen
            .conflict
            .into_iter()
            .chain(foreign)
            .next()
            .map(|c| c.problem(world::RENAME_HINT));
        // One being deleted is as good as gone: its bytes are going.
        let dv_uids: Vec<Option<String>> = ours
            .into_iter()
            .map(|d| {
                d.filter(|d| d.metadata.deletion_timestamp.is_none())?
                    .metadata
                    .uid
            })
            .collect();
        let block = if seen.state == JobState::Absent && conflict.is_none() {
            world::block_claims(io, world::staged_keys(io.vmm).len()).await?
        } else {
            vec![]
        };
        Ok(Observed {
            job: seen.state,
            failure: seen.failure,
            reported: seen
                .report
                .as_deref()
                .and_then(ferry_convert::guest::parse_result),
            conflict,
            block,
            made_for: seen.job.as_ref().and_then(verify_job::made_for),
            dv_uids,
        })
    }

    fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
        decide(scope)
    }

    async fn execute(io: Io<'_>, observed: &Observed, action: &Action) -> Result<Option<Problem>> {
        match action {
            Action::CreateJob => {
                let Ok(volumes) = verify_volumes(io.vmm, &observed.block, &observed.dv_uids) else {
                    // The decision creates the Job only with every checksum in hand.
                    return Ok(None);
                };
                let Ok(image) = io.converter_image() else {
                    // Converting refused a disallowed image before anything was imported.
                    return Ok(None);
                };
                let job = guest_job::guest_job(io.vmm, &volumes, &image)?;
                Ok(io.create(job).await?.problem(world::RENAME_HINT))
            }
        }
    }
}

/// Decides the ConvertingGuest step. Pure.
pub fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
    if let Some(p) = &scope.world.conflict {
        return Outcome::from_problem(scope, p, Some(GuestConverted));
    }
    let job = names::guest_job_name(&scope.vmm);
    if let Some(i) = scope.world.dv_uids.iter().position(Option::is_none) {
        return volume_gone(scope, i);
    }
    match &scope.world.job {
        JobState::Absent => create(scope, &job),
        JobState::Deleting => wait(scope, say::job_going(&job)),
        JobState::Running { .. } => wait(scope, say::converting(&job)),
        JobState::Failed { reason, message } => {
            let said = scope.world.failure.as_deref().unwrap_or(message);
            Outcome::failure(
                Reason::GuestConversionFailed,
                say::failed(&job, reason, said),
                true,
                Phase::ConvertingGuest,
                GuestConverted,
            )
        }
        JobState::Complete if !made_for_these(&scope.world) => Outcome::failure(
            Reason::GuestConversionFailed,
            say::made_for_others(&job),
            true,
            Phase::ConvertingGuest,
            GuestConverted,
        ),
        JobState::Complete => match &scope.world.reported {
            Some(c) => converted(scope, c),
            None => Outcome::failure(
                Reason::GuestConversionFailed,
                say::no_report(&job),
                true,
                Phase::ConvertingGuest,
                GuestConverted,
            ),
        },
    }
}

/// Whether the guest Job was made for exactly the DataVolumes there now: one replaced under the
/// same name since holds bytes the Job's report is not about.
fn made_for_these(w: &Observed) -> bool {
    verify_job::made_for_these(
        w.made_for.as_deref(),
        w.dv_uids.iter().map(Option::as_deref),
    )
}

/// Disk `i`'s DataVolume is gone (or going) since it was imported: its bytes, which ferry
/// verified (cold) or cut over (warm), are lost, and the guest Job converts nothing else. A cold
/// migration imports it again from staging; a warm one's cutover changes were never staged.
fn volume_gone(scope: &Scope<Observed>, i: usize) -> Outcome<Action> {
    let dv = names::datavolume_name(&scope.vmm, i);
    let warm = scope.vmm.spec.mode == ferry_crds::MigrationMode::Warm;
    Outcome::failure(
        Reason::GuestConversionFailed,
        say::volume_gone(&dv, warm),
        !warm,
        Phase::Importing,
        GuestConverted,
    )
}

fn create(scope: &Scope<Observed>, job: &str) -> Outcome<Action> {
    if let Err(which) = verify_volumes(&scope.vmm, &scope.world.block, &scope.world.dv_uids) {
        return Outcome::failure(
            Reason::GuestConversionFailed,
            say::no_checksums(&which),
            false,
            Phase::ConvertingGuest,
            GuestConverted,
        );
    }
    if let Some(i) = scope.world.block.iter().position(|b| *b) {
        return Outcome::failure(
            Reason::GuestConversionFailed,
            say::block_volume(i),
            false,
            Phase::ConvertingGuest,
            GuestConverted,
        );
    }
    let msg = say::converting(job);
    Outcome::new(Step::Act(vec![Action::CreateJob]), msg.clone()).with(
        GuestConverted,
        Unknown,
        Reason::InProgress,
        msg,
    )
}

fn wait(scope: &Scope<Observed>, msg: String) -> Outcome<Action> {
    Outcome::new(
        Step::Wait {
            requeue: scope.policy.wait_requeue,
        },
        msg.clone(),
    )
    .with(GuestConverted, Unknown, Reason::InProgress, msg)
}

/// ferry's program reported: recorded, and on to the VM.
fn converted(scope: &Scope<Observed>, c: &Converted) -> Outcome<Action> {
    let disks = world::staged_keys(&scope.vmm).len();
    if c.converted && c.volumes.len() != disks {
        return Outcome::failure(
            Reason::GuestConversionFailed,
            say::volumes_missing(c.volumes.len(), disks),
            true,
            Phase::ConvertingGuest,
            GuestConverted,
        );
    }
    let guest = GuestStatus {
        operating_system: c.operating_system.clone(),
        converted: c.converted,
        changes: c.changes.iter().take(16).cloned().collect(),
        volumes: c
            .volumes
            .iter()
            .map(|v| GuestVolume {
                disk: u32::try_from(v.disk).unwrap_or(u32::MAX),
                sha256: v.sha256.clone(),
                written_bytes: v.written_bytes,
            })
            .collect(),
        seconds: Some(c.seconds),
        interface_names: c.interface_names.iter().take(16).cloned().collect(),
    };
    let (reason, msg) = if c.converted {
        (Reason::GuestConverted, say::done(c))
    } else {
        (Reason::GuestNeedsNoConversion, say::no_os())
    };
    Outcome::new(
        Step::Advance {
            to: Phase::CreatingVM,
        },
        msg.clone(),
    )
    .with(GuestConverted, True, reason, msg)
    .recording(Record {
        guest: Some(guest),
        ..Record::default()
    })
}

mod say {
    use ferry_convert::guest::Outcome as Converted;

    pub fn converting(job: &str) -> String {
        format!("converting the guest to run on KubeVirt (virt-v2v-in-place in Job {job})")
    }

    pub fn job_going(job: &str) -> String {
        format!("waiting for the earlier guest Job {job} to be deleted")
    }

    pub fn failed(job: &str, reason: &str, said: &str) -> String {
        format!(
            "the guest conversion failed ({reason}, Job {job}): {said}; the volumes hold the verified bytes, or a conversion a retry finishes"
        )
    }

    pub fn no_report(job: &str) -> String {
        format!(
            "the guest Job {job} completed without ferry's program reporting an outcome: nothing is taken as converted"
        )
    }

    pub fn made_for_others(job: &str) -> String {
        format!(
            "the guest Job {job} was made for DataVolumes that were since replaced under the same names: its report is not about the volumes there now, and nothing is taken as converted"
        )
    }

    pub fn volume_gone(dv: &str, warm: bool) -> String {
        if warm {
            format!(
                "the DataVolume {dv} is gone since the cutover: the bytes ferry cut over are lost, and no guest is converted; cancel, then migrate again"
            )
        } else {
            format!(
                "the DataVolume {dv} is gone since it was imported and verified: no guest is converted; raise spec.retry to import it again from staging"
            )
        }
    }

    pub fn no_checksums(which: &str) -> String {
        format!(
            "no verified checksum recorded for {which}: the guest Job converts only volumes ferry can account for"
        )
    }

    pub fn block_volume(i: usize) -> String {
        format!(
            "disk {i}'s volume is a block device: the guest Job keeps its journal beside disk.img on a Filesystem volume; set spec.conversion.guest: Never, or use a Filesystem StorageClass"
        )
    }

    pub fn volumes_missing(got: usize, disks: usize) -> String {
        format!(
            "the guest Job reported {got} converted volumes of {disks}: nothing is taken as converted"
        )
    }

    pub fn done(c: &Converted) -> String {
        let written: u64 = c.volumes.iter().map(|v| v.written_bytes).sum();
        format!(
            "converted {} to run on KubeVirt in {} s ({} MiB written into the volumes)",
            c.operating_system.as_deref().unwrap_or("the guest"),
            c.seconds,
            written >> 20
        )
    }

    pub fn no_os() -> String {
        "virt-v2v found no operating system to convert: the volumes are unchanged (conversion.guest: Auto)".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use crate::reconcile::scope::Scope;
    use ferry_convert::guest::Landed;
    use ferry_crds::fixtures::migration;

    fn scope(vmm: ferry_crds::VirtualMachineMigration, w: Observed) -> Scope<Observed> {
        Scope::new(vmm, ferry_crds::fixtures::t0().0, Policy::default(), w)
    }

    fn observed(job: JobState) -> Observed {
        Observed {
            job,
            failure: None,
            reported: None,
            conflict: None,
            block: vec![false],
            dv_uids: vec![Some("dv-1".into())],
            made_for: Some(vec!["dv-1".into()]),
        }
    }

    fn staged() -> ferry_crds::VirtualMachineMigration {
        let mut vmm = migration("web-1")
            .with_phase(Phase::ConvertingGuest)
            .with_disks(1);
        vmm.spec.conversion.guest = ferry_crds::GuestConversion::Auto;
        let s = vmm.status.as_mut().unwrap();
        s.disks[0].virtual_size_bytes = Some(1 << 30);
        s.disks[0].raw_checksum = Some("ab".repeat(32));
        vmm
    }

    #[test]
    fn no_job_makes_one_and_a_running_one_is_waited_for() {
        let out = decide(&scope(staged(), observed(JobState::Absent)));
        assert_eq!(out.step, Step::Act(vec![Action::CreateJob]));
        let out = decide(&scope(staged(), observed(JobState::Running { failed: 0 })));
        assert!(matches!(out.step, Step::Wait { .. }), "{out:?}");
    }

    #[test]
    fn a_block_volume_or_a_missing_checksum_fails_before_any_job() {
        let mut w = observed(JobState::Absent);
        w.block = vec![true];
        let out = decide(&scope(staged(), w));
        assert!(
            matches!(&out.step, Step::Fail { reason: Reason::GuestConversionFailed, message, .. } if message.contains("block device")),
            "{out:?}"
        );
        let mut vmm = staged();
        vmm.status.as_mut().unwrap().disks[0].raw_checksum = None;
        let out = decide(&scope(vmm, observed(JobState::Absent)));
        assert!(matches!(out.step, Step::Fail { .. }), "{out:?}");
    }

    #[test]
    fn only_ferrys_reported_outcome_converts_and_it_is_recorded() {
        let out = decide(&scope(staged(), observed(JobState::Complete)));
        assert!(
            matches!(
                &out.step,
                Step::Fail {
                    reason: Reason::GuestConversionFailed,
                    ..
                }
            ),
            "a Job that merely exited 0: {out:?}"
        );
        let mut w = observed(JobState::Complete);
        w.reported = Some(Converted {
            operating_system: Some("12.15".into()),
            converted: true,
            changes: vec!["This guest has virtio drivers installed.".into()],
            volumes: vec![Landed {
                disk: 0,
                sha256: "cd".repeat(32),
                written_bytes: 14 << 20,
            }],
            seconds: 63,
            interface_names: vec!["kept ens192 for 00:50:56:00:00:01".into()],
        });
        let out = decide(&scope(staged(), w));
        assert_eq!(
            out.step,
            Step::Advance {
                to: Phase::CreatingVM
            }
        );
        let g = out.record.guest.unwrap();
        assert!(g.converted);
        assert_eq!(g.volumes[0].sha256, "cd".repeat(32));
        assert_eq!(g.interface_names, ["kept ens192 for 00:50:56:00:00:01"]);
        assert!(out.message.contains("12.15"), "{}", out.message);
    }

    fn reported() -> Converted {
        Converted {
            operating_system: Some("12.15".into()),
            converted: true,
            changes: vec![],
            volumes: vec![Landed {
                disk: 0,
                sha256: "cd".repeat(32),
                written_bytes: 14 << 20,
            }],
            seconds: 63,
            interface_names: vec![],
        }
    }

    #[test]
    fn a_report_about_datavolumes_replaced_since_the_job_was_made_converts_nothing() {
        let mut w = observed(JobState::Complete);
        w.reported = Some(reported());
        w.made_for = Some(vec!["dv-0-before".into()]);
        let out = decide(&scope(staged(), w.clone()));
        assert!(
            matches!(&out.step, Step::Fail { reason: Reason::GuestConversionFailed, message, .. } if message.contains("since replaced")),
            "{out:?}"
        );
        assert!(out.record.guest.is_none());
        // Made without the annotation: not known to be about these volumes either.
        w.made_for = None;
        let out = decide(&scope(staged(), w));
        assert!(matches!(out.step, Step::Fail { .. }), "{out:?}");
    }

    #[test]
    fn a_datavolume_gone_since_the_import_converts_nothing_and_says_what_a_retry_does() {
        let mut w = observed(JobState::Absent);
        w.dv_uids = vec![None];
        let out = decide(&scope(staged(), w.clone()));
        assert!(
            matches!(&out.step, Step::Fail { retriable: true, resume: Phase::Importing, message, .. } if message.contains("import it again")),
            "cold: imported again from staging: {out:?}"
        );
        let mut warm = staged();
        warm.spec.mode = ferry_crds::MigrationMode::Warm;
        w.job = JobState::Running { failed: 0 };
        let out = decide(&scope(warm, w));
        assert!(
            matches!(&out.step, Step::Fail { retriable: false, message, .. } if message.contains("cutover")),
            "warm: the cutover's bytes are lost: {out:?}"
        );
    }

    #[test]
    fn a_failed_job_fails_retriably_with_what_its_pod_said() {
        let mut w = observed(JobState::Failed {
            reason: "PodFailurePolicy".into(),
            message: "Container guest for pod x failed with exit code 3".into(),
        });
        w.failure = Some("guest conversion: virt-v2v-in-place: no root device found".into());
        let out = decide(&scope(staged(), w));
        assert!(
            matches!(&out.step, Step::Fail { retriable: true, message, .. } if message.contains("no root device found")),
            "{out:?}"
        );
    }
}
