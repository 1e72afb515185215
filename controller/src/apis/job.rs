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

/// What the last failed pod of `job` said when its `container` ended: the termination message
/// (the file, or the log's tail under `FallbackToLogsOnError`), its last non-empty line. Only
/// the Job's own pods speak ([`own_pods`]): a decoy's failure would put its words in the
/// migration's status. Pure.
pub fn last_failure_message(job: &Job, pods: &[Pod], container: &str) -> Option<String> {
    own_pods(job, pods)
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

/// The pods of `pods` that are exactly `job`'s own: controlled by the Job (by uid) and with the
/// template's whole spec as it bears on what runs and what it reads ([`runs_template`]). A pod
/// anyone else made with the Job's labels and owner — another program, or the same with a decoy
/// claim mounted — is not one. Pure.
pub fn own_pods<'a>(job: &'a Job, pods: &'a [Pod]) -> impl Iterator<Item = &'a Pod> + 'a {
    let uid = job.metadata.uid.as_deref();
    let template = job.spec.as_ref().and_then(|s| s.template.spec.as_ref());
    pods.iter().filter(move |p| {
        let (Some(uid), Some(template)) = (uid, template) else {
            return false;
        };
        let controlled = p
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.uid == uid);
        controlled && p.spec.as_ref().is_some_and(|s| runs_template(template, s))
    })
}

/// The termination message of `container` in a pod of `job` that succeeded, from the Job's own
/// pods only ([`own_pods`]). `None` when no such pod ended with a message. Pure.
pub fn succeeded_message(job: &Job, pods: &[Pod], container: &str) -> Option<String> {
    let template = job.spec.as_ref()?.template.spec.as_ref()?;
    template.containers.iter().find(|c| c.name == container)?;
    own_pods(job, pods)
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded"))
        .filter_map(|p| {
            p.status
                .as_ref()?
                .container_statuses
                .as_ref()?
                .iter()
                .find(|c| c.name == container)?
                .state
                .as_ref()?
                .terminated
                .as_ref()
                .filter(|t| t.exit_code == 0)?
                .message
                .clone()
        })
        .next()
}

/// Whether `pod` runs what `template` says: the same containers (init ones included) with
/// the same image, command, arguments, environment, mounts, devices, working directory and
/// security; the same volumes; the same service account, token mounting, host namespaces and
/// pod security. What the API server and the scheduler add to every pod (defaults a Job's
/// template gets too, tolerations, the node) is not compared. Pure.
pub fn runs_template(
    template: &k8s_openapi::api::core::v1::PodSpec,
    pod: &k8s_openapi::api::core::v1::PodSpec,
) -> bool {
    use k8s_openapi::api::core::v1::Container;
    let same_container = |a: &Container, b: &Container| {
        a.name == b.name
            && a.image == b.image
            && a.command == b.command
            && a.args == b.args
            && a.env == b.env
            && a.env_from == b.env_from
            && a.volume_mounts == b.volume_mounts
            && a.volume_devices == b.volume_devices
            && a.working_dir == b.working_dir
            && a.security_context == b.security_context
    };
    let same_list = |a: &[Container], b: &[Container]| {
        a.len() == b.len() && a.iter().zip(b).all(|(a, b)| same_container(a, b))
    };
    let account = |s: &k8s_openapi::api::core::v1::PodSpec| {
        s.service_account_name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".to_owned())
    };
    let flag = |f: Option<bool>| f.unwrap_or(false);
    same_list(&template.containers, &pod.containers)
        && same_list(
            template.init_containers.as_deref().unwrap_or_default(),
            pod.init_containers.as_deref().unwrap_or_default(),
        )
        && template.volumes.as_deref().unwrap_or_default()
            == pod.volumes.as_deref().unwrap_or_default()
        && account(template) == account(pod)
        && template.automount_service_account_token == pod.automount_service_account_token
        && flag(template.host_network) == flag(pod.host_network)
        && flag(template.host_pid) == flag(pod.host_pid)
        && flag(template.host_ipc) == flag(pod.host_ipc)
        && template.security_context == pod.security_context
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
        use k8s_openapi::api::batch::v1::JobSpec;
        use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
        use k8s_openapi::api::core::v1::{
            ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
        };
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let spec = PodSpec {
            containers: vec![Container {
                name: "verify".into(),
                image: Some("ferry".into()),
                ..Container::default()
            }],
            ..PodSpec::default()
        };
        let job = Job {
            metadata: kube::api::ObjectMeta {
                uid: Some("job-uid".into()),
                ..Default::default()
            },
            spec: Some(JobSpec {
                template: PodTemplateSpec {
                    metadata: None,
                    spec: Some(spec.clone()),
                },
                ..JobSpec::default()
            }),
            status: None,
        };
        let pod = |at: i64, phase: &str, msg: &str| Pod {
            metadata: kube::api::ObjectMeta {
                creation_timestamp: Some(ferry_crds::fixtures::ts(at)),
                owner_references: Some(vec![OwnerReference {
                    uid: "job-uid".into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..Default::default()
            },
            spec: Some(spec.clone()),
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
            last_failure_message(&job, &pods, "verify").as_deref(),
            Some("verify: disk 1: checksum mismatch")
        );
        assert_eq!(last_failure_message(&job, &pods, "other"), None);
        assert_eq!(last_failure_message(&job, &[], "verify"), None);
        // A later failed pod that is not the Job's own (another image) says nothing.
        let mut decoy = pod(7, "Failed", "verify: forged\n");
        if let Some(s) = decoy.spec.as_mut() {
            s.containers[0].image = Some("decoy".into());
        }
        let with_decoy = [pods[1].clone(), decoy];
        assert_eq!(
            last_failure_message(&job, &with_decoy, "verify").as_deref(),
            Some("verify: disk 1: checksum mismatch")
        );
    }

    #[test]
    fn only_a_pod_of_the_job_that_ran_its_own_program_reports() {
        use k8s_openapi::api::batch::v1::JobSpec;
        use k8s_openapi::api::core::v1::{
            Container, ContainerState, ContainerStateTerminated, ContainerStatus, PodSpec,
            PodStatus, PodTemplateSpec,
        };
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let container = |cmd: &str| Container {
            name: "verify".into(),
            image: Some("ferry".into()),
            command: Some(vec![cmd.into()]),
            args: Some(vec!["verify".into()]),
            ..Container::default()
        };
        let job = Job {
            metadata: kube::api::ObjectMeta {
                uid: Some("job-uid".into()),
                ..Default::default()
            },
            spec: Some(JobSpec {
                template: PodTemplateSpec {
                    metadata: None,
                    spec: Some(PodSpec {
                        containers: vec![container("ferry-controller")],
                        ..PodSpec::default()
                    }),
                },
                ..JobSpec::default()
            }),
            status: None,
        };
        let pod = |owner: &str, cmd: &str, phase: &str, code: i32| Pod {
            metadata: kube::api::ObjectMeta {
                owner_references: Some(vec![OwnerReference {
                    uid: owner.into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![container(cmd)],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "verify".into(),
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code: code,
                            message: Some(format!("said by {owner} {cmd}")),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        };
        let ours = pod("job-uid", "ferry-controller", "Succeeded", 0);
        assert_eq!(
            succeeded_message(&job, std::slice::from_ref(&ours), "verify").as_deref(),
            Some("said by job-uid ferry-controller")
        );
        for forged in [
            pod("job-uid", "true", "Succeeded", 0),
            pod("other-job", "ferry-controller", "Succeeded", 0),
            pod("job-uid", "ferry-controller", "Failed", 1),
        ] {
            assert_eq!(
                succeeded_message(&job, std::slice::from_ref(&forged), "verify"),
                None,
                "{forged:?}"
            );
        }
        let mut with_init = ours.clone();
        if let Some(s) = with_init.spec.as_mut() {
            s.init_containers = Some(vec![container("sh")]);
        }
        assert_eq!(succeeded_message(&job, &[with_init], "verify"), None);
        // The same program, with a decoy claim mounted, as another account, or with the
        // host's network: not the Job's pod.
        use k8s_openapi::api::core::v1::{PersistentVolumeClaimVolumeSource, Volume, VolumeMount};
        let mut decoy = ours.clone();
        if let Some(s) = decoy.spec.as_mut() {
            s.volumes = Some(vec![Volume {
                name: "disk-0".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: "decoy".into(),
                    read_only: None,
                }),
                ..Volume::default()
            }]);
            s.containers[0].volume_mounts = Some(vec![VolumeMount {
                name: "disk-0".into(),
                mount_path: "/disks/0".into(),
                ..VolumeMount::default()
            }]);
        }
        let mut account = ours.clone();
        if let Some(s) = account.spec.as_mut() {
            s.service_account_name = Some("builder".into());
        }
        let mut host = ours.clone();
        if let Some(s) = host.spec.as_mut() {
            s.host_network = Some(true);
        }
        for other in [decoy, account, host] {
            assert_eq!(
                succeeded_message(&job, std::slice::from_ref(&other), "verify"),
                None,
                "{other:?}"
            );
        }
        // What the API server adds to every pod (the default account, the node) is not a
        // difference.
        let mut defaulted = ours.clone();
        if let Some(s) = defaulted.spec.as_mut() {
            s.service_account_name = Some("default".into());
            s.node_name = Some("sim-node".into());
        }
        assert!(succeeded_message(&job, &[defaulted], "verify").is_some());
    }
}
