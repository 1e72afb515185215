//! The domain virt-launcher would define for a VMI, as the `qemu-system-x86_64` command line
//! that runs it here (`--guests qemu`). Pure: the VMI's spec in, the machine and its argv out.
//!
//! What is read, after KubeVirt's converter (`pkg/virt-launcher/virtwrap/converter/`, v1.8.3):
//! firmware (`domain.firmware.bootloader`: SeaBIOS unless `efi`; `efi.secureBoot` defaults to
//! true, and then needs SMM), the machine type (`q35` unless it names i440fx's `pc`), CPU
//! topology, memory (`domain.memory.guest`, else the memory request), each disk on its bus from
//! its volume's claim (`virtio`, `sata`, `scsi`) in `bootOrder` (else listed order), each
//! interface's model and MAC (user networking stands in for the pod network), the guest agent's
//! virtio-serial channel (`org.qemu.guest_agent.0`, always present), and serial port 0.
//! The interfaces are the domain's as KubeVirt's network configurator makes them
//! (`DomainConfigurator.Configure`, `converter/network/configurator.go`): an interface with
//! `state: absent` is left out; a MAC is the spec's `macAddress` (as libvirt writes it, lower
//! case) or, without one, libvirt's own (`52:54:00:…`; here derived from the VMI's uid, so the
//! same instance gets the same one); a virtio interface has as many queues as vCPUs with
//! `networkInterfaceMultiqueue` (`NetworkQueuesCapacity`, `virtio-queues.go`; qemu's user network
//! still runs one), else one.
//! A spec the node cannot run here (a volume that is not a claim, a bus qemu lacks, an SR-IOV or
//! binding-plugin interface, a link set down) is refused with its reason, as virt-launcher fails
//! a domain it cannot define.

use serde_json::Value;

use crate::kubevirt::VirtualMachineInstanceSpec;

/// The firmware the guest boots on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Firmware {
    /// SeaBIOS.
    Bios,
    /// OVMF; with Secure Boot (SMM, Microsoft's keys enrolled) or without.
    Efi { secure_boot: bool },
}

/// One disk: its bus and the claim whose volume backs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disk {
    pub name: String,
    pub bus: String,
    pub claim: String,
    pub boot_order: Option<u64>,
}

/// One network interface of the domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nic {
    /// The VMI spec's interface name (the domain's alias `ua-<name>`).
    pub name: String,
    pub model: String,
    /// As the domain has it: lower case, never absent.
    pub mac: String,
    /// The driver's queues (`queueCount` in the VMI's status).
    pub queues: u32,
    /// Bound with `masquerade` (the guest's link-local addresses are not reported).
    pub masquerade: bool,
}

/// What qemu is asked to run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    pub firmware: Firmware,
    /// `q35` or `pc`.
    pub machine_type: &'static str,
    pub sockets: u64,
    pub cores: u64,
    pub threads: u64,
    pub memory_mib: u64,
    pub disks: Vec<Disk>,
    pub nics: Vec<Nic>,
    /// The name of the network (and its interface) that is the pod network, if any.
    pub pod_network: Option<String>,
}

/// Files of one running instance.
#[derive(Clone, Debug)]
pub struct Files {
    /// Each disk's volume file, in [`Machine::disks`] order.
    pub disks: Vec<std::path::PathBuf>,
    /// The guest agent's socket (qemu listens).
    pub agent: std::path::PathBuf,
    /// QMP, for the ACPI power button.
    pub qmp: std::path::PathBuf,
    /// The instance's copy of OVMF's variables (EFI only).
    pub vars: std::path::PathBuf,
}

/// OVMF as Debian's `ovmf` package installs it.
pub const OVMF_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.fd";
pub const OVMF_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.fd";
pub const OVMF_CODE_SECBOOT: &str = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd";
pub const OVMF_VARS_MS: &str = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd";

fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(k))
}

fn count(v: Option<&Value>) -> u64 {
    v.and_then(Value::as_u64).filter(|n| *n > 0).unwrap_or(1)
}

/// The machine of the VMI `uid`'s spec, or why this node cannot run it.
pub fn machine(spec: &VirtualMachineInstanceSpec, uid: &str) -> Result<Machine, String> {
    let rest = Value::Object(spec.rest.clone());
    let domain = rest.get("domain").cloned().unwrap_or(Value::Null);
    let firmware = match at(&domain, &["firmware", "bootloader", "efi"]) {
        Some(efi) => Firmware::Efi {
            secure_boot: efi
                .get("secureBoot")
                .and_then(Value::as_bool)
                .unwrap_or(true),
        },
        None => Firmware::Bios,
    };
    let machine_type = match at(&domain, &["machine", "type"]).and_then(Value::as_str) {
        Some(t) if !t.contains("q35") && (t == "pc" || t.contains("i440fx")) => "pc",
        _ => "q35",
    };
    let cpu = domain.get("cpu").cloned().unwrap_or(Value::Null);
    let memory = at(&domain, &["memory", "guest"])
        .or_else(|| at(&domain, &["resources", "requests", "memory"]))
        .and_then(Value::as_str)
        .ok_or("the domain names no memory (domain.memory.guest or a memory request)")?;
    let bytes = crate::quantity::parse_bytes(memory)
        .ok_or_else(|| format!("memory {memory:?} is not a quantity"))?;
    let disks = disks(spec, &domain)?;
    let (sockets, cores, threads) = (
        count(cpu.get("sockets")),
        count(cpu.get("cores")),
        count(cpu.get("threads")),
    );
    let multiqueue = at(&domain, &["devices", "networkInterfaceMultiqueue"])
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let vcpus = u32::try_from(sockets * cores * threads).unwrap_or(u32::MAX);
    let nics = nics(&domain, uid, multiqueue.then_some(vcpus))?;
    let pod_network = rest
        .get("networks")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|n| n.get("pod").is_some())
        .and_then(|n| n.get("name").and_then(Value::as_str))
        .map(str::to_owned);
    Ok(Machine {
        firmware,
        machine_type,
        sockets,
        cores,
        threads,
        memory_mib: (bytes / (1024 * 1024)).max(1),
        disks,
        nics,
        pod_network,
    })
}

/// The domain's interfaces from `domain.devices.interfaces` (`absent` ones left out); with
/// `multiqueue`, a virtio interface's queues (vCPUs, at most 256).
fn nics(domain: &Value, uid: &str, multiqueue: Option<u32>) -> Result<Vec<Nic>, String> {
    let listed = at(domain, &["devices", "interfaces"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for (i, iface) in listed.iter().enumerate() {
        let s = |k: &str| iface.get(k).and_then(Value::as_str);
        let name = s("name").unwrap_or_default().to_owned();
        match s("state") {
            Some("absent") => continue,
            Some("down") => {
                return Err(format!(
                    "interface {name:?}: this node does not set a link down"
                ));
            }
            _ => {}
        }
        if let Some(kind) = ["sriov", "binding", "passtBinding"]
            .into_iter()
            .find(|k| iface.get(k).is_some())
        {
            return Err(format!("interface {name:?}: {kind} is not supported"));
        }
        let model = s("model").unwrap_or("virtio").to_owned();
        let queues = match multiqueue {
            Some(n) if model == "virtio" => n.min(256),
            _ => 1,
        };
        out.push(Nic {
            mac: s("macAddress").map_or_else(|| libvirt_mac(uid, i), str::to_lowercase),
            name,
            model,
            queues,
            masquerade: iface.get("masquerade").is_some(),
        });
    }
    Ok(out)
}

/// A MAC address as libvirt makes one for an interface without (`virMacAddrGenerate`: QEMU's
/// prefix `52:54:00`, then three bytes; random there, here of the VMI's uid and the interface's
/// index). Pure.
fn libvirt_mac(uid: &str, index: usize) -> String {
    // FNV-1a.
    let h = format!("{uid}/{index}")
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    let b = h.to_be_bytes();
    format!("52:54:00:{:02x}:{:02x}:{:02x}", b[5], b[6], b[7])
}

/// The disks of `domain.devices.disks`, each backed by its volume's claim, in boot order.
fn disks(spec: &VirtualMachineInstanceSpec, domain: &Value) -> Result<Vec<Disk>, String> {
    let listed = at(domain, &["devices", "disks"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut out = Vec::new();
    for d in &listed {
        let name = d.get("name").and_then(Value::as_str).unwrap_or_default();
        let volume = spec
            .volumes
            .iter()
            .find(|v| v.name == name)
            .ok_or_else(|| format!("disk {name:?} has no volume"))?;
        let claim = volume.claim().ok_or_else(|| {
            format!("volume {name:?} is not a claim or DataVolume: this node runs only those")
        })?;
        let bus = at(d, &["disk", "bus"])
            .and_then(Value::as_str)
            .unwrap_or("virtio")
            .to_owned();
        if !matches!(bus.as_str(), "virtio" | "sata" | "scsi") {
            return Err(format!("disk {name:?}: bus {bus:?} is not supported"));
        }
        out.push(Disk {
            name: name.to_owned(),
            bus,
            claim: claim.to_owned(),
            boot_order: d.get("bootOrder").and_then(Value::as_u64),
        });
    }
    // libvirt boots the disks with a boot order first, lowest first; then the others as listed.
    out.sort_by_key(|d| d.boot_order.unwrap_or(u64::MAX));
    Ok(out)
}

/// qemu's name for a KubeVirt interface model.
fn nic_device(model: &str) -> &str {
    match model {
        "e1000" => "e1000",
        "e1000e" => "e1000e",
        "rtl8139" => "rtl8139",
        "pcnet" => "pcnet",
        "ne2k_pci" => "ne2k_pci",
        _ => "virtio-net-pci",
    }
}

/// The command line (after the program's name) that runs `m` under TCG, its serial port on
/// stdout.
pub fn argv(m: &Machine, f: &Files) -> Vec<String> {
    let secure = matches!(m.firmware, Firmware::Efi { secure_boot: true });
    let mut machine = format!("{},accel=tcg", m.machine_type);
    if secure {
        machine.push_str(",smm=on");
    }
    let mut a: Vec<String> = vec![
        "-machine".into(),
        machine,
        "-m".into(),
        format!("{}", m.memory_mib),
        "-smp".into(),
        format!(
            "{},sockets={},cores={},threads={}",
            m.sockets * m.cores * m.threads,
            m.sockets,
            m.cores,
            m.threads
        ),
        "-nodefaults".into(),
        "-display".into(),
        "none".into(),
        "-serial".into(),
        "stdio".into(),
        "-qmp".into(),
        format!("unix:{},server=on,wait=off", f.qmp.display()),
    ];
    if let Firmware::Efi { .. } = m.firmware {
        let code = if secure { OVMF_CODE_SECBOOT } else { OVMF_CODE };
        if secure {
            a.extend([
                "-global".into(),
                "driver=cfi.pflash01,property=secure,value=on".into(),
            ]);
        }
        a.extend([
            "-drive".into(),
            format!("if=pflash,format=raw,unit=0,readonly=on,file={code}"),
            "-drive".into(),
            format!("if=pflash,format=raw,unit=1,file={}", f.vars.display()),
        ]);
    }
    let mut controllers = (false, false);
    for (i, (d, path)) in m.disks.iter().zip(&f.disks).enumerate() {
        a.extend([
            "-drive".into(),
            format!(
                "if=none,id=disk{i},format=raw,cache=writeback,file={}",
                path.display()
            ),
        ]);
        let boot = format!(",bootindex={}", i + 1);
        let device = match d.bus.as_str() {
            "sata" => {
                if !controllers.0 {
                    a.extend(["-device".into(), "ahci,id=sata".into()]);
                    controllers.0 = true;
                }
                format!("ide-hd,drive=disk{i},bus=sata.{i}{boot}")
            }
            "scsi" => {
                if !controllers.1 {
                    a.extend(["-device".into(), "virtio-scsi-pci,id=scsi".into()]);
                    controllers.1 = true;
                }
                format!("scsi-hd,drive=disk{i},bus=scsi.0{boot}")
            }
            _ => format!("virtio-blk-pci,drive=disk{i}{boot}"),
        };
        a.extend(["-device".into(), device]);
    }
    if m.nics.is_empty() {
        a.extend(["-nic".into(), "none".into()]);
    }
    for (i, n) in m.nics.iter().enumerate() {
        a.extend([
            "-netdev".into(),
            format!("user,id=net{i}"),
            "-device".into(),
            format!("{},netdev=net{i},mac={}", nic_device(&n.model), n.mac),
        ]);
    }
    a.extend([
        "-chardev".into(),
        format!(
            "socket,id=agent,path={},server=on,wait=off",
            f.agent.display()
        ),
        "-device".into(),
        "virtio-serial".into(),
        "-device".into(),
        "virtserialport,chardev=agent,name=org.qemu.guest_agent.0".into(),
    ]);
    a
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::kubevirt::{NamedRef, Volume};
    use serde_json::json;

    fn spec(domain: Value, volumes: &[(&str, &str)]) -> VirtualMachineInstanceSpec {
        let mut s = VirtualMachineInstanceSpec::default();
        s.rest.insert("domain".into(), domain);
        s.volumes = volumes
            .iter()
            .map(|(n, dv)| Volume {
                name: (*n).into(),
                data_volume: Some(NamedRef {
                    name: (*dv).into(),
                    ..NamedRef::default()
                }),
                ..Volume::default()
            })
            .collect();
        s
    }

    fn files(n: usize) -> Files {
        Files {
            disks: (0..n).map(|i| format!("/v/d{i}.img").into()).collect(),
            agent: "/s/qga.sock".into(),
            qmp: "/s/qmp.sock".into(),
            vars: "/s/vars.fd".into(),
        }
    }

    #[test]
    fn a_bios_vm_runs_its_disks_on_their_buses_with_the_agents_channel() {
        let s = spec(
            json!({
                "cpu": {"sockets": 1, "cores": 2, "threads": 1},
                "memory": {"guest": "512Mi"},
                "devices": {
                    "disks": [{"name": "d1", "disk": {"bus": "sata"}}, {"name": "d0", "disk": {"bus": "virtio"}, "bootOrder": 1}],
                    "interfaces": [{"name": "default", "model": "e1000e", "macAddress": "00:50:56:01:02:03"}]
                }
            }),
            &[("d0", "m-disk-0"), ("d1", "m-disk-1")],
        );
        let m = machine(&s, "vmi-uid").unwrap();
        assert_eq!(m.firmware, Firmware::Bios);
        assert_eq!(m.memory_mib, 512);
        assert_eq!(
            m.disks.iter().map(|d| d.claim.as_str()).collect::<Vec<_>>(),
            ["m-disk-0", "m-disk-1"],
            "the boot disk first"
        );
        let a = argv(&m, &files(2)).join(" ");
        assert!(a.contains("-machine q35,accel=tcg"), "{a}");
        assert!(a.contains("-smp 2,sockets=1,cores=2,threads=1"), "{a}");
        assert!(a.contains("virtio-blk-pci,drive=disk0,bootindex=1"), "{a}");
        assert!(
            a.contains("ahci,id=sata") && a.contains("ide-hd,drive=disk1,bus=sata.1,bootindex=2"),
            "{a}"
        );
        assert!(
            a.contains("e1000e,netdev=net0,mac=00:50:56:01:02:03"),
            "{a}"
        );
        assert!(a.contains("name=org.qemu.guest_agent.0"), "{a}");
        assert!(!a.contains("pflash"), "{a}");
    }

    #[test]
    fn efi_boots_ovmf_and_secure_boot_needs_smm_and_the_signed_firmware() {
        let d = |efi: Value| {
            json!({"memory": {"guest": "1Gi"}, "firmware": {"bootloader": {"efi": efi}},
                   "devices": {"disks": [{"name": "d0", "disk": {"bus": "virtio"}}]}})
        };
        let off = machine(&spec(d(json!({"secureBoot": false})), &[("d0", "x")]), "u").unwrap();
        assert_eq!(off.firmware, Firmware::Efi { secure_boot: false });
        let a = argv(&off, &files(1)).join(" ");
        assert!(a.contains(OVMF_CODE) && !a.contains("smm=on"), "{a}");
        // KubeVirt's default for an efi bootloader is Secure Boot on.
        let on = machine(&spec(d(json!({})), &[("d0", "x")]), "u").unwrap();
        assert_eq!(on.firmware, Firmware::Efi { secure_boot: true });
        let a = argv(&on, &files(1)).join(" ");
        assert!(a.contains(OVMF_CODE_SECBOOT) && a.contains("smm=on"), "{a}");
    }

    #[test]
    fn the_interfaces_are_the_domains_with_their_macs_and_queues() {
        let mut s = spec(
            json!({
                "cpu": {"sockets": 2, "cores": 2},
                "memory": {"guest": "1Gi"},
                "devices": {
                    "networkInterfaceMultiqueue": true,
                    "disks": [{"name": "d0", "disk": {"bus": "virtio"}}],
                    "interfaces": [
                        {"name": "net-0", "model": "virtio", "masquerade": {}, "macAddress": "00:0C:29:32:64:63"},
                        {"name": "gone", "bridge": {}, "state": "absent"},
                        {"name": "net-1", "model": "e1000e", "bridge": {}}
                    ]
                }
            }),
            &[("d0", "x")],
        );
        s.rest.insert(
            "networks".into(),
            json!([{"name": "net-1", "multus": {"networkName": "br"}}, {"name": "net-0", "pod": {}}]),
        );
        let m = machine(&s, "vmi-uid").unwrap();
        assert_eq!(m.pod_network.as_deref(), Some("net-0"));
        let n = &m.nics;
        assert_eq!(n.len(), 2, "absent left out: {n:?}");
        assert_eq!(
            (n[0].mac.as_str(), n[0].queues, n[0].masquerade),
            ("00:0c:29:32:64:63", 4, true)
        );
        // No MAC in the spec: libvirt's prefix, the same for the same instance; one queue off virtio.
        assert!(
            n[1].mac.starts_with("52:54:00:") && n[1].mac.len() == 17,
            "{}",
            n[1].mac
        );
        assert_eq!(machine(&s, "vmi-uid").unwrap().nics[1].mac, n[1].mac);
        assert_ne!(machine(&s, "other").unwrap().nics[1].mac, n[1].mac);
        assert_eq!((n[1].queues, n[1].masquerade), (1, false));
        let a = argv(&m, &files(1)).join(" ");
        assert!(
            a.contains("virtio-net-pci,netdev=net0,mac=00:0c:29:32:64:63"),
            "{a}"
        );
        assert!(
            a.contains(&format!("e1000e,netdev=net1,mac={}", n[1].mac)),
            "{a}"
        );
    }

    #[test]
    fn what_this_node_cannot_run_is_refused_with_its_reason() {
        let mut s = spec(
            json!({"memory": {"guest": "1Gi"}, "devices": {"disks": [{"name": "c", "disk": {"bus": "virtio"}}]}}),
            &[],
        );
        s.volumes.push(Volume {
            name: "c".into(),
            ..Volume::default()
        });
        assert!(machine(&s, "vmi-uid").unwrap_err().contains("not a claim"));
        let s = spec(
            json!({"memory": {"guest": "1Gi"}, "devices": {"disks": [{"name": "d0", "disk": {"bus": "usb"}}]}}),
            &[("d0", "x")],
        );
        assert!(machine(&s, "vmi-uid").unwrap_err().contains("usb"));
        let s = spec(json!({"devices": {}}), &[]);
        assert!(machine(&s, "vmi-uid").unwrap_err().contains("memory"));
        for (iface, why) in [
            (json!({"name": "n", "sriov": {}}), "sriov"),
            (
                json!({"name": "n", "binding": {"name": "passt"}}),
                "binding",
            ),
            (json!({"name": "n", "bridge": {}, "state": "down"}), "down"),
        ] {
            let s = spec(
                json!({"memory": {"guest": "1Gi"}, "devices": {"interfaces": [iface]}}),
                &[],
            );
            assert!(machine(&s, "vmi-uid").unwrap_err().contains(why), "{why}");
        }
    }
}
