//! The ledger of the objects ferry created for a migration (`status.children`): kind, name and
//! the uid the API server gave each one when ferry's own create made it. It is the proof that an
//! object under a child's name is ferry's: labels and owner references are written by whoever
//! creates an object, so anyone who may create objects in the namespace can forge them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Most entries `status.children` holds: 64 DataVolumes and the few other children, with room.
pub const MAX_CHILDREN: usize = 128;

/// One object ferry created for the migration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChildRecord {
    /// Kind of the object, e.g. `DataVolume`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// Its name, in the migration's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// The uid the API server answered ferry's create with.
    #[schemars(length(min = 1, max = 64))]
    pub uid: String,
    /// The attempt (`status.attempts`) that created it.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub attempt: i32,
    /// ferry handed the object over to its user (Validating removed its owner reference): the
    /// record, not the object, says so, since anyone who may edit the object can remove an
    /// owner reference or write a label.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub released: bool,
}

/// A change to the ledger found or made during one reconcile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LedgerEntry {
    /// ferry's create made this object (or proved it made it before a crash): record it.
    Made(ChildRecord),
    /// ferry deleted the object `kind`/`name`: forget it.
    Gone {
        /// Kind.
        kind: String,
        /// Name.
        name: String,
    },
    /// ferry released the object `kind`/`name` to its user: mark its record so.
    Released {
        /// Kind.
        kind: String,
        /// Name.
        name: String,
    },
}

/// The record of `kind`/`name`, if any.
pub fn find<'a>(ledger: &'a [ChildRecord], kind: &str, name: &str) -> Option<&'a ChildRecord> {
    ledger.iter().find(|c| c.kind == kind && c.name == name)
}

/// `ledger` with `changes` applied in order: a made object replaces any record of its kind and
/// name, a gone one removes it, a released one is marked (only one ferry recorded making can
/// be). The order of the other records is kept. Pure.
pub fn apply(mut ledger: Vec<ChildRecord>, changes: &[LedgerEntry]) -> Vec<ChildRecord> {
    for change in changes {
        match change {
            LedgerEntry::Made(r) => {
                match ledger
                    .iter_mut()
                    .find(|c| c.kind == r.kind && c.name == r.name)
                {
                    Some(c) => *c = r.clone(),
                    None => ledger.push(r.clone()),
                }
            }
            LedgerEntry::Gone { kind, name } => {
                ledger.retain(|c| !(c.kind == *kind && c.name == *name));
            }
            LedgerEntry::Released { kind, name } => {
                if let Some(c) = ledger
                    .iter_mut()
                    .find(|c| c.kind == *kind && c.name == *name)
                {
                    c.released = true;
                }
            }
        }
    }
    ledger
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(kind: &str, name: &str, uid: &str) -> ChildRecord {
        ChildRecord {
            kind: kind.into(),
            name: name.into(),
            uid: uid.into(),
            attempt: 1,
            released: false,
        }
    }

    #[test]
    fn a_released_object_is_marked_only_when_recorded_and_a_new_create_unmarks_it() {
        let ledger = vec![rec("VirtualMachine", "m", "a")];
        let next = apply(
            ledger,
            &[
                LedgerEntry::Released {
                    kind: "VirtualMachine".into(),
                    name: "m".into(),
                },
                LedgerEntry::Released {
                    kind: "DataVolume".into(),
                    name: "never-made".into(),
                },
            ],
        );
        assert_eq!(next.len(), 1, "nothing unrecorded is marked: {next:?}");
        assert!(next[0].released);
        let yaml = serde_json::to_value(&next[0]).unwrap();
        assert_eq!(yaml["released"], true);
        assert!(
            serde_json::to_value(rec("Job", "j", "b"))
                .unwrap()
                .get("released")
                .is_none(),
            "an unreleased record is written as before"
        );
        let again = apply(next, &[LedgerEntry::Made(rec("VirtualMachine", "m", "c"))]);
        assert!(!again[0].released, "a new create is not released");
    }

    #[test]
    fn a_made_object_replaces_its_record_and_a_gone_one_is_forgotten() {
        let ledger = vec![
            rec("Job", "m-convert", "a"),
            rec("DataVolume", "m-disk-0", "b"),
        ];
        let next = apply(
            ledger,
            &[
                LedgerEntry::Made(rec("Job", "m-convert", "c")),
                LedgerEntry::Gone {
                    kind: "DataVolume".into(),
                    name: "m-disk-0".into(),
                },
                LedgerEntry::Made(rec("VirtualMachine", "m", "d")),
            ],
        );
        assert_eq!(
            next,
            vec![
                rec("Job", "m-convert", "c"),
                rec("VirtualMachine", "m", "d")
            ]
        );
        assert_eq!(
            find(&next, "Job", "m-convert").map(|c| c.uid.as_str()),
            Some("c")
        );
        assert_eq!(
            find(&next, "Job", "m-disk-0"),
            None,
            "kind and name both match"
        );
    }
}
