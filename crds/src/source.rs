//! The vSphere side: the endpoint, how the VM is selected, what happens to its power, and what
//! the controller discovered about it.

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{Error, SecretRef};

/// How to reach and trust a vCenter or ESXi SDK endpoint. The credentials Secret names the
/// endpoint and how to trust it (keys url, and thumbprint or cacert); the fields here may
/// repeat what it says but never change it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceEndpoint {
    /// URL of the vCenter or ESXi SDK, e.g. https://vcenter.example.com/sdk. Taken from the
    /// credentials Secret (key url) when left out; when set it must name the same endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = crate::rules::vsphere_url())]
    #[schemars(length(min = 1, max = 2048))]
    pub url: Option<String>,

    /// Secret holding the vSphere user name (key username) and password (key password), bound by
    /// its owner to one endpoint: key url, and optionally thumbprint (a pinned certificate),
    /// cacert (PEM CA bundle of a CA-signed certificate) or insecureSkipTLSVerify: "true". It
    /// must carry the label migration.platform.example/credentials: "true".
    pub credentials_secret_ref: SecretRef,

    /// Expected thumbprint of the endpoint's TLS certificate, SHA-1 or SHA-256 as colon-separated
    /// hex pairs (as `govc about.cert -thumbprint` prints it). Optional: the credentials Secret
    /// decides how the endpoint is trusted; when set it must equal the Secret's thumbprint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 95), pattern(crate::rules::THUMBPRINT))]
    pub thumbprint: Option<String>,

    /// Skip verifying the endpoint's TLS certificate. Only for labs: anyone on the path can read
    /// the credentials. Honoured only when the credentials Secret allows it too (key
    /// insecureSkipTLSVerify: "true"); at most one of thumbprint and insecureSkipTLSVerify.
    #[serde(
        default,
        skip_serializing_if = "std::ops::Not::not",
        rename = "insecureSkipTLSVerify"
    )]
    pub insecure_skip_tls_verify: bool,
}

/// Which VM to migrate: exactly one of `name`, `id` and `uuid`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct VmSelector {
    /// Name of the VM as shown in the vSphere inventory, e.g. DC0_H0_VM0. Must be unique on the
    /// endpoint; use id or uuid otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 80))]
    pub name: Option<String>,

    /// Managed object reference of the VM, e.g. vm-42 (a bare number on a standalone ESXi).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64), pattern(crate::rules::MOREF))]
    pub id: Option<String>,

    /// BIOS UUID of the VM (config.uuid), e.g. 42265e3b-3d1b-4b6b-9d58-2c8a9f0b1c2d.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 36), pattern(crate::rules::UUID))]
    pub uuid: Option<String>,
}

/// How to find the VM, from a valid [`VmSelector`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmLookup<'a> {
    /// By inventory name.
    Name(&'a str),
    /// By managed object reference.
    Id(&'a str),
    /// By BIOS UUID.
    Uuid(&'a str),
}

impl VmSelector {
    /// Selects the VM by name.
    pub fn by_name(name: impl Into<String>) -> Self {
        Self {
            name: Some(name.into()),
            ..Self::default()
        }
    }

    /// Selects the VM by managed object reference.
    pub fn by_id(id: impl Into<String>) -> Self {
        Self {
            id: Some(id.into()),
            ..Self::default()
        }
    }

    /// Selects the VM by BIOS UUID.
    pub fn by_uuid(uuid: impl Into<String>) -> Self {
        Self {
            uuid: Some(uuid.into()),
            ..Self::default()
        }
    }

    /// The one way this selector finds the VM.
    ///
    /// # Errors
    /// [`Error::InvalidVmSelector`] when not exactly one of name, id and uuid is set (the API
    /// server rejects such objects; only hand-built ones can have it).
    pub fn lookup(&self) -> Result<VmLookup<'_>, Error> {
        match (&self.name, &self.id, &self.uuid) {
            (Some(n), None, None) => Ok(VmLookup::Name(n)),
            (None, Some(i), None) => Ok(VmLookup::Id(i)),
            (None, None, Some(u)) => Ok(VmLookup::Uuid(u)),
            (n, i, u) => Err(Error::InvalidVmSelector {
                set: [n.is_some(), i.is_some(), u.is_some()]
                    .into_iter()
                    .filter(|b| *b)
                    .count(),
            }),
        }
    }

    /// The selector's value (name, id or uuid), whichever is set first; for display and naming.
    pub fn value(&self) -> Option<&str> {
        self.name
            .as_deref()
            .or(self.id.as_deref())
            .or(self.uuid.as_deref())
    }
}

/// What to do with the source VM's power state when a migration does not succeed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum RestorePowerState {
    /// Leave the source VM as the migration left it.
    Never,
    /// Restore the original power state when the migration is cancelled or deleted.
    #[default]
    OnCancel,
    /// Restore the original power state when the migration is cancelled, deleted or fails.
    OnCancelOrFailure,
}

/// What ferry does with the source VM's power.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PowerPolicy {
    /// Power the source VM off before its disks are copied (a consistent copy needs it). When
    /// false, a powered-on VM fails validation with reason SourcePoweredOn.
    #[serde(default = "default_true")]
    pub power_off: bool,

    /// When to power the source VM back to its original state: Never, OnCancel (cancel or
    /// delete) or OnCancelOrFailure. Nothing else about the source VM is ever changed.
    #[serde(default)]
    pub restore_power_state: RestorePowerState,

    /// Seconds the guest may take to shut down after ferry asked it to through VMware Tools
    /// (ShutdownGuest) before ferry powers the VM off hard. Without running Tools the VM is
    /// powered off hard at once; 0 always powers off hard at once.
    #[serde(default = "default_shutdown_grace")]
    #[schemars(range(min = 0, max = 86400))]
    pub shutdown_grace_period_seconds: i64,
}

fn default_true() -> bool {
    true
}

/// Default of [`PowerPolicy::shutdown_grace_period_seconds`]: five minutes.
pub const DEFAULT_SHUTDOWN_GRACE_SECONDS: i64 = 300;

fn default_shutdown_grace() -> i64 {
    DEFAULT_SHUTDOWN_GRACE_SECONDS
}

impl Default for PowerPolicy {
    fn default() -> Self {
        Self {
            power_off: true,
            restore_power_state: RestorePowerState::default(),
            shutdown_grace_period_seconds: DEFAULT_SHUTDOWN_GRACE_SECONDS,
        }
    }
}

/// The source of a migration: a vSphere endpoint, one VM on it, and its power policy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = crate::rules::exactly_one_vm_selector())]
#[x_kube(validation = crate::rules::tls_verification())]
pub struct SourceSpec {
    /// The vSphere endpoint and how to trust it.
    #[serde(flatten)]
    pub endpoint: SourceEndpoint,
    /// The VM to migrate.
    #[serde(flatten)]
    pub vm: VmSelector,
    /// What happens to the VM's power.
    #[serde(flatten)]
    pub power: PowerPolicy,
}

/// Power state of the VM before ferry changed anything, as vSphere names it (poweredOn,
/// poweredOff, suspended); what restorePowerState restores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum PowerState {
    /// Running.
    PoweredOn,
    /// Off.
    PoweredOff,
    /// Suspended to disk.
    Suspended,
}

/// Firmware of the VM: bios or efi.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Firmware {
    /// Legacy BIOS.
    Bios,
    /// UEFI.
    Efi,
}

/// The kind of controller a source disk hangs on, as vSphere names its device types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum DiskController {
    /// VirtualIDEController.
    Ide,
    /// VirtualAHCIController (SATA).
    Sata,
    /// ParaVirtualSCSIController (VMware paravirtual SCSI).
    Pvscsi,
    /// VirtualLsiLogicController.
    LsiLogic,
    /// VirtualLsiLogicSASController.
    LsiLogicSas,
    /// VirtualBusLogicController.
    BusLogic,
    /// VirtualNVMEController.
    Nvme,
    /// Anything else.
    Other,
}

/// The device type of a source network adapter, as vSphere names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum NicDeviceType {
    /// VirtualVmxnet3.
    Vmxnet3,
    /// VirtualVmxnet2.
    Vmxnet2,
    /// VirtualVmxnet.
    Vmxnet,
    /// VirtualE1000e.
    E1000e,
    /// VirtualE1000.
    E1000,
    /// VirtualPCNet32.
    Pcnet32,
    /// VirtualSriovEthernetCard.
    Sriov,
    /// Anything else.
    Other,
}

/// The guest operating system family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum GuestOsFamily {
    /// Linux.
    Linux,
    /// Windows.
    Windows,
    /// Anything else (Solaris, BSD, NetWare, macOS, unknown).
    Other,
}

/// Whether VMware Tools run in the guest, as vSphere reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ToolsState {
    /// Running (`guestToolsRunning`): the guest can be asked to shut down.
    Running,
    /// Installed but not running (the VM is off, or Tools stopped).
    NotRunning,
    /// Not installed.
    NotInstalled,
}

/// A virtual disk of the source VM.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredDisk {
    /// vSphere device key of the disk, e.g. 2000.
    pub key: i32,
    /// Device label, e.g. "Hard disk 1".
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    /// Datastore path of the disk's descriptor, e.g. "[datastore1] vm0/vm0.vmdk".
    pub datastore_path: String,
    /// Capacity of the disk in bytes.
    pub capacity_bytes: i64,
    /// The controller the disk is attached to in vSphere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<DiskController>,
}

/// A network adapter of the source VM.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredNic {
    /// MAC address, e.g. 00:50:56:a1:b2:c3; kept on the target interface.
    pub mac: String,
    /// Name of the vSphere network (port group) the adapter is connected to.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub network: String,
    /// The adapter's device type in vSphere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_type: Option<NicDeviceType>,
    /// The PCI slot ESXi gave the adapter (`slotInfo.pciSlotNumber`); a Linux guest names the
    /// adapter after it (`ens192` for slot 192), and a converted guest keeps that name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_slot_number: Option<i32>,
}

/// What the controller read about the source VM in Preparing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredSource {
    /// Inventory name of the VM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Managed object reference, e.g. vm-42.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moref: Option<String>,
    /// BIOS UUID (config.uuid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// Instance UUID (config.instanceUuid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_uuid: Option<String>,
    /// Power state found before ferry changed anything (poweredOn, poweredOff, suspended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_state: Option<PowerState>,
    /// vSphere guest OS identifier, e.g. otherLinux64Guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_id: Option<String>,
    /// The guest's OS family: from what running VMware Tools report, else from the guest OS
    /// identifier (as first read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_os_family: Option<GuestOsFamily>,
    /// The guest OS as vSphere names it, e.g. "Red Hat Enterprise Linux 9 (64-bit)".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_full_name: Option<String>,
    /// Whether VMware Tools ran in the guest when it was first read (before ferry powered it off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmware_tools: Option<ToolsState>,
    /// Firmware: bios or efi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<Firmware>,
    /// UEFI Secure Boot is on (only with efi firmware).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_boot: Option<bool>,
    /// Changed block tracking is on (`config.changeTrackingEnabled`), when vSphere says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_tracking: Option<bool>,
    /// Number of virtual CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_cpu: Option<i32>,
    /// Cores per virtual socket; numCpu / coresPerSocket sockets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores_per_socket: Option<i32>,
    /// Memory in MiB.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "memoryMiB")]
    pub memory_mib: Option<i64>,
    /// Virtual disks, in device order; disk index N in status.disks is the Nth of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub disks: Vec<DiscoveredDisk>,
    /// Network adapters, in device order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub nics: Vec<DiscoveredNic>,
    /// The ESXi host the VM is registered on, by name (`runtime.host`): its disks are read
    /// through it, so the controller's per-host limit of copies counts it there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub host: Option<String>,
}

impl DiscoveredSource {
    /// The datastores holding the VM's disks (from their `[datastore] path`), each once, in
    /// disk order: what the per-datastore limit of copies counts. Pure.
    pub fn datastores(&self) -> Vec<&str> {
        let mut out: Vec<&str> = vec![];
        for d in &self.disks {
            if let Some(ds) = datastore_of(&d.datastore_path)
                && !out.contains(&ds)
            {
                out.push(ds);
            }
        }
        out
    }
}

/// The datastore of a `[datastore] dir/file.vmdk` path; `None` when it is not one. Pure.
pub fn datastore_of(path: &str) -> Option<&str> {
    let rest = path.trim_start().strip_prefix('[')?;
    let (ds, _) = rest.split_once(']')?;
    Some(ds).filter(|d| !d.is_empty())
}

/// What defines the copy of the source VM, as vCenter reported it when ferry recorded it: at the
/// power-off the copy is made after (a cold migration's, as it leaves Preparing; a warm one's at
/// the cutover). Before the migrated VM is made, ferry reads the source again: anything changed —
/// a disk added, removed or resized, the configuration changed, a disk written, a power-on since
/// — fails the migration with SourceChanged, since the copy is not the source's final state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceState {
    /// vCenter's clock when it was read (ServiceInstance.CurrentTime): the power-ons vCenter
    /// records from then on are power cycles of the source.
    #[schemars(length(max = 64))]
    pub read_at: String,
    /// The checkpoint that recorded it (Preparing, or CuttingOver for a warm migration).
    pub recorded_in: crate::Phase,
    /// The attempt that recorded it (status.attempts then).
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub attempt: i32,
    /// `config.changeVersion`: it moves with every reconfiguration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub change_version: Option<String>,
    /// `summary.config.numVirtualDisks`: how many virtual disks vSphere counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_virtual_disks: Option<i32>,
    /// The virtual disks, in device order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub disks: Vec<SourceDiskState>,
}

/// One disk of a [`SourceState`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceDiskState {
    /// Device key.
    pub key: i32,
    /// The backing file, `[datastore] dir/file.vmdk`.
    #[schemars(length(max = 1024))]
    pub file: String,
    /// Capacity in bytes.
    pub capacity_bytes: i64,
    /// `backing.changeId` with changed block tracking on: any write moves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 256))]
    pub change_id: Option<String>,
}

/// How ferry powered the source VM off, for the decision across reconciles and for people.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourcePowerOff {
    /// When ferry asked the guest to shut down through VMware Tools (ShutdownGuest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shutdown_guest_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// When ferry powered the VM off hard (PowerOffVM_Task): at once without running VMware
    /// Tools, or once the shutdown grace period ran out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard_power_off_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

impl SourcePowerOff {
    /// When ferry began powering the source off: the guest shutdown asked for, else the hard
    /// power-off; `None` when ferry found it off and powered nothing off.
    pub fn began_at(&self) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
        [
            self.shutdown_guest_at.as_ref(),
            self.hard_power_off_at.as_ref(),
        ]
        .into_iter()
        .flatten()
        .min_by_key(|t| t.0)
        .cloned()
    }
}

/// How many earlier outages `status.earlierOutages` keeps; the oldest are dropped first.
pub const MAX_EARLIER_OUTAGES: usize = 16;

/// The source's outage in an attempt that a retry started over from Preparing: what the new
/// attempt's `sourcePowerOff` would otherwise overwrite. The report adds it to the current one,
/// so that downtime runs from ferry's first power-off request, through every attempt.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourceOutage {
    /// The attempt whose power-off began it.
    #[schemars(range(min = 1))]
    pub attempt: i32,
    /// When ferry began powering the source off.
    pub from: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// When ferry powered the source back on; absent: it stayed off into the next attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

impl SourceOutage {
    /// The outage of `attempt`, which is ending: none when ferry powered nothing off in it.
    /// It ended when ferry powered the source back on; otherwise the source stayed off.
    pub fn of_attempt(
        attempt: i32,
        power_off: Option<&SourcePowerOff>,
        restore: Option<&SourcePowerRestore>,
    ) -> Option<SourceOutage> {
        let from = power_off?.began_at()?;
        let restored_at = restore
            .filter(|r| r.result == Some(PowerRestoreResult::PoweredOn))
            .and_then(|r| r.finished_at.clone())
            .filter(|t| t.0 >= from.0);
        Some(SourceOutage {
            attempt,
            from,
            restored_at,
        })
    }

    /// Adds `outage` to `outages`, keeping at most [`MAX_EARLIER_OUTAGES`]. Pure.
    pub fn keep(outages: &mut Vec<SourceOutage>, outage: SourceOutage) {
        outages.push(outage);
        if outages.len() > MAX_EARLIER_OUTAGES {
            outages.drain(..outages.len() - MAX_EARLIER_OUTAGES);
        }
    }
}

/// Ferry powering the source VM back on after a cancel, a failure (restorePowerState
/// OnCancelOrFailure) or a delete. The source is powered on only once the target is proven not
/// running: ferry stops the target VM first (runStrategy Halted) and waits, bounded, for its
/// VirtualMachineInstance to be gone. Written by the controller only; it carries the wait across
/// reconciles and restarts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SourcePowerRestore {
    /// When ferry decided to power the source VM back on.
    pub requested_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    /// When ferry first stopped the target VM or found its instance stopping; the wait for the
    /// instance to be gone is bounded from here (its terminationGracePeriodSeconds plus the
    /// controller's --target-stop-margin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_stopping_since: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// How it ended; absent while ferry is still stopping the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<PowerRestoreResult>,
    /// When it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// What happened, for people: the instance waited for, and what to do when ferry gave up.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 4096))]
    pub message: Option<String>,
}

/// How ferry's power-on of the source VM ended.
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
pub enum PowerRestoreResult {
    /// The source VM was powered on, after the target was proven not running.
    PoweredOn,
    /// The target's instance was still there when the wait ran out: the source stays off, and
    /// ferry does not power it on later by itself.
    TargetStillRunning,
    /// The target VM had been released (the migration completed): the source stays off.
    TargetReleased,
    /// vSphere did not power the source VM on (the message says why); ferry does not try again.
    PowerOnFailed,
    /// A rollback stopped the target, and the source was not ferry's to power on (it was off
    /// before the migration, or ferry did not power it off): it stays as it is.
    TargetStopped,
}

impl PowerRestoreResult {
    /// The name written in the API.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn an_attempts_outage_runs_from_the_first_power_off_request_to_the_restore() {
        use crate::fixtures::ts;
        let off = SourcePowerOff {
            shutdown_guest_at: Some(ts(30)),
            hard_power_off_at: Some(ts(20)),
        };
        let restore = |result, at| SourcePowerRestore {
            requested_at: ts(50),
            target_stopping_since: None,
            result: Some(result),
            finished_at: Some(ts(at)),
            message: None,
        };
        let o = SourceOutage::of_attempt(
            2,
            Some(&off),
            Some(&restore(PowerRestoreResult::PoweredOn, 60)),
        )
        .unwrap();
        assert_eq!(
            (o.attempt, o.from, o.restored_at),
            (2, ts(20), Some(ts(60)))
        );
        // Not powered on: it stays off into the next attempt.
        let o = SourceOutage::of_attempt(
            2,
            Some(&off),
            Some(&restore(PowerRestoreResult::PowerOnFailed, 60)),
        )
        .unwrap();
        assert_eq!(o.restored_at, None);
        // Found off, nothing powered off: no outage of its own.
        assert_eq!(
            SourceOutage::of_attempt(1, Some(&SourcePowerOff::default()), None),
            None
        );
        assert_eq!(SourceOutage::of_attempt(1, None, None), None);
        let mut kept = vec![];
        for a in 1..=20 {
            SourceOutage::keep(
                &mut kept,
                SourceOutage {
                    attempt: a,
                    from: ts(a.into()),
                    restored_at: None,
                },
            );
        }
        assert_eq!(kept.len(), MAX_EARLIER_OUTAGES);
        assert_eq!(kept[0].attempt, 5, "the oldest go first");
    }
    use super::*;

    #[test]
    fn the_datastores_are_read_from_the_disks_paths_each_once() {
        let disk = |path: &str| DiscoveredDisk {
            key: 2000,
            label: "Hard disk".into(),
            datastore_path: path.into(),
            capacity_bytes: 1,
            controller: None,
        };
        let vm = DiscoveredSource {
            disks: vec![
                disk("[LocalDS_0] vm/vm.vmdk"),
                disk("[ssd 2] vm/vm_1.vmdk"),
                disk("[LocalDS_0] vm/vm_2.vmdk"),
                disk("vm/no-datastore.vmdk"),
            ],
            ..DiscoveredSource::default()
        };
        assert_eq!(vm.datastores(), ["LocalDS_0", "ssd 2"]);
        assert_eq!(datastore_of("[] x"), None);
    }

    #[test]
    fn lookup_accepts_exactly_one_selector() {
        assert_eq!(
            VmSelector::by_name("DC0_H0_VM0").lookup().ok(),
            Some(VmLookup::Name("DC0_H0_VM0"))
        );
        assert_eq!(
            VmSelector::by_id("vm-42").lookup().ok(),
            Some(VmLookup::Id("vm-42"))
        );
        assert_eq!(
            VmSelector::by_uuid("u").lookup().ok(),
            Some(VmLookup::Uuid("u"))
        );
        assert!(matches!(
            VmSelector::default().lookup(),
            Err(Error::InvalidVmSelector { set: 0 })
        ));
        let two = VmSelector {
            name: Some("a".into()),
            id: Some("vm-1".into()),
            uuid: None,
        };
        assert!(matches!(
            two.lookup(),
            Err(Error::InvalidVmSelector { set: 2 })
        ));
    }

    #[test]
    fn source_spec_flattens_on_the_wire_and_defaults_power_policy() {
        let json = serde_json::json!({
            "url": "https://vc.example/sdk",
            "credentialsSecretRef": {"name": "vc"},
            "thumbprint": "AA:BB",
            "name": "DC0_H0_VM0",
        });
        let s: SourceSpec = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(s.vm.lookup().ok(), Some(VmLookup::Name("DC0_H0_VM0")));
        assert!(s.power.power_off, "powerOff defaults to true");
        assert_eq!(s.power.restore_power_state, RestorePowerState::OnCancel);
        assert!(!s.endpoint.insecure_skip_tls_verify);
        let back = serde_json::to_value(&s).unwrap();
        let mut expected = json;
        expected["powerOff"] = true.into();
        expected["restorePowerState"] = "OnCancel".into();
        expected["shutdownGracePeriodSeconds"] = DEFAULT_SHUTDOWN_GRACE_SECONDS.into();
        assert_eq!(back, expected);
    }
}
