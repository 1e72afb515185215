//! A Job's status contract (batch/v1): where the conversion Job stands, read from its conditions.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;

/// The label the Job controller puts on a Job's pods, with the Job's uid.
pub const CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";

/// Where a conversion Job stands, read from its status conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JobState {
    /// Not created yet.
    Absent,
    /// Being deleted.
    Deleting,
    /// Pods are running or pending; `failed` pod attempts so far.
    Running {
        /// Failed pod attempts.
        failed: i32,
    },
    /// `Complete=True`.
    Complete,
    /// `Failed=True`, with the condition's reason and message.
    Failed {
        /// e.g. `BackoffLimitExceeded`, `PodFailurePolicy`, `DeadlineExceeded`.
        reason: String,
        /// Details.
        message: String,
    },
}

/// Classifies a Job (or its absence). Pure.
pub fn observe(job: Option<&Job>) -> JobState {
    let Some(job) = job else {
        return JobState::Absent;
    };
    if job.metadata.deletion_timestamp.is_some() {
        return JobState::Deleting;
    }
    let status = job.status.clone().unwrap_or_default();
    let conds = status.conditions.unwrap_or_default();
    let is_true = |t: &str| conds.iter().find(|c| c.type_ == t && c.status == "True");
    if is_true("Complete").is_some() {
        return JobState::Complete;
    }
    if let Some(c) = is_true("Failed") {
        return JobState::Failed {
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        };
    }
    JobState::Running {
        failed: status.failed.unwrap_or(0),
    }
}

/// What the last failed pod of a Job said when its `container` ended: the termination message
/// (the file, or the log's tail under `FallbackToLogsOnError`), its last non-empty line. Pure.
pub fn last_failure_message(pods: &[Pod], container: &str) -> Option<String> {
    pods.iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
        .max_by_key(|p| p.metadata.creation_timestamp.as_ref().map(|t| t.0))
        .and_then(|p| p.status.as_ref()?.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == container))
        .and_then(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
        .and_then(|m| {
            m.lines()
                .rev()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(str::to_owned)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};

    fn job_with(conds: &[(&str, &str)], failed: i32) -> Job {
        Job {
            status: Some(JobStatus {
                failed: Some(failed),
                conditions: Some(
                    conds
                        .iter()
                        .map(|(t, r)| JobCondition {
                            type_: (*t).into(),
                            status: "True".into(),
                            reason: Some((*r).into()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Job::default()
        }
    }

    #[test]
    fn observe_reads_job_conditions() {
        assert_eq!(observe(None), JobState::Absent);
        assert_eq!(
            observe(Some(&job_with(&[], 1))),
            JobState::Running { failed: 1 }
        );
        assert_eq!(
            observe(Some(&job_with(
                &[("SuccessCriteriaMet", "x"), ("Complete", "x")],
                0
            ))),
            JobState::Complete
        );
        assert_eq!(
            observe(Some(&job_with(
                &[
                    ("FailureTarget", "BackoffLimitExceeded"),
                    ("Failed", "BackoffLimitExceeded")
                ],
                3
            ))),
            JobState::Failed {
                reason: "BackoffLimitExceeded".into(),
                message: String::new()
            }
        );
    }

    #[test]
    fn the_last_failed_pod_says_why() {
        use k8s_openapi::api::core::v1::{
            ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
        };
        let pod = |at: i64, phase: &str, msg: &str| Pod {
            metadata: kube::api::ObjectMeta {
                creation_timestamp: Some(ferry_crds::fixtures::ts(at)),
                ..Default::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "verify".into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: 3,
                            message: Some(msg.into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Pod::default()
        };
        let pods = [
            pod(1, "Failed", "old\n"),
            pod(
                5,
                "Failed",
                "{\"disk\":0}\nverify: disk 1: checksum mismatch\n\n",
            ),
            pod(9, "Running", "not yet"),
        ];
        assert_eq!(
            last_failure_message(&pods, "verify").as_deref(),
            Some("verify: disk 1: checksum mismatch")
        );
        assert_eq!(last_failure_message(&pods, "other"), None);
        assert_eq!(last_failure_message(&[], "verify"), None);
    }
}
