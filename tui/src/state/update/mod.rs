//! `update`: the one way the state changes. One arm per action, each handled in the module of
//! its concern: `watch` (what the watches deliver), `navigation` (cursor, views, marks, sort),
//! `input` (the filter and command line), `verbs` (mutations) and `session` (clock, scope,
//! messages, leaving).

mod input;
mod navigation;
mod podlogs;
mod session;
mod verbs;
mod watch;

pub use verbs::{execute, plan, refusal, refusal_text};

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
    if let Some(action) = from_the_world(state, action, &mut fx) {
        by_the_operator(state, action, &mut fx);
    }
    // Many actions change what is on screen (a view, the log pane, a wave line): the page
    // follows here, once, rather than in each of them.
    navigation::relayout(state);
    fx
}

/// Applies an action of the watches, of effects, of time or of the screen; hands any other
/// (the operator's) back.
fn from_the_world(state: &mut State, action: Action, fx: &mut Vec<Effect>) -> Option<Action> {
    match action {
        // --- from the watches and from effects ---
        // An action of a cluster the board no longer has (an old context's watch) is dropped.
        Action::MigrationApplied(c, _)
        | Action::MigrationsListed(c, _)
        | Action::MigrationsArriving(c, _)
        | Action::WaveApplied(c, _)
        | Action::WavesListed(c, _)
        | Action::EventsListed(c, _)
        | Action::Connection(c, ..)
        | Action::AccessReviewed { cluster: c, .. }
            if state.cluster(c).is_none() => {}
        Action::MigrationApplied(c, obj) => watch::migration_applied(state, c, *obj, fx),
        Action::MigrationDeleted(key) => watch::migration_deleted(state, key),
        Action::MigrationsListed(c, rows) => watch::migrations_listed(state, c, rows, fx),
        Action::MigrationsArriving(c, rows) => watch::migrations_arriving(state, c, rows),
        Action::WaveApplied(c, obj) => watch::wave_applied(state, c, *obj, fx),
        Action::WaveDeleted(key) => watch::wave_deleted(state, key),
        Action::WavesListed(c, objs) => watch::waves_listed(state, c, objs, fx),
        Action::EventApplied(ev) => watch::event_applied(state, ev),
        Action::EventDeleted(ev) => state.events.remove(ev.kind, &ev.regarding, &ev.uid),
        Action::EventsListed(c, evs) => watch::events_listed(state, c, evs),
        Action::Connection(c, r, s) => watch::connection(state, c, r, s),
        Action::AccessReviewed {
            cluster,
            namespace,
            generation,
            answers,
        } => state
            .access
            .answered(cluster, namespace, generation, answers),
        Action::Children { key, result } => watch::children(state, key, result),
        Action::Whole { key, result } => watch::whole(state, key, result),
        Action::MigrationRead { key, result } => watch::read(state, key, result, fx),
        Action::PodsFound { key, result } => podlogs::found(state, &key, result, fx),
        Action::LogLines { session, lines } => podlogs::lines(state, session, lines),
        Action::LogEnded { session, result } => podlogs::ended(state, session, result),
        Action::Outcome {
            id,
            target,
            outcome,
        } => verbs::outcome(state, id, target, outcome),
        Action::ContextSwitched(clusters) => session::context_switched(state, clusters),
        Action::ContextFailed(e) => session::flash(state, e, true),
        // --- time and screen ---
        Action::Tick(now) => session::tick(state, now),
        Action::Resize(screen) => state.screen = Some(screen),
        operator => return Some(operator),
    }
    None
}

/// Applies an action of the operator's.
fn by_the_operator(state: &mut State, action: Action, fx: &mut Vec<Effect>) {
    match action {
        Action::Nav(nav) => navigation::navigate(state, nav),
        Action::Enter => navigation::enter(state, fx),
        Action::Back => {
            navigation::back(state);
            if !state.views.iter().any(|v| matches!(v, View::PodLogs(_))) {
                podlogs::left(state, fx);
            }
        }
        Action::FocusNext => navigation::focus_next(state),
        Action::CycleSort => navigation::cycle_sort(state),
        Action::ReverseSort => navigation::reverse_sort(state),
        Action::PickWave => navigation::pick_wave(state),
        Action::ShowTimeline => navigation::show_timeline(state),
        Action::ShowPreflight => navigation::show_preflight(state),
        Action::ShowProblems => navigation::show_problems(state),
        Action::ToggleMark => navigation::toggle_mark(state),
        Action::MarkAllVisible => navigation::mark_all_visible(state),
        Action::ShowYaml => navigation::show_yaml(state, fx),
        Action::ShowEvents => navigation::show(state, View::Events),
        Action::ShowPodLogs => podlogs::show(state, fx),
        Action::NextPod => podlogs::choose(state, 1, fx),
        Action::PrevPod => podlogs::choose(state, -1, fx),
        Action::FollowAgain => podlogs::again(state, fx),
        Action::NextMessage => navigation::next_message(state),
        Action::CopyMessage => session::copy_message(state, fx),
        Action::ToggleLogs => state.show_logs = !state.show_logs,
        Action::ToggleHelp => navigation::toggle_help(state),
        Action::StartFilter => input::start_filter(state),
        Action::StartCommand => input::start_command(state),
        Action::Edit(edit) => input::edit(state, edit),
        Action::Submit => input::submit(state, fx),
        Action::Command(line) => input::command(state, line.trim(), fx),
        Action::Request(verb) => verbs::request(state, verb),
        Action::TogglePause => verbs::toggle_pause(state),
        Action::Confirm => verbs::confirmed(state, fx),
        Action::Quit => session::quit(state, fx),
        // Applied by `from_the_world`, never handed here.
        Action::MigrationApplied(..)
        | Action::MigrationDeleted(_)
        | Action::MigrationsListed(..)
        | Action::MigrationsArriving(..)
        | Action::WaveApplied(..)
        | Action::WaveDeleted(_)
        | Action::WavesListed(..)
        | Action::EventApplied(_)
        | Action::EventDeleted(_)
        | Action::EventsListed(..)
        | Action::Connection(..)
        | Action::AccessReviewed { .. }
        | Action::Children { .. }
        | Action::Whole { .. }
        | Action::MigrationRead { .. }
        | Action::PodsFound { .. }
        | Action::LogLines { .. }
        | Action::LogEnded { .. }
        | Action::Outcome { .. }
        | Action::ContextSwitched(_)
        | Action::ContextFailed(_)
        | Action::Tick(_)
        | Action::Resize(_) => {}
    }
}
