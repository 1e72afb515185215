//! Kubernetes Events about our objects, trimmed to what the cockpit shows, kept per object and
//! bounded.

use std::collections::{HashMap, VecDeque};

use super::{ClusterId, ObjKey, Timestamp};

/// How many events are kept per object.
pub const PER_OBJECT: usize = 50;

/// Kind of object an event is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// A `VirtualMachineMigration`.
    Migration,
    /// A `MigrationWave`.
    Wave,
}

/// One event, trimmed.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRow {
    /// The event's uid (events are updated in place as their series grows).
    pub uid: String,
    /// What it is about.
    pub kind: EventKind,
    /// Its namespace and name.
    pub regarding: ObjKey,
    /// Last seen.
    pub time: Option<Timestamp>,
    /// `Normal` or `Warning`.
    pub type_: String,
    /// CamelCase reason.
    pub reason: String,
    /// The human-readable note.
    pub note: String,
    /// How often it happened (series count, at least 1).
    pub count: i32,
}

/// Events per object, newest last.
#[derive(Debug, Default)]
pub struct EventStore {
    by_obj: HashMap<(EventKind, ObjKey), VecDeque<EventRow>>,
}

impl EventStore {
    /// Adds or updates an event.
    pub fn upsert(&mut self, ev: EventRow) {
        let list = self
            .by_obj
            .entry((ev.kind, ev.regarding.clone()))
            .or_default();
        if let Some(pos) = list.iter().position(|e| e.uid == ev.uid) {
            list.remove(pos);
        }
        let at = list
            .iter()
            .rposition(|e| e.time <= ev.time)
            .map_or(0, |p| p + 1);
        list.insert(at, ev);
        while list.len() > PER_OBJECT {
            list.pop_front();
        }
    }

    /// Removes an event.
    pub fn remove(&mut self, kind: EventKind, regarding: &ObjKey, uid: &str) {
        let k = (kind, regarding.clone());
        if let Some(list) = self.by_obj.get_mut(&k) {
            list.retain(|e| e.uid != uid);
            if list.is_empty() {
                self.by_obj.remove(&k);
            }
        }
    }

    /// Replaces every event.
    pub fn replace_all(&mut self, events: Vec<EventRow>) {
        self.by_obj.clear();
        for e in events {
            self.upsert(e);
        }
    }

    /// Replaces every event about objects of one cluster (its re-list).
    pub fn replace_cluster(&mut self, cluster: ClusterId, events: Vec<EventRow>) {
        self.by_obj.retain(|(_, k), _| k.cluster != cluster);
        for e in events {
            self.upsert(e);
        }
    }

    /// Objects with events, and events kept in all.
    pub fn len(&self) -> (usize, usize) {
        (
            self.by_obj.len(),
            self.by_obj.values().map(VecDeque::len).sum(),
        )
    }

    /// No event at all.
    pub fn is_empty(&self) -> bool {
        self.by_obj.is_empty()
    }

    /// Events about one object, oldest first.
    pub fn of(&self, kind: EventKind, key: &ObjKey) -> impl DoubleEndedIterator<Item = &EventRow> {
        self.by_obj.get(&(kind, key.clone())).into_iter().flatten()
    }

    /// Drops everything (scope change).
    pub fn clear(&mut self) {
        self.by_obj.clear();
    }
}
