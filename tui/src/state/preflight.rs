//! What preflight found about the migrations on the board, grouped: one group per concern code
//! and severity (`12 VMs · Critical · SnapshotPresent`), Critical first, each with its
//! migrations in board order and their messages. Pure: `ui/preflight.rs` draws it.

use std::collections::BTreeMap;

use ferry_crds::{Concern, ConcernCode, Severity, WavePreflight};

use super::Row;

/// What a group is about: one code at one severity. Ordered by severity (Critical first),
/// then by code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    /// The severity the concerns were found at.
    pub severity: Severity,
    /// Their code.
    pub code: ConcernCode,
}

/// One migration of a group.
#[derive(Clone, Debug)]
pub struct Member<'a> {
    /// The migration.
    pub row: &'a Row,
    /// Its concerns of the group's code and severity, as preflight listed them (a code may be
    /// found more than once, e.g. once per disk).
    pub concerns: Vec<&'a Concern>,
    /// A Critical concern the operator accepted (`status.preflight.accepted`): it holds nothing.
    pub accepted: bool,
}

/// The migrations preflight found one concern about.
#[derive(Clone, Debug)]
pub struct Group<'a> {
    /// Code and severity.
    pub key: GroupKey,
    /// Each migration once, in the order the rows came.
    pub members: Vec<Member<'a>>,
}

impl Group<'_> {
    /// Members that accepted the concern.
    pub fn accepted(&self) -> usize {
        self.members.iter().filter(|m| m.accepted).count()
    }

    /// Members the concern holds (or will hold once released): Critical, not accepted.
    pub fn blocking(&self) -> usize {
        if self.key.severity == Severity::Critical {
            self.members.len() - self.accepted()
        } else {
            0
        }
    }
}

/// The concerns of `rows`, grouped by code and severity.
///
/// # Guarantees
/// Every concern of every row is in exactly one group, under its own code and severity; a
/// migration is once in a group however often its code was found. Groups come Critical first,
/// then Warning, then Info; within a severity, groups that hold a migration before those that
/// hold none (all accepted), then the most migrations first, then by code. Members keep the
/// order of `rows`.
pub fn groups<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Vec<Group<'a>> {
    let mut by_key: BTreeMap<GroupKey, Vec<Member<'a>>> = BTreeMap::new();
    for row in rows {
        let Some(p) = row.preflight() else {
            continue;
        };
        for c in &p.concerns {
            let key = GroupKey {
                severity: c.severity,
                code: c.code,
            };
            let members = by_key.entry(key).or_default();
            // A row's concerns all come before the next row's: its member, if any, is last.
            match members.last_mut() {
                Some(m) if std::ptr::eq(m.row, row) => m.concerns.push(c),
                _ => members.push(Member {
                    row,
                    concerns: vec![c],
                    accepted: c.severity == Severity::Critical && p.accepted.contains(&c.code),
                }),
            }
        }
    }
    let mut out: Vec<Group<'a>> = by_key
        .into_iter()
        .map(|(key, members)| Group { key, members })
        .collect();
    out.sort_by(|a, b| {
        a.key
            .severity
            .cmp(&b.key.severity)
            .then_with(|| (a.blocking() == 0).cmp(&(b.blocking() == 0)))
            .then_with(|| b.members.len().cmp(&a.members.len()))
            .then_with(|| a.key.code.cmp(&b.key.code))
    });
    out
}

/// Where the group `selected` is among `groups`; the first one when it is not there (none
/// chosen yet, or its concern went away).
pub fn position(groups: &[Group<'_>], selected: Option<GroupKey>) -> usize {
    selected
        .and_then(|k| groups.iter().position(|g| g.key == k))
        .unwrap_or(0)
}

/// Counts over `rows` as a wave's status counts its migrations ([`WavePreflight::of`]):
/// preflighted, ready, blocked, ready with warnings (all zero when none was preflighted). No
/// claims: the watch trims them (`kube::watch::trim_migration`), so the cockpit never had them.
pub fn tally<'a>(rows: impl IntoIterator<Item = &'a Row>) -> WavePreflight {
    let mut out = WavePreflight::default();
    for p in rows.into_iter().filter_map(Row::preflight) {
        out.checked += 1;
        if p.blocking().next().is_some() {
            out.blocked += 1;
        } else {
            out.ready += 1;
            if p.concerns.iter().any(|c| c.severity == Severity::Warning) {
                out.warnings += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use ferry_crds::{Phase, PreflightStatus, fixtures::migration};

    use super::*;
    use crate::state::ClusterId;

    fn row(name: &str, phase: Phase, concerns: &[(ConcernCode, Severity)]) -> Row {
        row_accepting(name, phase, concerns, &[])
    }

    fn row_accepting(
        name: &str,
        phase: Phase,
        concerns: &[(ConcernCode, Severity)],
        accepted: &[ConcernCode],
    ) -> Row {
        let mut o = migration(name).with_phase(phase);
        o.status.as_mut().unwrap().preflight = Some(PreflightStatus {
            concerns: concerns
                .iter()
                .map(|(code, sev)| Concern::new(*code, *sev, format!("{name}: {code}")))
                .collect(),
            accepted: accepted.to_vec(),
            ..PreflightStatus::default()
        });
        Row::from_object(ClusterId::default(), o)
    }

    fn summary(groups: &[Group<'_>]) -> Vec<(Severity, ConcernCode, Vec<String>)> {
        groups
            .iter()
            .map(|g| {
                let names = g.members.iter().map(|m| m.row.key.name.clone()).collect();
                (g.key.severity, g.key.code, names)
            })
            .collect()
    }

    use ConcernCode::{PoweredOn, SharedDisk, SnapshotPresent, ToolsNotRunning};
    use Severity::{Critical, Info, Warning};

    #[test]
    fn concerns_group_by_code_and_severity_critical_first_and_the_biggest_first() {
        let rows = [
            row(
                "a",
                Phase::Pending,
                &[(ToolsNotRunning, Warning), (PoweredOn, Info)],
            ),
            row("b", Phase::Pending, &[(SnapshotPresent, Critical)]),
            row("c", Phase::Queued, &[(ToolsNotRunning, Warning)]),
            row("d", Phase::Succeeded, &[]),
            row(
                "e",
                Phase::Pending,
                &[(SharedDisk, Critical), (ToolsNotRunning, Warning)],
            ),
            row("f", Phase::Pending, &[(SharedDisk, Critical)]),
            // The same code at another severity is another group.
            row("g", Phase::Pending, &[(PoweredOn, Warning)]),
        ];
        let g = groups(&rows);
        assert_eq!(
            summary(&g),
            vec![
                (Critical, SharedDisk, vec!["e".into(), "f".into()]),
                (Critical, SnapshotPresent, vec!["b".into()]),
                (
                    Warning,
                    ToolsNotRunning,
                    vec!["a".into(), "c".into(), "e".into()]
                ),
                (Warning, PoweredOn, vec!["g".into()]),
                (Info, PoweredOn, vec!["a".into()]),
            ]
        );
        let concerns: usize = g
            .iter()
            .flat_map(|g| &g.members)
            .map(|m| m.concerns.len())
            .sum();
        assert_eq!(concerns, 8, "every concern in exactly one group");
    }

    #[test]
    fn a_code_found_twice_counts_its_migration_once_with_both_messages() {
        let rows = [row(
            "a",
            Phase::Pending,
            &[
                (SnapshotPresent, Critical),
                (SharedDisk, Critical),
                (SnapshotPresent, Critical),
            ],
        )];
        let g = groups(&rows);
        assert_eq!(g[0].key.code, SnapshotPresent);
        assert_eq!(g[0].members.len(), 1);
        assert_eq!(g[0].members[0].concerns.len(), 2);
    }

    #[test]
    fn accepted_critical_concerns_hold_nothing_and_their_group_comes_after_those_that_do() {
        let rows = [
            row_accepting(
                "a",
                Phase::Pending,
                &[(SharedDisk, Critical)],
                &[SharedDisk],
            ),
            row_accepting(
                "b",
                Phase::Preparing,
                &[(SharedDisk, Critical)],
                &[SharedDisk],
            ),
            row("c", Phase::Pending, &[(SnapshotPresent, Critical)]),
            // A Warning of an accepted code is no acceptance.
            row_accepting("d", Phase::Pending, &[(SharedDisk, Warning)], &[SharedDisk]),
        ];
        let g = groups(&rows);
        assert_eq!(
            g.iter().map(|g| g.key.code).collect::<Vec<_>>(),
            [SnapshotPresent, SharedDisk, SharedDisk]
        );
        assert_eq!((g[0].blocking(), g[0].accepted()), (1, 0));
        assert_eq!((g[1].blocking(), g[1].accepted()), (0, 2));
        assert_eq!((g[2].blocking(), g[2].accepted()), (0, 0));
        assert!(rows[0].held_by.is_none(), "accepted: nothing holds it");
        assert_eq!(rows[2].held_by, Some(SnapshotPresent));
    }

    #[test]
    fn the_selection_stays_on_its_group_and_falls_back_to_the_first() {
        let rows = [
            row("a", Phase::Pending, &[(ToolsNotRunning, Warning)]),
            row("b", Phase::Pending, &[(SnapshotPresent, Critical)]),
        ];
        let g = groups(&rows);
        let tools = GroupKey {
            severity: Warning,
            code: ToolsNotRunning,
        };
        assert_eq!(position(&g, Some(tools)), 1);
        assert_eq!(position(&g, None), 0);
        let gone = GroupKey {
            severity: Info,
            code: PoweredOn,
        };
        assert_eq!(position(&g, Some(gone)), 0);
    }

    #[test]
    fn the_tally_counts_as_a_wave_does() {
        let rows = [
            row("a", Phase::Pending, &[(SnapshotPresent, Critical)]),
            row("b", Phase::Queued, &[(ToolsNotRunning, Warning)]),
            row("c", Phase::Succeeded, &[]),
            Row::from_object(ClusterId::default(), migration("d")),
        ];
        let t = tally(&rows);
        assert_eq!(
            (t.checked, t.ready, t.blocked, t.warnings),
            (3, 2, 1, 1),
            "d was never preflighted"
        );
        assert_eq!(tally(&rows[3..]), WavePreflight::default());
    }
}
