//! The migrations on the board in trouble, grouped by cause: failed ones by their failure's
//! reason, stuck ones by their phase, each then by the first line of its message with the
//! migration's own names taken out (`9 × ImportFailed: DataVolume *-disk-0 failed: …`), so
//! that a cause can be fixed and its migrations retried together. Pure: `ui/problems.rs`
//! draws it, `update` marks a group's migrations for the board's verbs.

use std::collections::HashMap;

use ferry_crds::{Phase, Reason, Stage, VirtualMachineMigration};
use k8s_openapi::jiff::SignedDuration;

use super::{ObjKey, Row, Timestamp};

/// How long a migration may go without progress in `phase` before it counts as stuck; `None`
/// for the phases that wait by design or have ended.
///
/// The one place these numbers live. Progress is a new phase, a new attempt, or more bytes
/// copied ([`Moved`]), so a long copy that keeps moving is never stuck, while one whose bytes
/// stand still is, however large its disks.
pub fn usual_time(phase: Phase) -> Option<SignedDuration> {
    const MIN: i64 = 60;
    let secs = match phase {
        // Waiting is their job: for `spec.paused`, for a person to accept a concern (preflight
        // says so itself), or for the wave's maxInFlight to free a slot.
        Phase::Pending | Phase::Queued => return None,
        // Over: failed ones are problems of their own, the others are not problems.
        Phase::Succeeded | Phase::Failed | Phase::Cancelled | Phase::RolledBack => return None,
        // Finding the VM and preflight take seconds; the guest shutdown waits at most
        // source.shutdownGracePeriodSeconds (300 s by default) before the hard power-off.
        // Three times that grace is not a slow guest any more.
        Phase::Preparing => 15 * MIN,
        // The Job's pod must be scheduled and its image pulled before the first byte moves
        // (minutes on a cold node); after that the converter's record reports bytes at least
        // every status interval. Ten minutes without one byte is a stalled read or upload.
        Phase::Converting => 10 * MIN,
        // CDI's importer pod is scheduled, pulls its image and binds a claim (WaitForFirstConsumer
        // waits for the VM, not here); CDI reports progress as it copies. The same ten minutes,
        // plus the verification Job reading every byte back once the copy is done: a disk of
        // hundreds of GiB at a slow 100 MiB/s takes about half an hour.
        Phase::Importing => 30 * MIN,
        // A warm migration waits here for its cutover, which is the operator's time (hours or
        // days); the cutover's own steps say where they stand in its message.
        Phase::CuttingOver => return None,
        // virt-v2v converts a Linux guest in a few minutes under TCG (libguestfs' appliance
        // boots, the initramfs is rebuilt); a Windows guest takes longer. An hour is stuck.
        Phase::ConvertingGuest => 60 * MIN,
        // One create of a VirtualMachine: seconds.
        Phase::CreatingVM => 5 * MIN,
        // Scheduling the virt-launcher pod and booting it: a few minutes; the controller's own
        // kubevirt_error_grace fails it on a KubeVirt error before this.
        Phase::Starting => 10 * MIN,
        // The guest's readiness (agent, probe) after boot: a slow OS with updates pending
        // takes a while, longer than that is a guest that will not come up.
        Phase::Validating => 20 * MIN,
    };
    Some(SignedDuration::from_secs(secs))
}

/// The last progress the cockpit saw of a migration: its phase, attempt and bytes copied, and
/// since when they are as they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Moved {
    phase: Phase,
    attempt: i32,
    bytes: i64,
    /// When they were last seen to change (a new phase: when the migration entered it).
    pub at: Timestamp,
}

impl Moved {
    /// `row` as seen at `now`, after `prev`.
    ///
    /// # Guarantees
    /// The same phase, attempt and bytes keep `prev`'s time; a new phase or attempt takes the
    /// time the migration entered its phase (`status.history`, else `now`); more (or fewer)
    /// bytes alone take `now`. Seen for the first time, a migration's last progress is its
    /// phase entry: the cockpit cannot know of bytes that moved before it looked, so a copy
    /// may show as stuck until its next status write (at most `--status-interval` away).
    pub fn after(prev: Option<&Moved>, row: &Row, now: Timestamp) -> Moved {
        let bytes = row.bytes_done;
        let entered = row.phase_since.unwrap_or(now);
        let at = match prev {
            Some(p) if p.phase == row.phase && p.attempt == row.attempt => {
                if p.bytes == bytes {
                    p.at
                } else {
                    now
                }
            }
            Some(_) | None => entered,
        };
        Moved {
            phase: row.phase,
            attempt: row.attempt,
            bytes,
            at,
        }
    }
}

/// What is wrong with a group's migrations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// Failed, with this reason (`status.lastFailure.reason`).
    Failed(Reason),
    /// No progress in this phase for longer than [`usual_time`].
    Stuck(Phase),
}

/// A group: a cause and the first line of its migrations' messages.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProblemKey {
    /// What is wrong.
    pub cause: Cause,
    /// The first line of the message, each migration's own names made `*`.
    pub line: String,
}

impl Cause {
    /// The reason's or the phase's name.
    pub fn word(self) -> &'static str {
        match self {
            Cause::Failed(r) => r.as_str(),
            Cause::Stuck(p) => p.as_str(),
        }
    }
}

impl ProblemKey {
    /// Failed before stuck, then by the reason's or phase's name, then by line.
    fn order(&self) -> (bool, &'static str, &str) {
        (
            matches!(self.cause, Cause::Stuck(_)),
            self.cause.word(),
            &self.line,
        )
    }
}

/// One migration of a group.
#[derive(Clone, Debug)]
pub struct Member<'a> {
    /// The migration.
    pub row: &'a Row,
    /// How long it has gone without progress (stuck ones), or since it failed.
    pub for_: SignedDuration,
}

/// Migrations with one cause and one first line.
#[derive(Clone, Debug)]
pub struct Group<'a> {
    /// Cause and line.
    pub key: ProblemKey,
    /// Each migration once, in the order the rows came.
    pub members: Vec<Member<'a>>,
}

/// The line the problems view groups migration `o` (named `name`, in `phase`, with the board's
/// `message`) by, or an empty one in a phase that is never a problem: the first line of its
/// failure's message when it failed (the board's message when it has no failure record), else
/// of the board's message. Made once per row, with the object at hand (rows keep none).
pub fn line_of(o: &VirtualMachineMigration, name: &str, phase: Phase, message: &str) -> String {
    match phase.stage() {
        Stage::Failed => {
            let failure = o.status.as_ref().and_then(|s| s.last_failure.as_ref());
            // The failing component's classification is the cause itself: two truncated disks
            // are one problem, whatever paths and pods their messages name.
            if let Some(cause) = failure.and_then(|f| f.cause.as_deref()) {
                return cause.to_owned();
            }
            first_line(o, name, failure.map_or(message, |f| f.message.as_str()))
        }
        Stage::Pending | Stage::Queued | Stage::InFlight | Stage::Succeeded | Stage::Cancelled => {
            if usual_time(phase).is_some() {
                first_line(o, name, message)
            } else {
                String::new()
            }
        }
    }
}

/// The first line of `message` with the names of `o` (the migration's, `name`, its target
/// VM's, its source VM's) made `*`: the same failure of two VMs reads the same.
fn first_line(o: &VirtualMachineMigration, name: &str, message: &str) -> String {
    let line = message.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut names = vec![name.to_owned(), ferry_crds::names::vm_name(o)];
    if let Some(vm) = o.spec.source.vm.value() {
        names.push(vm.to_owned());
    }
    // Longest first: a name that contains another (`w1-db` in `w1-db-01`) goes whole.
    names.sort_by_key(|n| std::cmp::Reverse(n.len()));
    let mut out = line.trim().to_owned();
    for n in names.iter().filter(|n| !n.is_empty()) {
        out = replace_word(&out, n, "*");
    }
    mask_generated(&out)
}

/// `s` with the random suffix of every generated name made `*`: a pod of a Job is named
/// `<job>-<5 characters>` by the Job controller (`*-convert-x7k2p` → `*-convert-*`), so the
/// same failure of two Jobs reads the same. The suffix is what the API server's
/// `generateName` appends: five of `bcdfghjklmnpqrstvwxz2456789` (apimachinery's
/// `util/rand.String`), a set without vowels, so few words of a message match it.
fn mask_generated(s: &str) -> String {
    const ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";
    let mut out = String::with_capacity(s.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        match word.rsplit_once('-') {
            Some((stem, tail))
                if !stem.is_empty()
                    && tail.len() == 5
                    && tail.chars().all(|c| ALPHABET.contains(c)) =>
            {
                out.push_str(stem);
                out.push_str("-*");
            }
            _ => out.push_str(word),
        }
        word.clear();
    };
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || c == '-' || c == '*' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// `s` with every `name` that stands on its own (no letter or digit right before or after
/// it: `vm-a` in `vm-a-disk-0`, not in `vm-ab`) made `with`.
fn replace_word(s: &str, name: &str, with: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(name) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + name.len()..].chars().next();
        let alone =
            !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric);
        out.push_str(&rest[..i]);
        if alone {
            out.push_str(with);
        } else {
            out.push_str(name);
        }
        rest = &rest[i + name.len()..];
    }
    out.push_str(rest);
    out
}

/// Whether `row` is in trouble at `now`, and why, with the message its group is read by.
fn problem(
    row: &Row,
    moved: &HashMap<ObjKey, Moved>,
    now: Timestamp,
) -> Option<(Cause, String, SignedDuration)> {
    match row.phase.stage() {
        Stage::Failed => {
            let (reason, at) = match row.failure {
                Some((reason, at)) => (reason, Some(at)),
                // A failure without its record (an older controller): the reason the board
                // has nothing better for.
                None => (Reason::Failed, row.completed_at),
            };
            let for_ = now.duration_since(at.unwrap_or(now));
            Some((Cause::Failed(reason), row.problem_line.to_string(), for_))
        }
        Stage::Pending | Stage::Queued | Stage::InFlight | Stage::Succeeded | Stage::Cancelled => {
            let usual = usual_time(row.phase)?;
            let since = moved
                .get(&row.key)
                .map(|m| m.at)
                .or(row.phase_since)
                .unwrap_or(now);
            let still = now.duration_since(since);
            (still > usual).then(|| (Cause::Stuck(row.phase), row.problem_line.to_string(), still))
        }
    }
}

/// The failed and stuck migrations of `rows` at `now`, grouped.
///
/// # Guarantees
/// A migration is in at most one group: failed ones under their failure's reason, stuck ones
/// (not finished, not waiting by design, no progress for longer than [`usual_time`] of their
/// phase, as `moved` remembers it) under their phase; within a cause, by the first line of
/// the message. The biggest groups come first, then failed before stuck, then by key. Members
/// keep the order of `rows`.
pub fn groups<'a>(
    rows: impl IntoIterator<Item = &'a Row>,
    moved: &HashMap<ObjKey, Moved>,
    now: Timestamp,
) -> Vec<Group<'a>> {
    let mut out: Vec<Group<'a>> = vec![];
    let mut at: HashMap<ProblemKey, usize> = HashMap::new();
    for row in rows {
        if let Some((cause, line, for_)) = problem(row, moved, now) {
            let key = ProblemKey { cause, line };
            let i = *at.entry(key.clone()).or_insert_with(|| {
                out.push(Group {
                    key,
                    members: vec![],
                });
                out.len() - 1
            });
            if let Some(g) = out.get_mut(i) {
                g.members.push(Member { row, for_ });
            }
        }
    }
    out.sort_by(|a, b| {
        b.members
            .len()
            .cmp(&a.members.len())
            .then_with(|| a.key.order().cmp(&b.key.order()))
    });
    out
}

/// Where the group `selected` is among `groups`; the first one when it is not there.
pub fn position(groups: &[Group<'_>], selected: Option<&ProblemKey>) -> usize {
    selected
        .and_then(|k| groups.iter().position(|g| g.key == *k))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use ferry_crds::{
        LastFailure, PhaseTransition, Progress,
        fixtures::{migration, ts},
    };

    use super::*;
    use crate::state::ClusterId;

    fn failed(name: &str, reason: Reason, message: &str) -> Row {
        let mut o = migration(name).with_phase(Phase::Failed);
        o.status.as_mut().unwrap().last_failure = Some(LastFailure {
            phase: Phase::Importing,
            reason,
            message: message.into(),
            retriable: true,
            time: ts(1000),
            cause: None,
        });
        Row::from_object(ClusterId::default(), o)
    }

    /// A migration that entered `phase` at `entered` and has copied `bytes`.
    fn running(name: &str, phase: Phase, entered: i64, bytes: i64) -> Row {
        let mut o = migration(name).with_phase(phase);
        let s = o.status.as_mut().unwrap();
        s.attempts = 1;
        s.history = vec![PhaseTransition {
            phase,
            attempt: 1,
            entered_at: ts(entered),
            left_at: None,
        }];
        s.progress = Some(Progress {
            percent: 10.0,
            bytes_done: bytes,
            bytes_total: 1 << 30,
            rate_bytes_per_second: None,
            eta_seconds: None,
        });
        Row::from_object(ClusterId::default(), o)
    }

    #[test]
    fn generated_names_are_masked_and_a_components_cause_groups_whatever_the_message() {
        assert_eq!(
            mask_generated("pod ns/*-convert-x7k2p failed; disk-0 and key-abcde stay"),
            "pod ns/*-convert-* failed; disk-0 and key-abcde stay"
        );
        // Two conversions failed by the same cause, their messages naming their own pods and
        // paths: one group, its line the cause.
        let with_cause = |name: &str, path: &str, pod: &str| {
            let mut o = migration(name).with_phase(Phase::Failed);
            o.status.as_mut().unwrap().last_failure = Some(LastFailure {
                phase: Phase::Converting,
                reason: Reason::ConversionFailed,
                message: format!("disk 0 ({path}): short extent; pod {pod}"),
                retriable: true,
                time: ts(1000),
                cause: Some("BadDisk".into()),
            });
            Row::from_object(ClusterId::default(), o)
        };
        let a = with_cause("a", "[ds] A/a.vmdk", "a-convert-x7k2p");
        let b = with_cause("b", "[ds] B/b.vmdk", "b-convert-q9zt4");
        let rows = [a, b];
        let g = groups(&rows, &HashMap::new(), ts(2000).0);
        assert_eq!(g.len(), 1, "{g:?}");
        assert_eq!(g[0].key.line, "BadDisk");
        assert_eq!(names(&g[0]), ["a", "b"]);
        // Without a cause (an older controller), the pods' suffixes are masked: still one group.
        let plain = |name: &str, pod: &str| {
            failed(
                name,
                Reason::ConversionFailed,
                &format!("the conversion Job failed (PodFailurePolicy: pod ns/{pod} exited 3)"),
            )
        };
        let rows = [plain("c", "c-convert-x7k2p"), plain("d", "d-convert-q9zt4")];
        let g = groups(&rows, &HashMap::new(), ts(2000).0);
        assert_eq!(g.len(), 1, "{g:?}");
        assert!(
            g[0].key.line.contains("pod ns/*-convert-* exited"),
            "{}",
            g[0].key.line
        );
    }

    fn names(g: &Group<'_>) -> Vec<String> {
        g.members.iter().map(|m| m.row.key.name.clone()).collect()
    }

    #[test]
    fn failures_group_by_reason_and_first_line_with_each_vms_names_taken_out() {
        let rows = [
            failed(
                "w1-a",
                Reason::ImportFailed,
                "DataVolume w1-a-disk-0 failed: Unable to process data\nimporter restarted",
            ),
            failed(
                "w1-b",
                Reason::SourcePoweredOn,
                "the source VM was powered on",
            ),
            failed(
                "w1-c",
                Reason::ImportFailed,
                "DataVolume w1-c-disk-0 failed: Unable to process data\nother details",
            ),
            failed(
                "w1-d",
                Reason::ImportFailed,
                "DataVolume w1-d-disk-1 failed: checksum mismatch",
            ),
            running("w1-e", Phase::Importing, 3500, 5),
        ];
        let g = groups(&rows, &HashMap::new(), ts(3600).0);
        let summary: Vec<(Cause, &str, Vec<String>)> = g
            .iter()
            .map(|g| (g.key.cause, g.key.line.as_str(), names(g)))
            .collect();
        assert_eq!(
            summary,
            [
                (
                    Cause::Failed(Reason::ImportFailed),
                    "DataVolume *-disk-0 failed: Unable to process data",
                    vec!["w1-a".to_owned(), "w1-c".to_owned()]
                ),
                (
                    Cause::Failed(Reason::ImportFailed),
                    "DataVolume *-disk-1 failed: checksum mismatch",
                    vec!["w1-d".to_owned()]
                ),
                (
                    Cause::Failed(Reason::SourcePoweredOn),
                    "the source VM was powered on",
                    vec!["w1-b".to_owned()]
                ),
            ],
            "an Importing migration 100 s in is no problem"
        );
        assert_eq!(g[0].members[0].for_, SignedDuration::from_secs(2600));
    }

    #[test]
    fn a_name_is_taken_out_only_where_it_stands_on_its_own() {
        assert_eq!(
            replace_word("Data a-disk-0 of ab (a)", "a", "*"),
            "Data *-disk-0 of ab (*)"
        );
    }

    #[test]
    fn a_migration_is_stuck_only_past_its_phases_usual_time_without_progress() {
        let now = ts(10_000).0;
        let preparing_for = |secs: i64| running("p", Phase::Preparing, 10_000 - secs, 0);
        let limit = usual_time(Phase::Preparing).unwrap().as_secs();
        let at_limit = [preparing_for(limit)];
        assert!(groups(&at_limit, &HashMap::new(), now).is_empty());
        let past = [preparing_for(limit + 1)];
        let g = groups(&past, &HashMap::new(), now);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].key.cause, Cause::Stuck(Phase::Preparing));
        // Waiting by design and finished phases are never stuck, however long.
        for phase in [
            Phase::Pending,
            Phase::Queued,
            Phase::Succeeded,
            Phase::Cancelled,
        ] {
            let rows = [running("w", phase, 0, 0)];
            assert!(groups(&rows, &HashMap::new(), now).is_empty(), "{phase}");
        }
    }

    #[test]
    fn a_copy_whose_bytes_keep_moving_is_not_stuck_and_one_whose_bytes_stand_still_is() {
        let usual = usual_time(Phase::Converting).unwrap().as_secs();
        // In Converting for two usual times; the cockpit first saw it at t=100.
        let t = |s: i64| ts(s).0;
        let at = |bytes: i64| running("c", Phase::Converting, 0, bytes);
        let first = Moved::after(None, &at(10), t(100));
        assert_eq!(
            first.at,
            t(0),
            "first seen: its last progress is its phase entry"
        );
        // Bytes moved at t=2u: progress now.
        let moving = Moved::after(Some(&first), &at(20), t(2 * usual));
        assert_eq!(moving.at, t(2 * usual));
        // The same bytes later: the time stays.
        let still = Moved::after(Some(&moving), &at(20), t(2 * usual + 30));
        assert_eq!(still, moving);
        let row = [at(20)];
        let mut moved = HashMap::new();
        moved.insert(row[0].key.clone(), still);
        assert!(groups(&row, &moved, t(3 * usual)).is_empty());
        let g = groups(&row, &moved, t(3 * usual + 1));
        assert_eq!(g[0].key.cause, Cause::Stuck(Phase::Converting));
        assert_eq!(g[0].members[0].for_, SignedDuration::from_secs(usual + 1));
        // A new phase: the time it entered it.
        let next = Moved::after(
            Some(&moving),
            &running("c", Phase::Importing, 5000, 0),
            t(6000),
        );
        assert_eq!(next.at, t(5000));
    }

    #[test]
    fn the_selection_stays_on_its_group_and_falls_back_to_the_first() {
        let rows = [
            failed("a", Reason::ImportFailed, "x"),
            failed("b", Reason::ConversionFailed, "y"),
        ];
        let g = groups(&rows, &HashMap::new(), ts(3600).0);
        assert_eq!(position(&g, Some(&g[1].key.clone())), 1);
        assert_eq!(position(&g, None), 0);
        let gone = ProblemKey {
            cause: Cause::Stuck(Phase::Starting),
            line: String::new(),
        };
        assert_eq!(position(&g, Some(&gone)), 0);
    }
}
