//! Moving around the screen: the board cursor and its page, the wave strip, views over the
//! board, marks, sort and the wave scope.

use std::sync::Arc;

use ferry_crds::VirtualMachineMigration;

use super::super::{
    Children, Effect, Filter, Focus, GroupKey, Nav, ObjKey, Opened, Popup, Sort, State, Target,
    TargetKind, View, Whole, index::WaveScope, layout, messages, podlogs, preflight, problems,
};
use super::session::flash;
use crate::strings;

/// Takes the page from the screen layout; when it changed, keeps the cursor on screen.
pub(super) fn relayout(state: &mut State) {
    if let Some(page) = layout::page(state)
        && page != state.page
    {
        state.page = page;
        ensure_visible(state);
    }
}

pub(super) fn clamp_wave_cursor(state: &mut State) {
    state.wave_cursor = state.wave_cursor.min(state.waves.len().saturating_sub(1));
    if state.waves.is_empty() && state.focus == Focus::Waves {
        state.focus = Focus::Board;
    }
}

/// Puts the cursor back on the selected row after the view changed, or keeps its position
/// when that row left the view.
pub(super) fn resync_cursor(state: &mut State) {
    let len = state.index.visible_len();
    if let Some(pos) = state
        .selected
        .as_ref()
        .and_then(|k| state.index.position(k))
    {
        state.cursor = pos;
    } else {
        state.cursor = state.cursor.min(len.saturating_sub(1));
        state.selected = state.index.visible(state.cursor).map(|r| r.key.clone());
    }
    ensure_visible(state);
}

fn ensure_visible(state: &mut State) {
    let len = state.index.visible_len();
    let page = state.page.max(1);
    if state.cursor < state.offset {
        state.offset = state.cursor;
    } else if state.cursor >= state.offset + page {
        state.offset = state.cursor + 1 - page;
    }
    state.offset = state.offset.min(len.saturating_sub(page));
}

pub(super) fn navigate(state: &mut State, nav: Nav) {
    if let Some(Popup::WavePicker { cursor }) = &mut state.popup {
        // Line 0 is "every wave", then one line per wave.
        let last = state.waves.len();
        *cursor = match nav {
            Nav::Up => cursor.saturating_sub(1),
            Nav::Down => (*cursor + 1).min(last),
            Nav::PageUp => cursor.saturating_sub(10),
            Nav::PageDown => (*cursor + 10).min(last),
            Nav::Top => 0,
            Nav::Bottom => last,
        };
        return;
    }
    if state.popup.is_some() {
        return;
    }
    if let Some(View::Problems(selected)) = state.views.last() {
        let to = move_among_problems(state, selected.as_ref(), nav);
        if let Some(View::Problems(selected)) = state.views.last_mut() {
            *selected = to;
        }
        return;
    }
    if let Some(View::Preflight(selected)) = state.views.last() {
        let to = move_among_groups(state, *selected, nav);
        if let Some(View::Preflight(selected)) = state.views.last_mut() {
            *selected = to;
        }
        return;
    }
    if matches!(state.views.last(), Some(View::PodLogs(_))) {
        scroll_logs(state, nav);
        return;
    }
    if !state.views.is_empty() {
        let page = state.page.max(1);
        state.scroll = match nav {
            Nav::Up => state.scroll.saturating_sub(1),
            Nav::Down => state.scroll + 1,
            Nav::PageUp => state.scroll.saturating_sub(page),
            Nav::PageDown => state.scroll + page,
            Nav::Top => 0,
            // The view clamps it to its length.
            Nav::Bottom => usize::MAX / 2,
        };
        return;
    }
    if state.focus == Focus::Waves {
        let last = state.waves.len().saturating_sub(1);
        state.wave_cursor = match nav {
            Nav::Up | Nav::PageUp => state.wave_cursor.saturating_sub(1),
            Nav::Down | Nav::PageDown => (state.wave_cursor + 1).min(last),
            Nav::Top => 0,
            Nav::Bottom => last,
        };
        return;
    }
    let len = state.index.visible_len();
    if len == 0 {
        return;
    }
    state.cursor = moved(state.cursor, len, state.page, nav);
    state.selected = state.index.visible(state.cursor).map(|r| r.key.clone());
    ensure_visible(state);
}

/// Scrolling the pod logs view: in screen rows of its lines wrapped at the screen's width, so
/// the last page is known; at the end it sticks there (`tail`) as lines arrive.
fn scroll_logs(state: &mut State, nav: Nav) {
    let page = state.page.max(1);
    let width = state.screen.map_or(80, |s| usize::from(s.width));
    let Some(logs) = state.podlogs.as_mut() else {
        return;
    };
    let last = podlogs::total_rows(logs, width).saturating_sub(page);
    let from = if logs.tail {
        last
    } else {
        state.scroll.min(last)
    };
    let to = match nav {
        Nav::Up => from.saturating_sub(1),
        Nav::Down => from + 1,
        Nav::PageUp => from.saturating_sub(page),
        Nav::PageDown => from + page,
        Nav::Top => 0,
        Nav::Bottom => last,
    };
    logs.tail = to >= last;
    state.scroll = to.min(last);
}

pub(super) fn set_wave_scope(state: &mut State, wave: Option<WaveScope>) {
    if let Some(w) = wave.as_ref()
        && let Some(i) = state.waves.iter().position(|r| w.covers(&r.key))
    {
        state.wave_cursor = i;
    }
    state.index.set_wave_scope(wave);
    resync_cursor(state);
}

pub(super) fn enter(state: &mut State, fx: &mut Vec<Effect>) {
    if let Some(Popup::WavePicker { cursor }) = state.popup {
        state.popup = None;
        let wave = cursor
            .checked_sub(1)
            .and_then(|i| state.waves.get(i))
            .map(|w| WaveScope::exactly(&w.key));
        set_wave_scope(state, wave);
        return;
    }
    if state.popup.is_some() {
        return;
    }
    if let Some(View::Preflight(selected)) = state.views.last() {
        let key = {
            let groups = board_groups(state);
            groups
                .get(preflight::position(&groups, *selected))
                .map(|g| g.key)
        };
        if let Some(key) = key {
            state.views.push(View::PreflightGroup(key));
            state.scroll = 0;
        }
        return;
    }
    if let Some(View::Problems(selected)) = state.views.last() {
        mark_problem_group(state, selected.clone());
        return;
    }
    if !state.views.is_empty() {
        return;
    }
    if state.focus == Focus::Waves {
        let wave = state
            .waves
            .get(state.wave_cursor)
            .map(|w| WaveScope::exactly(&w.key));
        set_wave_scope(state, wave);
        state.focus = Focus::Board;
        return;
    }
    let Some(key) = state.selected_row().map(|r| r.key.clone()) else {
        return;
    };
    // The row keeps no object: the details read it (and then its children, which it names).
    state.opened = None;
    state.children = None;
    ask_opened(state, &key, fx);
    state.views.push(View::Details(key));
    state.scroll = 0;
    state.message = None;
}

/// `m` in details: the next message is the one the copy key takes; the footer says which, as
/// the view may show it below the page.
pub(super) fn next_message(state: &mut State) {
    let Some(View::Details(key)) = state.views.last() else {
        return;
    };
    // Not read yet (or not readable): no message to select.
    let Some(o) = state.opened(key) else {
        return;
    };
    let list = messages::of(o, key, &state.events);
    state.message = messages::next(&list, state.message.as_ref());
    let at = messages::position(&list, state.message.as_ref());
    let text = match list.get(at).map(|m| &m.about) {
        Some(about) => {
            let what = match about {
                messages::About::Failure => strings::message::FAILURE.to_owned(),
                messages::About::Status => strings::message::STATUS.to_owned(),
                messages::About::Condition(t) => strings::message::condition(t.as_str()),
                messages::About::Event(_) => strings::message::EVENT.to_owned(),
            };
            strings::message::selected(at + 1, list.len(), &what)
        }
        None => strings::message::NONE.to_owned(),
    };
    flash(state, text, false);
}

pub(super) fn back(state: &mut State) {
    if state.input.take().is_some() {
        return;
    }
    if state.popup.take().is_some() {
        return;
    }
    if state.views.pop().is_some() {
        state.scroll = 0;
        if state.views.is_empty() {
            state.children = None;
        }
        if !state.views.iter().any(|v| matches!(v, View::Details(_))) {
            state.opened = None;
        }
        if !state.views.iter().any(|v| matches!(v, View::Yaml(_))) {
            state.whole = None;
        }
        return;
    }
    if state.focus == Focus::Waves {
        state.focus = Focus::Board;
    } else if !state.index.filter().is_empty() {
        state.index.set_filter(Filter::default());
        resync_cursor(state);
    } else if !state.marks.is_empty() {
        state.marks.clear();
    } else if state.index.wave_scope().is_some() {
        set_wave_scope(state, None);
    }
}

pub(super) fn focus_next(state: &mut State) {
    if state.views.is_empty() {
        state.focus = match state.focus {
            Focus::Board if !state.waves.is_empty() => Focus::Waves,
            _ => Focus::Board,
        };
    }
}

pub(super) fn cycle_sort(state: &mut State) {
    let s = state.index.sort();
    let key = s.key.next(state.all_namespaces(), state.multi_cluster());
    state.index.set_sort(Sort {
        key,
        reverse: s.reverse,
    });
    resync_cursor(state);
}

pub(super) fn reverse_sort(state: &mut State) {
    let s = state.index.sort();
    state.index.set_sort(Sort {
        key: s.key,
        reverse: !s.reverse,
    });
    resync_cursor(state);
}

/// `w`: the wave picker, its cursor on the wave shown (or on "every wave").
pub(super) fn pick_wave(state: &mut State) {
    if state.popup.is_some() {
        return;
    }
    let cursor = state
        .index
        .wave_scope()
        .and_then(|w| state.waves.iter().position(|r| w.covers(&r.key)))
        .map_or(0, |i| i + 1);
    state.popup = Some(Popup::WavePicker { cursor });
}

/// `t`: the timeline of the migrations the board shows.
pub(super) fn show_timeline(state: &mut State) {
    if state.views.last() != Some(&View::Timeline) {
        state.views.push(View::Timeline);
        state.scroll = 0;
    }
}

/// `P`: the concerns preflight found about the migrations the board shows, grouped.
pub(super) fn show_preflight(state: &mut State) {
    if !matches!(state.views.last(), Some(View::Preflight(_))) {
        state.views.push(View::Preflight(None));
        state.scroll = 0;
    }
}

/// `!`: the failed and stuck migrations the board shows, grouped by cause and message.
pub(super) fn show_problems(state: &mut State) {
    // From the wave strip: the problems of the wave under its cursor.
    if state.views.is_empty() && state.focus == Focus::Waves {
        let wave = state
            .waves
            .get(state.wave_cursor)
            .map(|w| WaveScope::exactly(&w.key));
        set_wave_scope(state, wave);
    }
    if !matches!(state.views.last(), Some(View::Problems(_))) {
        state.views.push(View::Problems(None));
        state.scroll = 0;
        state.focus = Focus::Board;
    }
}

/// The problem groups of the rows the board shows (filter, wave and namespace as on it).
fn board_problems(state: &State) -> Vec<problems::Group<'_>> {
    problems::groups(
        state.index.visible_range(0, state.index.visible_len()),
        &state.moved,
        state.now,
    )
}

/// The group `nav` moves the problems view's cursor to from `selected`.
fn move_among_problems(
    state: &State,
    selected: Option<&problems::ProblemKey>,
    nav: Nav,
) -> Option<problems::ProblemKey> {
    let groups = board_problems(state);
    let at = problems::position(&groups, selected);
    let to = moved(at, groups.len(), state.page, nav);
    groups.get(to).map(|g| g.key.clone())
}

/// Enter in the problems view: marks the group's migrations (unmarks them when all are
/// marked), so that the board's verbs act on the group with one confirmation.
fn mark_problem_group(state: &mut State, selected: Option<problems::ProblemKey>) {
    let (keys, key) = {
        let groups = board_problems(state);
        let Some(g) = groups.get(problems::position(&groups, selected.as_ref())) else {
            flash(state, strings::problems::NONE.to_owned(), true);
            return;
        };
        let keys: Vec<ObjKey> = g.members.iter().map(|m| m.row.key.clone()).collect();
        (keys, g.key.clone())
    };
    let text = if keys.iter().all(|k| state.marks.contains(k)) {
        for k in &keys {
            state.marks.remove(k);
        }
        strings::problems::unmarked(keys.len())
    } else {
        state.marks.extend(keys.iter().cloned());
        strings::problems::marked(keys.len(), state.marks.len())
    };
    // The cursor stays on the group just marked.
    if let Some(View::Problems(selected)) = state.views.last_mut() {
        *selected = Some(key);
    }
    flash(state, text, false);
}

/// The preflight groups of the rows the board shows (filter, wave and namespace as on it).
fn board_groups(state: &State) -> Vec<preflight::Group<'_>> {
    preflight::groups(state.index.visible_range(0, state.index.visible_len()))
}

/// Where `nav` moves a cursor at `at` in a list of `len` shown `page` lines at a time.
fn moved(at: usize, len: usize, page: usize, nav: Nav) -> usize {
    let last = len.saturating_sub(1);
    let page = page.max(1);
    match nav {
        Nav::Up => at.saturating_sub(1),
        Nav::Down => (at + 1).min(last),
        Nav::PageUp => at.saturating_sub(page),
        Nav::PageDown => (at + page).min(last),
        Nav::Top => 0,
        Nav::Bottom => last,
    }
}

/// The group `nav` moves the preflight view's cursor to from `selected`.
fn move_among_groups(state: &State, selected: Option<GroupKey>, nav: Nav) -> Option<GroupKey> {
    let groups = board_groups(state);
    let at = preflight::position(&groups, selected);
    let to = moved(at, groups.len(), state.page, nav);
    groups.get(to).map(|g| g.key)
}

pub(super) fn toggle_mark(state: &mut State) {
    if let Some(k) = state.selected.clone() {
        if !state.marks.remove(&k) {
            state.marks.insert(k);
        }
        navigate(state, Nav::Down);
    }
}

pub(super) fn mark_all_visible(state: &mut State) {
    let visible: Vec<ObjKey> = state
        .index
        .visible_range(0, state.index.visible_len())
        .map(|r| r.key.clone())
        .collect();
    if !visible.is_empty() && visible.iter().all(|k| state.marks.contains(k)) {
        state.marks.clear();
    } else {
        state.marks.extend(visible);
    }
}

/// Opens a view (YAML, events) of the focused object.
/// `y`: the YAML of the focused object. A migration's is read whole from the API, since the
/// board keeps it cut down; a wave's is the watch's own copy.
pub(super) fn show_yaml(state: &mut State, fx: &mut Vec<Effect>) {
    let Some(t) = focused_target(state) else {
        return;
    };
    if t.kind == TargetKind::Migration {
        ask_whole(state, &t.key, fx);
    }
    state.views.push(View::Yaml(t));
    state.scroll = 0;
}

/// Asks for the children of migration `key` (`obj` as the watch last delivered it); the details
/// view shows them loading until the answer arrives.
pub(super) fn ask_children(
    state: &mut State,
    key: &ObjKey,
    obj: Arc<VirtualMachineMigration>,
    fx: &mut Vec<Effect>,
) {
    fx.push(Effect::FetchChildren {
        key: key.clone(),
        obj,
    });
    state.children = Some(Children {
        key: key.clone(),
        asked_at: state.now,
        result: None,
    });
}

/// Asks for migration `key` for the details view; the copy it has stays shown until the answer
/// arrives (or a watch event, which makes the answer unwanted).
pub(super) fn ask_opened(state: &mut State, key: &ObjKey, fx: &mut Vec<Effect>) {
    fx.push(Effect::FetchMigration { key: key.clone() });
    let shown = state
        .opened
        .take()
        .filter(|o| o.key == *key)
        .and_then(|o| o.result);
    state.opened = Some(Opened {
        key: key.clone(),
        reading: true,
        result: shown,
    });
}

/// Asks for migration `key` whole; the answer it had stays shown until the new one arrives.
pub(super) fn ask_whole(state: &mut State, key: &ObjKey, fx: &mut Vec<Effect>) {
    fx.push(Effect::FetchWhole { key: key.clone() });
    let shown = state
        .whole
        .take()
        .filter(|w| w.key == *key)
        .and_then(|w| w.result);
    state.whole = Some(Whole {
        key: key.clone(),
        asked_at: state.now,
        result: shown,
    });
}

pub(super) fn show(state: &mut State, view: fn(Target) -> View) {
    if let Some(t) = focused_target(state) {
        state.views.push(view(t));
        state.scroll = 0;
    }
}

pub(super) fn toggle_help(state: &mut State) {
    state.popup = match state.popup {
        Some(Popup::Help) => None,
        _ => Some(Popup::Help),
    }
}

/// The one object the keys are about: the one in the innermost view, the wave under the strip
/// cursor, else the selected migration.
pub(super) fn focused_target(state: &State) -> Option<Target> {
    if let Some(v) = state.view() {
        return match v {
            View::Details(k) | View::PodLogs(k) => Some(Target {
                kind: TargetKind::Migration,
                key: k.clone(),
            }),
            View::Yaml(t) | View::Events(t) => Some(t.clone()),
            // The timeline, preflight and problems are about every row shown; verbs there act
            // on none but the marked (problems: Enter marks a group).
            View::Timeline | View::Preflight(_) | View::PreflightGroup(_) | View::Problems(_) => {
                None
            }
        };
    }
    if state.focus == Focus::Waves {
        return state.waves.get(state.wave_cursor).map(|w| Target {
            kind: TargetKind::Wave,
            key: w.key.clone(),
        });
    }
    state.selected.clone().map(|key| Target {
        kind: TargetKind::Migration,
        key,
    })
}
