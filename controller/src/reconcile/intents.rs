//! "Should we act, and how?" — the operator's intents as a chain of pure policies, checked in
//! order before any checkpoint runs: cancel → retry → a failure's pending power-on → paused →
//! held by the wave → start. (Deletion comes first of all, through the finalizer.) The source's
//! power is no cleanup step: a cancel, a delete and a pending power-on go through the power rule
//! (`power.rs`) before anything else.

use ferry_crds::{Phase, RestorePowerState, Stage, VirtualMachineMigration};
use kube::ResourceExt;

use super::by_phase::retry_cleanup;
use super::cleanup::Cleanup;

/// What a retry that starts over from Preparing removes: every partial result.
const START_OVER: [Cleanup; 10] = [
    Cleanup::Job,
    Cleanup::Snapshot,
    Cleanup::Staging,
    Cleanup::VerifyJob,
    Cleanup::GuestJob,
    Cleanup::S3Secret,
    Cleanup::AllDataVolumes,
    Cleanup::CutoverJob,
    Cleanup::PrecopyJob,
    Cleanup::Vm,
];

/// What a retry of an import whose verification found a damaged volume removes: every
/// DataVolume (the damaged one is `Succeeded`) and the verification Job.
const REIMPORT: [Cleanup; 2] = [Cleanup::VerifyJob, Cleanup::AllDataVolumes];

/// What the intents ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Intent {
    /// `spec.cancel` on an unfinished migration: the target stopped and the source powered back
    /// on (the power rule, over as many reconciles as it takes), then clean up, then `Cancelled`.
    Cancel {
        /// What to remove.
        cleanup: Vec<Cleanup>,
    },
    /// `spec.retry` raised on a `Failed` or `Cancelled` migration: clean up and resume.
    Retry {
        /// The checkpoint to resume.
        resume: Phase,
        /// What to remove first.
        cleanup: Vec<Cleanup>,
    },
    /// `spec.retry` raised while nothing failed: take note of the token, nothing else.
    AckRetry,
    /// `spec.paused`: no new step.
    Paused,
    /// Held in `Queued` by its wave.
    Held,
    /// `Pending` (or a released `Queued`): start with Preparing.
    Start,
    /// A `Failed` migration whose source is to be powered back on (OnCancelOrFailure) and is
    /// not yet: the power rule goes on.
    RestorePower,
    /// A terminal phase, nothing asked: nothing to do.
    Settled,
    /// Work on the current checkpoint.
    Proceed,
}

/// Whether the power policy asks to restore the source's power on a cancel or delete.
pub fn restores_on_cancel(vmm: &VirtualMachineMigration) -> bool {
    vmm.spec.source.power.restore_power_state != RestorePowerState::Never
}

/// Whether the power policy asks to restore the source's power when the migration fails.
pub fn restores_on_failure(vmm: &VirtualMachineMigration) -> bool {
    vmm.spec.source.power.restore_power_state == RestorePowerState::OnCancelOrFailure
}

/// What cancelling removes: the Job, staging, unfinished DataVolumes, the VM (once the power
/// rule is done with it: see [`Intent::Cancel`]).
pub fn cancel_cleanup() -> Vec<Cleanup> {
    vec![
        Cleanup::Job,
        Cleanup::Snapshot,
        Cleanup::Staging,
        Cleanup::VerifyJob,
        Cleanup::GuestJob,
        Cleanup::S3Secret,
        Cleanup::UnfinishedDataVolumes,
        Cleanup::CutoverJob,
        Cleanup::PrecopyJob,
        Cleanup::Vm,
    ]
}

/// What deleting the migration removes before the finalizer goes (after the power rule, when
/// [`restores_on_delete`]). A `Succeeded` migration has already released its VM and volumes and
/// cleaned staging: nothing is touched then.
pub fn delete_cleanup(vmm: &VirtualMachineMigration) -> Vec<Cleanup> {
    if vmm.phase() == Phase::Succeeded {
        return vec![Cleanup::Staging, Cleanup::S3Secret];
    }
    with_hook_jobs(vmm, cancel_cleanup())
}

/// Whether deleting `vmm` powers the source back on (through the power rule): as a cancel
/// does, never after success (the VM now runs in KubeVirt).
pub fn restores_on_delete(vmm: &VirtualMachineMigration) -> bool {
    restores_on_cancel(vmm) && vmm.phase() != Phase::Succeeded
}

/// Whether the owner of `vmm` abandoned its cleanup: the annotation
/// [`names::ABANDON_CLEANUP_ANNOTATION`] is `true` (what cleanup cannot remove is left behind).
/// Pure.
pub fn abandons_cleanup(vmm: &VirtualMachineMigration) -> bool {
    vmm.annotations()
        .get(ferry_crds::names::ABANDON_CLEANUP_ANNOTATION)
        .is_some_and(|v| {
            v.trim()
                .eq_ignore_ascii_case(ferry_crds::names::ABANDON_CLEANUP_VALUE)
        })
}

/// Whether `spec.staging` or `spec.conversion` differ from what the migration recorded when it
/// left Preparing (admission refuses such a change while it runs; a settled one may take it,
/// and its retry then starts over). Pure.
pub fn staging_changed(vmm: &VirtualMachineMigration) -> bool {
    vmm.status
        .as_ref()
        .and_then(|s| s.staging.as_ref())
        .is_some_and(|r| {
            r.location != vmm.spec.staging
                || !r.conversion.makes_the_same_images_as(&vmm.spec.conversion)
        })
}

/// Applies the intent policies in order. Pure.
///
/// # Guarantees
/// * `cancel` wins over everything but deletion, and never touches a `Succeeded` migration (nor
///   one whose VM was released: the power rule finds that out and the cancel gives way);
/// * a `Failed` migration whose source is still to be powered back on (a pending
///   `status.sourcePowerRestore`) goes on with it unless a cancel or a retry is asked;
/// * a retry of a `Failed` migration resumes the checkpoint in `lastFailure.phase`, except when
///   the source was powered back on after the failure, or someone powered it on during the
///   migration (`SourcePoweredOn` past Preparing): its staged data is stale then, so it starts
///   over from Preparing; so it does when `spec.staging` or `spec.conversion` changed since it
///   started ([`staging_changed`]); a retry of a `Cancelled` one starts over from Preparing;
/// * a pending retry token on a `Cancelled` migration with `cancel` still true waits.
pub fn decide(vmm: &VirtualMachineMigration) -> Intent {
    let intent = cancel(vmm)
        .or_else(|| retry(vmm))
        .or_else(|| finished(vmm))
        .or_else(|| paused(vmm))
        .or_else(|| not_started(vmm))
        .unwrap_or(Intent::Proceed);
    match intent {
        Intent::Cancel { cleanup } => Intent::Cancel {
            cleanup: with_hook_jobs(vmm, cleanup),
        },
        Intent::Retry { resume, cleanup } => Intent::Retry {
            resume,
            cleanup: with_hook_jobs(vmm, cleanup),
        },
        other => other,
    }
}

/// `cleanup` and the Jobs of the migration's hooks (set in its spec, or run in an attempt):
/// a cancel removes them, and a retry too, so that the next attempt runs each hook it reaches
/// afresh (the gate asks for this attempt's success: see `hooks`). A migration without hooks
/// spends no request on them. Pure.
fn with_hook_jobs(vmm: &VirtualMachineMigration, mut cleanup: Vec<Cleanup>) -> Vec<Cleanup> {
    use ferry_crds::HookPoint;
    let ran = |p: HookPoint| {
        vmm.spec.hooks.as_ref().is_some_and(|h| h.at(p).is_some())
            || vmm
                .status
                .as_ref()
                .is_some_and(|s| s.hooks.iter().any(|h| h.point == p))
    };
    for (point, job) in [
        (HookPoint::PreCutover, Cleanup::PreCutoverHookJob),
        (HookPoint::PostCutover, Cleanup::PostCutoverHookJob),
    ] {
        if ran(point) && !cleanup.contains(&job) {
            cleanup.push(job);
        }
    }
    cleanup
}

/// The operator's cancel wins over everything but deletion, once there is something to cancel.
fn cancel(vmm: &VirtualMachineMigration) -> Option<Intent> {
    let open = !matches!(vmm.phase(), Phase::Succeeded | Phase::Cancelled);
    (vmm.spec.cancel && open).then(|| Intent::Cancel {
        cleanup: cancel_cleanup(),
    })
}

/// A raised `spec.retry` resumes a failed or cancelled migration; on any other it is only noted.
fn retry(vmm: &VirtualMachineMigration) -> Option<Intent> {
    if !vmm.retry_requested() {
        return None;
    }
    match vmm.phase().stage() {
        Stage::Failed => Some(retry_failed(vmm)),
        Stage::Cancelled if !vmm.spec.cancel => Some(Intent::Retry {
            resume: Phase::Preparing,
            cleanup: START_OVER.to_vec(),
        }),
        // Still cancelled: the token waits until cancel is lowered.
        Stage::Cancelled => None,
        Stage::Pending | Stage::Queued | Stage::InFlight | Stage::Succeeded => {
            Some(Intent::AckRetry)
        }
    }
}

/// A failed migration resumes where it failed, unless what it did before can no longer be
/// trusted: then it starts over from Preparing.
fn retry_failed(vmm: &VirtualMachineMigration) -> Intent {
    let last = vmm.status.as_ref().and_then(|s| s.last_failure.as_ref());
    let failed_at = last.map_or(Phase::Preparing, |f| f.phase);
    // Someone powered the source on, or changed it, after ferry recorded what it copies: what
    // was copied is stale.
    let powered_on_meanwhile = last.is_some_and(|f| {
        matches!(
            f.reason,
            ferry_crds::Reason::SourcePoweredOn | ferry_crds::Reason::SourceChanged
        )
    });
    // A rollback gave the source back its place: a retry copies it as it is now.
    let rolled_back = vmm.phase() == Phase::RolledBack;
    let powered_back = (restores_on_failure(vmm) || powered_on_meanwhile || rolled_back)
        && failed_at != Phase::Preparing;
    // Staging or conversion changed while it was settled: what was staged is not what the spec
    // asks for now.
    let respecified = staging_changed(vmm) && failed_at != Phase::Preparing;
    // The guest is now to be converted and was not: its VM (made for the unconverted guest) goes,
    // and the conversion runs before a new one is made.
    let convert_now = vmm.spec.conversion.guest.converts()
        && !vmm
            .status
            .as_ref()
            .and_then(|s| s.guest.as_ref())
            .is_some_and(|g| g.converted)
        && failed_at > Phase::ConvertingGuest
        && failed_at.is_checkpoint();
    let resume = if powered_back || respecified || !failed_at.is_checkpoint() {
        Phase::Preparing
    } else if convert_now {
        Phase::ConvertingGuest
    } else {
        failed_at
    };
    if resume == Phase::ConvertingGuest && convert_now {
        return Intent::Retry {
            resume,
            cleanup: vec![Cleanup::Vm, Cleanup::GuestJob],
        };
    }
    let damaged = resume == Phase::Importing
        && last.is_some_and(|f| f.reason == ferry_crds::Reason::ChecksumMismatch);
    let cleanup = if resume == Phase::Preparing && failed_at != Phase::Preparing {
        START_OVER.to_vec()
    } else if damaged {
        REIMPORT.to_vec()
    } else {
        retry_cleanup(resume).to_vec()
    };
    Intent::Retry { resume, cleanup }
}

/// A finished migration takes no step, but a failure still owes the source its power-on.
fn finished(vmm: &VirtualMachineMigration) -> Option<Intent> {
    if !vmm.phase().is_terminal() {
        return None;
    }
    let restoring = vmm
        .status
        .as_ref()
        .is_some_and(|s| super::power::is_pending(s.source_power_restore.as_deref()));
    Some(if restoring {
        Intent::RestorePower
    } else {
        Intent::Settled
    })
}

/// A paused migration takes no new step until the operator lifts the pause.
fn paused(vmm: &VirtualMachineMigration) -> Option<Intent> {
    vmm.spec.paused.then_some(Intent::Paused)
}

/// A migration not started yet waits for its wave to release it, then starts with Preparing.
fn not_started(vmm: &VirtualMachineMigration) -> Option<Intent> {
    if !matches!(vmm.phase(), Phase::Pending | Phase::Queued) {
        return None;
    }
    Some(if vmm.is_held() {
        Intent::Held
    } else {
        Intent::Start
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::{
        LastFailure, Reason,
        fixtures::{migration, t0},
    };

    fn failed_at(phase: Phase) -> VirtualMachineMigration {
        let mut vmm = migration("m").with_phase(Phase::Failed);
        if let Some(s) = vmm.status.as_mut() {
            s.last_failure = Some(LastFailure {
                phase,
                reason: Reason::ImportFailed,
                message: String::new(),
                retriable: true,
                time: t0(),
                cause: None,
            });
        }
        vmm
    }

    #[test]
    fn the_chain_in_order() {
        let m = || migration("m");
        type Case = (&'static str, VirtualMachineMigration, fn(&Intent) -> bool);
        let cases: Vec<Case> = vec![
            ("pending starts", m(), |i| *i == Intent::Start),
            (
                "queued and released starts",
                m().with_phase(Phase::Queued),
                |i| *i == Intent::Start,
            ),
            ("held by the wave", m().in_wave("w"), |i| *i == Intent::Held),
            (
                "queued and held",
                m().in_wave("w").with_phase(Phase::Queued),
                |i| *i == Intent::Held,
            ),
            ("running proceeds", m().with_phase(Phase::Importing), |i| {
                *i == Intent::Proceed
            }),
            ("paused", m().with_phase(Phase::Importing).paused(), |i| {
                *i == Intent::Paused
            }),
            ("paused before start", m().paused(), |i| {
                *i == Intent::Paused
            }),
            (
                "cancel wins over paused",
                m().with_phase(Phase::Importing).paused().cancelled(),
                |i| matches!(i, Intent::Cancel { .. }),
            ),
            ("cancel of a held one", m().in_wave("w").cancelled(), |i| {
                matches!(i, Intent::Cancel { .. })
            }),
            (
                "cancel of a failed one cleans it",
                failed_at(Phase::Importing).cancelled(),
                |i| matches!(i, Intent::Cancel { .. }),
            ),
            (
                "cancel after success is ignored",
                m().with_phase(Phase::Succeeded).cancelled(),
                |i| *i == Intent::Settled,
            ),
            (
                "cancelled stays",
                m().with_phase(Phase::Cancelled).cancelled(),
                |i| *i == Intent::Settled,
            ),
            (
                "succeeded is settled",
                m().with_phase(Phase::Succeeded),
                |i| *i == Intent::Settled,
            ),
            ("failed is settled", failed_at(Phase::Importing), |i| {
                *i == Intent::Settled
            }),
            (
                "retry while running is acknowledged",
                m().with_phase(Phase::Importing).with_retry(1),
                |i| *i == Intent::AckRetry,
            ),
            (
                "retry after success is acknowledged",
                m().with_phase(Phase::Succeeded).with_retry(1),
                |i| *i == Intent::AckRetry,
            ),
            (
                "retry of a cancelled one waits for cancel=false",
                m().with_phase(Phase::Cancelled).cancelled().with_retry(1),
                |i| *i == Intent::Settled,
            ),
            (
                "retry of a cancelled one restarts",
                m().with_phase(Phase::Cancelled).with_retry(1),
                |i| matches!(i, Intent::Retry { resume: Phase::Preparing, cleanup } if cleanup.contains(&Cleanup::AllDataVolumes)),
            ),
            (
                "retry of a failed import resumes importing",
                failed_at(Phase::Importing).with_retry(1),
                |i| {
                    *i == Intent::Retry {
                        resume: Phase::Importing,
                        cleanup: vec![Cleanup::VerifyJob, Cleanup::UnfinishedDataVolumes],
                    }
                },
            ),
            (
                "retry after the source changed starts over",
                {
                    let mut v = failed_at(Phase::CreatingVM).with_retry(1);
                    v.status
                        .as_mut()
                        .unwrap()
                        .last_failure
                        .as_mut()
                        .unwrap()
                        .reason = ferry_crds::Reason::SourceChanged;
                    v
                },
                |i| matches!(i, Intent::Retry { resume: Phase::Preparing, cleanup } if cleanup.contains(&Cleanup::AllDataVolumes)),
            ),
            (
                "retry of a failed conversion drops the Job, its snapshot and staging",
                failed_at(Phase::Converting).with_retry(1),
                |i| {
                    *i == Intent::Retry {
                        resume: Phase::Converting,
                        cleanup: vec![Cleanup::Job, Cleanup::Snapshot, Cleanup::Staging],
                    }
                },
            ),
        ];
        for (name, vmm, ok) in cases {
            let got = decide(&vmm);
            assert!(ok(&got), "{name}: {got:?}");
        }
    }

    #[test]
    fn a_retry_after_power_was_restored_starts_over() {
        let mut vmm = failed_at(Phase::Importing).with_retry(1);
        vmm.spec.source.power.restore_power_state = RestorePowerState::OnCancelOrFailure;
        assert!(matches!(
            decide(&vmm),
            Intent::Retry {
                resume: Phase::Preparing,
                ..
            }
        ));
    }

    #[test]
    fn a_retry_after_the_source_was_powered_on_meanwhile_starts_over() {
        for phase in [Phase::Converting, Phase::Starting] {
            let mut vmm = failed_at(phase).with_retry(1);
            if let Some(f) = vmm.status.as_mut().and_then(|s| s.last_failure.as_mut()) {
                f.reason = Reason::SourcePoweredOn;
            }
            let Intent::Retry { resume, cleanup } = decide(&vmm) else {
                panic!("{phase}: a retry")
            };
            assert_eq!(resume, Phase::Preparing, "{phase}");
            assert_eq!(cleanup, START_OVER.to_vec(), "{phase}: stale copies go");
        }
    }

    #[test]
    fn a_retry_after_the_guest_was_asked_converted_converts_it_before_a_new_vm() {
        let mut vmm = failed_at(Phase::Validating).with_retry(1);
        vmm.spec.source.power.restore_power_state = RestorePowerState::Never;
        assert!(matches!(
            decide(&vmm),
            Intent::Retry {
                resume: Phase::Validating,
                ..
            }
        ));
        vmm.spec.conversion.guest = ferry_crds::GuestConversion::Auto;
        assert_eq!(
            decide(&vmm),
            Intent::Retry {
                resume: Phase::ConvertingGuest,
                cleanup: vec![Cleanup::Vm, Cleanup::GuestJob],
            }
        );
        // Converted already: the retry resumes where it failed.
        vmm.status.as_mut().unwrap().guest = Some(Box::new(ferry_crds::GuestStatus {
            converted: true,
            ..Default::default()
        }));
        assert!(matches!(
            decide(&vmm),
            Intent::Retry {
                resume: Phase::Validating,
                ..
            }
        ));
    }

    #[test]
    fn a_retry_after_a_checksum_mismatch_imports_every_disk_again() {
        let mut vmm = failed_at(Phase::Importing).with_retry(1);
        if let Some(f) = vmm.status.as_mut().and_then(|s| s.last_failure.as_mut()) {
            f.reason = Reason::ChecksumMismatch;
        }
        assert_eq!(
            decide(&vmm),
            Intent::Retry {
                resume: Phase::Importing,
                cleanup: vec![Cleanup::VerifyJob, Cleanup::AllDataVolumes],
            }
        );
    }

    #[test]
    fn power_follows_the_policy_and_spares_a_finished_migration() {
        let mut vmm = migration("m").with_phase(Phase::Importing);
        assert!(restores_on_cancel(&vmm) && restores_on_delete(&vmm));
        assert!(!restores_on_failure(&vmm), "OnCancel by default");
        vmm.spec.source.power.restore_power_state = RestorePowerState::Never;
        assert!(!restores_on_cancel(&vmm) && !restores_on_delete(&vmm));
        let done = migration("m").with_phase(Phase::Succeeded);
        assert!(!restores_on_delete(&done));
        let c = delete_cleanup(&done);
        assert!(!c.contains(&Cleanup::Vm) && !c.contains(&Cleanup::AllDataVolumes));
        assert!(
            delete_cleanup(&migration("m").with_phase(Phase::Converting)).contains(&Cleanup::Job)
        );
    }

    #[test]
    fn a_retry_after_staging_or_conversion_changed_starts_over_and_removes_the_old_copies() {
        let mut vmm = failed_at(Phase::Importing).with_retry(1);
        if let Some(st) = vmm.status.as_mut() {
            st.staging = Some(Box::new(ferry_crds::StagingRecord {
                location: vmm.spec.staging.clone(),
                conversion: vmm.spec.conversion.clone(),
                keys: vec!["k".into()],
            }));
        }
        assert!(matches!(
            decide(&vmm),
            Intent::Retry {
                resume: Phase::Importing,
                ..
            }
        ));
        let mut moved = vmm.clone();
        moved.spec.staging.prefix = Some("elsewhere".into());
        let mut reformatted = vmm.clone();
        reformatted.spec.conversion.format = ferry_crds::DiskFormat::Qcow2;
        // Its own copy limits decide when a copy starts, not what it makes: no start over.
        let mut limited = vmm.clone();
        limited.spec.conversion.copy_limits = Some(ferry_crds::CopyLimits {
            per_host: Some(1),
            per_datastore: None,
        });
        assert!(!staging_changed(&limited));
        for changed in [moved, reformatted] {
            assert!(staging_changed(&changed));
            assert_eq!(
                decide(&changed),
                Intent::Retry {
                    resume: Phase::Preparing,
                    cleanup: START_OVER.to_vec()
                }
            );
        }
    }

    fn restore(
        result: Option<ferry_crds::source::PowerRestoreResult>,
    ) -> ferry_crds::source::SourcePowerRestore {
        ferry_crds::source::SourcePowerRestore {
            requested_at: t0(),
            target_stopping_since: None,
            finished_at: result.map(|_| t0()),
            result,
            message: None,
        }
    }

    #[test]
    fn a_failure_whose_power_on_is_pending_goes_on_with_it_unless_cancelled_or_retried() {
        let pending = || {
            let mut vmm = failed_at(Phase::Validating);
            if let Some(s) = vmm.status.as_mut() {
                s.source_power_restore = Some(Box::new(restore(None)));
            }
            vmm
        };
        assert_eq!(decide(&pending()), Intent::RestorePower);
        assert_eq!(
            decide(&pending().paused()),
            Intent::RestorePower,
            "a paused migration takes no new step; this one is finishing its failure"
        );
        assert!(matches!(
            decide(&pending().cancelled()),
            Intent::Cancel { .. }
        ));
        assert!(matches!(
            decide(&pending().with_retry(1)),
            Intent::Retry { .. }
        ));
        let mut done = pending();
        if let Some(s) = done.status.as_mut() {
            s.source_power_restore = Some(Box::new(restore(Some(
                ferry_crds::source::PowerRestoreResult::TargetStillRunning,
            ))));
        }
        assert_eq!(decide(&done), Intent::Settled, "an ended one is settled");
    }

    #[test]
    fn only_the_annotation_set_to_true_abandons_a_cleanup() {
        let with = |v: &str| {
            let mut vmm = migration("m");
            vmm.metadata.annotations = Some(
                [(
                    ferry_crds::names::ABANDON_CLEANUP_ANNOTATION.to_owned(),
                    v.to_owned(),
                )]
                .into(),
            );
            abandons_cleanup(&vmm)
        };
        assert!(!abandons_cleanup(&migration("m")));
        assert!(with("true") && with("True") && with(" true "));
        assert!(!with("false") && !with("") && !with("yes"));
    }
}
