//! CDI's `DataVolume` (`cdi.kubevirt.io/v1beta1`): the fields ferry writes and reads, and the
//! reading of its status contract.

use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Annotation asking CDI to bind (and so import) at once even on a `WaitForFirstConsumer`
/// StorageClass. ferry does not set it: its verification Job is the claims' first consumer, as
/// Forklift's conversion pod is (see docs/real-guests.md); a DataVolume that carries it is still read.
pub const BIND_IMMEDIATE_ANNOTATION: &str = "cdi.kubevirt.io/storage.bind.immediate.requested";

/// `DataVolume.spec`: an S3 source and a storage request. Unknown fields are kept.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[kube(
    group = "cdi.kubevirt.io",
    version = "v1beta1",
    kind = "DataVolume",
    namespaced,
    status = "DataVolumeStatus",
    derive = "Default",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeSpec {
    /// Where the data comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<DataVolumeSource>,
    /// CDI's `StorageSpec`: a claim spec whose blanks CDI fills in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageSpec>,
    /// Fields ferry does not use.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `spec.source`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct DataVolumeSource {
    /// An object in S3, path-style URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Source>,
    /// Other source kinds.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `spec.source.s3`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct S3Source {
    /// `http(s)://host[:port]/bucket/key`.
    pub url: String,
    /// Secret with keys `accessKeyId` and `secretKey`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<String>,
    /// ConfigMap whose values are PEM CA certificates the importer trusts besides the system's
    /// (an https endpoint with a private CA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_config_map: Option<String>,
}

/// `spec.storage`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Requested size and the like.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Value>,
    /// StorageClass; the cluster default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// `Filesystem` or `Block`; CDI's StorageProfile decides when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mode: Option<String>,
    /// `ReadWriteOnce`, `ReadWriteMany`; CDI's StorageProfile decides when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_modes: Option<Vec<String>>,
    /// Other fields.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `DataVolume.status`, as CDI's DataVolume controller writes it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeStatus {
    /// `Pending`, `ImportScheduled`, `ImportInProgress`, `Succeeded`, `Failed`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `"45.23%"`, or `"N/A"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// How often the importer pod restarted.
    #[serde(default)]
    pub restart_count: i32,
    /// `Bound`, `Running`, `Ready`.
    #[serde(default)]
    pub conditions: Vec<CdiCondition>,
    /// Name of the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
}

/// A condition of a DataVolume.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
pub struct CdiCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `"True"`, `"False"` or `"Unknown"`.
    pub status: String,
    /// CamelCase reason.
    #[serde(default)]
    pub reason: Option<String>,
    /// Details.
    #[serde(default)]
    pub message: Option<String>,
}

/// Where one DataVolume stands, read through CDI's status contract.
#[derive(Clone, Debug, PartialEq)]
pub enum DvState {
    /// Not created yet.
    Absent,
    /// Being deleted (a retry's cleanup); wait until it is gone.
    Deleting,
    /// Created, not finished: `percent` from `status.progress` when known; `restarts` is
    /// `status.restartCount`; `failing` carries the `Running` condition's message while the
    /// importer is down (`Running=False` with reason `Error`).
    InProgress {
        /// CDI phase.
        phase: String,
        /// Import progress, 0 to 100.
        percent: Option<f64>,
        /// Importer restarts so far.
        restarts: i32,
        /// Why the importer is down, when it is.
        failing: Option<String>,
    },
    /// `WaitForFirstConsumer` or `PendingPopulation`: the claim's StorageClass binds on first
    /// consumer and CDI waits for a pod to use it (with populators the claim binds only once
    /// populated, so that consumer sees the finished import; without, CDI imports alongside it).
    AwaitingConsumer {
        /// Populators: the claim binds only once populated (`PendingPopulation`).
        populator: bool,
    },
    /// `Paused`: a multi-stage import waits for its next checkpoint (ferry asks for none).
    Paused,
    /// `Succeeded`.
    Succeeded,
    /// `Failed`: CDI gave up; the message says why.
    Failed {
        /// The `Running` condition's message.
        message: String,
    },
}

/// `Running` condition reasons CDI writes while the importer is down and restarting: the
/// importer's exit (`Error`, with its termination message; CDI keeps it through the kubelet's
/// back-off since containerized-data-importer 19d109837), or the back-off itself
/// (`CrashLoopBackOff`, as CDI reported before that change), or an image it cannot pull.
const IMPORTER_DOWN: [&str; 3] = ["Error", "CrashLoopBackOff", "ImagePullFailed"];

/// Parses CDI's progress string (`"45.23%"`); `None` for `"N/A"` or garbage.
pub fn parse_progress(s: &str) -> Option<f64> {
    let v: f64 = s.trim().strip_suffix('%')?.trim().parse().ok()?;
    v.is_finite().then_some(v.clamp(0.0, 100.0))
}

/// Classifies a DataVolume (or its absence). Pure.
pub fn observe(dv: Option<&DataVolume>) -> DvState {
    let Some(dv) = dv else { return DvState::Absent };
    if dv.metadata.deletion_timestamp.is_some() {
        return DvState::Deleting;
    }
    let status = dv.status.clone().unwrap_or_default();
    let running = status.conditions.iter().find(|c| c.type_ == "Running");
    let running_message = running.and_then(|c| c.message.clone()).unwrap_or_default();
    match status.phase.as_deref() {
        Some("Succeeded") => DvState::Succeeded,
        Some("Failed") => DvState::Failed {
            message: running_message,
        },
        Some("WaitForFirstConsumer") => DvState::AwaitingConsumer { populator: false },
        Some("PendingPopulation") => DvState::AwaitingConsumer { populator: true },
        Some("Paused") => DvState::Paused,
        phase => {
            let failing = running.filter(|c| c.status == "False").and_then(|c| {
                let reason = c.reason.as_deref().unwrap_or_default();
                let message = c.message.clone().unwrap_or_default();
                if IMPORTER_DOWN.contains(&reason) {
                    Some(if message.is_empty() {
                        format!("importer {reason}")
                    } else {
                        message
                    })
                } else if !reason.is_empty() && reason != "Completed" {
                    // The importer cannot start (Unschedulable, CreateContainerConfigError).
                    Some(format!("{reason}: {message}"))
                } else {
                    None
                }
            });
            DvState::InProgress {
                phase: phase.unwrap_or("Pending").to_owned(),
                percent: status.progress.as_deref().and_then(parse_progress),
                restarts: status.restart_count,
                failing,
            }
        }
    }
}

/// The path-style URL CDI reads a staged object from: `<endpoint>/<bucket>/<key>`.
pub fn s3_url(endpoint: &str, bucket: &str, key: &str) -> String {
    format!(
        "{}/{}/{}",
        endpoint.trim_end_matches('/'),
        bucket,
        key.trim_start_matches('/')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dv_with(status: serde_json::Value) -> DataVolume {
        let mut dv = DataVolume::new("d", DataVolumeSpec::default());
        dv.status = Some(serde_json::from_value(status).unwrap());
        dv
    }

    #[test]
    fn progress_strings_parse_like_cdi_writes_them() {
        assert_eq!(parse_progress("45.23%"), Some(45.23));
        assert_eq!(parse_progress("100.0%"), Some(100.0));
        assert_eq!(parse_progress(" 7 % "), Some(7.0));
        assert_eq!(parse_progress("N/A"), None);
        assert_eq!(parse_progress(""), None);
        assert_eq!(parse_progress("120%"), Some(100.0));
    }

    #[test]
    fn observe_reads_the_cdi_status_contract() {
        assert_eq!(observe(None), DvState::Absent);
        assert_eq!(
            observe(Some(&dv_with(serde_json::json!({"phase": "Succeeded"})))),
            DvState::Succeeded
        );
        let failed = dv_with(serde_json::json!({"phase": "Failed",
            "conditions": [{"type": "Running", "status": "False", "reason": "Error", "message": "checksum"}]}));
        assert_eq!(
            observe(Some(&failed)),
            DvState::Failed {
                message: "checksum".into()
            }
        );
        let running = dv_with(
            serde_json::json!({"phase": "ImportInProgress", "progress": "45.23%", "restartCount": 0,
            "conditions": [{"type": "Running", "status": "True", "reason": "Pod is running"}]}),
        );
        assert_eq!(
            observe(Some(&running)),
            DvState::InProgress {
                phase: "ImportInProgress".into(),
                percent: Some(45.23),
                restarts: 0,
                failing: None
            }
        );
        let restarting = dv_with(
            serde_json::json!({"phase": "ImportInProgress", "progress": "40.00%", "restartCount": 2,
            "conditions": [{"type": "Running", "status": "False", "reason": "Error", "message": "boom"}]}),
        );
        assert_eq!(
            observe(Some(&restarting)),
            DvState::InProgress {
                phase: "ImportInProgress".into(),
                percent: Some(40.0),
                restarts: 2,
                failing: Some("boom".into())
            }
        );
        // CDI before 19d109837 (2021) put the kubelet's back-off in the Running condition.
        let backing_off = dv_with(
            serde_json::json!({"phase": "ImportInProgress", "restartCount": 3,
            "conditions": [{"type": "Running", "status": "False", "reason": "CrashLoopBackOff",
                "message": "back-off 40s restarting failed container=importer pod=importer-d"}]}),
        );
        assert!(matches!(
            observe(Some(&backing_off)),
            DvState::InProgress { restarts: 3, failing: Some(ref m), .. } if m.contains("back-off 40s")
        ));
        let unschedulable = dv_with(serde_json::json!({"phase": "ImportScheduled",
            "conditions": [{"type": "Running", "status": "False", "reason": "Unschedulable",
                "message": "Importer pod cannot be scheduled"}]}));
        assert!(matches!(
            observe(Some(&unschedulable)),
            DvState::InProgress { restarts: 0, failing: Some(ref m), .. } if m == "Unschedulable: Importer pod cannot be scheduled"
        ));
        let done = dv_with(serde_json::json!({"phase": "ImportInProgress",
            "conditions": [{"type": "Running", "status": "False", "reason": "Completed"}]}));
        assert!(matches!(
            observe(Some(&done)),
            DvState::InProgress { failing: None, .. }
        ));
        assert_eq!(
            observe(Some(&dv_with(
                serde_json::json!({"phase": "WaitForFirstConsumer"})
            ))),
            DvState::AwaitingConsumer { populator: false }
        );
        assert_eq!(
            observe(Some(&dv_with(
                serde_json::json!({"phase": "PendingPopulation"})
            ))),
            DvState::AwaitingConsumer { populator: true }
        );
        assert_eq!(
            observe(Some(&dv_with(serde_json::json!({"phase": "Paused"})))),
            DvState::Paused
        );
        let mut deleting = dv_with(serde_json::json!({"phase": "ImportInProgress"}));
        deleting.metadata.deletion_timestamp = Some(ferry_crds::fixtures::t0());
        assert_eq!(observe(Some(&deleting)), DvState::Deleting);
        assert!(
            matches!(observe(Some(&dv_with(serde_json::json!({})))), DvState::InProgress { ref phase, .. } if phase == "Pending")
        );
    }

    #[test]
    fn s3_url_joins_without_double_slashes() {
        assert_eq!(s3_url("http://h:9000/", "b", "/k/x"), "http://h:9000/b/k/x");
    }
}
