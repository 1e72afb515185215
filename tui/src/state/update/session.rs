//! The session around the board: the clock, bottom-line messages, the context and namespace
//! the watches look at, and leaving.

use k8s_openapi::jiff::SignedDuration;

use super::super::{
    ClusterView, Connection, Effect, Flash, Focus, Scope, State, Timestamp, View, messages,
};
use crate::strings;

/// How long a bottom-line message stays.
const FLASH: SignedDuration = SignedDuration::from_secs(6);

pub(super) fn tick(state: &mut State, now: Timestamp) {
    state.now = now;
    if state.flash.as_ref().is_some_and(|f| f.until <= now) {
        state.flash = None;
    }
}

pub(super) fn flash(state: &mut State, text: String, error: bool) {
    let until = state.now.checked_add(FLASH).unwrap_or(state.now);
    state.flash = Some(Flash { text, error, until });
}

/// `:ns`: the rows of the old scope go at once, the new watches (of every cluster) fill the
/// board.
pub(super) fn rescope(state: &mut State, scope: Scope, fx: &mut Vec<Effect>) {
    reset_data(state);
    for c in &mut state.clusters {
        c.scope = scope.clone();
    }
    fx.push(Effect::Rewatch(scope));
}

pub(super) fn context_switched(state: &mut State, clusters: Vec<ClusterView>) {
    if clusters.is_empty() {
        return;
    }
    reset_data(state);
    state.clusters = clusters;
    let names: Vec<&str> = state.clusters.iter().map(|c| c.context.as_str()).collect();
    let text = strings::context_switched(&names.join(","));
    flash(state, text, false);
}

/// `Y`: the selected message whole, to the terminal's clipboard: in details the one selected
/// there, on the board the selected row's (what its MESSAGE column starts).
pub(super) fn copy_message(state: &mut State, fx: &mut Vec<Effect>) {
    let text = match state.views.last() {
        // Not read yet (or not readable): nothing to copy.
        Some(View::Details(key)) => state.opened(key).and_then(|o| {
            let list = messages::of(o, key, &state.events);
            let at = messages::position(&list, state.message.as_ref());
            list.into_iter().nth(at).map(|m| m.text)
        }),
        None => state.selected_row().map(|r| r.message.clone()),
        Some(
            View::Yaml(_)
            | View::Events(_)
            | View::PodLogs(_)
            | View::Timeline
            | View::Preflight(_)
            | View::PreflightGroup(_)
            | View::Problems(_),
        ) => None,
    };
    match text.filter(|t| !t.is_empty()) {
        Some(text) => {
            flash(state, strings::message::copied(text.chars().count()), false);
            fx.push(Effect::Copy(text));
        }
        None => flash(state, strings::message::NONE.to_owned(), true),
    }
}

pub(super) fn quit(state: &mut State, fx: &mut Vec<Effect>) {
    state.quit = true;
    fx.push(Effect::Quit);
}

/// Forgets everything the old watches delivered and every view over it.
fn reset_data(state: &mut State) {
    state.index.replace_all(vec![]);
    state.waves.clear();
    state.events.clear();
    for c in &mut state.clusters {
        c.conn = Connection::default();
    }
    state.marks.clear();
    state.moved.clear();
    state.pending.clear();
    // Another scope or context: its namespaces are asked about as they appear.
    state.access.clear();
    state.views.clear();
    state.children = None;
    state.opened = None;
    // Its stream stops with the runtime's switch (Effect::Rewatch / SwitchContexts).
    state.podlogs = None;
    state.popup = None;
    state.selected = None;
    state.cursor = 0;
    state.offset = 0;
    state.wave_cursor = 0;
    state.focus = Focus::Board;
}
