//! Kubernetes Events (events.k8s.io) for every phase transition, failure, retry and cancel,
//! derived purely from the status before and after a reconcile.

use ferry_crds::{
    ConditionType, EventAction, EventReason, Phase, Reason, VirtualMachineMigrationStatus as Status,
};
use kube::runtime::events::{Event, EventType};

/// One Event to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Normal or Warning.
    pub warning: bool,
    /// Why.
    pub reason: EventReason,
    /// The action taken.
    pub action: EventAction,
    /// Human-readable details.
    pub note: String,
}

impl Note {
    fn normal(reason: EventReason, action: EventAction, note: impl Into<String>) -> Self {
        Self {
            warning: false,
            reason,
            action,
            note: note.into(),
        }
    }

    fn warning(reason: EventReason, action: EventAction, note: impl Into<String>) -> Self {
        Self {
            warning: true,
            reason,
            action,
            note: note.into(),
        }
    }

    /// The kube-runtime Event.
    pub fn to_event(&self) -> Event {
        Event {
            type_: if self.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: self.reason.as_str().to_owned(),
            // Whatever a note was made from, no URL user info leaves in an Event.
            note: Some(truncate(
                &ferry_crds::redact::userinfo(&self.note),
                NOTE_MAX,
            )),
            action: self.action.as_str().to_owned(),
            secondary: None,
        }
    }
}

/// The longest note ferry writes on an Event (the API server's limit is 1 KiB).
const NOTE_MAX: usize = 1000;

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

fn condition(s: &Status, t: ConditionType) -> Option<(Reason, &str)> {
    s.condition(t).map(|c| (c.reason, c.message.as_str()))
}

/// The Events that the change from `old` to `new` deserves. Pure.
///
/// # Guarantees
/// * The start (`Preparing`), the end and a retry each give exactly one Event: `Failed` a
///   Warning with `lastFailure`'s reason, `Cancelled` a Normal `Cancelled`, `Succeeded` a Normal
///   `Succeeded`, a retry a Normal `RetryRequested`, the start a Normal `Preparing`. The phases
///   in between give none: an Event is a write to the shared API server, and the way through
///   them is in `status.history` with its times.
/// * A condition newly carrying reason `TransientError` (or a new message under it) gives a
///   Warning `TransientError`: CDI restarting an importer, a converter pod failing.
/// * Nothing changed, nothing published.
pub fn notes(old: &Status, new: &Status) -> Vec<Note> {
    let mut out = vec![];
    if new.attempts > old.attempts.max(1) {
        out.push(Note::normal(
            EventReason::RetryRequested,
            EventAction::Retry,
            format!(
                "attempt {} resumes {} (last failure: {})",
                new.attempts,
                new.phase,
                old.last_failure
                    .as_ref()
                    .map_or("none".into(), |f| f.reason.to_string())
            ),
        ));
    } else if new.phase != old.phase {
        match new.phase {
            Phase::Failed => {
                let (reason, msg) = new
                    .last_failure
                    .as_ref()
                    .map_or((Reason::Failed, String::new()), |f| {
                        (f.reason, f.message.clone())
                    });
                out.push(Note::warning(
                    EventReason::Condition(reason),
                    EventAction::Fail,
                    format!("{} failed: {msg}", old.phase),
                ));
            }
            Phase::RolledBack => {
                let msg = new
                    .last_failure
                    .as_ref()
                    .map_or(String::new(), |f| f.message.clone());
                out.push(Note::warning(
                    EventReason::Entered(Phase::RolledBack),
                    EventAction::Fail,
                    format!("rolled back: {msg}"),
                ));
            }
            Phase::Cancelled => out.push(Note::normal(
                EventReason::Entered(Phase::Cancelled),
                EventAction::Cancel,
                format!("cancelled in {}; partial results removed", old.phase),
            )),
            Phase::Succeeded => out.push(Note::normal(
                EventReason::Entered(Phase::Succeeded),
                EventAction::Complete,
                "the VM runs in KubeVirt; staging cleaned up",
            )),
            Phase::Preparing => out.push(Note::normal(
                EventReason::Entered(Phase::Preparing),
                EventAction::Transition,
                format!("{} → {}", old.phase, Phase::Preparing),
            )),
            Phase::Pending
            | Phase::Queued
            | Phase::Converting
            | Phase::Importing
            | Phase::CuttingOver
            | Phase::ConvertingGuest
            | Phase::CreatingVM
            | Phase::Starting
            | Phase::Validating => {}
        }
    }
    for t in ConditionType::ALL {
        if let Some((Reason::TransientError, msg)) = condition(new, t)
            && condition(old, t) != Some((Reason::TransientError, msg))
        {
            out.push(Note::warning(
                EventReason::Condition(Reason::TransientError),
                EventAction::Retry,
                format!("{t}: {msg}"),
            ));
        }
    }
    out
}

/// The Event for a transient failure retried in the phase. Pure.
pub fn retrying(phase: Phase, reason: Reason, message: &str, delay_secs: u64, retry: u32) -> Note {
    Note::warning(
        EventReason::Condition(reason),
        EventAction::Retry,
        format!("{phase}: {message}; retry {} in {delay_secs}s", retry + 1),
    )
}

/// The Warning that the operator accepted Critical preflight concerns (`codes`, newly
/// accepted) and the migration goes on despite them. Pure.
pub fn concerns_accepted(codes: &[ferry_crds::ConcernCode]) -> Note {
    let names: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
    Note::warning(
        EventReason::ConcernsAccepted,
        EventAction::Preflight,
        format!(
            "going on despite Critical preflight concerns accepted in spec.preflight.accept: {}",
            names.join(", ")
        ),
    )
}

/// The Warning for something a cleanup let go (best effort). Pure.
pub fn cleanup_incomplete(what: &str) -> Note {
    Note::warning(EventReason::CleanupIncomplete, EventAction::Cleanup, what)
}

/// The Warning of a migration held because ferry's admission policies are not in force. Pure.
pub fn held_for_policies(message: &str) -> Note {
    Note::warning(
        EventReason::Condition(Reason::PoliciesNotInForce),
        EventAction::Preflight,
        message,
    )
}

/// The Warning of a delete whose cleanup cannot remove what the migration staged (it retries).
/// Pure.
pub fn cleanup_blocked(message: &str) -> Note {
    Note::warning(
        EventReason::Condition(Reason::CleanupBlocked),
        EventAction::Cleanup,
        message,
    )
}

/// The Warnings of an abandoned cleanup: every object left behind, in as many Events as their
/// names need (an Event's note holds 1000 bytes, and none of `left` may be cut off). Pure.
pub fn cleanup_abandoned(why: &str, left: &[String]) -> Vec<Note> {
    let head = format!("cleanup abandoned ({why}); left behind:");
    let mut notes = vec![];
    let mut note = head.clone();
    for (i, item) in left.iter().enumerate() {
        if note.len() + 1 + item.len() > NOTE_MAX && note != head {
            notes.push(note);
            note = format!("left behind (continued, from {}):", i + 1);
        }
        note.push(' ');
        note.push_str(item);
    }
    if left.is_empty() {
        note.push_str(" nothing");
    }
    notes.push(note);
    notes
        .into_iter()
        .map(|n| Note::warning(EventReason::CleanupAbandoned, EventAction::Cleanup, n))
        .collect()
}

/// The Event of a deleted migration whose partial results were removed in `phase`. Pure.
pub fn deleted(phase: Phase) -> Note {
    Note::normal(
        EventReason::Deleted,
        EventAction::Cleanup,
        format!("cleaned up in {phase}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::{intents::Intent, status};
    use ferry_crds::{
        LastFailure,
        fixtures::{migration, t0, t1},
    };

    fn started() -> Status {
        status::after_intent(&migration("m"), &Intent::Start, &t0()).unwrap()
    }

    #[test]
    fn one_event_for_the_start_the_end_and_a_retry_and_none_between() {
        let mut pending = started();
        pending.phase = Phase::Pending;
        let s0 = started();
        let n = notes(&pending, &s0);
        assert_eq!(n.len(), 1);
        assert_eq!((n[0].reason.as_str(), n[0].warning), ("Preparing", false));
        assert_eq!(n[0].action, EventAction::Transition);
        let mut s1 = s0.clone();
        status::enter(&mut s1, Phase::Converting, &t1());
        assert!(
            notes(&s0, &s1).is_empty(),
            "a phase between is in the history only"
        );
        assert!(notes(&s1, &s1).is_empty());
        let mut done = s1.clone();
        status::enter(&mut done, Phase::Succeeded, &t1());
        assert_eq!(notes(&s1, &done)[0].reason.as_str(), "Succeeded");
        let mut f = s1.clone();
        f.last_failure = Some(LastFailure {
            phase: Phase::Converting,
            reason: Reason::ConversionFailed,
            message: "x".into(),
            retriable: true,
            time: t1(),
            cause: None,
        });
        status::enter(&mut f, Phase::Failed, &t1());
        let n = notes(&s1, &f);
        assert_eq!(
            (n[0].reason.as_str(), n[0].warning),
            ("ConversionFailed", true)
        );
        let mut r = f.clone();
        r.attempts = 2;
        status::enter(&mut r, Phase::Converting, &t1());
        assert_eq!(notes(&f, &r)[0].reason, EventReason::RetryRequested);
    }

    #[test]
    fn a_new_transient_error_is_a_warning() {
        let s0 = started();
        let mut s1 = s0.clone();
        ferry_crds::condition::set_condition(
            &mut s1.conditions,
            ConditionType::DiskImported,
            ferry_crds::ConditionStatus::Unknown,
            Reason::TransientError,
            "restarted 1",
            None,
            &t1(),
        );
        let n = notes(&s0, &s1);
        assert_eq!(n.len(), 1);
        assert!(n[0].warning && n[0].note.contains("restarted 1"));
        assert!(notes(&s1, &s1).is_empty());
    }

    #[test]
    fn long_notes_are_cut_on_a_char_boundary() {
        let e =
            Note::normal(EventReason::Deleted, EventAction::Cleanup, "é".repeat(600)).to_event();
        assert!(e.note.unwrap().len() <= 1004);
    }

    #[test]
    fn an_abandoned_cleanup_lists_every_object_left_in_notes_that_fit() {
        let left: Vec<String> = (0..64)
            .flat_map(|i| {
                let k = format!("ferry/ns/a-rather-long-migration-name/disk-{i}.img");
                [
                    format!("s3://bucket/{k}"),
                    format!("s3://bucket/{k}.state.json"),
                ]
            })
            .collect();
        let notes = cleanup_abandoned("connection refused", &left);
        assert!(notes.len() > 1, "128 names do not fit one Event");
        let mut seen = 0;
        for n in &notes {
            assert!(n.warning && n.reason == EventReason::CleanupAbandoned);
            let e = n.to_event();
            let note = e.note.unwrap();
            assert!(
                note.len() <= NOTE_MAX && !note.ends_with('…'),
                "not cut: {note}"
            );
            seen += left.iter().filter(|l| note.contains(l.as_str())).count();
        }
        assert_eq!(seen, left.len(), "every object, once");
        assert!(notes[0].note.contains("connection refused"));
        let none = cleanup_abandoned("x", &[]);
        assert_eq!(none.len(), 1);
        assert!(none[0].note.ends_with("nothing"));
    }
}
