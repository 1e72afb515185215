//! The KubeVirt side: what the migrated VirtualMachine looks like.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Volume mode of the imported disks' volumes: Filesystem or Block; the StorageClass's default
/// when unset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum VolumeMode {
    /// A disk image file on a filesystem volume.
    Filesystem,
    /// A raw block device.
    Block,
}

/// KubeVirt's run strategy for the migrated VirtualMachine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RunStrategy {
    /// Keep an instance running; restart it whenever it stops.
    #[default]
    Always,
    /// Leave the VM stopped (the migration then ends after CreatingVM, without boot validation).
    Halted,
    /// Start and stop only on request.
    Manual,
    /// Restart the instance only if it failed.
    RerunOnFailure,
    /// Run the instance once.
    Once,
}

/// The pod network: KubeVirt's masquerade binding on the pod's own interface.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PodNetwork {}

/// A Multus secondary network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MultusNetwork {
    /// NetworkAttachmentDefinition to attach to, as name or namespace/name.
    #[schemars(length(min = 1, max = 317), pattern(crate::rules::NETWORK_ATTACHMENT))]
    pub network_name: String,
}

/// Where the adapters on one vSphere network go: exactly one of `pod` and `multus`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[x_kube(validation = crate::rules::exactly_one_network_binding())]
pub struct NetworkMapping {
    /// Name of the vSphere network (port group) whose adapters this entry maps.
    #[schemars(length(min = 1, max = 80))]
    pub source: String,
    /// Connect these adapters to the pod network (`pod: {}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodNetwork>,
    /// Connect these adapters to a Multus network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multus: Option<MultusNetwork>,
}

/// The target of a migration minus its name: shared by every VM of a wave.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetTemplate {
    /// StorageClass of the imported disks' volumes; the cluster's default class when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(crate::rules::DNS1123_SUBDOMAIN))]
    pub storage_class_name: Option<String>,

    /// Volume mode of the imported disks' volumes: Filesystem or Block; the StorageClass's
    /// default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mode: Option<VolumeMode>,

    /// KubeVirt run strategy of the new VirtualMachine: Always (default), Halted, Manual,
    /// RerunOnFailure or Once. The VM is created Halted and switched to this in Starting.
    #[serde(default)]
    pub run_strategy: RunStrategy,

    /// Where each vSphere network's adapters go. When empty, the first adapter is connected to
    /// the pod network and the others are left out; adapters on networks not listed here are
    /// left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["source"]))]
    #[x_kube(validation = crate::rules::at_most_one_pod_network())]
    pub networks: Vec<NetworkMapping>,
}

/// The target of a migration: the KubeVirt VirtualMachine to create.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TargetSpec {
    /// Name of the new VirtualMachine (a DNS-1123 label). Defaults to the source VM's name made
    /// valid: lowercased, other characters replaced by '-', e.g. DC0_H0_VM0 becomes dc0-h0-vm0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63), pattern(crate::rules::DNS1123_LABEL))]
    pub name: Option<String>,

    /// Storage, run strategy and networks.
    #[serde(flatten)]
    pub template: TargetTemplate,
}
