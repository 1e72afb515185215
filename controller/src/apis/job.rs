//! A Job's status contract (batch/v1): where the conversion Job stands, read from its conditions.

use k8s_openapi::api::batch::v1::Job;

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
}
