//! The parts of KubeVirt's `VirtualMachine` and `VirtualMachineInstance` (kubevirt.io/v1) the
//! sim reads and writes, after `staging/src/kubevirt.io/api/core/v1/types.go`. Unknown fields
//! of the spec are kept as JSON so a VMI is created from the VM's template unchanged.

use kube::CustomResource;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::conditions::Condition;

/// `VirtualMachine.spec`: the run strategy (or legacy `running`) and the VMI template.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize)]
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<VmiTemplate>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// `spec.template`: metadata (labels, annotations) and the VMI spec.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct VmiTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    #[serde(default)]
    pub spec: VirtualMachineInstanceSpec,
}

/// `VirtualMachine.status`, the fields KubeVirt's VM controller maintains that the sim keeps.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineStatus {
    #[serde(default)]
    pub created: bool,
    #[serde(default)]
    pub ready: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub printable_status: Option<String>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_failure: Option<StartFailure>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<String>,
}

/// `status.startFailure`: KubeVirt's crash-loop bookkeeping.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StartFailure {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_timestamp: Option<String>,
    #[serde(default)]
    pub consecutive_fail_count: i64,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "lastFailedVMIUID"
    )]
    pub last_failed_vmi_uid: Option<String>,
}

/// `VirtualMachineInstance.spec`: the volumes are read; everything else is carried along.
#[derive(CustomResource, Clone, Debug, Default, Deserialize, Serialize)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachineInstance",
    namespaced,
    status = "VirtualMachineInstanceStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

/// One VMI volume; only the kinds that name a claim matter to the sim.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_volume: Option<NamedRef>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<ClaimRef>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
pub struct NamedRef {
    #[serde(default)]
    pub name: String,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRef {
    #[serde(default)]
    pub claim_name: String,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Volume {
    /// The claim (PVC, or the DataVolume's PVC of the same name) this volume needs, if any.
    pub fn claim(&self) -> Option<&str> {
        self.data_volume
            .as_ref()
            .map(|d| d.name.as_str())
            .or_else(|| {
                self.persistent_volume_claim
                    .as_ref()
                    .map(|p| p.claim_name.as_str())
            })
            .filter(|s| !s.is_empty())
    }
}

/// `VirtualMachineInstance.status`, the fields virt-controller and virt-handler maintain.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceStatus {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub phase: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(default)]
    pub phase_transition_timestamps: Vec<PhaseTransition>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "guestOSInfo"
    )]
    pub guest_os_info: Option<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<NetworkInterface>,
}

/// One of `status.interfaces` (`VirtualMachineInstanceNetworkInterface`): every field
/// `omitempty`, as Go writes it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// The first of `ipAddresses`.
    #[serde(
        default,
        rename = "ipAddress",
        skip_serializing_if = "String::is_empty"
    )]
    pub ip: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub mac: String,
    /// The VMI spec's interface (and network) name; empty for an interface only the guest has.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(default, rename = "ipAddresses", skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    /// Written by virt-controller (the pod's interface), kept by virt-handler.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_interface_name: String,
    /// The guest's name for it (`enp1s0`), from the guest agent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub interface_name: String,
    /// `domain`, `guest-agent`, `multus-status`, joined with `, `.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub info_source: String,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub queue_count: i32,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub link_state: String,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseTransition {
    pub phase: String,
    pub phase_transition_timestamp: String,
}

/// VMI phases (`VirtualMachineInstancePhase`).
pub mod phase {
    pub const PENDING: &str = "Pending";
    pub const SCHEDULING: &str = "Scheduling";
    pub const SCHEDULED: &str = "Scheduled";
    pub const RUNNING: &str = "Running";
    pub const SUCCEEDED: &str = "Succeeded";
    pub const FAILED: &str = "Failed";
}

impl VirtualMachineInstanceStatus {
    /// `Succeeded` or `Failed`.
    pub fn is_final(&self) -> bool {
        self.phase == phase::SUCCEEDED || self.phase == phase::FAILED
    }

    /// When the current phase began, from `phaseTransitionTimestamps`.
    pub fn phase_since(&self) -> Option<&str> {
        self.phase_transition_timestamps
            .iter()
            .rev()
            .find(|t| t.phase == self.phase)
            .map(|t| t.phase_transition_timestamp.as_str())
    }
}
