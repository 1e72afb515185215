//! The session around the board: the clock, bottom-line messages, the context and namespace
//! the watches look at, and leaving.

use k8s_openapi::jiff::SignedDuration;

use super::super::{Effect, Flash, Focus, Scope, State, Timestamp};
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

/// `:ns`: the rows of the old scope go at once, the new watches fill the board.
pub(super) fn rescope(state: &mut State, scope: Scope, fx: &mut Vec<Effect>) {
    reset_data(state);
    state.scope = scope.clone();
    fx.push(Effect::Rewatch(scope));
}

pub(super) fn context_switched(state: &mut State, context: String, scope: Scope) {
    reset_data(state);
    state.context = context;
    state.scope = scope;
    flash(state, strings::context_switched(&state.context), false);
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
    state.conn = Default::default();
    state.marks.clear();
    state.pending.clear();
    state.views.clear();
    state.children = None;
    state.popup = None;
    state.selected = None;
    state.cursor = 0;
    state.offset = 0;
    state.wave_cursor = 0;
    state.focus = Focus::Board;
}
