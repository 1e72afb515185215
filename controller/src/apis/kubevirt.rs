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
    /// Other fields.
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `VirtualMachineInstance.spec`, kept as JSON: ferry never writes a VMI.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachineInstance",
    namespaced,
    status = "VirtualMachineInstanceStatus",
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
