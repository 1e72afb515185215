//! The vSphere source: log in over SOAP (vim_rs) with a pinned TLS thumbprint, find a VM, read
//! what a migration needs to know about it, switch its power, and download its disks.
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

mod answer;
mod datastore;
mod error;
mod inventory;
mod layout;
mod marks;
mod session;
mod snapshot;
pub mod tags;
pub mod tls;
mod url;

use std::fmt;

pub use answer::vim_rs_reads_strictly;
pub use datastore::Allocation;
pub use error::Error;
pub use layout::{LayoutProblem, validate_layout};
pub use marks::Marks;
pub use session::Session;
pub use snapshot::{Snapshot, SnapshotDisk};
pub use url::{DatastorePath, download_url};

pub use crate::tls::{DigestKind, Thumbprint, ThumbprintError, TlsPolicy};
// The device and guest vocabulary is the API's: status shows it as read here.
pub use ferry_crds::{DiskController, GuestOsFamily, NicDeviceType, ToolsState};

/// Result of vSphere operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Where and as whom to log in.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// The SDK URL, `https://HOST[:PORT]/sdk` (a bare host or `https://HOST` is accepted too).
    pub url: String,
    pub username: String,
    pub password: secrecy::SecretString,
    pub tls: TlsPolicy,
}

/// How to find a VM: exactly one way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VmSelector {
    /// Inventory name; must be unique.
    Name(String),
    /// Managed object reference id, e.g. `vm-42`.
    Id(String),
    /// BIOS UUID (`config.uuid`), or else the instance UUID (`config.instanceUuid`).
    Uuid(String),
}

impl fmt::Display for VmSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(n) => write!(f, "name {n:?}"),
            Self::Id(i) => write!(f, "id {i}"),
            Self::Uuid(u) => write!(f, "uuid {u}"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PowerState {
    PoweredOn,
    PoweredOff,
    Suspended,
}

impl PowerState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PoweredOn => "poweredOn",
            Self::PoweredOff => "poweredOff",
            Self::Suspended => "suspended",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Firmware {
    Bios,
    Efi,
}

/// How a virtual disk is stored on the datastore.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum DiskBacking {
    /// A VMDK (flat, thin or thick): what ferry converts.
    Flat,
    /// A raw device mapping: the data lives on a LUN, not in a file.
    Rdm,
    /// A hosted-format sparse VMDK (Workstation style, ESXi-readable).
    Sparse,
    /// Anything else, by its vSphere type name (SeSparse, vVol, PMem, ...).
    Other(String),
}

/// One virtual disk of a VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskInfo {
    /// Device key, unique within the VM (2000, 2001, ...).
    pub key: i32,
    pub label: String,
    /// The kind of controller it hangs on, when its controller is among the VM's devices.
    pub controller: Option<DiskController>,
    /// `[datastore] dir/file.vmdk`
    pub datastore_path: String,
    pub capacity_bytes: u64,
    pub backing: DiskBacking,
    /// The backing is a snapshot delta on top of a parent disk.
    pub has_parent: bool,
    /// `backing.diskMode`: persistent (the default), independent_persistent,
    /// independent_nonpersistent, ...
    pub disk_mode: String,
    /// `backing.sharing` is `sharingMultiWriter`: other VMs may write the disk.
    pub shared: bool,
    /// `backing.keyId` is set: the disk is encrypted.
    pub encrypted: bool,
    /// `backing.changeId`: where the disk stands in its history, with changed block tracking on
    /// (any write moves it on); none without.
    pub change_id: Option<String>,
}

/// One network card of a VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicInfo {
    pub mac: String,
    /// vmxnet3, e1000e, ...
    pub device_type: NicDeviceType,
    /// Port group name (standard switch), port group key (distributed switch) or opaque network id.
    pub network: String,
    /// The PCI slot ESXi gave the card (`slotInfo.pciSlotNumber`): a Linux guest names the card
    /// after it (`ens192` for slot 192). `None` until the VM has powered on.
    pub pci_slot: Option<i32>,
}

/// A device in vSphere's answer about a VM that ferry could not read, as far as the answer's text
/// tells (vim_rs refused its shape, so only the raw XML names it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UnreadDevice {
    /// Device key, unique within the VM (2000, 2001, ...).
    pub key: Option<i32>,
    /// Its vSphere type name (`VirtualDisk`, `VirtualCdrom`, ...).
    pub kind: String,
    /// `deviceInfo.label`, e.g. "Hard disk 2".
    pub label: Option<String>,
    /// The vSphere type name of its backing.
    pub backing: Option<String>,
    /// The backing's file (`[datastore] dir/file.vmdk`), when it has one.
    pub file: Option<String>,
}

impl UnreadDevice {
    /// A virtual disk: what a migration would lose.
    pub fn is_disk(&self) -> bool {
        self.kind == "VirtualDisk"
    }
}

impl fmt::Display for UnreadDevice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("device")?;
        if let Some(key) = self.key {
            write!(f, " {key}")?;
        }
        if let Some(label) = &self.label {
            write!(f, " {label:?}")?;
        }
        let kind = if self.kind.is_empty() {
            "of unknown type"
        } else {
            &self.kind
        };
        write!(f, " ({kind}")?;
        if let Some(backing) = &self.backing {
            write!(f, ", backing {backing}")?;
        }
        if let Some(file) = &self.file {
            write!(f, ", {file}")?;
        }
        f.write_str(")")
    }
}

/// A part of vSphere's answer about a VM that ferry could not read. A VM with any is not
/// migrated: what ferry did not read would be missing, or wrong, in the migrated VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unread {
    /// One entry of `config.hardware.device`.
    Device(UnreadDevice),
    /// A property that does not read even without its parts (named by its path).
    Property(String),
}

impl fmt::Display for Unread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Device(d) => write!(f, "{d} in config.hardware.device"),
            Self::Property(p) => write!(f, "property {p}"),
        }
    }
}

/// What a migration needs to know about a source VM.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VmInfo {
    pub moref: String,
    pub name: String,
    /// BIOS UUID (`config.uuid`).
    pub uuid: String,
    pub instance_uuid: String,
    pub power_state: PowerState,
    pub guest_id: String,
    /// `config.guestFullName`, e.g. "Other Linux (64-bit)".
    pub guest_full_name: String,
    /// From `guest.guestFamily` (what Tools report), else from the guest id.
    pub guest_family: GuestOsFamily,
    /// From `guest.toolsRunningStatus` and `guest.toolsStatus`.
    pub tools: ToolsState,
    pub firmware: Firmware,
    /// `config.bootOptions.efiSecureBootEnabled`.
    pub secure_boot: bool,
    /// `config.changeTrackingEnabled` (absent when the endpoint leaves it out).
    pub change_tracking: Option<bool>,
    /// `config.changeVersion`: changes with every reconfiguration of the VM.
    pub change_version: Option<String>,
    pub num_cpu: u32,
    /// `config.hardware.numCoresPerSocket` (1 when unset).
    pub cores_per_socket: u32,
    pub memory_mib: u64,
    pub disks: Vec<DiskInfo>,
    /// `summary.config.numVirtualDisks`: how many virtual disks vSphere counts (absent when the
    /// endpoint leaves the property out).
    pub disks_reported: Option<u32>,
    /// What ferry could not read of vSphere's answer (empty when it read all of it).
    pub unread: Vec<Unread>,
    pub nics: Vec<NicInfo>,
    /// Labels of the PCI and USB devices passed through to the VM (KubeVirt's VM gets none).
    pub passthrough: Vec<String>,
    /// How many snapshot trees the VM has (`rootSnapshot`): with any, its disks' current data
    /// is in delta files on top of the base ones.
    pub snapshots: usize,
    /// The ESXi host the VM is registered on (`runtime.host`), by its name: where its disks
    /// are read from, so what a per-host limit of copies counts (absent when vSphere says none).
    pub host: Option<String>,
    /// Inventory path of the VM's datacenter (its name, or `folder/name` when nested): the
    /// `dcPath` of datastore downloads.
    pub datacenter: String,
}
