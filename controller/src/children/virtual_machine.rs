//! The migrated KubeVirt VirtualMachine: devices, firmware and networks from the discovered
//! source, disks on the imported DataVolumes.

use std::collections::BTreeMap;

use ferry_crds::{
    DiscoveredNic, Firmware, NetworkMapping, RunStrategy, VirtualMachineMigration, names,
};
use serde_json::{Map, Value, json};

use crate::Result;
use crate::apis::kubevirt::{VirtualMachine, VirtualMachineSpec, run_strategy_name};

/// Disk bus for a guest: Windows guests migrated without driver injection have no virtio
/// drivers, so they get SATA; everything else gets virtio.
pub fn disk_bus(guest_id: Option<&str>) -> &'static str {
    match guest_id {
        Some(g) if g.to_ascii_lowercase().starts_with("win") => "sata",
        _ => "virtio",
    }
}

/// How the source NICs map to KubeVirt interfaces and networks: `(interfaces, networks)`.
///
/// With no mapping, the first NIC goes to the pod network (masquerade) and the others are left
/// out; with a mapping, NICs on listed networks go where it says (pod: masquerade, Multus:
/// bridge) and the others are left out. MAC addresses are kept. Pure.
pub fn network_wiring(
    nics: &[DiscoveredNic],
    mapping: &[NetworkMapping],
) -> (Vec<Value>, Vec<Value>) {
    let mut interfaces = vec![];
    let mut networks = vec![];
    for (i, nic) in nics.iter().enumerate() {
        let name = format!("net-{i}");
        let binding = if mapping.is_empty() {
            (i == 0).then(|| (json!({"masquerade": {}}), json!({"pod": {}})))
        } else {
            mapping
                .iter()
                .find(|m| m.source == nic.network)
                .and_then(|m| match (&m.pod, &m.multus) {
                    (Some(_), _) => Some((json!({"masquerade": {}}), json!({"pod": {}}))),
                    (None, Some(mu)) => Some((
                        json!({"bridge": {}}),
                        json!({"multus": {"networkName": mu.network_name}}),
                    )),
                    (None, None) => None,
                })
        };
        let Some((iface_binding, network)) = binding else {
            continue;
        };
        let mut iface = json!({"name": name});
        if let (Some(obj), Some(b)) = (iface.as_object_mut(), iface_binding.as_object()) {
            obj.extend(b.clone());
            if !nic.mac.is_empty() {
                obj.insert("macAddress".into(), nic.mac.clone().into());
            }
        }
        let mut net = json!({"name": name});
        if let (Some(obj), Some(n)) = (net.as_object_mut(), network.as_object()) {
            obj.extend(n.clone());
        }
        interfaces.push(iface);
        networks.push(net);
    }
    (interfaces, networks)
}

/// The migrated VirtualMachine, `runStrategy: Halted`, on the imported DataVolumes.
///
/// # Guarantees
/// Named [`names::vm_name`]; owned by and labelled with the migration; its instance template
/// carries the migration label too (KubeVirt copies it onto the VMI, which is how VMI events map
/// back); CPU, memory, firmware (EFI → `bootloader.efi`, BIOS UUID kept) and NICs (MACs kept)
/// come from the discovered source; disk `i` is the DataVolume [`names::datavolume_name`]`(i)`,
/// the first one boots.
///
/// # Errors
/// When the migration lacks a uid or namespace.
pub fn virtual_machine(vmm: &VirtualMachineMigration) -> Result<VirtualMachine> {
    let meta = super::child_meta(vmm, names::vm_name(vmm))?;
    let source = vmm
        .status
        .as_ref()
        .and_then(|s| s.source.clone())
        .unwrap_or_default();
    let bus = disk_bus(source.guest_id.as_deref());
    let (disks, volumes): (Vec<Value>, Vec<Value>) = (0..source.disks.len())
        .map(|i| {
            let name = format!("disk-{i}");
            let mut disk = json!({"name": name, "disk": {"bus": bus}});
            if i == 0 {
                disk["bootOrder"] = json!(1);
            }
            (
                disk,
                json!({"name": name, "dataVolume": {"name": names::datavolume_name(vmm, i)}}),
            )
        })
        .unzip();
    let (interfaces, networks) = network_wiring(&source.nics, &vmm.spec.target.template.networks);
    let memory = format!("{}Mi", source.memory_mib.unwrap_or(1024).max(1));
    let mut firmware = match source.firmware {
        Some(Firmware::Efi) => json!({"bootloader": {"efi": {"secureBoot": false}}}),
        _ => json!({"bootloader": {"bios": {}}}),
    };
    if let Some(uuid) = &source.uuid {
        firmware["uuid"] = json!(uuid);
    }
    let mut devices = json!({"disks": disks});
    if !interfaces.is_empty() {
        devices["interfaces"] = json!(interfaces);
    } else if !source.nics.is_empty() {
        // Every NIC was left out by the mapping: no pod interface either.
        devices["autoattachPodInterface"] = json!(false);
    }
    let mut vmi_spec = json!({
        "domain": {
            "cpu": {"sockets": 1, "cores": source.num_cpu.unwrap_or(1).max(1), "threads": 1},
            "memory": {"guest": memory},
            "resources": {"requests": {"memory": memory}},
            "firmware": firmware,
            "devices": devices,
        },
        "volumes": volumes,
    });
    if !networks.is_empty() {
        vmi_spec["networks"] = json!(networks);
    }
    let template_labels: BTreeMap<String, String> = super::labels(vmm);
    let spec = VirtualMachineSpec {
        run_strategy: Some(run_strategy_name(RunStrategy::Halted).to_owned()),
        template: Some(json!({"metadata": {"labels": template_labels}, "spec": vmi_spec})),
        rest: Map::new(),
    };
    Ok(VirtualMachine {
        metadata: meta,
        spec,
        status: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::{
        DiscoveredDisk, DiscoveredSource, MultusNetwork, PodNetwork, fixtures::migration,
    };

    fn nic(mac: &str, network: &str) -> DiscoveredNic {
        DiscoveredNic {
            mac: mac.into(),
            network: network.into(),
        }
    }

    fn discovered() -> VirtualMachineMigration {
        let mut vmm = migration("web-1");
        vmm.status = Some(ferry_crds::VirtualMachineMigrationStatus {
            source: Some(DiscoveredSource {
                name: Some("DC0_H0_VM0".into()),
                uuid: Some("42265e3b-3d1b-4b6b-9d58-2c8a9f0b1c2d".into()),
                firmware: Some(Firmware::Efi),
                num_cpu: Some(2),
                memory_mib: Some(2048),
                guest_id: Some("otherLinux64Guest".into()),
                disks: (0..2)
                    .map(|i| DiscoveredDisk {
                        key: 2000 + i,
                        datastore_path: format!("[ds] d{i}.vmdk"),
                        capacity_bytes: 1 << 26,
                        ..Default::default()
                    })
                    .collect(),
                nics: vec![
                    nic("00:50:56:aa:bb:01", "VM Network"),
                    nic("00:50:56:aa:bb:02", "DVS0"),
                ],
                ..Default::default()
            }),
            ..Default::default()
        });
        vmm
    }

    #[test]
    fn the_vm_is_halted_on_the_imported_volumes_with_the_source_shape() {
        let vm = virtual_machine(&discovered()).unwrap();
        assert_eq!(vm.metadata.name.as_deref(), Some("dc0-h0-vm0"));
        let v = serde_json::to_value(&vm).unwrap();
        assert_eq!(v["apiVersion"], "kubevirt.io/v1");
        assert_eq!(v["spec"]["runStrategy"], "Halted");
        let t = &v["spec"]["template"];
        assert_eq!(t["metadata"]["labels"][names::MIGRATION_LABEL], "web-1");
        let d = &t["spec"]["domain"];
        assert_eq!(d["cpu"]["cores"], 2);
        assert_eq!(d["memory"]["guest"], "2048Mi");
        assert_eq!(d["firmware"]["bootloader"]["efi"]["secureBoot"], false);
        assert_eq!(
            d["firmware"]["uuid"],
            "42265e3b-3d1b-4b6b-9d58-2c8a9f0b1c2d"
        );
        assert_eq!(
            d["devices"]["disks"][0],
            json!({"name": "disk-0", "disk": {"bus": "virtio"}, "bootOrder": 1})
        );
        assert_eq!(
            d["devices"]["disks"][1],
            json!({"name": "disk-1", "disk": {"bus": "virtio"}})
        );
        assert_eq!(
            t["spec"]["volumes"][1],
            json!({"name": "disk-1", "dataVolume": {"name": "web-1-disk-1"}})
        );
        assert_eq!(
            d["devices"]["interfaces"],
            json!([{"name": "net-0", "masquerade": {}, "macAddress": "00:50:56:aa:bb:01"}])
        );
        assert_eq!(t["spec"]["networks"], json!([{"name": "net-0", "pod": {}}]));
    }

    #[test]
    fn bios_guests_and_windows_guests() {
        let mut vmm = discovered();
        if let Some(s) = vmm.status.as_mut().and_then(|s| s.source.as_mut()) {
            s.firmware = Some(Firmware::Bios);
            s.guest_id = Some("windows2019srv_64Guest".into());
        }
        let v = serde_json::to_value(virtual_machine(&vmm).unwrap()).unwrap();
        let d = &v["spec"]["template"]["spec"]["domain"];
        assert_eq!(d["firmware"]["bootloader"], json!({"bios": {}}));
        assert_eq!(d["devices"]["disks"][0]["disk"]["bus"], "sata");
    }

    #[test]
    fn network_mapping_routes_nics_and_drops_unmapped_ones() {
        let nics = [
            nic("m0", "VM Network"),
            nic("m1", "DVS0"),
            nic("m2", "other"),
        ];
        let mapping = [
            NetworkMapping {
                source: "DVS0".into(),
                pod: Some(PodNetwork {}),
                multus: None,
            },
            NetworkMapping {
                source: "VM Network".into(),
                pod: None,
                multus: Some(MultusNetwork {
                    network_name: "ns/br0".into(),
                }),
            },
        ];
        let (ifaces, nets) = network_wiring(&nics, &mapping);
        assert_eq!(
            ifaces,
            vec![
                json!({"name": "net-0", "bridge": {}, "macAddress": "m0"}),
                json!({"name": "net-1", "masquerade": {}, "macAddress": "m1"})
            ]
        );
        assert_eq!(
            nets,
            vec![
                json!({"name": "net-0", "multus": {"networkName": "ns/br0"}}),
                json!({"name": "net-1", "pod": {}})
            ]
        );
        let (ifaces, nets) = network_wiring(&nics, &[]);
        assert_eq!(
            (ifaces.len(), nets.len()),
            (1, 1),
            "without a mapping only the first NIC is wired"
        );
        assert_eq!(network_wiring(&[], &[]), (vec![], vec![]));
    }
}
