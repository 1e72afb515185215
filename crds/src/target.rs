//! The KubeVirt side: what the migrated VirtualMachine looks like.

use std::collections::BTreeMap;

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::PowerState;

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
    /// Start and stop only on request: ferry leaves it stopped (starting it is KubeVirt's
    /// `start` subresource, served by virt-api; `virtctl start`), so readiness must be None.
    Manual,
    /// Restart the instance only if it failed.
    RerunOnFailure,
    /// Run the instance once.
    Once,
}

/// When a migrated VM counts as ready, i.e. what Validating waits for before the migration
/// succeeds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Readiness {
    /// The VirtualMachineInstance is Running and its qemu guest agent connected (the guest must
    /// run qemu-guest-agent; VMware guests usually do not).
    AgentConnected,
    /// The VirtualMachineInstance is Running and Ready: the guest was started; no agent needed.
    Running,
    /// Nothing is checked: the migration succeeds once the VirtualMachine exists with its run
    /// strategy (with Halted or Manual it stays stopped).
    None,
}

/// The disk bus of the migrated VM's disks (KubeVirt `disk.bus`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum DiskBus {
    /// virtio-blk: fastest; needs virtio drivers in the guest (its initramfs, for Linux).
    Virtio,
    /// SATA (AHCI): works without virtio drivers.
    Sata,
    /// virtio-scsi: needs virtio drivers too.
    Scsi,
}

impl DiskBus {
    /// KubeVirt's name of the bus.
    pub fn as_str(self) -> &'static str {
        match self {
            DiskBus::Virtio => "virtio",
            DiskBus::Sata => "sata",
            DiskBus::Scsi => "scsi",
        }
    }
}

/// The NIC model of the migrated VM's interfaces (KubeVirt `interface.model`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NicModel {
    /// virtio-net: needs virtio drivers in the guest.
    Virtio,
    /// Intel e1000e: drivers in every mainstream guest.
    E1000e,
    /// Intel e1000: for old guests.
    E1000,
}

impl NicModel {
    /// KubeVirt's name of the model.
    pub fn as_str(self) -> &'static str {
        match self {
            NicModel::Virtio => "virtio",
            NicModel::E1000e => "e1000e",
            NicModel::E1000 => "e1000",
        }
    }
}

/// How the source's devices become the migrated VM's: the mapping is in docs/real-guests.md; each field
/// overrides one part of it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Devices {
    /// The guest has virtio drivers (a Linux whose initramfs has virtio_blk and virtio_net, or a
    /// Windows with virtio-win installed): disks and NICs default to virtio instead of SATA and
    /// e1000e. ferry's conversion does not install drivers.
    #[serde(default)]
    pub virtio_drivers: bool,
    /// Disk bus of every disk; from virtioDrivers when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bus: Option<DiskBus>,
    /// NIC model of every interface; from virtioDrivers when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nic_model: Option<NicModel>,
    /// Keep the source NICs' MAC addresses on the target interfaces.
    #[serde(default = "default_true")]
    pub preserve_mac_addresses: bool,
    /// QEMU machine type, e.g. q35 or pc-q35-rhel9.4.0; KubeVirt's cluster default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64), pattern(crate::rules::MACHINE_TYPE))]
    pub machine_type: Option<String>,
}

fn default_true() -> bool {
    true
}

impl Default for Devices {
    fn default() -> Self {
        Self {
            virtio_drivers: false,
            disk_bus: None,
            nic_model: None,
            preserve_mac_addresses: true,
            machine_type: None,
        }
    }
}

impl Devices {
    /// Whether nothing is overridden (then the field is left out on the wire).
    pub fn is_default(&self) -> bool {
        *self == Devices::default()
    }

    /// The disk bus: the override, else virtio with virtio drivers, else SATA.
    pub fn disk_bus(&self) -> DiskBus {
        self.disk_bus.unwrap_or(if self.virtio_drivers {
            DiskBus::Virtio
        } else {
            DiskBus::Sata
        })
    }

    /// The NIC model: the override, else virtio with virtio drivers, else e1000e.
    pub fn nic_model(&self) -> NicModel {
        self.nic_model.unwrap_or(if self.virtio_drivers {
            NicModel::Virtio
        } else {
            NicModel::E1000e
        })
    }
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

/// How the volumes of a PersistentVolumeClaim may be mounted.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
)]
pub enum AccessMode {
    /// By one node at a time.
    ReadWriteOnce,
    /// By many nodes at once (what KubeVirt's live migration needs).
    ReadWriteMany,
}

impl AccessMode {
    /// Kubernetes' name of the mode.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// Where the disks on one vSphere datastore go.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageMapping {
    /// Name of the vSphere datastore, as in a disk's path: `datastore1` for
    /// `[datastore1] vm/vm.vmdk`.
    #[schemars(length(min = 1, max = 80))]
    pub datastore: String,
    /// StorageClass of the volumes of its disks; the cluster's default class when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(crate::rules::DNS1123_SUBDOMAIN))]
    pub storage_class_name: Option<String>,
    /// Volume mode of those volumes; the StorageClass's default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mode: Option<VolumeMode>,
    /// Access mode of those volumes; the StorageClass's default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_mode: Option<AccessMode>,
}

/// Where one disk's volume goes: its StorageClass, volume mode and access mode (each `None`:
/// the class's or the cluster's default).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskPlacement {
    /// StorageClass.
    pub storage_class_name: Option<String>,
    /// Volume mode.
    pub volume_mode: Option<VolumeMode>,
    /// Access mode.
    pub access_mode: Option<AccessMode>,
}

/// The datastore of a disk's datastore path (`[datastore1] vm/vm.vmdk` → `datastore1`), `None`
/// when the path has no `[…]`. Pure.
pub fn datastore_of(datastore_path: &str) -> Option<&str> {
    let rest = datastore_path.trim_start().strip_prefix('[')?;
    let end = rest.find(']')?;
    Some(&rest[..end])
}

/// The target of a migration minus its name: shared by every VM of a wave.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::rules::readiness_needs_a_start())]
#[x_kube(validation = crate::rules::power_on_needs_a_start())]
#[x_kube(validation = crate::rules::health_check_needs_a_start())]
pub struct TargetTemplate {
    /// StorageClass of the imported disks' volumes; the cluster's default class when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), pattern(crate::rules::DNS1123_SUBDOMAIN))]
    pub storage_class_name: Option<String>,

    /// Volume mode of the imported disks' volumes: Filesystem or Block; the StorageClass's
    /// default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mode: Option<VolumeMode>,

    /// Where the disks of each vSphere datastore go (a VM's disks may live on several). A
    /// datastore not listed takes storageClassName and volumeMode above when storageClassName
    /// is set; without it, a disk on an unlisted datastore is a Critical preflight concern
    /// (DatastoreUnmapped) rather than a silent fall to the cluster's default class.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub storage_map: Vec<StorageMapping>,

    /// KubeVirt run strategy of the new VirtualMachine: Always (default), Halted, Manual,
    /// RerunOnFailure or Once. The VM is created with it in CreatingVM, right after the source
    /// VM is seen powered off again.
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

    /// When the migrated VM counts as ready: AgentConnected (qemu guest agent), Running
    /// (VirtualMachineInstance Running and Ready; no agent needed) or None (nothing checked).
    /// Unset: Running, or None with runStrategy Halted or Manual (ferry does not start those).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<Readiness>,

    /// Disk bus, NIC model, MAC addresses and machine type of the migrated VM.
    #[serde(default, skip_serializing_if = "Devices::is_default")]
    pub devices: Devices,

    /// The migrated VM's power state once ferry is done (Forklift's targetPowerState):
    /// PoweredOn (started as runStrategy says), PoweredOff (left Halted whatever runStrategy
    /// says; not waited for) or Auto (PoweredOn when the source was poweredOn when ferry first
    /// read it, else PoweredOff).
    /// Unset: as runStrategy says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_state: Option<TargetPowerState>,

    /// The migrated VM's labels and annotations, the nodes it may run on, and the
    /// instancetype and preference it takes its size and defaults from.
    #[serde(default, skip_serializing_if = "VmPlacement::is_empty")]
    pub placement: VmPlacement,

    /// A probe of the guest's own service once it is ready (see `HealthCheck`): the migration
    /// succeeds only when it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<crate::HealthCheck>,

    /// What a failed health check does: RollBack (default; the target stopped, the source
    /// powered back on, `RolledBack`) or Keep (the target left running, `Failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_health_check_failure: Option<crate::OnHealthCheckFailure>,
}

/// The migrated VM's power state once ferry is done, in vSphere's words. Not `On`/`Off`:
/// Kubernetes reads YAML 1.1, where an unquoted `On` or `Off` is a boolean.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum TargetPowerState {
    /// Started, as runStrategy says (which must be one that starts it).
    PoweredOn,
    /// Left stopped: created Halted and kept so; readiness is not waited for.
    PoweredOff,
    /// As the source VM was when ferry first read it: PoweredOn if it was, else PoweredOff.
    Auto,
}

/// Where and as what the migrated VM runs: its own labels and annotations, scheduling, and an
/// instancetype/preference. Ferry's own labels (migration.platform.example/*) cannot be set
/// here: they are how ferry finds its children.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::rules::placement_labels_not_ferrys())]
pub struct VmPlacement {
    /// Labels of the VirtualMachine and of its instances (KubeVirt copies the template's onto
    /// the VirtualMachineInstance and its pod, so NetworkPolicies and Services select them).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub labels: BTreeMap<String, String>,
    /// Annotations of the VirtualMachine.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 64))]
    pub annotations: BTreeMap<String, String>,
    /// Node labels the VM's pod must match (the instance's nodeSelector).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub node_selector: BTreeMap<String, String>,
    /// The instance's affinity (node, pod and pod anti-affinity), as in a Pod spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "bounded::<Option<k8s_openapi::api::core::v1::Affinity>>")]
    pub affinity: Option<k8s_openapi::api::core::v1::Affinity>,
    /// The instance's tolerations, as in a Pod spec.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "bounded::<Vec<k8s_openapi::api::core::v1::Toleration>>")]
    pub tolerations: Vec<k8s_openapi::api::core::v1::Toleration>,
    /// A KubeVirt instancetype the VM takes its CPU and memory from instead of the source's;
    /// the source's CPU and memory are then left out of the VM (KubeVirt refuses both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instancetype: Option<InstancetypeRef>,
    /// A KubeVirt preference the VM takes its defaults from (devices ferry maps stay explicit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preference: Option<PreferenceRef>,
}

/// Kubernetes' own schema of `T` with every list and string bounded: the apiserver estimates
/// the cost of the CRD's CEL rules from these bounds, and refuses rules over unbounded input.
/// The bounds are far above what a Pod's scheduling terms use.
pub(crate) fn bounded<T: JsonSchema>(
    generator: &mut schemars::SchemaGenerator,
) -> schemars::Schema {
    fn bound(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(o) => {
                match o.get("type").and_then(|t| t.as_str()) {
                    Some("array") if !o.contains_key("maxItems") => {
                        o.insert("maxItems".into(), 16.into());
                    }
                    Some("string") if !o.contains_key("maxLength") && !o.contains_key("enum") => {
                        o.insert("maxLength".into(), 1024.into());
                    }
                    _ => {}
                }
                o.values_mut().for_each(bound);
            }
            serde_json::Value::Array(a) => a.iter_mut().for_each(bound),
            _ => {}
        }
    }
    let mut schema = T::json_schema(generator).to_value();
    bound(&mut schema);
    schemars::Schema::try_from(schema).unwrap_or_default()
}

impl VmPlacement {
    /// Nothing asked for.
    pub fn is_empty(&self) -> bool {
        *self == VmPlacement::default()
    }
}

/// A KubeVirt instancetype by name: namespaced (VirtualMachineInstancetype, in the VM's
/// namespace) or cluster-wide (VirtualMachineClusterInstancetype, the default).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstancetypeRef {
    /// The instancetype's name.
    #[schemars(length(min = 1, max = 253), pattern(crate::rules::DNS1123_SUBDOMAIN))]
    pub name: String,
    /// VirtualMachineClusterInstancetype (default) or VirtualMachineInstancetype.
    #[serde(default)]
    pub kind: InstancetypeKind,
}

/// Which kind of KubeVirt instancetype.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum InstancetypeKind {
    /// Cluster-wide.
    #[default]
    VirtualMachineClusterInstancetype,
    /// In the VM's namespace.
    VirtualMachineInstancetype,
}

/// A KubeVirt preference by name: namespaced (VirtualMachinePreference) or cluster-wide
/// (VirtualMachineClusterPreference, the default).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreferenceRef {
    /// The preference's name.
    #[schemars(length(min = 1, max = 253), pattern(crate::rules::DNS1123_SUBDOMAIN))]
    pub name: String,
    /// VirtualMachineClusterPreference (default) or VirtualMachinePreference.
    #[serde(default)]
    pub kind: PreferenceKind,
}

/// Which kind of KubeVirt preference.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum PreferenceKind {
    /// Cluster-wide.
    #[default]
    VirtualMachineClusterPreference,
    /// In the VM's namespace.
    VirtualMachinePreference,
}

impl TargetTemplate {
    /// Where the volume of a disk on `datastore` goes; `None` when the storage map leaves it
    /// out and names no default (see `storageMap`). Pure.
    pub fn placement(&self, datastore: Option<&str>) -> Option<DiskPlacement> {
        if let Some(m) = datastore.and_then(|d| self.storage_map.iter().find(|m| m.datastore == d))
        {
            return Some(DiskPlacement {
                storage_class_name: m.storage_class_name.clone(),
                volume_mode: m.volume_mode,
                access_mode: m.access_mode,
            });
        }
        (self.storage_map.is_empty() || self.storage_class_name.is_some()).then(|| DiskPlacement {
            storage_class_name: self.storage_class_name.clone(),
            volume_mode: self.volume_mode,
            access_mode: None,
        })
    }

    /// The run strategy the VM ends with, given the source's power state as ferry first read
    /// it: runStrategy, or Halted when powerState is PoweredOff, or Auto and the source was not
    /// poweredOn (unknown counts as not: ferry never starts a VM it cannot say was running).
    pub fn run_strategy_after(&self, source: Option<PowerState>) -> RunStrategy {
        let off = match self.power_state {
            None | Some(TargetPowerState::PoweredOn) => false,
            Some(TargetPowerState::PoweredOff) => true,
            Some(TargetPowerState::Auto) => source != Some(PowerState::PoweredOn),
        };
        if off {
            RunStrategy::Halted
        } else {
            self.run_strategy
        }
    }

    /// The readiness check in effect: `None` when the VM ends stopped (powerState Off, or
    /// Auto with a source that was off), else the one asked for, else `None` for run
    /// strategies that leave the VM stopped (Halted, Manual) and `Running` for the others.
    pub fn readiness_after(&self, source: Option<PowerState>) -> Readiness {
        let strategy = self.run_strategy_after(source);
        if strategy != self.run_strategy {
            return Readiness::None;
        }
        self.readiness.unwrap_or(match strategy {
            RunStrategy::Halted | RunStrategy::Manual => Readiness::None,
            RunStrategy::Always | RunStrategy::RerunOnFailure | RunStrategy::Once => {
                Readiness::Running
            }
        })
    }
}

/// The target of a migration: the KubeVirt VirtualMachine to create.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_default_to_sata_and_e1000e_without_virtio_drivers() {
        let d = Devices::default();
        assert_eq!(
            (d.disk_bus(), d.nic_model()),
            (DiskBus::Sata, NicModel::E1000e)
        );
        assert!(d.preserve_mac_addresses && d.is_default());
        let v = Devices {
            virtio_drivers: true,
            ..Devices::default()
        };
        assert_eq!(
            (v.disk_bus(), v.nic_model()),
            (DiskBus::Virtio, NicModel::Virtio)
        );
        let o = Devices {
            virtio_drivers: true,
            disk_bus: Some(DiskBus::Scsi),
            nic_model: Some(NicModel::E1000),
            ..Devices::default()
        };
        assert_eq!(
            (o.disk_bus(), o.nic_model()),
            (DiskBus::Scsi, NicModel::E1000)
        );
        let json: Devices = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(
            json,
            Devices::default(),
            "an empty devices object is the default"
        );
    }

    #[test]
    fn readiness_defaults_by_run_strategy() {
        let t = |rs: RunStrategy, r: Option<Readiness>| TargetTemplate {
            run_strategy: rs,
            readiness: r,
            ..TargetTemplate::default()
        };
        assert_eq!(
            t(RunStrategy::Always, None).readiness_after(None),
            Readiness::Running
        );
        assert_eq!(
            t(RunStrategy::Once, None).readiness_after(None),
            Readiness::Running
        );
        assert_eq!(
            t(RunStrategy::Halted, None).readiness_after(None),
            Readiness::None
        );
        assert_eq!(
            t(RunStrategy::Manual, None).readiness_after(None),
            Readiness::None
        );
        assert_eq!(
            t(RunStrategy::Always, Some(Readiness::AgentConnected)).readiness_after(None),
            Readiness::AgentConnected
        );
        assert_eq!(
            t(RunStrategy::Always, Some(Readiness::None)).readiness_after(None),
            Readiness::None
        );
    }

    #[test]
    fn power_state_decides_the_final_run_strategy_and_readiness() {
        use PowerState::{PoweredOff, PoweredOn, Suspended};
        let t = |p: Option<TargetPowerState>, r: Option<Readiness>| TargetTemplate {
            power_state: p,
            readiness: r,
            run_strategy: RunStrategy::RerunOnFailure,
            ..TargetTemplate::default()
        };
        let agent = Some(Readiness::AgentConnected);
        for source in [Some(PoweredOn), Some(PoweredOff), None] {
            // Unset and On: runStrategy as asked, readiness as asked.
            for p in [None, Some(TargetPowerState::PoweredOn)] {
                assert_eq!(
                    t(p, agent).run_strategy_after(source),
                    RunStrategy::RerunOnFailure
                );
                assert_eq!(
                    t(p, agent).readiness_after(source),
                    Readiness::AgentConnected
                );
            }
            // Off: Halted, nothing waited for, whatever the source was.
            let off = t(Some(TargetPowerState::PoweredOff), agent);
            assert_eq!(off.run_strategy_after(source), RunStrategy::Halted);
            assert_eq!(off.readiness_after(source), Readiness::None);
        }
        // Auto: as the source was; unknown or suspended is not "on".
        let auto = t(Some(TargetPowerState::Auto), agent);
        assert_eq!(
            auto.run_strategy_after(Some(PoweredOn)),
            RunStrategy::RerunOnFailure
        );
        assert_eq!(
            auto.readiness_after(Some(PoweredOn)),
            Readiness::AgentConnected
        );
        for source in [Some(PoweredOff), Some(Suspended), None] {
            assert_eq!(auto.run_strategy_after(source), RunStrategy::Halted);
            assert_eq!(auto.readiness_after(source), Readiness::None);
        }
    }

    #[test]
    fn a_disk_path_names_its_datastore() {
        assert_eq!(datastore_of("[LocalDS_0] vm/vm.vmdk"), Some("LocalDS_0"));
        assert_eq!(datastore_of("[san 2] a/b.vmdk"), Some("san 2"));
        assert_eq!(datastore_of("vm/vm.vmdk"), None);
    }

    #[test]
    fn each_datastore_goes_where_the_map_says_else_to_the_default_or_nowhere() {
        let mut t = TargetTemplate::default();
        assert_eq!(
            t.placement(Some("any")),
            Some(DiskPlacement::default()),
            "no map: the cluster's default class, as before"
        );
        t.storage_map = vec![StorageMapping {
            datastore: "san".into(),
            storage_class_name: Some("fast".into()),
            volume_mode: Some(VolumeMode::Block),
            access_mode: Some(AccessMode::ReadWriteMany),
        }];
        assert_eq!(
            t.placement(Some("san")),
            Some(DiskPlacement {
                storage_class_name: Some("fast".into()),
                volume_mode: Some(VolumeMode::Block),
                access_mode: Some(AccessMode::ReadWriteMany),
            })
        );
        assert_eq!(
            t.placement(Some("nas")),
            None,
            "a map and no default: unmapped"
        );
        t.storage_class_name = Some("standard".into());
        assert_eq!(
            t.placement(Some("nas")).and_then(|p| p.storage_class_name),
            Some("standard".into())
        );
    }
}
