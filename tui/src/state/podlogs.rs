//! The pod logs view (`L`): the pods of a migration's Jobs (conversion, verification, cutover)
//! and CDI's importers, and the log of the one chosen, its last lines then followed. Pure: the
//! pods come in [`Action::PodsFound`](super::Action::PodsFound), the lines in
//! [`Action::LogLines`](super::Action::LogLines).

use std::collections::VecDeque;

use super::{ObjKey, Timestamp};

/// Lines of a log kept: the oldest go first, so a chatty converter followed for hours costs a
/// bounded amount of memory.
pub const KEEP_LINES: usize = 5_000;

/// Lines asked for when a log is opened (`tailLines`): the end of it is what tells why a pod
/// failed, and its start may be megabytes away.
pub const TAIL_LINES: i64 = 500;

/// The label the Job controller puts on its pods with the Job's uid (Kubernetes 1.27+; the
/// older `controller-uid` is still written beside it).
pub const JOB_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";

/// One of the migration's Jobs, as its record in `status.children` names it: only pods
/// carrying this uid are its own (a Job of a similar or even the same name, made before or by
/// someone else, has another uid).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRef {
    /// Its name.
    pub name: String,
    /// The uid ferry's create answered.
    pub uid: String,
}

/// A pod as listed, cut down to what the view shows (never its environment or spec).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodInfo {
    /// Its name.
    pub name: String,
    /// What made it: a Job's name, or the DataVolume an importer fills.
    pub owner: String,
    /// The Job uid its label carries (`None`: not a Job's pod, e.g. CDI's importer).
    pub job_uid: Option<String>,
    /// Its containers, in spec order (the log is the first one's).
    pub containers: Vec<String>,
    /// `status.phase`.
    pub phase: String,
    /// When it was created.
    pub created: Option<Timestamp>,
}

/// What became of the log being read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stream {
    /// Nothing asked yet (no pod).
    Idle,
    /// Asked, nothing answered yet.
    Opening,
    /// Lines arrive as the container writes them.
    Following,
    /// The API server closed it: the container ended (or the connection was cut).
    Ended,
    /// It could not be read, with why (in the operator's words, from `strings::podlogs`).
    Failed(String),
}

/// The pod logs view's state.
#[derive(Clone, Debug, PartialEq)]
pub struct PodLogs {
    /// The migration.
    pub key: ObjKey,
    /// Its pods; `None` while they are being listed, `Err` with why they could not be.
    pub pods: Option<Result<Vec<PodInfo>, String>>,
    /// The pod chosen, by position in `pods`.
    pub selected: usize,
    /// Which stream the lines belong to: a line of an earlier one (another pod, or before `f`)
    /// is dropped.
    pub session: u64,
    /// The stream's state.
    pub stream: Stream,
    /// The last [`KEEP_LINES`] lines, control characters already replaced.
    pub lines: VecDeque<String>,
    /// Lines dropped from the front to keep within [`KEEP_LINES`].
    pub dropped: usize,
    /// Stuck to the end: new lines scroll into view (as `tail -f`); scrolling up leaves it.
    pub tail: bool,
}

impl PodLogs {
    /// A view of `key` whose pods are being listed.
    pub fn new(key: ObjKey) -> PodLogs {
        PodLogs {
            key,
            pods: None,
            selected: 0,
            session: 0,
            stream: Stream::Idle,
            lines: VecDeque::new(),
            dropped: 0,
            tail: true,
        }
    }

    /// The pod chosen, if any.
    pub fn pod(&self) -> Option<&PodInfo> {
        self.pods.as_ref()?.as_ref().ok()?.get(self.selected)
    }

    /// Appends `lines`, keeping the last [`KEEP_LINES`].
    pub fn append(&mut self, lines: impl IntoIterator<Item = String>) {
        for l in lines {
            self.lines.push_back(clean(&l));
        }
        let over = self.lines.len().saturating_sub(KEEP_LINES);
        if over > 0 {
            self.lines.drain(..over);
            self.dropped += over;
        }
    }

    /// Forgets the lines of the last stream and starts session `session`.
    pub fn restart(&mut self, session: u64) {
        self.session = session;
        self.lines.clear();
        self.dropped = 0;
        self.stream = Stream::Opening;
        self.tail = true;
    }
}

/// The pods of `jobs` among `found` (only those whose Job uid label is one of theirs), then the
/// importers (pods with no Job uid, listed by their exact name), each group oldest first.
pub fn pods_of(jobs: &[JobRef], found: Vec<PodInfo>) -> Vec<PodInfo> {
    let mut out: Vec<PodInfo> = found
        .into_iter()
        .filter(|p| match &p.job_uid {
            Some(uid) => jobs.iter().any(|j| j.uid == *uid),
            None => true,
        })
        .collect();
    out.sort_by(|a, b| {
        (a.job_uid.is_none(), a.created, &a.name).cmp(&(b.job_uid.is_none(), b.created, &b.name))
    });
    out
}

/// Which pod to show first: the newest Job pod (the last attempt of the latest Job, where a
/// failure shows), else the first importer.
pub fn first_choice(pods: &[PodInfo]) -> usize {
    pods.iter()
        .enumerate()
        .filter(|(_, p)| p.job_uid.is_some())
        .max_by(|(_, a), (_, b)| a.created.cmp(&b.created))
        .map_or(0, |(i, _)| i)
}

/// A log line safe to put in a cell: a terminal control character written by a container
/// (colours, a carriage return of a progress bar, a bell, an escape sequence) would otherwise
/// reach the operator's terminal and corrupt the screen. A tab becomes spaces; any other control
/// character becomes `�`, a trailing `\r` goes.
pub fn clean(line: &str) -> String {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut out = String::with_capacity(line.len());
    for c in line.chars() {
        match c {
            '\t' => out.push_str("    "),
            c if c.is_control() => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Screen rows `line` takes wrapped at `width` columns (at least one), as [`wrap`] cuts it.
pub fn rows_of(line: &str, width: usize) -> usize {
    let width = width.max(1);
    // Most lines fit: no need to cut them to count them.
    if line.chars().count() <= width {
        return 1;
    }
    wrap(line, width).len()
}

/// `line` cut into rows of at most `width` characters (one column a character), after a space
/// where one falls in the row's second half, else mid-word (a long URL or hash); one empty row
/// for an empty line.
pub fn wrap(line: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut rest: &[char] = &line.chars().collect::<Vec<_>>();
    let mut out = vec![];
    while rest.len() > width {
        let space = rest[..=width]
            .iter()
            .rposition(|c| *c == ' ')
            .filter(|&i| i > width / 2);
        let (row, next) = match space {
            // The space itself goes, at the end of the row or past it.
            Some(i) => (&rest[..i], i + 1),
            None => (&rest[..width], width),
        };
        out.push(row.iter().collect());
        rest = &rest[next..];
    }
    out.push(rest.iter().collect());
    out
}

/// Screen rows the view's lines take wrapped at `width` (the note of dropped lines included).
pub fn total_rows(logs: &PodLogs, width: usize) -> usize {
    usize::from(logs.dropped > 0) + logs.lines.iter().map(|l| rows_of(l, width)).sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_wrap_after_a_space_else_mid_word_and_rows_agree() {
        assert_eq!(wrap("", 10), [""]);
        assert_eq!(wrap("short", 10), ["short"]);
        assert_eq!(
            wrap("the ClusterRole ferry-view grants", 20),
            ["the ClusterRole", "ferry-view grants"]
        );
        assert_eq!(
            wrap("abcdefghijklmnopqrstuvwxy", 10),
            ["abcdefghij", "klmnopqrst", "uvwxy"]
        );
        for (l, w) in [
            ("", 5),
            ("a b c d e f g h", 3),
            ("the ClusterRole ferry-view grants", 20),
        ] {
            assert_eq!(rows_of(l, w), wrap(l, w).len(), "{l:?} at {w}");
            assert!(wrap(l, w).iter().all(|r| r.chars().count() <= w));
        }
    }
}
