//! The source's final state: what ferry records of the source VM at the power-off a copy is
//! made after ([`ferry_crds::SourceState`]), and what changed since, in words. A migration
//! whose source changed fails with `SourceChanged` before its VM is made: the copy is not the
//! source's final state. Pure.

use ferry_crds::{
    ConditionType, DiscoveredDisk, Phase, Reason, SourceDiskState, SourceState,
    VirtualMachineMigration,
};

use super::outcome::Outcome;

/// `state` as recorded by `recorded_in` in the migration's current attempt.
pub fn recorded(
    vmm: &VirtualMachineMigration,
    state: &SourceState,
    recorded_in: Phase,
) -> SourceState {
    SourceState {
        recorded_in,
        attempt: vmm.status.as_ref().map_or(0, |s| s.attempts),
        ..state.clone()
    }
}

/// The recorded state, when `recorded_in` recorded it in the current attempt.
pub fn recorded_by(vmm: &VirtualMachineMigration, recorded_in: Phase) -> Option<&SourceState> {
    let s = vmm.status.as_ref()?;
    s.source_state
        .as_deref()
        .filter(|r| r.recorded_in == recorded_in && r.attempt == s.attempts)
}

/// The source VM's name as recorded (its moref when it has none).
pub fn vm_name(vmm: &VirtualMachineMigration) -> &str {
    vmm.status
        .as_ref()
        .and_then(|s| s.source.as_ref())
        .and_then(|s| s.name.as_deref().or(s.moref.as_deref()))
        .unwrap_or("?")
}

fn size(bytes: i64) -> String {
    const MIB: i64 = 1 << 20;
    if bytes % MIB == 0 {
        format!("{} MiB", bytes / MIB)
    } else {
        format!("{bytes} bytes")
    }
}

/// What changed from `then` to `now`, each in words, with the power-ons vCenter recorded since
/// `then` was read (`powered_on`, their times); empty when nothing did.
pub fn changes(then: &SourceState, now: &SourceState, powered_on: &[String]) -> Vec<String> {
    let mut out: Vec<String> = powered_on
        .iter()
        .map(|t| format!("it was powered on at {t}"))
        .collect();
    out.extend(disk_changes(&then.disks, &now.disks, |d| {
        (d.key, d.capacity_bytes, d.file.as_str())
    }));
    for (a, b) in then
        .disks
        .iter()
        .filter_map(|a| now.disks.iter().find(|b| b.key == a.key).map(|b| (a, b)))
    {
        if a.file != b.file && a.capacity_bytes == b.capacity_bytes {
            out.push(format!(
                "disk {} is now backed by {}, was {}",
                a.key, b.file, a.file
            ));
        }
        if a.change_id.is_some() && a.change_id != b.change_id {
            out.push(format!(
                "disk {} was written (change id {} → {})",
                a.key,
                a.change_id.as_deref().unwrap_or_default(),
                b.change_id.as_deref().unwrap_or("none")
            ));
        }
    }
    if then.num_virtual_disks != now.num_virtual_disks {
        out.push(format!(
            "vSphere counts {} disks, {} when recorded",
            now.num_virtual_disks.map_or("no".into(), |n| n.to_string()),
            then.num_virtual_disks
                .map_or("none".into(), |n| n.to_string()),
        ));
    }
    if then.change_version.is_some() && then.change_version != now.change_version {
        out.push(format!(
            "its configuration changed (config.changeVersion {} → {})",
            then.change_version.as_deref().unwrap_or_default(),
            now.change_version.as_deref().unwrap_or("none")
        ));
    }
    out
}

/// The disks found now against those the migration copies (`status.source.disks`, as
/// Preparing found them): added, removed or resized, by device key and capacity only — a warm
/// migration's snapshots move their files and change ids.
pub fn disk_set_changes(copied: &[DiscoveredDisk], now: &[SourceDiskState]) -> Vec<String> {
    let copied: Vec<SourceDiskState> = copied
        .iter()
        .map(|d| SourceDiskState {
            key: d.key,
            file: d.datastore_path.clone(),
            capacity_bytes: d.capacity_bytes,
            change_id: None,
        })
        .collect();
    disk_changes(&copied, now, |d| (d.key, d.capacity_bytes, d.file.as_str()))
}

/// The disks a snapshot of a warm migration froze against those it copies (see
/// [`disk_set_changes`]).
pub fn snapshot_changes(
    vmm: &VirtualMachineMigration,
    frozen: &[ferry_vsphere::SnapshotDisk],
) -> Vec<String> {
    let copied = vmm
        .status
        .as_ref()
        .and_then(|s| s.source.as_ref())
        .map(|s| s.disks.as_slice())
        .unwrap_or_default();
    let now: Vec<SourceDiskState> = frozen
        .iter()
        .map(|d| SourceDiskState {
            key: d.key,
            file: d.datastore_path.clone(),
            capacity_bytes: i64::try_from(d.capacity_bytes).unwrap_or(i64::MAX),
            change_id: d.change_id.clone(),
        })
        .collect();
    disk_set_changes(copied, &now)
}

fn disk_changes<'a, T>(
    then: &'a [T],
    now: &'a [T],
    of: impl Fn(&'a T) -> (i32, i64, &'a str),
) -> Vec<String> {
    let mut out = vec![];
    for (key, cap, file) in now.iter().map(&of) {
        match then.iter().map(&of).find(|(k, _, _)| *k == key) {
            None => out.push(format!("a disk was added ({key}: {file}, {})", size(cap))),
            Some((_, was, _)) if was != cap => out.push(format!(
                "disk {key} was resized from {} to {}",
                size(was),
                size(cap)
            )),
            Some(_) => {}
        }
    }
    for (key, _, file) in then.iter().map(&of) {
        if !now.iter().map(&of).any(|(k, _, _)| k == key) {
            out.push(format!("disk {key} ({file}) was removed"));
        }
    }
    out
}

/// The failure, in checkpoint `phase`, of a migration whose source changed (`what`, from
/// [`changes`] or [`disk_set_changes`]) after ferry recorded what it copies: retriable, and a
/// retry starts over from Preparing, every child and staged image removed
/// (`intents::retry_failed`). `context` says when it was found.
pub fn changed<A>(
    vm: &str,
    context: &str,
    what: &[String],
    phase: Phase,
    marks: ConditionType,
) -> Outcome<A> {
    let message = format!(
        "the source VM {vm} changed {context}: {}. The copy is not its final state, and nothing was made from it; raise spec.retry to start over from Preparing",
        what.join("; ")
    );
    Outcome::failure(Reason::SourceChanged, message, true, phase, marks)
}

#[cfg(test)]
mod tests {
    use super::super::outcome::Step;
    use super::*;

    fn disk(key: i32, mib: i64, id: Option<&str>) -> SourceDiskState {
        SourceDiskState {
            key,
            file: format!("[ds] vm/disk{key}.vmdk"),
            capacity_bytes: mib << 20,
            change_id: id.map(str::to_owned),
        }
    }

    fn state(disks: Vec<SourceDiskState>, version: &str) -> SourceState {
        SourceState {
            read_at: "2026-12-06T10:00:00Z".into(),
            recorded_in: Phase::Preparing,
            attempt: 1,
            change_version: Some(version.into()),
            num_virtual_disks: Some(i32::try_from(disks.len()).unwrap()),
            disks,
        }
    }

    #[test]
    fn nothing_changed_says_nothing() {
        let s = state(vec![disk(2000, 16, Some("52 aa/1"))], "v1");
        assert_eq!(changes(&s, &s.clone(), &[]), Vec::<String>::new());
    }

    #[test]
    fn each_change_is_named() {
        let then = state(
            vec![disk(2000, 16, Some("52 aa/1")), disk(2001, 8, None)],
            "v1",
        );
        let mut now = state(
            vec![disk(2000, 32, Some("52 aa/7")), disk(2002, 16, None)],
            "v2",
        );
        now.num_virtual_disks = Some(3);
        let said = changes(&then, &now, &["2026-12-06T10:01:00Z".into()]);
        let all = said.join("\n");
        for words in [
            "powered on at 2026-12-06T10:01:00Z",
            "disk 2000 was resized from 16 MiB to 32 MiB",
            "a disk was added (2002: [ds] vm/disk2002.vmdk, 16 MiB)",
            "disk 2001 ([ds] vm/disk2001.vmdk) was removed",
            "disk 2000 was written (change id 52 aa/1 → 52 aa/7)",
            "vSphere counts 3 disks, 2 when recorded",
            "config.changeVersion v1 → v2",
        ] {
            assert!(all.contains(words), "{words:?} in:\n{all}");
        }
    }

    #[test]
    fn a_power_cycle_alone_is_a_change() {
        let s = state(vec![disk(2000, 16, None)], "v1");
        let said = changes(&s, &s.clone(), &["2026-12-06T10:02:00Z".into()]);
        assert_eq!(said, ["it was powered on at 2026-12-06T10:02:00Z"]);
    }

    #[test]
    fn the_disk_set_compares_keys_and_capacities_not_files() {
        let copied = vec![DiscoveredDisk {
            key: 2000,
            datastore_path: "[ds] vm/disk.vmdk".into(),
            capacity_bytes: 16 << 20,
            ..Default::default()
        }];
        // A warm snapshot moves the file: not a change of the set.
        let moved = SourceDiskState {
            file: "[ds] vm/disk-000001.vmdk".into(),
            ..disk(2000, 16, Some("x"))
        };
        assert!(disk_set_changes(&copied, std::slice::from_ref(&moved)).is_empty());
        let grown = disk_set_changes(&copied, &[moved, disk(2001, 16, None)]);
        assert_eq!(
            grown,
            ["a disk was added (2001: [ds] vm/disk2001.vmdk, 16 MiB)"]
        );
    }

    #[test]
    fn a_change_fails_the_migration_to_start_over_from_preparing() {
        let out: Outcome<()> = changed(
            "vm-a",
            "after ferry powered it off",
            &["a disk was added".into()],
            Phase::CreatingVM,
            ConditionType::VMCreated,
        );
        let Step::Fail {
            reason,
            retriable,
            resume,
            message,
        } = out.step
        else {
            panic!("a failure");
        };
        // Recorded as failed in CreatingVM; the retry starts over (intents::retry_failed).
        assert_eq!(
            (reason, retriable, resume),
            (Reason::SourceChanged, true, Phase::CreatingVM)
        );
        assert!(
            message.contains("a disk was added") && message.contains("spec.retry"),
            "{message}"
        );
    }
}
