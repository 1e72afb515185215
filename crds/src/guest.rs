//! The migrated guest: whether ferry converts it to run on KubeVirt, and what it found and did.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Whether the imported guest is converted to run on KubeVirt (`virt-v2v-in-place`: virtio's
/// drivers in its initramfs, VMware's tools removed, its boot configuration for the new disks).
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
)]
pub enum GuestConversion {
    /// Never: the volumes hold the source's bytes as they were (the guest must already boot on
    /// the target's devices; `devices.virtioDrivers` says which).
    #[default]
    Never,
    /// Converted when virt-v2v finds an operating system it converts; a disk set with none
    /// (data disks only) is passed over, unchanged.
    Auto,
    /// Converted; a disk set with no operating system virt-v2v converts fails the migration.
    Always,
}

impl GuestConversion {
    /// The value's name, as written in the spec.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the migration passes through ConvertingGuest.
    pub fn converts(self) -> bool {
        match self {
            GuestConversion::Never => false,
            GuestConversion::Auto | GuestConversion::Always => true,
        }
    }
}

/// What ConvertingGuest found of the guest and did to its volumes (`status.guest`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GuestStatus {
    /// The operating system virt-v2v found, as it names it (e.g. `Debian 12.15`); absent when it
    /// found none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub operating_system: Option<String>,
    /// Whether the volumes now hold the converted guest.
    #[serde(default)]
    pub converted: bool,
    /// What the conversion did, in virt-v2v's words (its own lines, at most 16).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub changes: Vec<String>,
    /// Per disk, the volume's SHA-256 after the conversion (of its virtual size), and how many
    /// bytes the conversion wrote into it: what "verified" means from here on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub volumes: Vec<GuestVolume>,
    /// How long the conversion Job's program took, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub seconds: Option<u32>,
    /// What became of each network card's name: kept (the name ESXi's PCI slot gave it, which
    /// the guest's network configuration uses, e.g. `kept ens192 for 00:50:56:…`) or left to
    /// the guest, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub interface_names: Vec<String>,
}

/// One converted volume (see [`GuestStatus::volumes`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GuestVolume {
    /// Disk index.
    #[schemars(range(min = 0))]
    pub disk: u32,
    /// SHA-256 of the volume's first virtual-size bytes after the conversion, lowercase hex.
    #[schemars(length(equal = 64))]
    pub sha256: String,
    /// Bytes the conversion wrote into the volume (its overlay's allocated clusters).
    #[schemars(range(min = 0))]
    pub written_bytes: u64,
}
