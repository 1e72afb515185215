//! The messages of one migration the details view shows whole and the copy key takes: its
//! failure, its status message, its conditions' messages and its Events' notes, in the order
//! the view lists them. Pure: `ui/details.rs` draws them, `update` copies one.

use ferry_crds::{ConditionType, VirtualMachineMigration};

use super::{EventKind, EventStore, ObjKey};
use crate::strings;

/// Which message of a migration: stable while others come and go (an Event arriving shifts
/// positions, not identities), so the selection stays on what the operator chose.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum About {
    /// `status.lastFailure`.
    Failure,
    /// `status.message`.
    Status,
    /// A condition's message.
    Condition(ConditionType),
    /// An Event's note, by the Event's uid.
    Event(String),
}

/// One message, whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Which one.
    pub about: About,
    /// Its whole text, as the API has it (a failure with its reason and phase in front).
    pub text: String,
}

/// The messages of migration `o` (the details view's copy, [`super::Opened`]; `key` is its
/// key): its failure, its status message, each condition's (in the order of
/// `ConditionType::ALL`), then its Events' notes, newest first.
///
/// # Guarantees
/// No message is empty; each [`About`] appears at most once; the order is the order the
/// details view draws them in.
pub fn of(o: &VirtualMachineMigration, key: &ObjKey, events: &EventStore) -> Vec<Message> {
    let mut out = vec![];
    let status = o.status.as_ref();
    if let Some(f) = status.and_then(|s| s.last_failure.as_ref()) {
        out.push(Message {
            about: About::Failure,
            text: strings::details::failure(f.reason.as_str(), &f.phase, &f.message, f.retriable),
        });
    }
    if let Some(m) = status
        .and_then(|s| s.message.as_deref())
        .filter(|m| !m.trim().is_empty())
    {
        out.push(Message {
            about: About::Status,
            text: m.to_owned(),
        });
    }
    for ty in ConditionType::ALL {
        if let Some(c) = o.condition(ty).filter(|c| !c.message.trim().is_empty()) {
            out.push(Message {
                about: About::Condition(ty),
                text: c.message.clone(),
            });
        }
    }
    for e in events.of(EventKind::Migration, key).rev() {
        if !e.note.trim().is_empty() {
            out.push(Message {
                about: About::Event(e.uid.clone()),
                text: e.note.clone(),
            });
        }
    }
    out
}

/// Where `selected` is among `messages`: the first when none is chosen or it went away.
pub fn position(messages: &[Message], selected: Option<&About>) -> usize {
    selected
        .and_then(|a| messages.iter().position(|m| m.about == *a))
        .unwrap_or(0)
}

/// The message after `selected` (after the last: the first again); `None` when there is none.
pub fn next(messages: &[Message], selected: Option<&About>) -> Option<About> {
    if messages.is_empty() {
        return None;
    }
    let at = position(messages, selected);
    let to = if selected.is_some_and(|a| messages.get(at).is_some_and(|m| m.about == *a)) {
        (at + 1) % messages.len()
    } else {
        // Nothing chosen yet (or it went away): the first is the one shown selected, so the
        // key moves on from it.
        1 % messages.len()
    };
    messages.get(to).map(|m| m.about.clone())
}

#[cfg(test)]
mod tests {
    use ferry_crds::{
        ConditionStatus, LastFailure, Phase, Reason,
        fixtures::{migration, ts},
    };

    use super::*;
    use crate::state::EventRow;

    fn failed() -> VirtualMachineMigration {
        let mut o = migration("vm-a").with_phase(Phase::Failed);
        o.metadata.namespace = Some("ns".into());
        let s = o.status.as_mut().unwrap();
        s.last_failure = Some(LastFailure {
            phase: Phase::Importing,
            reason: Reason::ImportFailed,
            message: "DataVolume vm-a-disk-0 failed: Unable to process data: \
                      unexpected EOF\nimporter pod restarted 3 times"
                .into(),
            retriable: true,
            time: ts(100),
            cause: None,
        });
        s.message = Some("   ".into());
        ferry_crds::condition::set_condition(
            &mut s.conditions,
            ConditionType::DiskImported,
            ConditionStatus::False,
            Reason::ImportFailed,
            "DataVolume vm-a-disk-0 failed",
            Some(1),
            &ts(100),
        );
        o
    }

    fn event(uid: &str, at: i64, note: &str) -> EventRow {
        EventRow {
            uid: uid.into(),
            kind: EventKind::Migration,
            regarding: ObjKey::new("ns", "vm-a"),
            time: Some(ts(at).0),
            type_: "Warning".into(),
            reason: "R".into(),
            note: note.into(),
            count: 1,
        }
    }

    #[test]
    fn the_failure_comes_first_whole_then_conditions_then_events_newest_first() {
        let o = failed();
        let key = ObjKey::new("ns", "vm-a");
        let mut events = EventStore::default();
        events.upsert(event("old", 10, "started"));
        events.upsert(event("new", 20, "failed: importer pod restarted 3 times"));
        events.upsert(event("blank", 30, " "));
        let m = of(&o, &key, &events);
        let about: Vec<About> = m.iter().map(|m| m.about.clone()).collect();
        assert_eq!(
            about,
            [
                About::Failure,
                About::Condition(ConditionType::DiskImported),
                About::Event("new".into()),
                About::Event("old".into()),
            ],
            "a blank status message and a blank note are no messages"
        );
        // Whole: nothing cut, the line break kept for the copy.
        assert!(
            m[0].text
                .starts_with("ImportFailed in Importing: DataVolume")
        );
        assert!(
            m[0].text.ends_with("restarted 3 times (retriable)"),
            "{}",
            m[0].text
        );
        assert!(m[0].text.contains("EOF\nimporter"));
    }

    #[test]
    fn the_selection_moves_on_wraps_and_survives_an_event_arriving() {
        let o = failed();
        let key = ObjKey::new("ns", "vm-a");
        let mut events = EventStore::default();
        events.upsert(event("e1", 10, "one"));
        let m = of(&o, &key, &events);
        assert_eq!(m.len(), 3);
        // Nothing chosen: the first is shown selected, the key moves to the second.
        let second = next(&m, None);
        assert_eq!(second, Some(About::Condition(ConditionType::DiskImported)));
        let third = next(&m, second.as_ref());
        assert_eq!(third, Some(About::Event("e1".into())));
        assert_eq!(next(&m, third.as_ref()), Some(About::Failure), "wraps");
        // A newer Event lands before e1; the selection stays on e1.
        events.upsert(event("e2", 20, "two"));
        let m = of(&o, &key, &events);
        assert_eq!(position(&m, third.as_ref()), 3);
        // A selection that went away falls back to the first.
        assert_eq!(position(&m, Some(&About::Status)), 0);
        assert_eq!(next(&[], None), None);
    }
}
