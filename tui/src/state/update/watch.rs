//! What the watches deliver, applied as it comes: a pending marker ends only when the watch
//! shows its effect, and the details view takes its migration's changes (and re-reads its
//! children) as they come.

use std::sync::Arc;

use ferry_crds::{MigrationWave, VirtualMachineMigration};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::{
    super::{
        Child, ClusterId, ConnState, Effect, EventRow, Expect, ObjKey, Resource, Row, State,
        Target, TargetKind, View, WaveRow,
    },
    navigation::{ask_children, ask_opened, ask_whole, clamp_wave_cursor, resync_cursor},
};
use crate::state::problems::Moved;

/// The distinct namespaces of a list, in their first order.
fn namespaces<'a>(all: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = std::collections::HashSet::new();
    all.filter(|ns| seen.insert(*ns)).collect()
}

/// Notes that a cluster's watches delivered something.
fn heard_from(state: &mut State, c: ClusterId) {
    let now = state.now;
    if let Some(cv) = state.clusters.get_mut(usize::from(c.0)) {
        cv.conn.last_event_at = Some(now);
    }
}

pub(super) fn connection(state: &mut State, c: ClusterId, r: Resource, s: ConnState) {
    let now = state.now;
    if let Some(cv) = state.clusters.get_mut(usize::from(c.0)) {
        cv.conn.set(r, s, now);
    }
}

/// Children of the migration in details, and the migration of the YAML view, are re-read at
/// most this often, on its changes.
const CHILDREN_REFRESH: SignedDuration = SignedDuration::from_secs(2);

pub(super) fn migration_applied(
    state: &mut State,
    c: ClusterId,
    obj: VirtualMachineMigration,
    fx: &mut Vec<Effect>,
) {
    heard_from(state, c);
    let row = Row::of(c, &obj);
    settle_pending(state, TargetKind::Migration, &row.key, |e| {
        expect_met_row(e, &row)
    });
    let key = row.key.clone();
    let moved = Moved::after(state.moved.get(&key), &row, state.now);
    state.moved.insert(key.clone(), moved);
    let now = state.now;
    let due = |asked: Option<(&ObjKey, Timestamp)>| {
        asked.is_none_or(|(k, at)| *k != key || now.duration_since(at) >= CHILDREN_REFRESH)
    };
    // The details view's copy follows the watch; no other row keeps its object.
    if let Some(o) = state.opened.as_mut().filter(|o| o.key == key) {
        let obj = Arc::new(obj);
        o.result = Some(Ok(obj.clone()));
        o.reading = false;
        let refetch = matches!(state.view(), Some(View::Details(k)) if *k == key)
            && due(state.children.as_ref().map(|c| (&c.key, c.asked_at)));
        if refetch {
            ask_children(state, &key, obj, fx);
        }
    }
    let reread = matches!(state.view(), Some(View::Yaml(t)) if t.kind == TargetKind::Migration && t.key == key)
        && due(state.whole.as_ref().map(|w| (&w.key, w.asked_at)));
    if reread {
        ask_whole(state, &key, fx);
    }
    state.access.ask(c, &row.key.namespace, fx);
    state.index.upsert(row);
    resync_cursor(state);
}

pub(super) fn migration_deleted(state: &mut State, key: ObjKey) {
    heard_from(state, key.cluster);
    state.index.remove(&key);
    state.marks.remove(&key);
    state.moved.remove(&key);
    state.pending.remove(&Target {
        kind: TargetKind::Migration,
        key,
    });
    resync_cursor(state);
}

/// The first rows of a list under way: on the board at once, as they are; the finished list
/// settles what is pending and replaces the cluster's rows.
pub(super) fn migrations_arriving(state: &mut State, c: ClusterId, rows: Vec<Row>) {
    heard_from(state, c);
    let now = state.now;
    for row in rows {
        let moved = Moved::after(state.moved.get(&row.key), &row, now);
        state.moved.insert(row.key.clone(), moved);
        state.index.upsert(row);
    }
    resync_cursor(state);
}

pub(super) fn migrations_listed(
    state: &mut State,
    c: ClusterId,
    rows: Vec<Row>,
    fx: &mut Vec<Effect>,
) {
    heard_from(state, c);
    let now = state.now;
    let moved: Vec<(ObjKey, Moved)> = rows
        .iter()
        .map(|r| (r.key.clone(), Moved::after(state.moved.get(&r.key), r, now)))
        .collect();
    // This cluster's memory is the list's: a migration gone meanwhile is forgotten.
    state.moved.retain(|k, _| k.cluster != c);
    state.moved.extend(moved);
    // A (re-)list, the first or after a reconnect: every namespace of the cluster is asked
    // about again, as it may have changed while the watch was away.
    state.access.relisted(c);
    for ns in namespaces(rows.iter().map(|r| r.key.namespace.as_str())) {
        state.access.ask(c, ns, fx);
    }
    for w in state.waves.iter().filter(|w| w.key.cluster == c) {
        state.access.ask(c, &w.key.namespace, fx);
    }
    state.index.replace_cluster(c, rows);
    let index = &state.index;
    state.marks.retain(|k| index.get(k).is_some());
    let pending: Vec<Target> = state
        .pending
        .keys()
        .filter(|t| t.kind == TargetKind::Migration)
        .cloned()
        .collect();
    for t in pending {
        let met = match (state.index.get(&t.key), state.pending.get(&t)) {
            (None, _) => true,
            (Some(row), Some(p)) => expect_met_row(&p.expect, row),
            (Some(_), None) => false,
        };
        if met {
            state.pending.remove(&t);
        }
    }
    // A (re-)list keeps no object, and the changes it caught up with came as no event: the
    // details view's copy is read again (the one it has stays shown meanwhile).
    if let Some(key) = state
        .opened
        .as_ref()
        .filter(|o| o.key.cluster == c)
        .map(|o| o.key.clone())
    {
        ask_opened(state, &key, fx);
    }
    resync_cursor(state);
}

pub(super) fn wave_applied(
    state: &mut State,
    c: ClusterId,
    obj: MigrationWave,
    fx: &mut Vec<Effect>,
) {
    heard_from(state, c);
    let row = WaveRow::from_object(c, obj);
    state.access.ask(c, &row.key.namespace, fx);
    settle_pending(state, TargetKind::Wave, &row.key, |e| {
        expect_met_wave(e, &row)
    });
    match state.waves.binary_search_by(|w| w.key.cmp(&row.key)) {
        Ok(i) => state.waves[i] = row,
        Err(i) => state.waves.insert(i, row),
    }
}

pub(super) fn wave_deleted(state: &mut State, key: ObjKey) {
    heard_from(state, key.cluster);
    state.waves.retain(|w| w.key != key);
    state.pending.remove(&Target {
        kind: TargetKind::Wave,
        key,
    });
    clamp_wave_cursor(state);
}

pub(super) fn waves_listed(
    state: &mut State,
    c: ClusterId,
    objs: Vec<MigrationWave>,
    fx: &mut Vec<Effect>,
) {
    let mut rows: Vec<WaveRow> = objs
        .into_iter()
        .map(|o| WaveRow::from_object(c, o))
        .collect();
    for ns in namespaces(rows.iter().map(|w| w.key.namespace.as_str())) {
        state.access.ask(c, ns, fx);
    }
    state.waves.retain(|w| w.key.cluster != c);
    rows.append(&mut state.waves);
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    state.waves = rows;
    let waves = &state.waves;
    state.pending.retain(|t, p| {
        t.kind != TargetKind::Wave
            || waves
                .iter()
                .find(|w| w.key == t.key)
                .is_some_and(|w| !expect_met_wave(&p.expect, w))
    });
    clamp_wave_cursor(state);
}

pub(super) fn event_applied(state: &mut State, ev: EventRow) {
    heard_from(state, ev.regarding.cluster);
    state.events.upsert(ev);
}

pub(super) fn events_listed(state: &mut State, c: ClusterId, evs: Vec<EventRow>) {
    // Listed events carry the cluster of the watch that listed them.
    let evs = evs
        .into_iter()
        .filter(|e| e.regarding.cluster == c)
        .collect();
    state.events.replace_cluster(c, evs);
}

/// A migration read whole for the YAML view; an answer about one no longer shown is dropped.
pub(super) fn whole(state: &mut State, key: ObjKey, result: Result<String, String>) {
    if let Some(w) = state.whole.as_mut().filter(|w| w.key == key) {
        w.result = Some(result);
    }
}

/// The migration of the details view read; an answer about one no longer shown, or one a watch
/// event overtook, is dropped. A failed re-read keeps the copy shown (the cluster's state says
/// the connection is in trouble); a failed first read is shown in the view.
pub(super) fn read(
    state: &mut State,
    key: ObjKey,
    result: Result<Box<VirtualMachineMigration>, String>,
    fx: &mut Vec<Effect>,
) {
    let Some(o) = state.opened.as_mut().filter(|o| o.key == key && o.reading) else {
        return;
    };
    o.reading = false;
    match result {
        Ok(obj) => {
            let obj: Arc<VirtualMachineMigration> = Arc::from(obj);
            o.result = Some(Ok(obj.clone()));
            // Its children are read once the object that names them is here.
            let asked = state.children.as_ref().filter(|c| c.key == key);
            let due =
                asked.is_none_or(|c| state.now.duration_since(c.asked_at) >= CHILDREN_REFRESH);
            if due {
                ask_children(state, &key, obj, fx);
            }
        }
        Err(e) => {
            if !matches!(o.result, Some(Ok(_))) {
                o.result = Some(Err(e));
            }
        }
    }
}

/// Children read for details; an answer about a migration no longer shown is dropped.
pub(super) fn children(state: &mut State, key: ObjKey, result: Result<Vec<Child>, String>) {
    if let Some(c) = state.children.as_mut().filter(|c| c.key == key) {
        c.result = Some(result);
    }
}

fn settle_pending(
    state: &mut State,
    kind: TargetKind,
    key: &ObjKey,
    met: impl Fn(&Expect) -> bool,
) {
    if state.pending.is_empty() {
        return;
    }
    let t = Target {
        kind,
        key: key.clone(),
    };
    if state.pending.get(&t).is_some_and(|p| met(&p.expect)) {
        state.pending.remove(&t);
    }
}

fn expect_met_row(e: &Expect, row: &Row) -> bool {
    match *e {
        Expect::Cancel => row.cancel,
        Expect::Paused(p) => row.paused == p,
        Expect::RetryAtLeast(n) => row.retry >= n,
        Expect::Gone => row.deleting,
        Expect::Cutover => row.cutover == Some(true),
    }
}

fn expect_met_wave(e: &Expect, w: &WaveRow) -> bool {
    match *e {
        Expect::Cancel => w.cancel,
        Expect::Paused(p) => w.paused == p,
        Expect::RetryAtLeast(n) => w.retry >= n,
        Expect::Gone => w.deleting,
        Expect::Cutover => w.warm.is_some_and(|warm| warm.asked),
    }
}
