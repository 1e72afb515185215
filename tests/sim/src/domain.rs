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
//! A spec the node cannot run here (a volume that is not a claim, a bus qemu lacks) is refused
//! with its reason, as virt-launcher fails a domain it cannot define.

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

/// One network interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nic {
    pub model: String,
    pub mac: Option<String>,
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

/// The machine of a VMI spec, or why this node cannot run it.
pub fn machine(spec: &VirtualMachineInstanceSpec) -> Result<Machine, String> {
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
    let nics = at(&domain, &["devices", "interfaces"])
        .and_then(Value::as_array)
        .map(|ifs| {
            ifs.iter()
                .map(|i| Nic {
                    model: i
                        .get("model")
                        .and_then(Value::as_str)
                        .unwrap_or("virtio")
                        .to_owned(),
                    mac: i
                        .get("macAddress")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Machine {
        firmware,
        machine_type,
        sockets: count(cpu.get("sockets")),
        cores: count(cpu.get("cores")),
        threads: count(cpu.get("threads")),
        memory_mib: (bytes / (1024 * 1024)).max(1),
        disks,
        nics,
    })
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
        let mut dev = format!("{},netdev=net{i}", nic_device(&n.model));
        if let Some(mac) = &n.mac {
            dev.push_str(&format!(",mac={mac}"));
        }
        a.extend([
            "-netdev".into(),
            format!("user,id=net{i}"),
            "-device".into(),
            dev,
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
        let m = machine(&s).unwrap();
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
        let off = machine(&spec(d(json!({"secureBoot": false})), &[("d0", "x")])).unwrap();
        assert_eq!(off.firmware, Firmware::Efi { secure_boot: false });
        let a = argv(&off, &files(1)).join(" ");
        assert!(a.contains(OVMF_CODE) && !a.contains("smm=on"), "{a}");
        // KubeVirt's default for an efi bootloader is Secure Boot on.
        let on = machine(&spec(d(json!({})), &[("d0", "x")])).unwrap();
        assert_eq!(on.firmware, Firmware::Efi { secure_boot: true });
        let a = argv(&on, &files(1)).join(" ");
        assert!(a.contains(OVMF_CODE_SECBOOT) && a.contains("smm=on"), "{a}");
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
        assert!(machine(&s).unwrap_err().contains("not a claim"));
        let s = spec(
            json!({"memory": {"guest": "1Gi"}, "devices": {"disks": [{"name": "d0", "disk": {"bus": "usb"}}]}}),
            &[("d0", "x")],
        );
        assert!(machine(&s).unwrap_err().contains("usb"));
        let s = spec(json!({"devices": {}}), &[]);
        assert!(machine(&s).unwrap_err().contains("memory"));
    }
}
