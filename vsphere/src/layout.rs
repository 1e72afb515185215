//! Which disk layouts ferry can migrate; a pure check of the discovered VM.

use std::fmt;

use super::{DatastorePath, DiskBacking, VmInfo};

/// One reason a VM's disks cannot be migrated as they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LayoutProblem {
    NoDisks,
    /// A raw device mapping: the data is on a LUN, not in a datastore file.
    RawDeviceMapping {
        disk: String,
    },
    /// The disk sits on a snapshot chain; the copy would miss the base or the deltas.
    SnapshotDelta {
        disk: String,
    },
    /// The backing file is not a `.vmdk` datastore file.
    NotVmdk {
        disk: String,
        path: String,
    },
    /// A backing type ferry does not read (SeSparse, vVol, persistent memory, ...).
    UnsupportedBacking {
        disk: String,
        kind: String,
    },
    /// An independent disk: never in a snapshot; `nonpersistent` drops its changes at
    /// power-off.
    Independent {
        disk: String,
        nonpersistent: bool,
    },
    /// A disk other VMs may write too (multi-writer sharing).
    Shared {
        disk: String,
    },
    /// An encrypted disk: its datastore file is ciphertext.
    Encrypted {
        disk: String,
    },
    /// A host device passed through (PCI, USB).
    Passthrough {
        device: String,
    },
    /// The VM has snapshots (`rootSnapshot`), whatever its disks' backings say.
    Snapshots {
        count: usize,
    },
}

impl fmt::Display for LayoutProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoDisks => f.write_str("the VM has no virtual disks"),
            Self::RawDeviceMapping { disk } => write!(f, "{disk} is a raw device mapping (RDM)"),
            Self::SnapshotDelta { disk } => {
                write!(
                    f,
                    "{disk} is a snapshot delta disk; consolidate or delete the VM's snapshots first"
                )
            }
            Self::NotVmdk { disk, path } => write!(
                f,
                "{disk} is backed by {path:?}, not a datastore .vmdk file"
            ),
            Self::UnsupportedBacking { disk, kind } => {
                write!(f, "{disk} has an unsupported backing ({kind})")
            }
            Self::Independent {
                disk,
                nonpersistent: true,
            } => write!(
                f,
                "{disk} is independent-nonpersistent: what the guest wrote since it was powered on is dropped at power-off, and the copy has only the disk's base"
            ),
            Self::Independent { disk, .. } => write!(
                f,
                "{disk} is independent: vSphere never snapshots it (no warm migration of this VM)"
            ),
            Self::Shared { disk } => write!(
                f,
                "{disk} is shared with other VMs (multi-writer): the copy is of a disk they may still write; stop them, or accept SharedDisk"
            ),
            Self::Encrypted { disk } => write!(
                f,
                "{disk} is encrypted: its datastore file is ciphertext; decrypt the VM in vSphere first"
            ),
            Self::Snapshots { count } => write!(
                f,
                "the VM has {count} snapshot tree(s): its disks' current data is in delta files; delete or consolidate its snapshots in vSphere first"
            ),
            Self::Passthrough { device } => write!(
                f,
                "{device} is passed through from the host: the KubeVirt VM will not have it"
            ),
        }
    }
}

/// Checks that every disk is a plain (flat or sparse) VMDK without snapshot deltas.
///
/// Errors: every problem found, in disk order, so the operator sees them all at once.
pub fn validate_layout(vm: &VmInfo) -> Result<(), Vec<LayoutProblem>> {
    if vm.disks.is_empty() {
        return Err(vec![LayoutProblem::NoDisks]);
    }
    let mut problems: Vec<LayoutProblem> = vm
        .passthrough
        .iter()
        .map(|device| LayoutProblem::Passthrough {
            device: device.clone(),
        })
        .collect();
    if vm.snapshots > 0 {
        problems.push(LayoutProblem::Snapshots {
            count: vm.snapshots,
        });
    }
    for d in &vm.disks {
        let disk = if d.label.is_empty() {
            format!("disk {}", d.key)
        } else {
            d.label.clone()
        };
        match &d.backing {
            DiskBacking::Rdm => {
                problems.push(LayoutProblem::RawDeviceMapping { disk: disk.clone() })
            }
            DiskBacking::Other(kind) => problems.push(LayoutProblem::UnsupportedBacking {
                disk: disk.clone(),
                kind: kind.clone(),
            }),
            DiskBacking::Flat | DiskBacking::Sparse => {}
        }
        if d.has_parent {
            problems.push(LayoutProblem::SnapshotDelta { disk: disk.clone() });
        }
        if d.disk_mode.starts_with("independent") {
            problems.push(LayoutProblem::Independent {
                disk: disk.clone(),
                nonpersistent: d.disk_mode == "independent_nonpersistent",
            });
        }
        if d.shared {
            problems.push(LayoutProblem::Shared { disk: disk.clone() });
        }
        if d.encrypted {
            problems.push(LayoutProblem::Encrypted { disk: disk.clone() });
        }
        let is_vmdk = DatastorePath::parse(&d.datastore_path)
            .is_ok_and(|p| p.file_name().to_ascii_lowercase().ends_with(".vmdk"));
        if d.backing != DiskBacking::Rdm && !is_vmdk {
            problems.push(LayoutProblem::NotVmdk {
                disk,
                path: d.datastore_path.clone(),
            });
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{DiskInfo, Firmware, PowerState};
    use super::*;

    fn disk(key: i32, path: &str, backing: DiskBacking, has_parent: bool) -> DiskInfo {
        DiskInfo {
            key,
            label: format!("Hard disk {}", key - 1999),
            datastore_path: path.into(),
            capacity_bytes: 1 << 30,
            backing,
            has_parent,
            controller: None,
            disk_mode: "persistent".into(),
            shared: false,
            encrypted: false,
            change_id: None,
        }
    }

    fn vm(disks: Vec<DiskInfo>) -> VmInfo {
        VmInfo {
            moref: "vm-1".into(),
            name: "vm".into(),
            uuid: String::new(),
            instance_uuid: String::new(),
            power_state: PowerState::PoweredOn,
            guest_id: "otherGuest".into(),
            guest_full_name: String::new(),
            guest_family: super::super::GuestOsFamily::Other,
            tools: super::super::ToolsState::NotInstalled,
            firmware: Firmware::Bios,
            secure_boot: false,
            change_version: None,
            change_tracking: Some(true),
            num_cpu: 1,
            cores_per_socket: 1,
            memory_mib: 1024,
            disks,
            disks_reported: None,
            unread: vec![],
            nics: vec![],
            passthrough: vec![],
            snapshots: 0,
            host: None,
            datacenter: "DC0".into(),
        }
    }

    type Case = (&'static str, Vec<DiskInfo>, Result<(), Vec<LayoutProblem>>);

    #[test]
    fn layout_table() {
        use DiskBacking::*;
        let flat = "[ds] vm/vm.vmdk";
        let cases: Vec<Case> = vec![
            ("one flat disk", vec![disk(2000, flat, Flat, false)], Ok(())),
            (
                "hosted sparse disk",
                vec![disk(2000, flat, Sparse, false)],
                Ok(()),
            ),
            (
                "upper-case extension",
                vec![disk(2000, "[ds] vm/VM.VMDK", Flat, false)],
                Ok(()),
            ),
            ("no disks", vec![], Err(vec![LayoutProblem::NoDisks])),
            (
                "rdm",
                vec![
                    disk(2000, flat, Flat, false),
                    disk(2001, "[ds] vm/rdm.vmdk", Rdm, false),
                ],
                Err(vec![LayoutProblem::RawDeviceMapping {
                    disk: "Hard disk 2".into(),
                }]),
            ),
            (
                "snapshot delta",
                vec![disk(2000, "[ds] vm/vm-000001.vmdk", Flat, true)],
                Err(vec![LayoutProblem::SnapshotDelta {
                    disk: "Hard disk 1".into(),
                }]),
            ),
            (
                "not a vmdk",
                vec![disk(2000, "[ds] vm/vm.img", Flat, false)],
                Err(vec![LayoutProblem::NotVmdk {
                    disk: "Hard disk 1".into(),
                    path: "[ds] vm/vm.img".into(),
                }]),
            ),
            (
                "no datastore path",
                vec![disk(2000, "", Flat, false)],
                Err(vec![LayoutProblem::NotVmdk {
                    disk: "Hard disk 1".into(),
                    path: String::new(),
                }]),
            ),
            (
                "unsupported backing and delta together",
                vec![disk(
                    2000,
                    flat,
                    Other("VirtualDiskSeSparseBackingInfo".into()),
                    true,
                )],
                Err(vec![
                    LayoutProblem::UnsupportedBacking {
                        disk: "Hard disk 1".into(),
                        kind: "VirtualDiskSeSparseBackingInfo".into(),
                    },
                    LayoutProblem::SnapshotDelta {
                        disk: "Hard disk 1".into(),
                    },
                ]),
            ),
        ];
        for (name, disks, want) in cases {
            assert_eq!(validate_layout(&vm(disks)), want, "{name}");
        }
    }

    #[test]
    fn problems_read_as_operator_advice() {
        let p = LayoutProblem::SnapshotDelta {
            disk: "Hard disk 1".into(),
        };
        assert!(p.to_string().contains("snapshots"));
        let label_less = DiskInfo {
            label: String::new(),
            ..disk(2003, "", DiskBacking::Flat, false)
        };
        let Err(problems) = validate_layout(&vm(vec![label_less])) else {
            panic!("expected a problem")
        };
        assert!(problems[0].to_string().starts_with("disk 2003"));
    }

    #[test]
    fn independent_shared_encrypted_disks_and_passthrough_are_each_named() {
        let mut d = disk(2000, "[ds] vm/vm.vmdk", DiskBacking::Flat, false);
        d.disk_mode = "independent_nonpersistent".into();
        d.shared = true;
        d.encrypted = true;
        let mut v = vm(vec![d]);
        v.passthrough = vec!["PCI device 0".into()];
        let Err(problems) = validate_layout(&v) else {
            panic!("expected problems")
        };
        let disk = "Hard disk 1".to_owned();
        assert_eq!(
            problems,
            vec![
                LayoutProblem::Passthrough {
                    device: "PCI device 0".into()
                },
                LayoutProblem::Independent {
                    disk: disk.clone(),
                    nonpersistent: true
                },
                LayoutProblem::Shared { disk: disk.clone() },
                LayoutProblem::Encrypted { disk },
            ]
        );
    }
}
