//! Snapshots and changed block tracking: what a warm migration's rounds need of vSphere. A
//! snapshot of a running VM freezes its disks (the guest writes on); each disk's view in the
//! snapshot is a file to read and a change id; `QueryChangedDiskAreas` tells which areas
//! changed since an earlier change id; the snapshot is removed once its round is read.
//!
//! vSphere API reference: `VirtualMachine.CreateSnapshot_Task` (memory and quiesce off: a
//! crash-consistent disk state, as a power cut would leave it, which every later round and the
//! final cold delta overwrite), `VirtualMachineSnapshot.config` (the disk as it was, its
//! backing's `changeId`), `VirtualMachine.QueryChangedDiskAreas` (areas changed since a change
//! id, up to the snapshot, asked again from `startOffset + length` until the disk is covered),
//! `VirtualMachineSnapshot.RemoveSnapshot_Task`. Which snapshot is ferry's is the caller's
//! judgement (its name is recorded before the task, its description carries a creation stamp
//! only ferry can make: `ferry_controller::reconcile::warm`), so that a crash between the task and ferry's record
//! of it finds the same snapshot, never a second one, and never someone else's.

use vim_rs::mo;
use vim_rs::types::enums::MoTypesEnum;
use vim_rs::types::structs::{ManagedObjectReference, VirtualMachineSnapshotTree};

use super::session::Session;
use super::{Error, Result, inventory};

/// One snapshot of a VM, as its snapshot tree names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The snapshot's moref, e.g. `snapshot-42`.
    pub moref: String,
    pub name: String,
    pub description: String,
    /// 1 for a root snapshot, +1 per parent: vSphere refuses a chain deeper than 32.
    pub depth: usize,
}

/// One disk as a snapshot holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotDisk {
    /// The device key, the same as the VM's disk.
    pub key: i32,
    /// The file that holds the disk as it was when the snapshot was taken.
    pub datastore_path: String,
    pub capacity_bytes: u64,
    /// The disk's change id at the snapshot (changed block tracking on), for the next round's
    /// `QueryChangedDiskAreas`.
    pub change_id: Option<String>,
}

fn snapshot_ref(moref: &str) -> ManagedObjectReference {
    ManagedObjectReference {
        r#type: MoTypesEnum::VirtualMachineSnapshot,
        value: moref.to_owned(),
    }
}

/// The snapshot tree, flattened, parents before children.
fn flatten(trees: &[VirtualMachineSnapshotTree], depth: usize, out: &mut Vec<Snapshot>) {
    for t in trees {
        out.push(Snapshot {
            moref: t.snapshot.value.clone(),
            name: t.name.clone(),
            description: t.description.clone(),
            depth,
        });
        flatten(
            t.child_snapshot_list.as_deref().unwrap_or_default(),
            depth + 1,
            out,
        );
    }
}

impl Session {
    /// Every snapshot of the VM, parents first; empty when it has none.
    ///
    /// Errors: [`Error::NotFound`] for a VM that does not exist; faults and network errors.
    pub async fn snapshots(&self, vm: &str) -> Result<Vec<Snapshot>> {
        let handle = mo::VirtualMachine::new(self.parts().2.clone(), vm);
        let info = handle.snapshot().await.map_err(|e| self.vim(&e))?;
        let mut out = Vec::new();
        if let Some(info) = &info {
            flatten(&info.root_snapshot_list, 1, &mut out);
        }
        Ok(out)
    }

    /// Takes a snapshot named `name` described by `description` of the VM (no memory, not
    /// quiesced), waits for it, and answers its moref: the one snapshot of that name and
    /// description (the caller makes the description unique: ferry's carries its creation stamp).
    ///
    /// Not idempotent by itself: the caller looks for its snapshot first (by its proof, never by
    /// its name alone: anyone with snapshot rights on the VM can take one of any name).
    ///
    /// Errors: vSphere's faults (`TooManySnapshotLevels` past a chain of 32, `InvalidState`…)
    /// as [`Error::Fault`]; [`Error::Protocol`] when the tree then holds not exactly one such.
    pub async fn create_snapshot(&self, vm: &str, name: &str, description: &str) -> Result<String> {
        let handle = mo::VirtualMachine::new(self.parts().2.clone(), vm);
        let task = handle
            .create_snapshot_task(name, Some(description), false, false)
            .await
            .map_err(|e| self.vim(&e))?;
        self.wait_task(&task).await?;
        let mut taken: Vec<Snapshot> = self
            .snapshots(vm)
            .await?
            .into_iter()
            .filter(|s| s.name == name && s.description == description)
            .collect();
        match (taken.pop(), taken.len()) {
            (Some(s), 0) => Ok(s.moref),
            (found, more) => Err(Error::Protocol(format!(
                "VM {vm}: {} snapshots named {name:?} with ferry's description after its task succeeded, not one",
                usize::from(found.is_some()) + more
            ))),
        }
    }

    /// The disks as the snapshot holds them: the file to read, the change id.
    ///
    /// Errors: [`Error::NotFound`] for a snapshot that does not exist.
    pub async fn snapshot_disks(&self, snapshot: &str) -> Result<Vec<SnapshotDisk>> {
        let handle = mo::VirtualMachineSnapshot::new(self.parts().2.clone(), snapshot);
        let config = handle.config().await.map_err(|e| self.vim(&e))?;
        let devices = config.hardware.device.unwrap_or_default();
        let ids: Vec<(i32, Option<String>)> = devices
            .iter()
            .map(|d| (d.key, inventory::change_id(d.as_ref())))
            .collect();
        Ok(inventory::disks(&devices)
            .into_iter()
            .map(|d| SnapshotDisk {
                change_id: ids
                    .iter()
                    .find(|(k, _)| *k == d.key)
                    .and_then(|(_, c)| c.clone()),
                key: d.key,
                datastore_path: d.datastore_path,
                capacity_bytes: d.capacity_bytes,
            })
            .collect())
    }

    /// Removes one snapshot (not its children) and waits; the disk state it froze is merged
    /// into the VM's disks by vSphere, nothing of the VM's data is lost.
    ///
    /// Guarantees: idempotent — a snapshot already gone is `Ok`.
    pub async fn remove_snapshot(&self, snapshot: &str) -> Result<()> {
        let handle = mo::VirtualMachineSnapshot::new(self.parts().2.clone(), snapshot);
        let task = match handle.remove_snapshot_task(false, Some(true)).await {
            Ok(task) => task,
            Err(e) => {
                return match self.vim(&e) {
                    Error::NotFound(_) => Ok(()),
                    other => Err(other),
                };
            }
        };
        match self.wait_task(&task).await {
            Err(Error::NotFound(_)) => Ok(()),
            other => other,
        }
    }

    /// The areas of disk `device_key` changed since `change_id` (`*`: every allocated area), up
    /// to `snapshot` (or the VM's current disk when none is given: vSphere answers that only
    /// for a powered-off VM), asked piece by piece until `capacity` is covered.
    ///
    /// Errors: every fault (an unknown or reset change id is a `FileFault`), network errors.
    pub async fn changed_areas(
        &self,
        vm: &str,
        snapshot: Option<&str>,
        device_key: i32,
        capacity: u64,
        change_id: &str,
    ) -> Result<Vec<(u64, u64)>> {
        let handle = mo::VirtualMachine::new(self.parts().2.clone(), vm);
        let snap = snapshot.map(snapshot_ref);
        let mut areas = Vec::new();
        let mut offset = 0u64;
        while offset < capacity {
            let start = i64::try_from(offset).unwrap_or(i64::MAX);
            let info = handle
                .query_changed_disk_areas(snap.as_ref(), device_key, start, change_id)
                .await
                .map_err(|e| self.vim(&e))?;
            for a in info.changed_area.iter().flatten() {
                if a.length > 0 && a.start >= 0 {
                    areas.push((a.start as u64, a.length as u64));
                }
            }
            let next = u64::try_from(info.start_offset.saturating_add(info.length)).unwrap_or(0);
            if next <= offset {
                return Err(Error::Protocol(format!(
                    "QueryChangedDiskAreas made no progress at offset {offset}"
                )));
            }
            offset = next;
        }
        Ok(areas)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(name: &str, children: Vec<VirtualMachineSnapshotTree>) -> VirtualMachineSnapshotTree {
        let mut t: VirtualMachineSnapshotTree =
            miniserde::json::from_str(&format!(
                r#"{{"_typeName":"VirtualMachineSnapshotTree","snapshot":{{"type":"VirtualMachineSnapshot","value":"s-{name}"}},"vm":{{"type":"VirtualMachine","value":"vm-1"}},"name":"{name}","description":"d","id":1,"createTime":"2026-12-04T00:00:00Z","state":"poweredOn","quiesced":false}}"#
            ))
            .expect("a snapshot tree");
        t.child_snapshot_list = (!children.is_empty()).then_some(children);
        t
    }

    #[test]
    fn the_tree_is_flattened_parents_first_with_depths() {
        let roots = vec![
            tree("a", vec![tree("b", vec![tree("c", vec![])])]),
            tree("d", vec![]),
        ];
        let mut out = Vec::new();
        flatten(&roots, 1, &mut out);
        let got: Vec<(&str, usize)> = out.iter().map(|s| (s.name.as_str(), s.depth)).collect();
        assert_eq!(got, vec![("a", 1), ("b", 2), ("c", 3), ("d", 1)]);
        assert_eq!(out[2].moref, "s-c");
    }
}
