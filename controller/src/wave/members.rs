//! Which migration is each VM's of a wave, pure: this wave's child migrating that very VM, a new
//! one under its name, or none, because that name is another VM's migration's (a collision).

use std::collections::HashMap;

use ferry_crds::{
    VirtualMachineMigration, VmSelector, WaveCollision, WaveVm, child_migration_name,
};
use kube::ResourceExt;

/// What becomes of one VM of a wave.
#[derive(Clone, Debug, PartialEq)]
pub enum Member<'a> {
    /// Its migration exists: this wave's child whose (immutable) `spec.source.vm` is this VM.
    Migrating(&'a VirtualMachineMigration),
    /// Its migration is to be created, under this name.
    Create(String),
    /// It gets none: the name is another VM's migration's, or the VM is listed twice.
    Collides(WaveCollision),
}

/// Where the wave lists its VMs, for messages: `spec.vms`, or `status.selectedVms` when a
/// selector chose them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listed {
    /// `spec.vms`.
    Spec,
    /// `status.selectedVms`.
    Selected,
}

impl Listed {
    fn at(self, i: usize) -> String {
        match self {
            Listed::Spec => format!("spec.vms[{i}]"),
            Listed::Selected => format!("status.selectedVms[{i}]"),
        }
    }
}

/// A VM reference as a key: the same VM listed twice is the same key.
fn key(vm: &VmSelector) -> (u8, &str) {
    match (&vm.name, &vm.id, &vm.uuid) {
        (Some(n), _, _) => (0, n),
        (None, Some(i), _) => (1, i),
        (None, None, Some(u)) => (2, u),
        (None, None, None) => (3, ""),
    }
}

fn shown(vm: &VmSelector) -> String {
    vm.value().unwrap_or("(no VM)").to_owned()
}

/// Decides what becomes of every VM of wave `wave` (`members` in order), given its own children
/// (owner reference to the wave's uid) and `others`: migrations of the namespace that are not
/// its children (only those holding a name matter). Pure.
///
/// # Guarantees
/// * One result per member, in order; no migration is two members', and no name is created twice.
/// * A member's migration is this wave's child migrating that VM, whatever its name (a
///   migration's source cannot change), so a wave whose names were made otherwise keeps them.
/// * A name is created only when no migration holds it: a migration of another VM — another
///   wave's, no wave's, or this wave's for a VM it no longer lists — or an earlier member wanting
///   it makes the member a collision that names both VMs; so does a VM listed a second time. The
///   earlier member (or the one whose migration exists) keeps the name.
pub fn assign<'a>(
    wave: &str,
    members: &[WaveVm],
    listed: Listed,
    children: &'a [VirtualMachineMigration],
    others: &[VirtualMachineMigration],
) -> Vec<Member<'a>> {
    let by_vm = children_by_vm(children);
    let own_by_name = by_name(children);
    let others_by_name = by_name(others);
    let (mut out, mut holder) = first_entries(wave, members, listed, &by_vm);
    for (i, m) in members.iter().enumerate() {
        if out[i].is_some() {
            continue;
        }
        let name = child_migration_name(wave, m);
        let taken = if let Some(&j) = holder.get(&name) {
            Some(NameHolder::Member(j))
        } else if let Some(c) = own_by_name.get(&name) {
            Some(NameHolder::Unlisted(c))
        } else {
            others_by_name.get(&name).map(|c| NameHolder::Other(c))
        };
        out[i] = Some(match taken {
            Some(taken) => collision(wave, members, listed, i, name, &taken),
            None => {
                holder.insert(name.clone(), i);
                Member::Create(name)
            }
        });
    }
    out.into_iter().flatten().collect()
}

/// This wave's children by the VM they migrate. Two children of one VM cannot come from this
/// controller; the first by name is kept.
fn children_by_vm(
    children: &[VirtualMachineMigration],
) -> HashMap<(u8, &str), &VirtualMachineMigration> {
    let mut by_vm: HashMap<(u8, &str), &VirtualMachineMigration> = HashMap::new();
    for c in children {
        by_vm
            .entry(key(&c.spec.source.vm))
            .and_modify(|k| {
                if c.name_any() < k.name_any() {
                    *k = c;
                }
            })
            .or_insert(c);
    }
    by_vm
}

fn by_name(migrations: &[VirtualMachineMigration]) -> HashMap<String, &VirtualMachineMigration> {
    migrations.iter().map(|c| (c.name_any(), c)).collect()
}

/// What is decided before any name is: a VM listed again collides with its first entry, and a
/// member whose migration exists has it (and holds its name first). The others are left open,
/// with the index of each member holding a name.
fn first_entries<'a>(
    wave: &str,
    members: &[WaveVm],
    listed: Listed,
    by_vm: &HashMap<(u8, &str), &'a VirtualMachineMigration>,
) -> (Vec<Option<Member<'a>>>, HashMap<String, usize>) {
    let mut out: Vec<Option<Member<'a>>> = vec![None; members.len()];
    let mut first: HashMap<(u8, &str), usize> = HashMap::new();
    let mut holder: HashMap<String, usize> = HashMap::new();
    for (i, m) in members.iter().enumerate() {
        let k = key(&m.vm);
        if let Some(&j) = first.get(&k) {
            out[i] = Some(Member::Collides(WaveCollision {
                index: index(i),
                vm: shown(&m.vm),
                migration: child_migration_name(wave, m),
                other_vm: shown(&members[j].vm),
                other_wave: Some(wave.to_owned()),
                message: format!(
                    "{} ({}) gets no second migration: the VM is listed at {} already; remove one entry",
                    shown(&m.vm),
                    listed.at(i),
                    listed.at(j)
                ),
            }));
            continue;
        }
        first.insert(k, i);
        if let Some(&c) = by_vm.get(&k) {
            holder.insert(c.name_any(), i);
            out[i] = Some(Member::Migrating(c));
        }
    }
    (out, holder)
}

/// Who holds the name a member's new migration would take.
enum NameHolder<'m> {
    /// An earlier member of the wave (its index).
    Member(usize),
    /// This wave's migration of a VM it no longer lists.
    Unlisted(&'m VirtualMachineMigration),
    /// A migration that is not this wave's.
    Other(&'m VirtualMachineMigration),
}

/// Member `i`'s collision: `name`, the name of its migration, is `taken`.
fn collision<'a>(
    wave: &str,
    members: &[WaveVm],
    listed: Listed,
    i: usize,
    name: String,
    taken: &NameHolder<'_>,
) -> Member<'a> {
    let (other_vm, other_wave, whose) = match *taken {
        NameHolder::Member(j) => {
            let other = shown(&members[j].vm);
            let whose = format!("that of {other}'s ({})", listed.at(j));
            (other, Some(wave.to_owned()), whose)
        }
        NameHolder::Unlisted(c) => {
            let other = shown(&c.spec.source.vm);
            let whose =
                format!("taken by this wave's migration of {other}, which it no longer lists");
            (other, Some(wave.to_owned()), whose)
        }
        NameHolder::Other(c) => {
            let other = shown(&c.spec.source.vm);
            let other_wave = c.wave().map(str::to_owned);
            let whose = match &other_wave {
                Some(w) => format!("taken by the migration of {other} in wave {w}"),
                None => format!("taken by the migration of {other}, which is no wave's"),
            };
            (other, other_wave, whose)
        }
    };
    let m = &members[i];
    Member::Collides(WaveCollision {
        index: index(i),
        vm: shown(&m.vm),
        message: format!(
            "{} ({}) gets no migration: {name}, the name of its migration, is {whose}; {}",
            shown(&m.vm),
            listed.at(i),
            match listed {
                Listed::Spec => "give one of them a targetName",
                Listed::Selected => "migrate it in a wave of spec.vms with a targetName",
            }
        ),
        migration: name,
        other_vm,
        other_wave,
    })
}

fn index(i: usize) -> i32 {
    i32::try_from(i).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_crds::{child_migration, fixtures::wave};
    use proptest::prelude::*;

    fn entry(name: &str) -> WaveVm {
        WaveVm::by_name(name)
    }

    fn wave_of(name: &str, vms: &[WaveVm]) -> ferry_crds::MigrationWave {
        let mut w = wave(name, 0);
        w.spec.vms = vms.to_vec();
        w
    }

    fn collision<'m>(m: &'m Member<'_>) -> Option<&'m WaveCollision> {
        match m {
            Member::Collides(c) => Some(c),
            Member::Migrating(_) | Member::Create(_) => None,
        }
    }

    #[test]
    fn two_vms_made_one_label_the_first_takes_the_name_the_second_is_told_why() {
        let vms = [entry("Web-1"), entry("web_1"), entry("db")];
        let got = assign("w", &vms, Listed::Spec, &[], &[]);
        assert_eq!(got[0], Member::Create("w-web-1".into()));
        assert_eq!(got[2], Member::Create("w-db".into()));
        let c = collision(&got[1]).expect("the second collides");
        assert_eq!(
            (
                c.index,
                c.vm.as_str(),
                c.migration.as_str(),
                c.other_vm.as_str()
            ),
            (1, "web_1", "w-web-1", "Web-1")
        );
        assert_eq!(c.other_wave.as_deref(), Some("w"));
        assert!(
            c.message.contains("web_1 (spec.vms[1])")
                && c.message.contains("Web-1's (spec.vms[0])")
                && c.message.contains("targetName"),
            "{}",
            c.message
        );
    }

    #[test]
    fn a_target_name_parts_the_two() {
        let mut second = entry("web_1");
        second.target_name = Some("web-1-b".into());
        let got = assign("w", &[entry("Web-1"), second], Listed::Spec, &[], &[]);
        assert_eq!(
            got,
            [
                Member::Create("w-web-1".into()),
                Member::Create("w-web-1-b".into())
            ]
        );
    }

    #[test]
    fn the_vm_whose_migration_exists_keeps_the_name_even_when_listed_later() {
        let vms = [entry("Web-1"), entry("web_1")];
        let w = wave_of("w", &vms);
        let existing = child_migration(&w, &vms[1]).unwrap();
        let children = [existing];
        let got = assign("w", &vms, Listed::Spec, &children, &[]);
        assert_eq!(got[1], Member::Migrating(&children[0]));
        let c = collision(&got[0]).unwrap();
        assert_eq!((c.vm.as_str(), c.other_vm.as_str()), ("Web-1", "web_1"));
    }

    #[test]
    fn another_waves_migration_of_the_name_is_a_collision_never_progress() {
        // Wave `a` lists VM `b-c`, wave `a-b` lists VM `c`: both make `a-b-c`.
        let a = wave_of("a", &[entry("b-c")]);
        let theirs = child_migration(&a, &a.spec.vms[0]).unwrap();
        assert_eq!(theirs.name_any(), "a-b-c");
        let got = assign("a-b", &[entry("c")], Listed::Spec, &[], &[theirs]);
        let c = collision(&got[0]).unwrap();
        assert_eq!(
            (c.vm.as_str(), c.migration.as_str(), c.other_vm.as_str()),
            ("c", "a-b-c", "b-c")
        );
        assert_eq!(c.other_wave.as_deref(), Some("a"));
        assert!(c.message.contains("in wave a"), "{}", c.message);
    }

    #[test]
    fn a_migration_of_no_wave_holding_the_name_is_a_collision() {
        let mut mine = ferry_crds::fixtures::migration("w-db");
        mine.spec.source.vm = VmSelector::by_name("other");
        let got = assign("w", &[entry("db")], Listed::Spec, &[], &[mine]);
        let c = collision(&got[0]).unwrap();
        assert_eq!(
            (c.other_vm.as_str(), c.other_wave.as_deref()),
            ("other", None)
        );
        assert!(c.message.contains("no wave's"), "{}", c.message);
    }

    #[test]
    fn this_waves_child_of_another_vm_under_the_name_is_not_taken_for_the_member() {
        // Owner reference and label can be written by anyone: a child migrating another VM is
        // never the member's migration, whatever its name.
        let w = wave_of("w", &[entry("db")]);
        let mut forged = child_migration(&w, &w.spec.vms[0]).unwrap();
        forged.spec.source.vm = VmSelector::by_name("elsewhere");
        let children = [forged];
        let got = assign("w", &w.spec.vms, Listed::Spec, &children, &[]);
        let c = collision(&got[0]).unwrap();
        assert_eq!(c.other_vm, "elsewhere");
        assert!(c.message.contains("no longer lists"), "{}", c.message);
    }

    #[test]
    fn a_vm_listed_twice_gets_one_migration_and_the_second_entry_is_reported() {
        let mut again = entry("db");
        again.target_name = Some("db-2".into());
        let got = assign("w", &[entry("db"), again], Listed::Spec, &[], &[]);
        assert_eq!(got[0], Member::Create("w-db".into()));
        let c = collision(&got[1]).unwrap();
        assert!(c.message.contains("listed at spec.vms[0]"), "{}", c.message);
    }

    #[test]
    fn a_member_keeps_its_migration_under_an_older_name() {
        // A targetName added after the migration was made changes the name the wave would
        // choose; the migration of that VM is still the member's.
        let vms = [entry("DC0_H0_VM0")];
        let w = wave_of("w", &vms);
        let children = [child_migration(&w, &vms[0]).unwrap()];
        let mut renamed = vms[0].clone();
        renamed.target_name = Some("db".into());
        let got = assign("w", &[renamed], Listed::Spec, &children, &[]);
        assert_eq!(got, [Member::Migrating(&children[0])]);
    }

    #[test]
    fn selected_members_are_told_where_they_are_listed() {
        let got = assign(
            "w",
            &[entry("Web-1"), entry("web_1")],
            Listed::Selected,
            &[],
            &[],
        );
        let c = collision(&got[1]).unwrap();
        assert!(c.message.contains("status.selectedVms[1]"), "{}", c.message);
    }

    proptest! {
        #[test]
        fn no_name_is_two_members_and_no_member_is_lost(
            picks in proptest::collection::vec(0usize..6, 1..10),
            existing in proptest::collection::vec(any::<bool>(), 10),
            foreign in proptest::collection::vec((any::<bool>(), 0usize..6), 0..3),
        ) {
            let names = ["Web-1", "web_1", "WEB-1", "db", "b-c", "x"];
            let vms: Vec<WaveVm> = picks.iter().map(|p| entry(names[*p])).collect();
            let w = wave_of("a", &vms);
            // One object per name, as in a namespace: this wave's children first, then others'
            // (wave `a-b` with VM `c` makes `a-b-c`, as wave `a` with VM `b-c`; a migration of no
            // wave may take any name).
            let mut seen = std::collections::HashSet::new();
            let children: Vec<VirtualMachineMigration> = vms
                .iter()
                .zip(&existing)
                .filter(|(_, e)| **e)
                .map(|(v, _)| child_migration(&w, v).unwrap())
                .filter(|c| seen.insert(c.name_any()))
                .collect();
            let theirs: Vec<VirtualMachineMigration> = foreign
                .iter()
                .map(|(kind, f)| {
                    if *kind {
                        let other = wave_of("a-b", &[entry(["c", "web-1", "x"][*f % 3])]);
                        child_migration(&other, &other.spec.vms[0]).unwrap()
                    } else {
                        let mut m = ferry_crds::fixtures::migration(&child_migration_name(
                            "a",
                            &entry(names[*f]),
                        ));
                        m.spec.source.vm = VmSelector::by_name("elsewhere");
                        m
                    }
                })
                .filter(|c| seen.insert(c.name_any()))
                .collect();
            let got = assign("a", &vms, Listed::Spec, &children, &theirs);
            prop_assert_eq!(got.len(), vms.len());
            let mut taken = std::collections::HashSet::new();
            for (i, m) in got.iter().enumerate() {
                let name = match m {
                    Member::Migrating(c) => {
                        prop_assert_eq!(&c.spec.source.vm, &vms[i].vm);
                        c.name_any()
                    }
                    Member::Create(n) => {
                        prop_assert!(children.iter().chain(&theirs).all(|c| &c.name_any() != n));
                        n.clone()
                    }
                    Member::Collides(c) => {
                        prop_assert_eq!(c.index as usize, i);
                        prop_assert!(c.message.contains(&c.vm) && c.message.contains(&c.other_vm));
                        continue;
                    }
                };
                prop_assert!(taken.insert(name), "a name given twice: {:?}", got);
            }
        }
    }
}
