//! What a warm migration's checkpoints share: the name of the snapshot ferry takes (found
//! again by it after a crash; cleanup removes it by it), and the record of its disks. Pure.

use ferry_crds::{
    DiskStatus, MigrationMode, SnapshotRecord, VirtualMachineMigration, WarmStatus, names,
};

use crate::vsphere::SnapshotDisk;

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

/// The snapshot's description, for whoever looks at the VM in vCenter.
pub fn snapshot_description(vmm: &VirtualMachineMigration) -> String {
    format!(
        "taken by ferry for the warm migration {}/{} (uid {}); ferry removes it",
        vmm.metadata.namespace.as_deref().unwrap_or_default(),
        vmm.metadata.name.as_deref().unwrap_or_default(),
        vmm.metadata.uid.as_deref().unwrap_or_default(),
    )
}

/// The warm status as recorded (default when none).
pub fn status(vmm: &VirtualMachineMigration) -> WarmStatus {
    vmm.status
        .as_ref()
        .and_then(|s| s.warm.clone())
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

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::{DiscoveredDisk, DiscoveredSource, fixtures};

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
        vmm.status.get_or_insert_with(Default::default).source = Some(DiscoveredSource {
            disks: vec![DiscoveredDisk::default(), DiscoveredDisk::default()],
            ..DiscoveredSource::default()
        });
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
}
