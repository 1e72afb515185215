//! From vim_rs' property-collector results to [`VmInfo`]: the one place that knows the shapes
//! of vSphere's device and backing types.

use vim_rs::types::convert::CastFrom;
use vim_rs::types::enums::{VirtualMachinePowerStateEnum, VirtualMachineToolsStatusEnum};
use vim_rs::types::struct_enum::StructType;
use vim_rs::types::structs::{
    VirtualDevicePciBusSlotInfo, VirtualDisk, VirtualDiskFlatVer1BackingInfo,
    VirtualDiskFlatVer2BackingInfo, VirtualDiskRawDiskMappingVer1BackingInfo,
    VirtualDiskSeSparseBackingInfo, VirtualDiskSparseVer1BackingInfo,
    VirtualDiskSparseVer2BackingInfo, VirtualEthernetCardDistributedVirtualPortBackingInfo,
    VirtualEthernetCardNetworkBackingInfo, VirtualEthernetCardOpaqueNetworkBackingInfo,
};
use vim_rs::types::traits::{
    VirtualDeviceBackingInfoTrait, VirtualDeviceFileBackingInfoTrait, VirtualDeviceTrait,
    VirtualEthernetCardTrait,
};
use vim_rs::vim_retrievable;

use super::{
    DiskBacking, DiskController, DiskInfo, Firmware, GuestOsFamily, NicDeviceType, NicInfo,
    PowerState, ToolsState,
};

// `?` on every path: vcsim leaves out properties the spec calls required, and a missing one
// must not make the whole VM unreadable. Read through `answer::read` (session.rs), strictly.
vim_retrievable!(
    struct VmProps: VirtualMachine {
        name = "name"?,
        uuid = "config.uuid"?,
        instance_uuid = "config.instance_uuid"?,
        guest_id = "config.guest_id"?,
        guest_full_name = "config.guest_full_name"?,
        firmware = "config.firmware"?,
        secure_boot = "config.boot_options.efi_secure_boot_enabled"?,
        change_tracking = "config.change_tracking_enabled"?,
        change_version = "config.change_version"?,
        num_cpu = "config.hardware.num_cpu"?,
        cores_per_socket = "config.hardware.num_cores_per_socket"?,
        memory_mb = "config.hardware.memory_mb"?,
        devices = "config.hardware.device"?,
        num_virtual_disks = "summary.config.num_virtual_disks"?,
        power_state = "runtime.power_state"?,
        host = "runtime.host"?,
        guest_family = "guest.guest_family"?,
        tools_running = "guest.tools_running_status"?,
        tools_status = "guest.tools_status"?,
        parent = "parent"?,
        parent_v_app = "parent_v_app"?,
        networks = "network"?,
        root_snapshots = "root_snapshot"?,
    }
);

vim_retrievable!(
    struct VmName: VirtualMachine {
        name = "name"?,
    }
);

vim_retrievable!(
    struct VmPower: VirtualMachine {
        power_state = "runtime.power_state"?,
        tools_running = "guest.tools_running_status"?,
        tools_status = "guest.tools_status"?,
    }
);

vim_retrievable!(
    struct TaskState: Task {
        state = "info.state"?,
        error = "info.error"?,
    }
);

pub(crate) fn power_state(p: &VirtualMachinePowerStateEnum) -> Option<PowerState> {
    match p {
        VirtualMachinePowerStateEnum::PoweredOn => Some(PowerState::PoweredOn),
        VirtualMachinePowerStateEnum::PoweredOff => Some(PowerState::PoweredOff),
        VirtualMachinePowerStateEnum::Suspended => Some(PowerState::Suspended),
        VirtualMachinePowerStateEnum::Other_(_) => None,
    }
}

/// `config.firmware` is a free string (`bios`, `efi`); absent means BIOS.
pub(crate) fn firmware(text: Option<&str>) -> Firmware {
    match text {
        Some(s) if s.eq_ignore_ascii_case("efi") => Firmware::Efi,
        _ => Firmware::Bios,
    }
}

/// Whether VMware Tools run: `guest.toolsRunningStatus` says whether they run,
/// `guest.toolsStatus` whether they are installed at all.
pub(crate) fn tools(
    running: Option<&str>,
    status: Option<&VirtualMachineToolsStatusEnum>,
) -> ToolsState {
    match (running, status) {
        (Some("guestToolsRunning"), _) => ToolsState::Running,
        (_, Some(VirtualMachineToolsStatusEnum::ToolsNotInstalled)) => ToolsState::NotInstalled,
        _ => ToolsState::NotRunning,
    }
}

/// The guest OS family: `guest.guestFamily` when Tools reported it, else read from the guest
/// id (`windows2019srv_64Guest`, `rhel9_64Guest`, `otherLinux64Guest`, ...).
pub(crate) fn guest_family(reported: Option<&str>, guest_id: &str) -> GuestOsFamily {
    match reported {
        Some("linuxGuest") => return GuestOsFamily::Linux,
        Some("windowsGuest") => return GuestOsFamily::Windows,
        Some(f) if !f.is_empty() => return GuestOsFamily::Other,
        _ => {}
    }
    let id = guest_id.to_ascii_lowercase();
    const LINUX: [&str; 18] = [
        "linux",
        "rhel",
        "centos",
        "fedora",
        "debian",
        "ubuntu",
        "sles",
        "suse",
        "oracle",
        "asianux",
        "coreos",
        "photon",
        "amazonlinux",
        "rocky",
        "alma",
        "mandrake",
        "mandriva",
        "turbolinux",
    ];
    if id.starts_with("win") {
        GuestOsFamily::Windows
    } else if LINUX.iter().any(|l| id.contains(l)) {
        GuestOsFamily::Linux
    } else {
        GuestOsFamily::Other
    }
}

/// The kind of a disk controller device, by vSphere type name.
pub(crate) fn controller_kind(t: StructType) -> DiskController {
    match t {
        StructType::VirtualIdeController => DiskController::Ide,
        StructType::VirtualAhciController | StructType::VirtualSataController => {
            DiskController::Sata
        }
        StructType::ParaVirtualScsiController => DiskController::Pvscsi,
        StructType::VirtualLsiLogicController => DiskController::LsiLogic,
        StructType::VirtualLsiLogicSasController => DiskController::LsiLogicSas,
        StructType::VirtualBusLogicController => DiskController::BusLogic,
        StructType::VirtualNvmeController => DiskController::Nvme,
        _ => DiskController::Other,
    }
}

/// The device type of a network card, by vSphere type name.
pub(crate) fn nic_kind(t: StructType) -> NicDeviceType {
    match t {
        StructType::VirtualVmxnet3 | StructType::VirtualVmxnet3Vrdma => NicDeviceType::Vmxnet3,
        StructType::VirtualVmxnet2 => NicDeviceType::Vmxnet2,
        StructType::VirtualVmxnet => NicDeviceType::Vmxnet,
        StructType::VirtualE1000E => NicDeviceType::E1000e,
        StructType::VirtualE1000 => NicDeviceType::E1000,
        StructType::VirtualPcNet32 => NicDeviceType::Pcnet32,
        StructType::VirtualSriovEthernetCard => NicDeviceType::Sriov,
        _ => NicDeviceType::Other,
    }
}

/// The backing kind, by vSphere type name.
pub(crate) fn backing_kind(t: StructType) -> DiskBacking {
    match t {
        StructType::VirtualDiskFlatVer2BackingInfo | StructType::VirtualDiskFlatVer1BackingInfo => {
            DiskBacking::Flat
        }
        StructType::VirtualDiskSparseVer2BackingInfo
        | StructType::VirtualDiskSparseVer1BackingInfo => DiskBacking::Sparse,
        StructType::VirtualDiskRawDiskMappingVer1BackingInfo
        | StructType::VirtualDiskRawDiskVer2BackingInfo => DiskBacking::Rdm,
        other => DiskBacking::Other(other.as_str().to_owned()),
    }
}

fn has_parent(b: &dyn VirtualDeviceBackingInfoTrait) -> bool {
    let any = b.as_any_ref();
    any.downcast_ref::<VirtualDiskFlatVer2BackingInfo>()
        .is_some_and(|x| x.parent.is_some())
        || any
            .downcast_ref::<VirtualDiskFlatVer1BackingInfo>()
            .is_some_and(|x| x.parent.is_some())
        || any
            .downcast_ref::<VirtualDiskSparseVer2BackingInfo>()
            .is_some_and(|x| x.parent.is_some())
        || any
            .downcast_ref::<VirtualDiskSparseVer1BackingInfo>()
            .is_some_and(|x| x.parent.is_some())
        || any
            .downcast_ref::<VirtualDiskSeSparseBackingInfo>()
            .is_some_and(|x| x.parent.is_some())
        || any
            .downcast_ref::<VirtualDiskRawDiskMappingVer1BackingInfo>()
            .is_some_and(|x| x.parent.is_some())
}

/// `diskMode` of the backings that have one (flat and RDM disks).
fn disk_mode(b: &dyn VirtualDeviceBackingInfoTrait) -> Option<String> {
    let any = b.as_any_ref();
    any.downcast_ref::<VirtualDiskFlatVer2BackingInfo>()
        .map(|x| x.disk_mode.clone())
        .or_else(|| {
            any.downcast_ref::<VirtualDiskRawDiskMappingVer1BackingInfo>()
                .and_then(|x| x.disk_mode.clone())
        })
        .filter(|m| !m.is_empty())
}

/// `sharing` of the backings that have one.
fn sharing(b: &dyn VirtualDeviceBackingInfoTrait) -> Option<String> {
    let any = b.as_any_ref();
    any.downcast_ref::<VirtualDiskFlatVer2BackingInfo>()
        .and_then(|x| x.sharing.clone())
        .or_else(|| {
            any.downcast_ref::<VirtualDiskRawDiskMappingVer1BackingInfo>()
                .and_then(|x| x.sharing.clone())
        })
}

/// Whether the backing names an encryption key (`keyId`).
fn encrypted(b: &dyn VirtualDeviceBackingInfoTrait) -> bool {
    let any = b.as_any_ref();
    any.downcast_ref::<VirtualDiskFlatVer2BackingInfo>()
        .is_some_and(|x| x.key_id.is_some())
        || any
            .downcast_ref::<VirtualDiskSeSparseBackingInfo>()
            .is_some_and(|x| x.key_id.is_some())
        || any
            .downcast_ref::<VirtualDiskSparseVer2BackingInfo>()
            .is_some_and(|x| x.key_id.is_some())
}

/// Labels of the devices passed through from the host (PCI, USB): KubeVirt's VM will not have
/// them.
pub(crate) fn passthrough(devices: &[Box<dyn VirtualDeviceTrait>]) -> Vec<String> {
    devices
        .iter()
        .filter(|d| {
            matches!(
                d.data_type(),
                StructType::VirtualPciPassthrough | StructType::VirtualUsb
            )
        })
        .map(|d| {
            let l = label(d.as_ref());
            if l.is_empty() {
                format!("{} {}", d.data_type().as_str(), d.get_virtual_device().key)
            } else {
                l
            }
        })
        .collect()
}

fn label(dev: &(dyn VirtualDeviceTrait + 'static)) -> String {
    dev.device_info
        .as_ref()
        .map(|d| d.get_description().label.clone())
        .unwrap_or_default()
}

/// The disks of a VM, in device order.
pub(crate) fn disks(devices: &[Box<dyn VirtualDeviceTrait>]) -> Vec<DiskInfo> {
    let mut out = Vec::new();
    let controller_of = |key: Option<i32>| {
        let key = key?;
        devices
            .iter()
            .find(|d| d.get_virtual_device().key == key)
            .map(|d| controller_kind(d.data_type()))
    };
    for dev in devices {
        let dev: &(dyn VirtualDeviceTrait + 'static) = dev.as_ref();
        let Some(disk) = dev.as_any_ref().downcast_ref::<VirtualDisk>() else {
            continue;
        };
        let backing = dev.backing.as_deref();
        let datastore_path = backing
            .and_then(|b| <dyn VirtualDeviceFileBackingInfoTrait>::from_ref(b))
            .map(|f| f.get_virtual_device_file_backing_info().file_name.clone())
            .unwrap_or_default();
        let capacity_bytes = disk
            .capacity_in_bytes
            .filter(|b| *b > 0)
            .unwrap_or(disk.capacity_in_kb.saturating_mul(1024))
            .max(0) as u64;
        out.push(DiskInfo {
            key: dev.key,
            label: label(dev),
            controller: controller_of(dev.controller_key),
            datastore_path,
            capacity_bytes,
            backing: backing.map_or(DiskBacking::Other("none".into()), |b| {
                backing_kind(b.data_type())
            }),
            has_parent: backing.is_some_and(has_parent),
            disk_mode: backing
                .and_then(disk_mode)
                .unwrap_or_else(|| "persistent".into()),
            shared: backing
                .and_then(sharing)
                .is_some_and(|s| s == "sharingMultiWriter"),
            encrypted: backing.is_some_and(encrypted),
            change_id: change_id(dev),
        });
    }
    out
}

/// The change id of a flat disk's backing (changed block tracking on), none without.
pub(crate) fn change_id(dev: &(dyn VirtualDeviceTrait + 'static)) -> Option<String> {
    dev.backing
        .as_deref()?
        .as_any_ref()
        .downcast_ref::<VirtualDiskFlatVer2BackingInfo>()?
        .change_id
        .clone()
        .filter(|c| !c.is_empty())
}

/// The PCI slot of a device, when vSphere gave it one.
fn pci_slot(dev: &(dyn VirtualDeviceTrait + 'static)) -> Option<i32> {
    dev.slot_info
        .as_deref()?
        .as_any_ref()
        .downcast_ref::<VirtualDevicePciBusSlotInfo>()
        .map(|s| s.pci_slot_number)
}

/// The network cards of a VM, in device order.
pub(crate) fn nics(devices: &[Box<dyn VirtualDeviceTrait>]) -> Vec<NicInfo> {
    let mut out = Vec::new();
    for dev in devices {
        let dev: &(dyn VirtualDeviceTrait + 'static) = dev.as_ref();
        let Some(card) = <dyn VirtualEthernetCardTrait>::from_ref(dev) else {
            continue;
        };
        let eth = card.get_virtual_ethernet_card();
        let network = dev
            .backing
            .as_deref()
            .map(|b| {
                let any = b.as_any_ref();
                if let Some(n) = any.downcast_ref::<VirtualEthernetCardNetworkBackingInfo>() {
                    n.virtual_device_device_backing_info_.device_name.clone()
                } else if let Some(d) =
                    any.downcast_ref::<VirtualEthernetCardDistributedVirtualPortBackingInfo>()
                {
                    d.port
                        .portgroup_key
                        .clone()
                        .unwrap_or_else(|| d.port.switch_uuid.clone())
                } else if let Some(o) =
                    any.downcast_ref::<VirtualEthernetCardOpaqueNetworkBackingInfo>()
                {
                    o.opaque_network_id.clone()
                } else {
                    String::new()
                }
            })
            .unwrap_or_default();
        out.push(NicInfo {
            mac: eth.mac_address.clone().unwrap_or_default(),
            device_type: nic_kind(dev.data_type()),
            network,
            pci_slot: pci_slot(dev),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backing_kinds_by_type_name() {
        assert_eq!(
            backing_kind(StructType::VirtualDiskFlatVer2BackingInfo),
            DiskBacking::Flat
        );
        assert_eq!(
            backing_kind(StructType::VirtualDiskSparseVer2BackingInfo),
            DiskBacking::Sparse
        );
        assert_eq!(
            backing_kind(StructType::VirtualDiskRawDiskMappingVer1BackingInfo),
            DiskBacking::Rdm
        );
        assert_eq!(
            backing_kind(StructType::VirtualDiskSeSparseBackingInfo),
            DiskBacking::Other("VirtualDiskSeSparseBackingInfo".into())
        );
    }

    #[test]
    fn tools_state_from_running_status_and_install_status() {
        use VirtualMachineToolsStatusEnum as S;
        assert_eq!(
            tools(Some("guestToolsRunning"), Some(&S::ToolsOk)),
            ToolsState::Running
        );
        assert_eq!(tools(Some("guestToolsRunning"), None), ToolsState::Running);
        assert_eq!(
            tools(Some("guestToolsNotRunning"), Some(&S::ToolsNotRunning)),
            ToolsState::NotRunning
        );
        assert_eq!(
            tools(Some("guestToolsNotRunning"), Some(&S::ToolsNotInstalled)),
            ToolsState::NotInstalled
        );
        assert_eq!(tools(None, None), ToolsState::NotRunning);
        assert_eq!(
            tools(Some("guestToolsExecutingScripts"), Some(&S::ToolsOk)),
            ToolsState::NotRunning,
            "scripts running (startup/shutdown) is not a guest that takes a shutdown request"
        );
    }

    #[test]
    fn guest_family_from_tools_else_from_the_guest_id() {
        assert_eq!(
            guest_family(Some("windowsGuest"), "otherGuest"),
            GuestOsFamily::Windows
        );
        assert_eq!(guest_family(Some("linuxGuest"), ""), GuestOsFamily::Linux);
        assert_eq!(
            guest_family(Some("solarisGuest"), "rhel9_64Guest"),
            GuestOsFamily::Other
        );
        assert_eq!(
            guest_family(None, "windows2019srv_64Guest"),
            GuestOsFamily::Windows
        );
        assert_eq!(
            guest_family(Some(""), "rhel9_64Guest"),
            GuestOsFamily::Linux
        );
        assert_eq!(
            guest_family(None, "otherLinux64Guest"),
            GuestOsFamily::Linux
        );
        assert_eq!(guest_family(None, "ubuntu64Guest"), GuestOsFamily::Linux);
        assert_eq!(guest_family(None, "otherGuest"), GuestOsFamily::Other);
        assert_eq!(
            guest_family(None, "freebsd13_64Guest"),
            GuestOsFamily::Other
        );
    }

    #[test]
    fn device_kinds_by_type_name() {
        assert_eq!(
            controller_kind(StructType::ParaVirtualScsiController),
            DiskController::Pvscsi
        );
        assert_eq!(
            controller_kind(StructType::VirtualAhciController),
            DiskController::Sata
        );
        assert_eq!(
            controller_kind(StructType::VirtualIdeController),
            DiskController::Ide
        );
        assert_eq!(
            controller_kind(StructType::VirtualNvmeController),
            DiskController::Nvme
        );
        assert_eq!(
            controller_kind(StructType::VirtualLsiLogicSasController),
            DiskController::LsiLogicSas
        );
        assert_eq!(
            controller_kind(StructType::VirtualE1000),
            DiskController::Other
        );
        assert_eq!(nic_kind(StructType::VirtualVmxnet3), NicDeviceType::Vmxnet3);
        assert_eq!(nic_kind(StructType::VirtualE1000E), NicDeviceType::E1000e);
        assert_eq!(nic_kind(StructType::VirtualE1000), NicDeviceType::E1000);
        assert_eq!(nic_kind(StructType::VirtualPcNet32), NicDeviceType::Pcnet32);
        assert_eq!(nic_kind(StructType::VirtualDisk), NicDeviceType::Other);
    }

    /// vcsim's own answers, recorded: with every disk read, the disks equal vSphere's count; with
    /// one ferry could not read, the count says a disk is missing (Preparing then fails).
    #[test]
    fn recorded_vcsim_answers_count_the_disks_ferry_read_against_vspheres() {
        use super::super::answer::{read, tests::VCSIM_VM, tests::VCSIM_VM_UNREADABLE_DISK};
        let props = |answer: &str| {
            let a = read(answer).unwrap();
            (
                VmProps::try_from(a.content.unwrap()).unwrap(),
                a.unread.len(),
            )
        };
        let (whole, unread) = props(VCSIM_VM);
        let keys: Vec<i32> = disks(&whole.devices.unwrap())
            .iter()
            .map(|d| d.key)
            .collect();
        assert_eq!(
            (keys, whole.num_virtual_disks, unread),
            (vec![204], Some(1), 0)
        );
        let (part, unread) = props(VCSIM_VM_UNREADABLE_DISK);
        let read: Vec<DiskInfo> = disks(&part.devices.unwrap());
        assert_eq!(read.len(), 1);
        assert_eq!(
            (read[0].key, &read[0].datastore_path, read[0].capacity_bytes),
            (
                204,
                &"[LocalDS_0] DC0_C0_RP0_VM0/disk1.vmdk".to_owned(),
                10 << 30
            )
        );
        assert_eq!((part.num_virtual_disks, unread), (Some(2), 1));
    }

    #[test]
    fn firmware_defaults_to_bios() {
        assert_eq!(firmware(None), Firmware::Bios);
        assert_eq!(firmware(Some("bios")), Firmware::Bios);
        assert_eq!(firmware(Some("EFI")), Firmware::Efi);
    }

    #[test]
    fn unknown_power_states_are_not_guessed() {
        assert_eq!(
            power_state(&VirtualMachinePowerStateEnum::Suspended),
            Some(PowerState::Suspended)
        );
        assert_eq!(
            power_state(&VirtualMachinePowerStateEnum::Other_("x".into())),
            None
        );
    }
}
