//! Preflight: what ferry found about a VM and its target before touching anything, as
//! *concerns* — each with a stable code, a severity and a message that says what to do. A
//! Critical concern keeps the migration from powering anything off; the operator fixes its
//! cause, or accepts it (only codes that [`ConcernCode::acceptable`] allows) in
//! `spec.preflight.accept`, which the status records.

use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How much a concern weighs.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
)]
pub enum Severity {
    /// Blocks the migration until its cause is fixed (or the concern accepted, where it may be).
    Critical,
    /// The migration may go on, but something will differ from the source or may go wrong.
    Warning,
    /// Worth knowing before the window; nothing to fix.
    Info,
}

impl Severity {
    /// The severity's name as serialized.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A concern's stable code: tools and people match on it, and `spec.preflight.accept` names it.
/// docs/preflight.md lists each with its fix.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::EnumCount,
    strum::VariantArray,
    strum::IntoStaticStr,
)]
pub enum ConcernCode {
    // --- the source ---
    /// The source could not be checked: the endpoint, its credentials, or the VM's lookup.
    SourceUnavailable,
    /// The VM is powered on (or suspended): the migration will power it off, or may not.
    PoweredOn,
    /// VMware Tools do not run in a powered-on guest: the shutdown will be a hard power-off.
    ToolsNotRunning,
    /// A disk is a snapshot delta: the VM has snapshots, and the base files are not its data.
    SnapshotPresent,
    /// A disk is a raw device mapping: its data lives on a LUN, not in a file ferry can read.
    RawDeviceMapping,
    /// A disk is independent: vSphere never snapshots it (nonpersistent: changes since power-on
    /// are lost at power-off).
    IndependentDisk,
    /// A disk is shared with other VMs (multi-writer): the copy is of a disk others still write.
    SharedDisk,
    /// A disk is encrypted: its datastore file is ciphertext ferry cannot convert.
    EncryptedDisk,
    /// A PCI or USB device is passed through: KubeVirt's VM will not have it.
    Passthrough,
    /// A disk's format or backing is one ferry cannot read (not a VMDK file, SeSparse, vVol...).
    UnsupportedDisk,
    /// ferry read fewer disks than vSphere counts, or could not read part of vSphere's answer.
    IncompleteInventory,
    /// The VM has no virtual disk: nothing to migrate.
    NoDisk,
    /// UEFI Secure Boot is on: the VM gets KubeVirt's Secure Boot (SMM, OVMF with Microsoft
    /// keys); a guest signed with other keys will not boot.
    SecureBoot,
    /// Changed block tracking is off (`config.changeTrackingEnabled`): a cold migration copies
    /// every block regardless; an incremental (warm) copy needs it on before the first snapshot.
    ChangeTrackingOff,
    /// The chosen disk bus needs drivers the guest is not said to have (virtio without
    /// `devices.virtioDrivers`): a Windows guest will not boot.
    BusWithoutDrivers,
    // --- the target ---
    /// Another VirtualMachine has the target name, or the name is not valid.
    TargetNameTaken,
    /// An object ferry would create (Job, Secret, ConfigMap, DataVolume) exists and is not
    /// this migration's.
    NameConflict,
    /// A source NIC's network is not in `target.template.networks`: that NIC is left out.
    NetworkUnmapped,
    /// A Multus network of `target.template.networks` names a NetworkAttachmentDefinition that
    /// does not exist.
    NetworkAttachmentMissing,
    /// A Multus network names a NetworkAttachmentDefinition of another namespace, which the
    /// platform does not allow (the controller's --cross-namespace-networks).
    NetworkNotAllowed,
    /// A StorageClass the disks' volumes would use does not exist: their claims would wait for a
    /// provisioner forever.
    StorageClassMissing,
    /// The instancetype or preference `target.template.placement` names does not exist:
    /// KubeVirt would not start the VM.
    InstancetypeMissing,
    /// A disk's datastore is not in `target.template.storageMap`, which names no default
    /// class: where its volume goes is not said.
    DatastoreUnmapped,
    /// A ResourceQuota of the namespace has less left (of storage, or of claims, in all or
    /// for the class) than the VM's disks' claims would take: their creation would be refused.
    QuotaExceeded,
    /// A StorageClass's driver reports (CSIStorageCapacity) no topology segment with room for
    /// the largest of the disks' claims on it.
    StorageCapacityShort,
    /// The staging bucket cannot be reached, written, or does not exist.
    StagingUnavailable,
    /// The converter image asked for is not allowed by the controller's policy.
    ConverterImageNotAllowed,
}

impl ConcernCode {
    /// Every code, in declaration order (derived).
    pub const ALL: [ConcernCode; <ConcernCode as strum::EnumCount>::COUNT] =
        crate::listed::array(<ConcernCode as strum::VariantArray>::VARIANTS);

    /// The code as serialized.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether an operator may accept this code's Critical concern and go on. Only where the
    /// data still arrives whole and the risk is the guest's or the operator's to judge: never
    /// where ferry would copy something other than the VM's data (a snapshot's base, a LUN it
    /// cannot read, ciphertext, a disk it did not see) or take a name that is not its own.
    pub fn acceptable(self) -> bool {
        match self {
            ConcernCode::SharedDisk | ConcernCode::BusWithoutDrivers => true,
            ConcernCode::SourceUnavailable
            | ConcernCode::PoweredOn
            | ConcernCode::ToolsNotRunning
            | ConcernCode::SnapshotPresent
            | ConcernCode::RawDeviceMapping
            | ConcernCode::IndependentDisk
            | ConcernCode::EncryptedDisk
            | ConcernCode::Passthrough
            | ConcernCode::UnsupportedDisk
            | ConcernCode::IncompleteInventory
            | ConcernCode::NoDisk
            | ConcernCode::SecureBoot
            | ConcernCode::ChangeTrackingOff
            | ConcernCode::TargetNameTaken
            | ConcernCode::NameConflict
            | ConcernCode::NetworkUnmapped
            | ConcernCode::NetworkAttachmentMissing
            | ConcernCode::NetworkNotAllowed
            | ConcernCode::StorageClassMissing
            | ConcernCode::InstancetypeMissing
            | ConcernCode::DatastoreUnmapped
            | ConcernCode::QuotaExceeded
            | ConcernCode::StorageCapacityShort
            | ConcernCode::StagingUnavailable
            | ConcernCode::ConverterImageNotAllowed => false,
        }
    }
}

impl fmt::Display for ConcernCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One thing preflight found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Concern {
    /// Stable code (see the table in docs/preflight.md).
    pub code: ConcernCode,
    /// Critical blocks the migration; Warning and Info do not.
    pub severity: Severity,
    /// What was found and what to do about it.
    pub message: String,
}

impl Concern {
    /// A concern of `code` at `severity`.
    pub fn new(code: ConcernCode, severity: Severity, message: impl Into<String>) -> Self {
        Self {
            code,
            severity,
            message: message.into(),
        }
    }
}

/// What the operator decided about preflight's concerns.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightSpec {
    /// Critical concerns to go on despite, by code (only codes that may be accepted:
    /// SharedDisk, BusWithoutDrivers). Each accepted concern is recorded in
    /// status.preflight.accepted and in an Event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 23))]
    pub accept: Vec<ConcernCode>,
}

/// The last preflight of a migration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreflightStatus {
    /// When the checks ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_at: Option<Time>,
    /// metadata.generation of the spec they ran for (a spec change checks again at once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// What they found, Critical first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub concerns: Vec<Concern>,
    /// Critical concerns the operator accepted (spec.preflight.accept), the migration going on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub accepted: Vec<ConcernCode>,
    /// What the disks' claims would take of each ResourceQuota resource they count against
    /// (`requests.storage` in bytes, `persistentvolumeclaims` as a count, and the same per
    /// StorageClass named), CDI's filesystem overhead included: what a wave sums up.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16))]
    pub claims: BTreeMap<String, i64>,
}

impl PreflightStatus {
    /// The Critical concerns that hold the migration: Critical, and not accepted.
    pub fn blocking(&self) -> impl Iterator<Item = &Concern> {
        self.concerns
            .iter()
            .filter(|c| c.severity == Severity::Critical && !self.accepted.contains(&c.code))
    }

    /// Counts of (Critical holding, Warning, Info) concerns.
    pub fn counts(&self) -> (usize, usize, usize) {
        let of = |s| self.concerns.iter().filter(|c| c.severity == s).count();
        (
            self.blocking().count(),
            of(Severity::Warning),
            of(Severity::Info),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_serializes_as_its_name() {
        for code in ConcernCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
            let back: ConcernCode = serde_json::from_str(&json).unwrap();
            assert_eq!(back, code);
        }
    }

    #[test]
    fn only_accepted_critical_concerns_stop_holding() {
        let status = PreflightStatus {
            checked_at: None,
            observed_generation: None,
            claims: BTreeMap::new(),
            concerns: vec![
                Concern::new(ConcernCode::SharedDisk, Severity::Critical, "shared"),
                Concern::new(ConcernCode::SnapshotPresent, Severity::Critical, "snap"),
                Concern::new(ConcernCode::ToolsNotRunning, Severity::Warning, "tools"),
                Concern::new(ConcernCode::PoweredOn, Severity::Info, "on"),
            ],
            accepted: vec![ConcernCode::SharedDisk],
        };
        let holding: Vec<_> = status.blocking().map(|c| c.code).collect();
        assert_eq!(holding, vec![ConcernCode::SnapshotPresent]);
        assert_eq!(status.counts(), (1, 1, 1));
    }
}
