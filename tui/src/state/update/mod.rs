//! `update`: the one way the state changes. One arm per action, each handled in the module of
//! its concern: `watch` (what the watches deliver), `navigation` (cursor, views, marks, sort),
//! `input` (the filter and command line), `verbs` (mutations) and `session` (clock, scope,
//! messages, leaving).

mod input;
mod navigation;
mod session;
mod verbs;
mod watch;

pub use verbs::{execute, plan};

use super::{Action, Effect, State, View};

/// Applies one action; returns the I/O it asks for.
///
/// # Guarantees
/// Pure: reads no clock (time comes in [`Action::Tick`]) and does no I/O. The board shows
/// only what the watches delivered: a mutation adds a pending marker, never a new phase or spec.
/// Once the screen size is known ([`Action::Resize`]), every action leaves
/// [`State::page`] equal to the rows the screen shows, with the cursor among them.
pub fn update(state: &mut State, action: Action) -> Vec<Effect> {
    let mut fx = vec![];
    match action {
        // --- from the watches and from effects ---
        Action::MigrationApplied(obj) => watch::migration_applied(state, *obj, &mut fx),
        Action::MigrationDeleted(key) => watch::migration_deleted(state, key),
        Action::MigrationsListed(objs) => watch::migrations_listed(state, objs),
        Action::WaveApplied(obj) => watch::wave_applied(state, *obj),
        Action::WaveDeleted(key) => watch::wave_deleted(state, key),
        Action::WavesListed(objs) => watch::waves_listed(state, objs),
        Action::EventApplied(ev) => watch::event_applied(state, ev),
        Action::EventDeleted(ev) => state.events.remove(ev.kind, &ev.regarding, &ev.uid),
        Action::EventsListed(evs) => state.events.replace_all(evs),
        Action::Connection(r, s) => state.conn.set(r, s, state.now),
        Action::Children { key, result } => watch::children(state, key, result),
        Action::Outcome {
            id,
            target,
            outcome,
        } => verbs::outcome(state, id, target, outcome),
        Action::ContextSwitched { context, scope } => {
            session::context_switched(state, context, scope)
        }
        Action::ContextFailed(e) => session::flash(state, e, true),
        // --- time and screen ---
        Action::Tick(now) => session::tick(state, now),
        Action::Resize(screen) => state.screen = Some(screen),
        // --- from the operator ---
        Action::Nav(nav) => navigation::navigate(state, nav),
        Action::Enter => navigation::enter(state, &mut fx),
        Action::Back => navigation::back(state),
        Action::FocusNext => navigation::focus_next(state),
        Action::CycleSort => navigation::cycle_sort(state),
        Action::ReverseSort => navigation::reverse_sort(state),
        Action::CycleWave => navigation::cycle_wave(state),
        Action::ToggleMark => navigation::toggle_mark(state),
        Action::MarkAllVisible => navigation::mark_all_visible(state),
        Action::ShowYaml => navigation::show(state, View::Yaml),
        Action::ShowEvents => navigation::show(state, View::Events),
        Action::ToggleLogs => state.show_logs = !state.show_logs,
        Action::ToggleHelp => navigation::toggle_help(state),
        Action::StartFilter => input::start_filter(state),
        Action::StartCommand => input::start_command(state),
        Action::Edit(edit) => input::edit(state, edit),
        Action::Submit => input::submit(state, &mut fx),
        Action::Command(line) => input::command(state, line.trim(), &mut fx),
        Action::Request(verb) => verbs::request(state, verb),
        Action::TogglePause => verbs::toggle_pause(state),
        Action::Confirm => verbs::confirmed(state, &mut fx),
        Action::Quit => session::quit(state, &mut fx),
    }
    // Many actions change what is on screen (a view, the log pane, a wave line): the page
    // follows here, once, rather than in each of them.
    navigation::relayout(state);
    fx
}
