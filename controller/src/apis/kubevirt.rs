//! KubeVirt's `VirtualMachine` and `VirtualMachineInstance` (`kubevirt.io/v1`): the fields ferry
//! writes and reads, and the reading of their status.

use ferry_crds::{RunStrategy, names};
use kube::{CustomResource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `VirtualMachine.spec`: run strategy and the instance template (kept as JSON).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachine",
    namespaced,
    status = "VirtualMachineStatus",
    derive = "Default",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineSpec {
    /// `Always`, `Halted`, `Manual`, `RerunOnFailure`, `Once`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<String>,
    /// The VMI template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Value>,
    /// Other fields.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `VirtualMachine.status`: only what ferry reads.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineStatus {
    /// e.g. `Running`, `Stopped`, `ErrorUnschedulable`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub printable_status: Option<String>,
    /// `Ready`, `Failure`, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<KvCondition>,
    /// KubeVirt's crash-loop bookkeeping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_failure: Option<StartFailure>,
    /// Other fields.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `VirtualMachine.status.startFailure`.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StartFailure {
    /// Instances that failed in a row.
    #[serde(default)]
    pub consecutive_fail_count: i64,
    /// When KubeVirt starts the next one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_timestamp: Option<String>,
}

/// `VirtualMachineInstance.spec`, kept as JSON: ferry never writes a VMI.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachineInstance",
    namespaced,
    status = "VirtualMachineInstanceStatus",
    derive = "Default",
    schema = "disabled"
)]
pub struct VirtualMachineInstanceSpec {
    /// Everything.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `VirtualMachineInstance.status`: phase and conditions.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceStatus {
    /// Where the instance stands.
    #[serde(default)]
    pub phase: Option<VmiPhase>,
    /// `Ready`, `AgentConnected`, `PodScheduled`, ...
    #[serde(default)]
    pub conditions: Vec<KvCondition>,
    /// Why the VMI is in its phase, when KubeVirt says.
    #[serde(default)]
    pub reason: Option<String>,
    /// The instance's pods, by uid, to their node: written by virt-controller, which made them
    /// (`pkg/virt-controller/watch/vmi.go`), in the VMI's status, which only KubeVirt's own
    /// components may write. What says which pod is the instance's launcher: a label or an
    /// owner reference on a pod is anyone's to write who may create pods in the namespace.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub active_pods: std::collections::BTreeMap<String, String>,
    /// The instance's interfaces as virt-handler reports them, the pod network's first
    /// (`NetStat.UpdateStatus`, `pkg/network/setup/netstat.go`): where the health check probes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<VmiInterface>,
}

/// One of `VirtualMachineInstance.status.interfaces`: its name and address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VmiInterface {
    /// The VMI spec's interface name (empty for one only the guest has).
    #[serde(default)]
    pub name: Option<String>,
    /// Its first IP address (for the pod network, the pod's).
    #[serde(default)]
    pub ip_address: Option<String>,
}

/// `VirtualMachineInstance.status.phase` (KubeVirt `v1.VirtualMachineInstancePhase`); a phase
/// this build does not know reads as `Unknown`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum VmiPhase {
    /// Accepted, not yet scheduling (also what an empty phase means).
    #[default]
    Pending,
    /// Its pod is being scheduled.
    Scheduling,
    /// Its pod was scheduled; the domain is starting.
    Scheduled,
    /// The guest runs.
    Running,
    /// The guest stopped on its own.
    Succeeded,
    /// The guest or its pod failed.
    Failed,
    /// KubeVirt lost track of it, or a phase unknown to this build.
    #[serde(other)]
    Unknown,
}

impl VmiPhase {
    /// The phase's name as KubeVirt writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            VmiPhase::Pending => "Pending",
            VmiPhase::Scheduling => "Scheduling",
            VmiPhase::Scheduled => "Scheduled",
            VmiPhase::Running => "Running",
            VmiPhase::Succeeded => "Succeeded",
            VmiPhase::Failed => "Failed",
            VmiPhase::Unknown => "Unknown",
        }
    }

    /// `Succeeded` or `Failed`: the instance will not run again by itself.
    pub fn is_final(self) -> bool {
        matches!(self, VmiPhase::Succeeded | VmiPhase::Failed)
    }
}

impl std::fmt::Display for VmiPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A KubeVirt condition.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KvCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// `"True"`, `"False"`, `"Unknown"`.
    pub status: String,
    /// Reason.
    #[serde(default)]
    pub reason: Option<String>,
    /// Message.
    #[serde(default)]
    pub message: Option<String>,
    /// When the status last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// The VM printableStatus values that say KubeVirt cannot run the VM as it is (after
/// `setPrintableStatus` in kubevirt `pkg/virt-controller/watch/vm/vm.go`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvError {
    /// The VMI's pod cannot be scheduled (`PodScheduled=False`, `Unschedulable`).
    ErrorUnschedulable,
    /// A claim of the VMI does not exist (`Synchronized=False`, `FailedPvcNotFound`).
    ErrorPvcNotFound,
    /// A DataVolume of the VM failed, or its importer stopped on an error.
    DataVolumeError,
    /// Instances keep failing and KubeVirt backs off starting the next one.
    CrashLoopBackOff,
    /// The virt-launcher image cannot be pulled.
    ErrImagePull,
    /// Pulling the virt-launcher image is backing off.
    ImagePullBackOff,
}

impl KvError {
    /// KubeVirt's printableStatus name.
    pub fn as_str(self) -> &'static str {
        match self {
            KvError::ErrorUnschedulable => "ErrorUnschedulable",
            KvError::ErrorPvcNotFound => "ErrorPvcNotFound",
            KvError::DataVolumeError => "DataVolumeError",
            KvError::CrashLoopBackOff => "CrashLoopBackOff",
            KvError::ErrImagePull => "ErrImagePull",
            KvError::ImagePullBackOff => "ImagePullBackOff",
        }
    }

    fn parse(s: &str) -> Option<KvError> {
        [
            KvError::ErrorUnschedulable,
            KvError::ErrorPvcNotFound,
            KvError::DataVolumeError,
            KvError::CrashLoopBackOff,
            KvError::ErrImagePull,
            KvError::ImagePullBackOff,
        ]
        .into_iter()
        .find(|e| e.as_str() == s)
    }
}

/// A KubeVirt error state: which, KubeVirt's own words, and since when (when KubeVirt says).
#[derive(Clone, Debug, PartialEq)]
pub struct Trouble {
    /// The printableStatus.
    pub error: KvError,
    /// KubeVirt's message (the condition that caused it), or what the status implies.
    pub message: String,
    /// When the condition behind it last changed.
    pub since: Option<k8s_openapi::jiff::Timestamp>,
}

fn false_condition<'a>(
    conds: &'a [KvCondition],
    type_: &str,
    reasons: &[&str],
) -> Option<&'a KvCondition> {
    conds.iter().find(|c| {
        c.type_ == type_
            && c.status == "False"
            && c.reason.as_deref().is_some_and(|r| reasons.contains(&r))
    })
}

/// The error state of a VM and its instance, if any: the VM's printableStatus, or (before
/// KubeVirt's VM controller updated it) the instance condition it follows from. Pure.
pub fn trouble(
    vm: Option<&VirtualMachineStatus>,
    vmi: Option<&VirtualMachineInstanceStatus>,
) -> Option<Trouble> {
    let vmi_conds = vmi.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let vm_conds = vm.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let unschedulable = false_condition(vmi_conds, "PodScheduled", &["Unschedulable"]);
    let pvc = false_condition(vmi_conds, "Synchronized", &["FailedPvcNotFound"]);
    let pull = false_condition(
        vmi_conds,
        "Synchronized",
        &["ErrImagePull", "ImagePullBackOff"],
    );
    let printable = vm
        .and_then(|s| s.printable_status.as_deref())
        .and_then(KvError::parse);
    let error = printable
        .or_else(|| pvc.map(|_| KvError::ErrorPvcNotFound))
        .or_else(|| unschedulable.map(|_| KvError::ErrorUnschedulable))
        .or_else(|| {
            pull.and_then(|c| c.reason.as_deref())
                .and_then(KvError::parse)
        })?;
    let cause = match error {
        KvError::ErrorUnschedulable => unschedulable,
        KvError::ErrorPvcNotFound => pvc,
        KvError::ErrImagePull | KvError::ImagePullBackOff => pull,
        KvError::DataVolumeError => {
            false_condition(vmi_conds, "DataVolumesReady", &["NotAllDVsReady"])
        }
        KvError::CrashLoopBackOff => None,
    };
    // These printable statuses are KubeVirt's summary of its instance's conditions: with an
    // instance that no longer carries the condition (the claim came back, the pod was
    // scheduled), the VM's summary is older than the instance and nothing is wrong now.
    let from_instance = matches!(
        error,
        KvError::ErrorUnschedulable
            | KvError::ErrorPvcNotFound
            | KvError::ErrImagePull
            | KvError::ImagePullBackOff
    );
    if from_instance && vmi.is_some() && cause.is_none() {
        return None;
    }
    let failure = vm_conds
        .iter()
        .find(|c| c.type_ == "Failure" && c.status == "True");
    let said = |c: Option<&KvCondition>| {
        c.and_then(|c| c.message.clone())
            .filter(|m| !m.trim().is_empty())
    };
    let message = said(cause)
        .or_else(|| said(failure))
        .unwrap_or_else(|| match error {
            KvError::CrashLoopBackOff => {
                let f = vm.and_then(|s| s.start_failure.as_ref());
                format!(
                    "the VirtualMachineInstance failed {} time(s) in a row{}",
                    f.map_or(1, |f| f.consecutive_fail_count.max(1)),
                    f.and_then(|f| f.retry_after_timestamp.as_deref())
                        .map(|t| format!("; KubeVirt starts the next one after {t}"))
                        .unwrap_or_default()
                )
            }
            KvError::DataVolumeError => "a DataVolume of the VM failed".to_owned(),
            other => other.as_str().to_owned(),
        });
    Some(Trouble {
        error,
        message,
        since: cause
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0),
    })
}

impl VirtualMachineInstanceStatus {
    /// Whether condition `type_` is `True`.
    pub fn condition_true(&self, type_: &str) -> bool {
        self.conditions
            .iter()
            .any(|c| c.type_ == type_ && c.status == "True")
    }
}

/// KubeVirt's name of a run strategy.
pub fn run_strategy_name(s: RunStrategy) -> &'static str {
    match s {
        RunStrategy::Always => "Always",
        RunStrategy::Halted => "Halted",
        RunStrategy::Manual => "Manual",
        RunStrategy::RerunOnFailure => "RerunOnFailure",
        RunStrategy::Once => "Once",
    }
}

/// The migration a VMI belongs to, from the label its VM's template put on it.
pub fn migration_of(vmi: &VirtualMachineInstance) -> Option<(String, String)> {
    let name = vmi.labels().get(names::MIGRATION_LABEL)?.clone();
    Some((vmi.namespace()?, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[test]
    fn error_states_come_with_kubevirts_words() {
        let vm = |printable: &str, extra: serde_json::Value| -> VirtualMachineStatus {
            let mut v = json!({"printableStatus": printable});
            if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            serde_json::from_value(v).unwrap()
        };
        let vmi = |conds: serde_json::Value| -> VirtualMachineInstanceStatus {
            serde_json::from_value(json!({"phase": "Scheduling", "conditions": conds})).unwrap()
        };
        let unsched = vmi(
            json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/3 nodes are available: 3 Insufficient memory.", "lastTransitionTime": "2026-01-01T00:00:05Z"}]),
        );
        let t = trouble(Some(&vm("ErrorUnschedulable", json!({}))), Some(&unsched)).unwrap();
        assert_eq!(t.error, KvError::ErrorUnschedulable);
        assert_eq!(t.message, "0/3 nodes are available: 3 Insufficient memory.");
        assert_eq!(t.since, Some(ferry_crds::fixtures::ts(5).0));
        // Before the VM controller caught up, the VMI's condition says it.
        assert_eq!(
            trouble(Some(&vm("Starting", json!({}))), Some(&unsched)).map(|t| t.error),
            Some(KvError::ErrorUnschedulable)
        );
        let pvc = vmi(
            json!([{"type": "Synchronized", "status": "False", "reason": "FailedPvcNotFound",
            "message": "PVC ns/d does not exist, waiting for it to appear"}]),
        );
        let t = trouble(Some(&vm("ErrorPvcNotFound", json!({}))), Some(&pvc)).unwrap();
        assert_eq!(
            (t.error, t.message.as_str()),
            (
                KvError::ErrorPvcNotFound,
                "PVC ns/d does not exist, waiting for it to appear"
            )
        );
        // The VM's summary lags an instance that no longer carries the condition: not an error
        // now. Without an instance, the summary is all there is.
        let recovered = vmi(json!([]));
        assert_eq!(
            trouble(Some(&vm("ErrorPvcNotFound", json!({}))), Some(&recovered)).map(|t| t.error),
            None
        );
        assert_eq!(
            trouble(Some(&vm("ErrorUnschedulable", json!({}))), Some(&recovered)).map(|t| t.error),
            None
        );
        assert_eq!(
            trouble(Some(&vm("ErrorPvcNotFound", json!({}))), None).map(|t| t.error),
            Some(KvError::ErrorPvcNotFound)
        );
        let crash = vm(
            "CrashLoopBackOff",
            json!({"startFailure": {"consecutiveFailCount": 3, "retryAfterTimestamp": "2026-01-01T00:01:00Z"}}),
        );
        let t = trouble(Some(&crash), None).unwrap();
        assert_eq!(t.error, KvError::CrashLoopBackOff);
        assert!(
            t.message.contains("failed 3 time(s)") && t.message.contains("00:01:00"),
            "{}",
            t.message
        );
        let dv = vm(
            "DataVolumeError",
            json!({"conditions": [{"type": "Failure", "status": "True", "reason": "FailedDataVolumeImport",
                "message": "DataVolume d is in Failed phase"}]}),
        );
        assert_eq!(
            trouble(Some(&dv), None).map(|t| (t.error, t.message)),
            Some((
                KvError::DataVolumeError,
                "DataVolume d is in Failed phase".to_owned()
            ))
        );
        let pull = vmi(
            json!([{"type": "Synchronized", "status": "False", "reason": "ErrImagePull", "message": "pull failed"}]),
        );
        assert_eq!(
            trouble(None, Some(&pull)).map(|t| t.error),
            Some(KvError::ErrImagePull)
        );
        for fine in [
            "Running",
            "Starting",
            "Stopped",
            "Provisioning",
            "WaitingForVolumeBinding",
        ] {
            assert_eq!(
                trouble(Some(&vm(fine, json!({}))), Some(&vmi(json!([])))),
                None,
                "{fine}"
            );
        }
    }

    #[test]
    fn vmi_conditions_and_owner_mapping() {
        let mut vmi =
            VirtualMachineInstance::new("dc0-h0-vm0", VirtualMachineInstanceSpec::default());
        vmi.metadata.namespace = Some("ns".into());
        vmi.metadata.labels = Some(BTreeMap::from([(
            names::MIGRATION_LABEL.to_owned(),
            "web-1".to_owned(),
        )]));
        assert_eq!(migration_of(&vmi), Some(("ns".into(), "web-1".into())));
        let s: VirtualMachineInstanceStatus = serde_json::from_value(json!({
            "phase": "Running", "conditions": [{"type": "AgentConnected", "status": "True"}, {"type": "Ready", "status": "False"}]
        }))
        .unwrap();
        assert!(s.condition_true("AgentConnected"));
        assert!(!s.condition_true("Ready"));
        assert_eq!(s.phase, Some(VmiPhase::Running));
        let odd: VirtualMachineInstanceStatus =
            serde_json::from_value(json!({"phase": "WaitingForSync"})).unwrap();
        assert_eq!(odd.phase, Some(VmiPhase::Unknown));
    }
}
