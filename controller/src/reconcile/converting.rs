//! Converting: every disk converted by the Job and staged, with its size and SHA-256 recorded.

use ferry_crds::{
    ConditionStatus::{True, Unknown},
    ConditionType::{self, DiskConverted},
    DiskStatus, Phase, Progress, Reason, names,
};
use k8s_openapi::api::batch::v1::Job;

use super::checkpoint::{Checkpoint, Io};
use super::credentials;
use super::intents::Cleanup;
use super::outcome::{Outcome, Record, Step};
use super::scope::Scope;
use super::world::{RENAME_HINT, staged_keys};
use crate::Result;
use crate::apis::job::{self as job_state, JobState};
use crate::children::{Ownership, job, ownership};
use crate::kubeio::create_if_absent;
use crate::ports::StagedObject;
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
    /// The Job's name held by an object that is not this migration's.
    pub conflict: Option<Problem>,
    /// Whether the vSphere credentials Secret may be handed to a converter (opted in, bound to
    /// the endpoint the spec names).
    pub credentials: Result<(), Problem>,
}

/// What Converting does to the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Create the conversion Job.
    CreateJob,
}

impl Checkpoint for Converting {
    const PHASE: Phase = Phase::Converting;
    const CONDITIONS: &'static [ConditionType] = &[DiskConverted];
    const RETRY_CLEANUP: &'static [Cleanup] = &[Cleanup::Job, Cleanup::Staging];
    type Observed = Observed;
    type Action = Action;

    async fn observe(io: Io<'_>) -> Result<Observed> {
        let found = io.api::<Job>().get_opt(&names::job_name(io.vmm)).await?;
        let (job, conflict) = match found.as_ref().map(|j| ownership("Job", &j.metadata, io.vmm)) {
            Some(Ownership::Foreign(c)) => (JobState::Absent, Some(c.problem(RENAME_HINT))),
            Some(Ownership::Ours) | None => (job_state::observe(found.as_ref()), None),
        };
        let credentials = credentials::source_login(io).await?.map(|_| ());
        let keys = staged_keys(io.vmm);
        let staged = match credentials::staging_login(io).await? {
            Err(p) => keys.iter().map(|_| Err(p.clone())).collect(),
            Ok(login) => {
                let mut v = Vec::with_capacity(keys.len());
                for k in &keys {
                    v.push(io.ctx.staging.head(&login, k).await);
                }
                v
            }
        };
        Ok(Observed {
            job,
            staged,
            conflict,
            credentials,
        })
    }

    fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
        decide(scope)
    }

    async fn execute(io: Io<'_>, _: &Observed, action: &Action) -> Result<Option<Problem>> {
        match action {
            Action::CreateJob => {
                let image = match io
                    .ctx
                    .policy
                    .converter_image_for(io.vmm.spec.conversion.image.as_deref())
                {
                    Ok(i) => i,
                    // The decision creates the Job only with an allowed image.
                    Err(_) => return Ok(None),
                };
                let job = job::conversion_job(io.vmm, &image)?;
                create_if_absent(
                    &io.ctx.metrics,
                    &io.api::<Job>(),
                    &job,
                    names::CONTROLLER_FIELD_MANAGER,
                )
                .await?;
            }
        }
        Ok(None)
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
            d.format = Some(scope.vmm.spec.conversion.format);
            d
        })
        .collect()
}

/// Decides the Converting step. Pure.
pub fn decide(scope: &Scope<Observed>) -> Outcome<Action> {
    let Observed {
        job,
        staged,
        conflict,
        credentials,
    } = &scope.world;
    if let Some(p) = conflict {
        return Outcome::from_problem(scope, p, Some(DiskConverted));
    }
    if let Some(p) = staged.iter().find_map(|s| s.as_ref().err()) {
        return Outcome::from_problem(scope, p, Some(DiskConverted));
    }
    let objects: Vec<Option<&StagedObject>> = staged
        .iter()
        .map(|s| s.as_ref().ok().and_then(Option::as_ref))
        .collect();
    let complete: Option<Vec<StagedObject>> = objects
        .iter()
        .map(|o| o.filter(|o| o.sha256.is_some()).cloned())
        .collect::<Option<Vec<_>>>()
        .filter(|v| !v.is_empty());
    let n = scope.disk_count();
    if *job == JobState::Absent && complete.is_none() {
        // About to hand the credentials to a converter: only opted-in, bound ones, and only to
        // the controller's image or an allowed one.
        if let Err(p) = credentials {
            return Outcome::from_problem(scope, p, Some(DiskConverted));
        }
        if let Err(msg) = scope
            .policy
            .converter_image_for(scope.vmm.spec.conversion.image.as_deref())
        {
            return Outcome::failure(
                Reason::ConverterImageNotAllowed,
                msg,
                false,
                Phase::Converting,
                DiskConverted,
            );
        }
    }
    match job {
        JobState::Complete | JobState::Absent if complete.is_some() => {
            let staged = complete.unwrap_or_default();
            let bytes: i64 = staged.iter().map(|o| o.size).sum();
            let record = Record {
                disks: Some(staged_disks(scope, &staged)),
                progress: Some(Progress {
                    percent: 0.0,
                    bytes_done: 0,
                    bytes_total: bytes,
                    ..Progress::default()
                }),
                source: None,
            };
            let msg =
                format!("{n} disk(s) converted and staged, {bytes} bytes, checksums recorded");
            Outcome::new(
                Step::Advance {
                    to: Phase::Importing,
                },
                msg.clone(),
            )
            .with(DiskConverted, True, Reason::Converted, msg)
            .recording(record)
        }
        // Worded as the running Job will be, so that its start costs no second write.
        JobState::Absent => Outcome::new(
            Step::Act(vec![Action::CreateJob]),
            format!("converting {n} disk(s)"),
        )
        .with(
            DiskConverted,
            Unknown,
            Reason::InProgress,
            format!("converting {n} disk(s)"),
        ),
        JobState::Deleting => Outcome::new(
            Step::Wait {
                requeue: scope.policy.wait_requeue,
            },
            "waiting for the old conversion Job to go",
        )
        .with(
            DiskConverted,
            Unknown,
            Reason::InProgress,
            "an earlier conversion Job is being deleted",
        ),
        JobState::Running { failed } => {
            let msg = if *failed > 0 {
                format!(
                    "converting {n} disk(s); {failed} converter attempt(s) failed and were retried"
                )
            } else {
                format!("converting {n} disk(s)")
            };
            let reason = if *failed > 0 {
                Reason::TransientError
            } else {
                Reason::InProgress
            };
            Outcome::new(
                Step::Wait {
                    requeue: scope.policy.wait_requeue,
                },
                msg.clone(),
            )
            .with(DiskConverted, Unknown, reason, msg)
        }
        JobState::Complete => {
            let missing: Vec<String> = objects
                .iter()
                .enumerate()
                .filter(|(_, o)| o.is_none_or(|o| o.sha256.is_none()))
                .map(|(i, o)| {
                    format!(
                        "disk {i} {}",
                        if o.is_none() {
                            "is not in staging"
                        } else {
                            "has no sha256 metadata"
                        }
                    )
                })
                .collect();
            let msg = format!(
                "the conversion Job completed but {}; raise spec.retry to convert again",
                missing.join(", ")
            );
            Outcome::failure(
                Reason::ConversionFailed,
                msg,
                true,
                Phase::Converting,
                DiskConverted,
            )
        }
        JobState::Failed { reason, message } => {
            let msg = format!(
                "the conversion Job failed ({reason}{}); see its pod logs, then raise spec.retry",
                if message.is_empty() {
                    String::new()
                } else {
                    format!(": {message}")
                }
            );
            Outcome::failure(
                Reason::ConversionFailed,
                msg,
                true,
                Phase::Converting,
                DiskConverted,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;
    use ferry_crds::fixtures::{migration, ts};

    fn obj(sha: Option<&str>) -> Result<Option<StagedObject>, Problem> {
        Ok(Some(StagedObject {
            size: 1 << 26,
            sha256: sha.map(str::to_owned),
        }))
    }

    fn decide_with(
        job: JobState,
        staged: Vec<Result<Option<StagedObject>, Problem>>,
        retries: u32,
    ) -> Outcome<Action> {
        let vmm = migration("m")
            .with_disks(staged.len())
            .with_phase(Phase::Converting);
        decide(&Scope {
            vmm,
            now: ts(0).0,
            policy: Policy::default(),
            retries,
            world: Observed {
                job,
                staged,
                conflict: None,
                credentials: Ok(()),
            },
        })
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
    fn no_job_without_usable_credentials_an_allowed_image_and_a_free_name() {
        let base = || {
            let vmm = migration("m").with_disks(1).with_phase(Phase::Converting);
            Scope {
                vmm,
                now: ts(0).0,
                policy: Policy::default(),
                retries: 0,
                world: Observed {
                    job: JobState::Absent,
                    staged: vec![Ok(None)],
                    conflict: None,
                    credentials: Ok(()),
                },
            }
        };
        assert_eq!(decide(&base()).step, Step::Act(vec![Action::CreateJob]));
        let fails_with = |scope: Scope<Observed>| match decide(&scope).step {
            Step::Fail { reason, .. } => Some(reason),
            _ => None,
        };
        let mut s = base();
        s.world.credentials = Err(Problem::permanent(Reason::CredentialsNotAllowed, "unlabelled"));
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
}
