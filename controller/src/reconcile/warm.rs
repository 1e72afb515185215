//! What a warm migration's checkpoints share: the snapshot ferry takes and how it knows it for
//! its own, and the record of its disks. Pure.
//!
//! A snapshot's name proves nothing: anyone with snapshot rights on the source VM may take one
//! named as ferry names its own (the migration's uid is readable by whoever reads the
//! migration). So, as for the objects ferry creates in the cluster ([`crate::children::proof`]):
//! the name is recorded before the task; the snapshot's description carries a creation stamp
//! (an HMAC under the controller's key of the migration's uid and the snapshot's name, which
//! holds the attempt); its moref is recorded once found. A snapshot is ferry's when it has the
//! recorded moref, or — before that record — the recorded name and a valid stamp. Any other
//! snapshot of that name is a conflict: ferry neither reads nor removes it.

use ferry_crds::{
    DiskStatus, MigrationMode, SnapshotRecord, VirtualMachineMigration, WarmStatus, names,
};

use crate::children::cutover_job::CutoverVolume;
use crate::children::proof::{ProofKey, Subject};
use ferry_vsphere::{Snapshot, SnapshotDisk};

/// The kind a snapshot's creation stamp names.
pub const SNAPSHOT_KIND: &str = "VirtualMachineSnapshot";
/// What introduces the creation stamp in a snapshot's description.
const STAMP_LABEL: &str = "ferry-stamp: ";
/// vSphere refuses a snapshot chain deeper than this (`TooManySnapshotLevels`).
pub const CHAIN_LIMIT: usize = 32;
/// Levels ferry leaves free below [`CHAIN_LIMIT`]: it never takes the snapshot that would bring
/// a VM's chain within them (the VM's owner, backups, may need their own).
pub const CHAIN_HEADROOM: usize = 4;

/// Whether the migration is warm.
pub fn is_warm(vmm: &VirtualMachineMigration) -> bool {
    vmm.spec.mode == MigrationMode::Warm
}

/// The name of the snapshot of the first copy: ferry's prefix, the migration's uid and the
/// attempt, so that no two migrations or attempts ever share one and none is anyone else's.
pub fn snapshot_name(vmm: &VirtualMachineMigration) -> String {
    let uid = vmm.metadata.uid.as_deref().unwrap_or_default();
    let attempt = vmm.status.as_ref().map_or(0, |s| s.attempts);
    format!("{}warm-{uid}-{attempt}", names::PREFIX)
}

/// What a snapshot's stamp is about: the migration and the snapshot's name. The attempt is in
/// the name, so the stamp's own attempt is 0: a retry's cleanup judges the snapshot of the
/// attempt before it with the same key.
fn subject<'a>(vmm: &'a VirtualMachineMigration, name: &'a str) -> Subject<'a> {
    Subject {
        migration_uid: vmm.metadata.uid.as_deref().unwrap_or_default(),
        attempt: 0,
        kind: SNAPSHOT_KIND,
        name,
    }
}

/// The snapshot's description: words for whoever looks at the VM in vCenter, then the creation
/// stamp of the snapshot `name` on a line of its own.
pub fn snapshot_description(vmm: &VirtualMachineMigration, key: &ProofKey, name: &str) -> String {
    format!(
        "taken by ferry for the warm migration {}/{} (uid {}); ferry removes it\n{STAMP_LABEL}{}",
        vmm.metadata.namespace.as_deref().unwrap_or_default(),
        vmm.metadata.name.as_deref().unwrap_or_default(),
        vmm.metadata.uid.as_deref().unwrap_or_default(),
        key.stamp(&subject(vmm, name)),
    )
}

/// What ferry makes of the source VM's snapshots, looking for the one it recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotSeen {
    /// None that is ferry's; the VM's snapshot chain is `depth` deep (0: no snapshot).
    Absent { depth: usize },
    /// Ferry's: its moref, and the disks as it froze them (filled by whoever reads them).
    Ours {
        moref: String,
        disks: Vec<SnapshotDisk>,
    },
    /// The recorded name is held by a snapshot ferry cannot prove it took; why, in words.
    Foreign(String),
    /// Ferry's own (its moref: the one carrying this migration's valid stamp) among others of
    /// the same name that ferry did not take; why ferry will not go on, naming them. Its own is
    /// removed at the end, cancel or deletion; the others are left alone.
    Crowded { moref: String, why: String },
}

/// Judges the VM's snapshots against the record: ferry's by the recorded moref, or (before
/// it is recorded) by the recorded name with a valid stamp; anything else of that name is
/// foreign. Pure.
pub fn judge(
    vmm: &VirtualMachineMigration,
    key: &ProofKey,
    rec: &SnapshotRecord,
    vm: &str,
    snapshots: &[Snapshot],
) -> SnapshotSeen {
    let stamped = |s: &Snapshot| {
        s.description
            .lines()
            .filter_map(|l| l.strip_prefix(STAMP_LABEL))
            .any(|stamp| key.verifies_stamp(stamp.trim(), &subject(vmm, &rec.name)))
    };
    let ours = |s: &Snapshot| SnapshotSeen::Ours {
        moref: s.moref.clone(),
        disks: vec![],
    };
    let foreign = |s: &Snapshot| {
        SnapshotSeen::Foreign(format!(
            "the source VM {vm} has a snapshot named {:?} ({}) that ferry did not take: its description carries no creation stamp of this migration; ferry neither reads nor removes it. Remove or rename it, then retry",
            rec.name, s.moref
        ))
    };
    let absent = SnapshotSeen::Absent {
        depth: snapshots.iter().map(|s| s.depth).max().unwrap_or(0),
    };
    let named: Vec<&Snapshot> = snapshots.iter().filter(|s| s.name == rec.name).collect();
    if let Some(m) = &rec.moref {
        return match snapshots.iter().find(|s| &s.moref == m) {
            Some(s) if s.name == rec.name && stamped(s) => ours(s),
            // The recorded moref now names another snapshot: not the one ferry took.
            Some(s) => foreign(s),
            None => absent,
        };
    }
    match named.as_slice() {
        [] => absent,
        [one] if stamped(one) => ours(one),
        [one] => foreign(one),
        many => {
            let (own, others): (Vec<&&Snapshot>, Vec<&&Snapshot>) =
                many.iter().partition(|s| stamped(s));
            let others: Vec<&str> = others.iter().map(|s| s.moref.as_str()).collect();
            match own.as_slice() {
                [own] => SnapshotSeen::Crowded {
                    moref: own.moref.clone(),
                    why: format!(
                        "the source VM {vm} has {} other snapshot(s) named {:?} ({}) that ferry did not take, beside its own ({}): ferry removes its own and leaves the others. Remove or rename them, then retry",
                        others.len(),
                        rec.name,
                        others.join(", "),
                        own.moref
                    ),
                },
                _ => SnapshotSeen::Foreign(format!(
                    "the source VM {vm} has {} snapshots named {:?}, none or several with this migration's stamp; ferry cannot tell which is its own and leaves them all. Remove them, then retry",
                    many.len(),
                    rec.name
                )),
            }
        }
    }
}

/// Why ferry will not take a snapshot of a VM whose chain is `depth` deep, if it will not.
pub fn chain_too_deep(depth: usize) -> Option<String> {
    (depth + 1 + CHAIN_HEADROOM > CHAIN_LIMIT).then(|| {
        format!(
            "the source VM has a chain of {depth} snapshots; ferry's would make {}, within {CHAIN_HEADROOM} of vSphere's limit of {CHAIN_LIMIT}. Consolidate or remove snapshots, then retry",
            depth + 1
        )
    })
}

/// The warm status as recorded (default when none).
pub fn status(vmm: &VirtualMachineMigration) -> WarmStatus {
    vmm.status
        .as_ref()
        .and_then(|s| s.warm.as_deref().cloned())
        .unwrap_or_default()
}

/// The snapshot ferry recorded taking (by name), if any.
pub fn recorded_snapshot(vmm: &VirtualMachineMigration) -> Option<SnapshotRecord> {
    status(vmm).snapshot
}

/// The per-disk status with each disk's view in the snapshot recorded: the frozen file the
/// converter reads, its device key and change id (the cutover copies what changed since).
/// Matched to the discovered disks by device order. Pure.
pub fn disks_in_snapshot(
    vmm: &VirtualMachineMigration,
    frozen: &[SnapshotDisk],
) -> Vec<DiskStatus> {
    let old = vmm
        .status
        .as_ref()
        .map(|s| s.disks.as_slice())
        .unwrap_or_default();
    let count = vmm
        .status
        .as_ref()
        .and_then(|s| s.source.as_ref())
        .map_or(0, |s| s.disks.len());
    (0..count)
        .map(|i| {
            let mut d = old.get(i).cloned().unwrap_or_default();
            d.index = i32::try_from(i).unwrap_or(i32::MAX);
            if let Some(f) = frozen.get(i) {
                d.snapshot_path = Some(f.datastore_path.clone());
                d.change_id = f.change_id.clone();
                d.device_key = Some(f.key);
            }
            d
        })
        .collect()
}

/// Whether every disk's view in the snapshot is recorded (what the conversion Job reads).
pub fn disks_recorded(vmm: &VirtualMachineMigration) -> bool {
    let count = vmm
        .status
        .as_ref()
        .and_then(|s| s.source.as_ref())
        .map_or(0, |s| s.disks.len());
    let disks = vmm
        .status
        .as_ref()
        .map(|s| s.disks.as_slice())
        .unwrap_or_default();
    count > 0
        && (0..count).all(|i| {
            disks.get(i).is_some_and(|d| {
                d.snapshot_path.is_some() && d.change_id.is_some() && d.device_key.is_some()
            })
        })
}

/// What the cutover Job writes (and a precopy round's, reading its snapshot instead): per disk its claim, device key, the first copy's change id and
/// the VM's own disk. Pure.
///
/// # Errors
/// The disks whose change id or device key is not recorded.
pub fn volumes(
    vmm: &ferry_crds::VirtualMachineMigration,
    block: &[bool],
) -> std::result::Result<Vec<CutoverVolume>, String> {
    let status = vmm.status.as_ref();
    let disks = status.map(|s| s.disks.as_slice()).unwrap_or_default();
    let source = status
        .and_then(|s| s.source.as_ref())
        .map(|s| s.disks.as_slice())
        .unwrap_or_default();
    let mut out = vec![];
    let mut missing = vec![];
    for i in 0..super::world::staged_keys(vmm).len() {
        let d = disks.get(i);
        match (
            d.and_then(|d| d.device_key),
            d.and_then(|d| d.change_id.clone()),
            source.get(i),
        ) {
            (Some(device_key), Some(change_id), Some(src)) => out.push(CutoverVolume {
                index: i,
                claim: names::datavolume_name(vmm, i),
                block: block.get(i).copied().unwrap_or(false),
                device_key,
                change_id,
                datastore_path: src.datastore_path.clone(),
            }),
            _ => missing.push(format!("disk {i}")),
        }
    }
    if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::{DiscoveredDisk, DiscoveredSource, SnapshotRecord, fixtures};

    #[test]
    fn the_snapshot_name_is_the_migrations_and_the_attempts() {
        let mut vmm = fixtures::migration("m");
        let first = snapshot_name(&vmm);
        assert!(first.starts_with(names::PREFIX), "{first}");
        assert!(first.contains(fixtures::MIGRATION_UID), "{first}");
        vmm.status.get_or_insert_with(Default::default).attempts = 2;
        assert_ne!(
            snapshot_name(&vmm),
            first,
            "a retry takes a snapshot of its own"
        );
    }

    #[test]
    fn each_disks_frozen_file_and_change_id_are_recorded_in_device_order() {
        let mut vmm = fixtures::migration("m");
        vmm.status.get_or_insert_with(Default::default).source = Some(Box::new(DiscoveredSource {
            disks: vec![DiscoveredDisk::default(), DiscoveredDisk::default()],
            ..DiscoveredSource::default()
        }));
        assert!(!disks_recorded(&vmm));
        let frozen = |i: i32| SnapshotDisk {
            key: 2000 + i,
            datastore_path: format!("[ds] vm/disk{i}-snapshot-7.vmdk"),
            capacity_bytes: 1 << 20,
            change_id: Some(format!("52 aa/{i}")),
        };
        let disks = disks_in_snapshot(&vmm, &[frozen(0), frozen(1)]);
        assert_eq!(disks.len(), 2);
        assert_eq!(disks[1].device_key, Some(2001));
        assert_eq!(disks[1].change_id.as_deref(), Some("52 aa/1"));
        vmm.status.as_mut().unwrap().disks = disks;
        assert!(disks_recorded(&vmm));
        let partial = disks_in_snapshot(&fixtures::migration("m"), &[frozen(0)]);
        assert!(partial.is_empty(), "no discovered disks, nothing recorded");
    }
    fn key(byte: u8) -> ProofKey {
        ProofKey::from_bytes(&[byte; crate::children::proof::KEY_BYTES]).unwrap()
    }

    fn snap(moref: &str, name: &str, description: &str, depth: usize) -> Snapshot {
        Snapshot {
            moref: moref.into(),
            name: name.into(),
            description: description.into(),
            depth,
        }
    }

    #[test]
    fn a_snapshot_is_ferrys_by_its_stamp_never_by_its_name_alone() {
        let vmm = fixtures::migration("m");
        let name = snapshot_name(&vmm);
        let rec = SnapshotRecord {
            name: name.clone(),
            ..SnapshotRecord::default()
        };
        let ours = snapshot_description(&vmm, &key(1), &name);
        assert!(ours.starts_with("taken by ferry"), "{ours}");
        let backup = snap("snapshot-1", "nightly", "", 1);

        // Nothing of that name: absent, with the chain's depth.
        assert_eq!(
            judge(&vmm, &key(1), &rec, "vm-1", std::slice::from_ref(&backup)),
            SnapshotSeen::Absent { depth: 1 }
        );
        // Ferry's name and stamp: ferry's (found again after a crash before its moref's record).
        let taken = snap("snapshot-2", &name, &ours, 2);
        assert_eq!(
            judge(
                &vmm,
                &key(1),
                &rec,
                "vm-1",
                &[backup.clone(), taken.clone()]
            ),
            SnapshotSeen::Ours {
                moref: "snapshot-2".into(),
                disks: vec![]
            }
        );
        // Ferry's name without a stamp, or with a stamp under another key: foreign, and the
        // words say what to do.
        for description in [
            "taken by ferry".to_owned(),
            snapshot_description(&vmm, &key(2), &name),
        ] {
            let planted = snap("snapshot-3", &name, &description, 1);
            let SnapshotSeen::Foreign(why) = judge(&vmm, &key(1), &rec, "vm-1", &[planted]) else {
                panic!("a snapshot without ferry's stamp is not ferry's: {description}");
            };
            assert!(why.contains("snapshot-3") && why.contains("retry"), "{why}");
        }
        let mut other = fixtures::migration("m");
        other.metadata.uid = Some("another-uid".into());
        let copied = snap(
            "snapshot-4",
            &name,
            &snapshot_description(&other, &key(1), &name),
            1,
        );
        assert!(
            matches!(
                judge(&vmm, &key(1), &rec, "vm-1", &[copied]),
                SnapshotSeen::Foreign(_)
            ),
            "a stamp for another migration proves nothing for this one"
        );
        // Two of the name, one with ferry's stamp: that one is ferry's (cleanup removes it),
        // the other is named and left alone.
        let twin = snap("snapshot-5", &name, "", 3);
        for pair in [[taken.clone(), twin.clone()], [twin.clone(), taken.clone()]] {
            let SnapshotSeen::Crowded { moref, why } = judge(&vmm, &key(1), &rec, "vm-1", &pair)
            else {
                panic!("ferry's stamped snapshot among twins is its own");
            };
            assert_eq!(moref, "snapshot-2");
            assert!(why.contains("snapshot-5") && why.contains("retry"), "{why}");
        }
        // Two of the name without ferry's stamp, or both with it: ferry cannot tell.
        let stamped_twin = snap("snapshot-6", &name, &ours, 3);
        for pair in [[twin.clone(), twin.clone()], [taken.clone(), stamped_twin]] {
            assert!(matches!(
                judge(&vmm, &key(1), &rec, "vm-1", &pair),
                SnapshotSeen::Foreign(w) if w.contains("2 snapshots")
            ));
        }
        // Once the moref is recorded it decides: the twin does not confuse it, and a recorded
        // moref now held by a snapshot of another name is not ferry's.
        let recorded = SnapshotRecord {
            name: name.clone(),
            moref: Some("snapshot-2".into()),
            ..SnapshotRecord::default()
        };
        assert!(matches!(
            judge(&vmm, &key(1), &recorded, "vm-1", &[taken, twin]),
            SnapshotSeen::Ours { moref, .. } if moref == "snapshot-2"
        ));
        let reused = snap("snapshot-2", "nightly", &ours, 1);
        assert!(matches!(
            judge(&vmm, &key(1), &recorded, "vm-1", &[reused]),
            SnapshotSeen::Foreign(_)
        ));
        assert_eq!(
            judge(&vmm, &key(1), &recorded, "vm-1", &[]),
            SnapshotSeen::Absent { depth: 0 }
        );
    }

    #[test]
    fn ferry_never_brings_a_chain_near_vspheres_limit() {
        assert_eq!(chain_too_deep(0), None);
        assert_eq!(chain_too_deep(CHAIN_LIMIT - CHAIN_HEADROOM - 1), None);
        let why = chain_too_deep(CHAIN_LIMIT - CHAIN_HEADROOM).expect("too deep");
        assert!(
            why.contains("limit of 32") && why.contains("Consolidate"),
            "{why}"
        );
        assert!(chain_too_deep(CHAIN_LIMIT).is_some());
    }
}
