//! The migrated KubeVirt VirtualMachine: devices, firmware and networks from the discovered
//! source, disks on the imported DataVolumes.

use ferry_crds::{
    DiscoveredNic, DiscoveredSource, Firmware, NetworkMapping, NicModel, TargetTemplate,
    VirtualMachineMigration, names,
};
use serde_json::{Map, Value, json};

use crate::Result;
use crate::apis::kubevirt::{VirtualMachine, VirtualMachineSpec, run_strategy_name};

/// How the source NICs map to KubeVirt interfaces and networks: `(interfaces, networks)`.
///
/// With no mapping, the first NIC goes to the pod network (masquerade) and the others are left
/// out; with a mapping, NICs on listed networks go where it says (pod: masquerade, Multus:
/// bridge) and the others are left out. Every interface gets `model`; MAC addresses are kept
/// when `keep_macs`. Pure.
pub fn network_wiring(
    nics: &[DiscoveredNic],
    mapping: &[NetworkMapping],
    model: NicModel,
    keep_macs: bool,
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
        let mut iface = json!({"name": name, "model": model.as_str()});
        if let (Some(obj), Some(b)) = (iface.as_object_mut(), iface_binding.as_object()) {
            obj.extend(b.clone());
            if keep_macs && !nic.mac.is_empty() {
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

/// KubeVirt's CPU topology for the source's: `numCPU / coresPerSocket` sockets of
/// `coresPerSocket` cores; one socket of every vCPU when the source gives no whole topology.
/// Pure.
pub fn cpu(source: &DiscoveredSource) -> Value {
    let n = source.num_cpu.unwrap_or(1).max(1);
    let (sockets, cores) = match source.cores_per_socket {
        Some(c) if c > 0 && n % c == 0 => (n / c, c),
        _ => (1, n),
    };
    json!({"sockets": sockets, "cores": cores, "threads": 1})
}

/// KubeVirt's firmware for the source's: EFI (Secure Boot as the source had it) or BIOS, the
/// BIOS UUID kept; `(firmware, features)` — Secure Boot needs SMM. Pure.
pub fn firmware(source: &DiscoveredSource) -> (Value, Option<Value>) {
    let secure = source.firmware == Some(Firmware::Efi) && source.secure_boot == Some(true);
    let mut fw = match source.firmware {
        // KubeVirt's EFI default is secureBoot: true; a source without it must say false.
        Some(Firmware::Efi) => json!({"bootloader": {"efi": {"secureBoot": secure}}}),
        Some(Firmware::Bios) | None => json!({"bootloader": {"bios": {}}}),
    };
    if let Some(uuid) = &source.uuid {
        fw["uuid"] = json!(uuid);
    }
    (fw, secure.then(|| json!({"smm": {"enabled": true}})))
}

/// The domain of the migrated VM: CPU, memory, firmware, machine type, disks on the imported
/// DataVolumes (the first boots) and NICs, after the mapping in docs/real-guests.md. Pure.
pub fn domain(
    vmm: &VirtualMachineMigration,
    source: &DiscoveredSource,
    target: &TargetTemplate,
) -> (Value, Vec<Value>, Vec<Value>) {
    // A guest ferry converted has virtio's drivers (virt-v2v installs them), whatever the spec
    // said of the source.
    let mut devices_spec = target.devices.clone();
    devices_spec.virtio_drivers |= vmm
        .status
        .as_ref()
        .and_then(|s| s.guest.as_ref())
        .is_some_and(|g| g.converted);
    let devices_spec = &devices_spec;
    let bus = devices_spec.disk_bus().as_str();
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
    let (interfaces, networks) = network_wiring(
        &source.nics,
        &target.networks,
        devices_spec.nic_model(),
        devices_spec.preserve_mac_addresses,
    );
    let memory = format!("{}Mi", source.memory_mib.unwrap_or(1024).max(1));
    let (firmware, features) = firmware(source);
    let mut devices = json!({"disks": disks});
    if !interfaces.is_empty() {
        devices["interfaces"] = json!(interfaces);
    } else if !source.nics.is_empty() {
        // Every NIC was left out by the mapping: no pod interface either.
        devices["autoattachPodInterface"] = json!(false);
    }
    let mut domain = json!({"firmware": firmware, "devices": devices});
    if target.placement.instancetype.is_none() {
        // With an instancetype, it gives CPU and memory: KubeVirt refuses a VM that sets them
        // too (user guide, "Instance types and preferences": conflicts rejected at admission).
        domain["cpu"] = cpu(source);
        domain["memory"] = json!({"guest": memory});
        domain["resources"] = json!({"requests": {"memory": memory}});
    }
    if let Some(f) = features {
        domain["features"] = f;
    }
    if let Some(m) = &devices_spec.machine_type {
        domain["machine"] = json!({"type": m});
    }
    (domain, volumes, networks)
}

/// The migrated VirtualMachine, with the migration's final run strategy, on the imported
/// DataVolumes (CreatingVM makes one that starts only once the source was seen powered off).
///
/// # Guarantees
/// Named [`names::vm_name`]; owned by and labelled with the migration; its instance template
/// carries the migration label too (KubeVirt copies it onto the VMI, which is how VMI events map
/// back); the domain is [`domain`]'s; disk `i` is the DataVolume
/// [`names::datavolume_name`]`(i)`, the first one boots.
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
    let (domain, volumes, networks) = domain(vmm, &source, &vmm.spec.target.template);
    let mut vmi_spec = json!({"domain": domain, "volumes": volumes});
    if !networks.is_empty() {
        vmi_spec["networks"] = json!(networks);
    }
    let placement = &vmm.spec.target.template.placement;
    scheduling(&mut vmi_spec, placement);
    // The user's labels first: ferry's own (which the CRD forbids in placement) always win.
    let mut template_labels = placement.labels.clone();
    template_labels.extend(super::labels(vmm));
    let mut meta = meta;
    meta.labels = Some(template_labels.clone());
    if !placement.annotations.is_empty() {
        meta.annotations = Some(placement.annotations.clone());
    }
    let mut rest = Map::new();
    if let Some(it) = &placement.instancetype {
        rest.insert(
            "instancetype".into(),
            json!({"name": it.name, "kind": it.kind}),
        );
    }
    if let Some(p) = &placement.preference {
        rest.insert("preference".into(), json!({"name": p.name, "kind": p.kind}));
    }
    let spec = VirtualMachineSpec {
        run_strategy: Some(run_strategy_name(vmm.final_run_strategy()).to_owned()),
        template: Some(json!({"metadata": {"labels": template_labels}, "spec": vmi_spec})),
        rest,
    };
    Ok(VirtualMachine {
        metadata: meta,
        spec,
        status: None,
    })
}

/// Why `vm`, found under the migration's target name with its creation stamp, is not the VM
/// ferry makes for it, if it is not: its volumes must be exactly the migration's DataVolumes,
/// disk `i` on `datavolume_name(i)` — no container disk, no service account token, no claim
/// of anyone else — and it may bring no DataVolume templates of its own. A stamp proves only
/// who may have made the object; what it would boot is checked too. Pure.
pub fn not_ferrys(vmm: &VirtualMachineMigration, vm: &VirtualMachine) -> Option<String> {
    let disks = vmm
        .status
        .as_ref()
        .and_then(|s| s.source.as_ref())
        .map_or(0, |s| s.disks.len());
    let want: Vec<String> = (0..disks)
        .map(|i| format!("dataVolume {}", names::datavolume_name(vmm, i)))
        .collect();
    let volumes = vm
        .spec
        .template
        .as_ref()
        .and_then(|t| t.pointer("/spec/volumes"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let have: Vec<String> = volumes
        .iter()
        .map(|v| {
            let source = v
                .as_object()
                .and_then(|o| o.iter().find(|(k, _)| k.as_str() != "name"));
            match source {
                Some((kind, s)) if kind == "dataVolume" => format!(
                    "dataVolume {}",
                    s.get("name").and_then(Value::as_str).unwrap_or_default()
                ),
                Some((kind, _)) => kind.clone(),
                None => "a volume without a source".to_owned(),
            }
        })
        .collect();
    let templates = vm
        .spec
        .rest
        .get("dataVolumeTemplates")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    if have != want {
        Some(format!(
            "its volumes are [{}], not the migration's DataVolumes [{}]",
            have.join(", "),
            want.join(", ")
        ))
    } else if templates {
        Some("it brings DataVolume templates of its own".to_owned())
    } else {
        None
    }
}

/// The instance's scheduling from the placement: nodeSelector, affinity and tolerations, as
/// KubeVirt's VirtualMachineInstanceSpec names them (the same shapes as a Pod's). Pure.
fn scheduling(vmi_spec: &mut Value, placement: &ferry_crds::VmPlacement) {
    if !placement.node_selector.is_empty() {
        vmi_spec["nodeSelector"] = json!(placement.node_selector);
    }
    if let Some(a) = &placement.affinity {
        vmi_spec["affinity"] = json!(a);
    }
    if !placement.tolerations.is_empty() {
        vmi_spec["tolerations"] = json!(placement.tolerations);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::{DiskBus, MultusNetwork, NicDeviceType, PodNetwork, fixtures::migration};

    fn nic(mac: &str, network: &str) -> DiscoveredNic {
        DiscoveredNic {
            mac: mac.into(),
            network: network.into(),
            device_type: Some(NicDeviceType::Vmxnet3),
            pci_slot_number: None,
        }
    }

    fn source() -> DiscoveredSource {
        ferry_crds::fixtures::discovered_source()
    }

    fn discovered(source: DiscoveredSource) -> VirtualMachineMigration {
        let mut vmm = migration("web-1");
        vmm.status = Some(ferry_crds::VirtualMachineMigrationStatus {
            source: Some(Box::new(source)),
            ..Default::default()
        });
        vmm
    }

    fn domain_of(vmm: &VirtualMachineMigration) -> Value {
        let v = serde_json::to_value(virtual_machine(vmm).unwrap()).unwrap();
        v["spec"]["template"]["spec"]["domain"].clone()
    }

    #[test]
    fn the_vm_is_made_with_its_final_run_strategy_on_the_imported_volumes_with_the_source_shape() {
        let vmm = discovered(source());
        let vm = virtual_machine(&vmm).unwrap();
        assert_eq!(vm.metadata.name.as_deref(), Some("dc0-h0-vm0"));
        let v = serde_json::to_value(&vm).unwrap();
        assert_eq!(v["apiVersion"], "kubevirt.io/v1");
        assert_eq!(
            v["spec"]["runStrategy"],
            run_strategy_name(vmm.final_run_strategy())
        );
        // The strategy the spec asks for, as Starting would have set it: powerState Off
        // leaves it Halted.
        let mut off = vmm.clone();
        off.spec.target.template.power_state = Some(ferry_crds::TargetPowerState::PoweredOff);
        let halted = serde_json::to_value(virtual_machine(&off).unwrap()).unwrap();
        assert_eq!(halted["spec"]["runStrategy"], "Halted");
        let mut always = vmm.clone();
        always.spec.target.template.power_state = Some(ferry_crds::TargetPowerState::PoweredOn);
        always.spec.target.template.run_strategy = ferry_crds::RunStrategy::Always;
        let on = serde_json::to_value(virtual_machine(&always).unwrap()).unwrap();
        assert_eq!(on["spec"]["runStrategy"], "Always");
        let t = &v["spec"]["template"];
        assert_eq!(t["metadata"]["labels"][names::MIGRATION_LABEL], "web-1");
        let d = &t["spec"]["domain"];
        assert_eq!(d["cpu"], json!({"sockets": 1, "cores": 2, "threads": 1}));
        assert_eq!(d["memory"]["guest"], "2048Mi");
        assert_eq!(d["resources"]["requests"]["memory"], "2048Mi");
        assert_eq!(d["firmware"]["bootloader"]["efi"]["secureBoot"], false);
        assert_eq!(
            d["firmware"]["uuid"],
            "42265e3b-3d1b-4b6b-9d58-2c8a9f0b1c2d"
        );
        assert!(d.get("features").is_none() && d.get("machine").is_none());
        assert_eq!(
            d["devices"]["disks"][0],
            json!({"name": "disk-0", "disk": {"bus": "sata"}, "bootOrder": 1})
        );
        assert_eq!(
            d["devices"]["disks"][1],
            json!({"name": "disk-1", "disk": {"bus": "sata"}})
        );
        assert_eq!(
            t["spec"]["volumes"][1],
            json!({"name": "disk-1", "dataVolume": {"name": "web-1-disk-1"}})
        );
        assert_eq!(
            d["devices"]["interfaces"],
            json!([{"name": "net-0", "model": "e1000e", "masquerade": {}, "macAddress": "00:50:56:aa:bb:01"}])
        );
        assert_eq!(t["spec"]["networks"], json!([{"name": "net-0", "pod": {}}]));
    }

    #[test]
    fn placement_labels_schedules_and_sizes_the_vm() {
        use ferry_crds::{InstancetypeKind, InstancetypeRef, PreferenceKind, PreferenceRef};
        use k8s_openapi::api::core::v1::Toleration;
        let mut vmm = discovered(source());
        let p = &mut vmm.spec.target.template.placement;
        p.labels = [("app".to_owned(), "web".to_owned())].into();
        p.annotations = [("owner".to_owned(), "team-a".to_owned())].into();
        p.node_selector = [("zone".to_owned(), "b".to_owned())].into();
        p.tolerations = vec![Toleration {
            key: Some("dedicated".into()),
            operator: Some("Equal".into()),
            value: Some("vms".into()),
            effect: Some("NoSchedule".into()),
            ..Toleration::default()
        }];
        p.instancetype = Some(InstancetypeRef {
            name: "u1.medium".into(),
            kind: InstancetypeKind::VirtualMachineClusterInstancetype,
        });
        p.preference = Some(PreferenceRef {
            name: "rhel.9".into(),
            kind: PreferenceKind::VirtualMachinePreference,
        });
        let v = serde_json::to_value(virtual_machine(&vmm).unwrap()).unwrap();
        // Labels on the VM and its instances, ferry's own kept beside them.
        for labels in [
            &v["metadata"]["labels"],
            &v["spec"]["template"]["metadata"]["labels"],
        ] {
            assert_eq!(labels["app"], "web");
            assert_eq!(labels[names::MIGRATION_LABEL], "web-1");
        }
        assert_eq!(v["metadata"]["annotations"], json!({"owner": "team-a"}));
        let t = &v["spec"]["template"]["spec"];
        assert_eq!(t["nodeSelector"], json!({"zone": "b"}));
        assert_eq!(
            t["tolerations"],
            json!([{"key": "dedicated", "operator": "Equal", "value": "vms", "effect": "NoSchedule"}])
        );
        assert!(t.get("affinity").is_none(), "no affinity asked for");
        assert_eq!(
            v["spec"]["instancetype"],
            json!({"name": "u1.medium", "kind": "VirtualMachineClusterInstancetype"})
        );
        assert_eq!(
            v["spec"]["preference"],
            json!({"name": "rhel.9", "kind": "VirtualMachinePreference"})
        );
        // The instancetype sizes the VM: the source's CPU and memory are left out.
        let d = &t["domain"];
        for k in ["cpu", "memory", "resources"] {
            assert!(d.get(k).is_none(), "{k} left to the instancetype: {d}");
        }
        assert_eq!(
            d["devices"]["disks"][0]["bootOrder"], 1,
            "devices still ferry's"
        );
        // Without a placement nothing of it appears.
        let plain = serde_json::to_value(virtual_machine(&discovered(source())).unwrap()).unwrap();
        assert!(plain["metadata"].get("annotations").is_none());
        assert!(plain["spec"].get("instancetype").is_none());
        assert!(
            plain["spec"]["template"]["spec"]
                .get("nodeSelector")
                .is_none()
        );
    }

    /// The mapping table of docs/real-guests.md, row by row: what each source shape and spec.target.devices
    /// become in the VirtualMachine's domain.
    #[test]
    fn the_device_mapping_table() {
        type Shape = fn(&mut DiscoveredSource, &mut ferry_crds::Devices);
        type Check = fn(&Value) -> bool;
        let rows: Vec<(&str, Shape, Check)> = vec![
            (
                "no virtio drivers: disks on SATA",
                |_, _| {},
                |d| d["devices"]["disks"][0]["disk"]["bus"] == "sata",
            ),
            (
                "no virtio drivers: NICs e1000e",
                |_, _| {},
                |d| d["devices"]["interfaces"][0]["model"] == "e1000e",
            ),
            (
                "virtio drivers: disks on virtio",
                |_, dev| dev.virtio_drivers = true,
                |d| d["devices"]["disks"][1]["disk"]["bus"] == "virtio",
            ),
            (
                "virtio drivers: NICs virtio",
                |_, dev| dev.virtio_drivers = true,
                |d| d["devices"]["interfaces"][0]["model"] == "virtio",
            ),
            (
                "diskBus overrides the drivers",
                |_, dev| {
                    dev.virtio_drivers = true;
                    dev.disk_bus = Some(DiskBus::Scsi);
                },
                |d| d["devices"]["disks"][0]["disk"]["bus"] == "scsi",
            ),
            (
                "nicModel overrides the drivers",
                |_, dev| dev.nic_model = Some(NicModel::E1000),
                |d| d["devices"]["interfaces"][0]["model"] == "e1000",
            ),
            (
                "MAC addresses kept by default",
                |_, _| {},
                |d| d["devices"]["interfaces"][0]["macAddress"] == "00:50:56:aa:bb:01",
            ),
            (
                "MAC addresses dropped when asked",
                |_, dev| dev.preserve_mac_addresses = false,
                |d| d["devices"]["interfaces"][0].get("macAddress").is_none(),
            ),
            (
                "BIOS firmware",
                |s, _| s.firmware = Some(Firmware::Bios),
                |d| d["firmware"]["bootloader"] == json!({"bios": {}}),
            ),
            (
                "no firmware reported reads as BIOS",
                |s, _| s.firmware = None,
                |d| d["firmware"]["bootloader"] == json!({"bios": {}}),
            ),
            (
                "EFI without Secure Boot",
                |_, _| {},
                |d| {
                    d["firmware"]["bootloader"] == json!({"efi": {"secureBoot": false}})
                        && d.get("features").is_none()
                },
            ),
            (
                "EFI with Secure Boot needs SMM",
                |s, _| s.secure_boot = Some(true),
                |d| {
                    d["firmware"]["bootloader"] == json!({"efi": {"secureBoot": true}})
                        && d["features"] == json!({"smm": {"enabled": true}})
                },
            ),
            (
                "Secure Boot on BIOS is ignored",
                |s, _| {
                    s.firmware = Some(Firmware::Bios);
                    s.secure_boot = Some(true);
                },
                |d| {
                    d["firmware"]["bootloader"] == json!({"bios": {}})
                        && d.get("features").is_none()
                },
            ),
            (
                "4 vCPUs as 2 sockets of 2 cores",
                |s, _| {
                    s.num_cpu = Some(4);
                    s.cores_per_socket = Some(2);
                },
                |d| d["cpu"] == json!({"sockets": 2, "cores": 2, "threads": 1}),
            ),
            (
                "a topology that does not divide reads as one socket",
                |s, _| {
                    s.num_cpu = Some(3);
                    s.cores_per_socket = Some(2);
                },
                |d| d["cpu"] == json!({"sockets": 1, "cores": 3, "threads": 1}),
            ),
            (
                "memory in MiB",
                |s, _| s.memory_mib = Some(6144),
                |d| {
                    d["memory"]["guest"] == "6144Mi"
                        && d["resources"]["requests"]["memory"] == "6144Mi"
                },
            ),
            (
                "machine type",
                |_, dev| dev.machine_type = Some("pc-q35-rhel9.4.0".into()),
                |d| d["machine"] == json!({"type": "pc-q35-rhel9.4.0"}),
            ),
        ];
        for (name, shape, check) in rows {
            let mut src = source();
            let mut vmm = discovered(source());
            shape(&mut src, &mut vmm.spec.target.template.devices);
            vmm.status.as_mut().unwrap().source = Some(Box::new(src));
            let d = domain_of(&vmm);
            assert!(
                check(&d),
                "{name}: {}",
                serde_json::to_string_pretty(&d).unwrap()
            );
        }
    }

    #[test]
    fn a_guest_ferry_converted_gets_virtio_whatever_the_spec_said_of_the_source() {
        let mut vmm = discovered(source());
        assert_eq!(
            domain_of(&vmm)["devices"]["disks"][0]["disk"]["bus"],
            "sata"
        );
        vmm.status.as_mut().unwrap().guest = Some(Box::new(ferry_crds::GuestStatus {
            converted: true,
            ..Default::default()
        }));
        let d = domain_of(&vmm);
        assert_eq!(d["devices"]["disks"][0]["disk"]["bus"], "virtio");
        assert_eq!(d["devices"]["interfaces"][0]["model"], "virtio");
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
        let (ifaces, nets) = network_wiring(&nics, &mapping, NicModel::Virtio, true);
        assert_eq!(
            ifaces,
            vec![
                json!({"name": "net-0", "model": "virtio", "bridge": {}, "macAddress": "m0"}),
                json!({"name": "net-1", "model": "virtio", "masquerade": {}, "macAddress": "m1"})
            ]
        );
        assert_eq!(
            nets,
            vec![
                json!({"name": "net-0", "multus": {"networkName": "ns/br0"}}),
                json!({"name": "net-1", "pod": {}})
            ]
        );
        let (ifaces, nets) = network_wiring(&nics, &[], NicModel::E1000e, true);
        assert_eq!(
            (ifaces.len(), nets.len()),
            (1, 1),
            "without a mapping only the first NIC is wired"
        );
        assert_eq!(
            network_wiring(&[], &[], NicModel::E1000e, true),
            (vec![], vec![])
        );
    }
}
