//! `update`: the one way the state changes.

use ferry_crds::{Phase, WavePhase};
use k8s_openapi::jiff::SignedDuration;
use serde_json::json;

use super::{
    Action, Children, Confirm, Edit, Effect, Expect, Filter, Flash, Focus, Input, InputKind, Nav,
    ObjKey, Outcome, Pending, Popup, Report, Row, Scope, Sort, State, Target, TargetKind, Verb,
    View, WaveRow,
};
use crate::strings;

/// How long a bottom-line message stays.
const FLASH_SECS: i64 = 6;
/// Children of the migration in details are re-read at most this often, on its changes.
const CHILDREN_REFRESH_SECS: i64 = 2;

/// Applies one action; returns the I/O it asks for.
///
/// # Guarantees
/// Pure: reads no clock (time comes in [`Action::Tick`]) and does no I/O. The board shows
/// only what the watches delivered: a mutation adds a pending marker, never a new phase or spec.
pub fn update(state: &mut State, action: Action) -> Vec<Effect> {
    let mut fx = vec![];
    match action {
        Action::MigrationApplied(obj) => {
            state.conn.last_event_at = Some(state.now);
            let row = Row::from_object(*obj);
            settle_pending(state, TargetKind::Migration, &row.key, |e| {
                expect_met_row(e, &row)
            });
            let key = row.key.clone();
            let refetch = matches!(state.view(), Some(View::Details(k)) if *k == key)
                && state.children.as_ref().is_none_or(|c| {
                    c.key != key
                        || state.now.duration_since(c.asked_at) >= secs(CHILDREN_REFRESH_SECS)
                });
            if refetch {
                fx.push(Effect::FetchChildren(row.obj.clone()));
                state.children = Some(Children {
                    key,
                    asked_at: state.now,
                    result: None,
                });
            }
            state.index.upsert(row);
            resync_cursor(state);
        }
        Action::MigrationDeleted(key) => {
            state.conn.last_event_at = Some(state.now);
            state.index.remove(&key);
            state.marks.remove(&key);
            state.pending.remove(&Target {
                kind: TargetKind::Migration,
                key,
            });
            resync_cursor(state);
        }
        Action::MigrationsListed(objs) => {
            state.conn.last_event_at = Some(state.now);
            let rows: Vec<Row> = objs.into_iter().map(Row::from_object).collect();
            state.index.replace_all(rows);
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
            resync_cursor(state);
        }
        Action::WaveApplied(obj) => {
            state.conn.last_event_at = Some(state.now);
            let row = WaveRow::from_object(*obj);
            settle_pending(state, TargetKind::Wave, &row.key, |e| {
                expect_met_wave(e, &row)
            });
            match state.waves.binary_search_by(|w| w.key.cmp(&row.key)) {
                Ok(i) => state.waves[i] = row,
                Err(i) => state.waves.insert(i, row),
            }
        }
        Action::WaveDeleted(key) => {
            state.conn.last_event_at = Some(state.now);
            state.waves.retain(|w| w.key != key);
            state.pending.remove(&Target {
                kind: TargetKind::Wave,
                key,
            });
            clamp_wave_cursor(state);
        }
        Action::WavesListed(objs) => {
            let mut rows: Vec<WaveRow> = objs.into_iter().map(WaveRow::from_object).collect();
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
        Action::EventApplied(ev) => {
            state.conn.last_event_at = Some(state.now);
            state.events.upsert(ev);
        }
        Action::EventDeleted(ev) => state.events.remove(ev.kind, &ev.regarding, &ev.uid),
        Action::EventsListed(evs) => state.events.replace_all(evs),
        Action::Connection(r, s) => state.conn.set(r, s, state.now),
        Action::Outcome {
            id,
            target,
            outcome,
        } => on_outcome(state, id, target, outcome),
        Action::Children { key, result } => {
            if let Some(c) = state.children.as_mut().filter(|c| c.key == key) {
                c.result = Some(result);
            }
        }
        Action::ContextSwitched { context, scope } => {
            reset_data(state);
            state.context = context;
            state.scope = scope;
            flash(state, strings::context_switched(&state.context), false);
        }
        Action::ContextFailed(e) => flash(state, e, true),
        Action::Tick(now) => {
            state.now = now;
            if state.flash.as_ref().is_some_and(|f| f.until <= now) {
                state.flash = None;
            }
        }
        Action::Viewport(rows) => {
            state.page = rows.max(1);
            ensure_visible(state);
        }
        Action::Nav(nav) => navigate(state, nav),
        Action::Enter => enter(state, &mut fx),
        Action::Back => back(state),
        Action::FocusNext => {
            if state.views.is_empty() {
                state.focus = match state.focus {
                    Focus::Board if !state.waves.is_empty() => Focus::Waves,
                    _ => Focus::Board,
                };
            }
        }
        Action::StartFilter => {
            let text = state.index.filter().raw.clone();
            state.input = Some(Input {
                kind: InputKind::Filter,
                text,
            });
        }
        Action::StartCommand => {
            state.input = Some(Input {
                kind: InputKind::Command,
                text: String::new(),
            });
        }
        Action::Edit(edit) => {
            if let Some(input) = state.input.as_mut() {
                match edit {
                    Edit::Char(c) => input.text.push(c),
                    Edit::Backspace => {
                        input.text.pop();
                    }
                    Edit::Clear => input.text.clear(),
                }
                if input.kind == InputKind::Filter {
                    let f = Filter::parse(&input.text);
                    state.index.set_filter(f);
                    resync_cursor(state);
                }
            }
        }
        Action::Command(line) => command(state, line.trim(), &mut fx),
        Action::Submit => {
            if let Some(input) = state.input.take()
                && input.kind == InputKind::Command
            {
                command(state, input.text.trim(), &mut fx);
            }
        }
        Action::CycleSort => {
            let s = state.index.sort();
            let key = s.key.next(state.all_namespaces());
            state.index.set_sort(Sort {
                key,
                reverse: s.reverse,
            });
            resync_cursor(state);
        }
        Action::ReverseSort => {
            let s = state.index.sort();
            state.index.set_sort(Sort {
                key: s.key,
                reverse: !s.reverse,
            });
            resync_cursor(state);
        }
        Action::CycleWave => {
            let mut names: Vec<&str> = state.waves.iter().map(|w| w.key.name.as_str()).collect();
            names.dedup();
            let next = match state.index.wave_scope() {
                None => names.first().map(|s| (*s).to_owned()),
                Some(cur) => names
                    .iter()
                    .position(|n| *n == cur)
                    .and_then(|i| names.get(i + 1))
                    .map(|s| (*s).to_owned()),
            };
            set_wave_scope(state, next);
        }
        Action::ToggleMark => {
            if let Some(k) = state.selected.clone() {
                if !state.marks.remove(&k) {
                    state.marks.insert(k);
                }
                navigate(state, Nav::Down);
            }
        }
        Action::MarkAllVisible => {
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
        Action::TogglePause => {
            let targets = targets(state);
            let all_paused = !targets.is_empty() && targets.iter().all(|t| is_paused(state, t));
            request(
                state,
                if all_paused {
                    Verb::Resume
                } else {
                    Verb::Pause
                },
            );
        }
        Action::Request(verb) => request(state, verb),
        Action::Confirm => {
            if let Some(Popup::Confirm(c)) = state.popup.take() {
                confirm(state, c, &mut fx);
            }
        }
        Action::ShowYaml => {
            if let Some(t) = focused_target(state) {
                state.views.push(View::Yaml(t));
                state.scroll = 0;
            }
        }
        Action::ShowEvents => {
            if let Some(t) = focused_target(state) {
                state.views.push(View::Events(t));
                state.scroll = 0;
            }
        }
        Action::ToggleLogs => state.show_logs = !state.show_logs,
        Action::ToggleHelp => {
            state.popup = match state.popup {
                Some(Popup::Help) => None,
                _ => Some(Popup::Help),
            }
        }
        Action::Quit => {
            state.quit = true;
            fx.push(Effect::Quit);
        }
    }
    fx
}

fn secs(n: i64) -> SignedDuration {
    SignedDuration::from_secs(n)
}

fn flash(state: &mut State, text: String, error: bool) {
    let until = state.now.checked_add(secs(FLASH_SECS)).unwrap_or(state.now);
    state.flash = Some(Flash { text, error, until });
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
    }
}

fn expect_met_wave(e: &Expect, w: &WaveRow) -> bool {
    match *e {
        Expect::Cancel => w.cancel,
        Expect::Paused(p) => w.paused == p,
        Expect::RetryAtLeast(n) => w.retry >= n,
        Expect::Gone => w.deleting,
    }
}

fn clamp_wave_cursor(state: &mut State) {
    state.wave_cursor = state.wave_cursor.min(state.waves.len().saturating_sub(1));
    if state.waves.is_empty() && state.focus == Focus::Waves {
        state.focus = Focus::Board;
    }
}

/// Puts the cursor back on the selected row after the view changed, or keeps its position
/// when that row left the view.
fn resync_cursor(state: &mut State) {
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

fn navigate(state: &mut State, nav: Nav) {
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
    let page = state.page.max(1);
    let last = len - 1;
    state.cursor = match nav {
        Nav::Up => state.cursor.saturating_sub(1),
        Nav::Down => (state.cursor + 1).min(last),
        Nav::PageUp => state.cursor.saturating_sub(page),
        Nav::PageDown => (state.cursor + page).min(last),
        Nav::Top => 0,
        Nav::Bottom => last,
    };
    state.selected = state.index.visible(state.cursor).map(|r| r.key.clone());
    ensure_visible(state);
}

fn set_wave_scope(state: &mut State, wave: Option<String>) {
    if let Some(w) = wave.as_deref()
        && let Some(i) = state.waves.iter().position(|r| r.key.name == w)
    {
        state.wave_cursor = i;
    }
    state.index.set_wave_scope(wave);
    resync_cursor(state);
}

fn enter(state: &mut State, fx: &mut Vec<Effect>) {
    if state.popup.is_some() || !state.views.is_empty() {
        return;
    }
    if state.focus == Focus::Waves {
        let name = state
            .waves
            .get(state.wave_cursor)
            .map(|w| w.key.name.clone());
        set_wave_scope(state, name);
        state.focus = Focus::Board;
        return;
    }
    let Some(row) = state.selected_row() else {
        return;
    };
    let key = row.key.clone();
    fx.push(Effect::FetchChildren(row.obj.clone()));
    state.children = Some(Children {
        key: key.clone(),
        asked_at: state.now,
        result: None,
    });
    state.views.push(View::Details(key));
    state.scroll = 0;
}

fn back(state: &mut State) {
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

fn command(state: &mut State, line: &str, fx: &mut Vec<Effect>) {
    let mut words = line.split_whitespace();
    let cmd = words.next().unwrap_or("");
    let arg = words.next();
    match (cmd, arg) {
        ("q" | "q!" | "quit" | "qa", _) => {
            state.quit = true;
            fx.push(Effect::Quit);
        }
        ("ns" | "namespace", Some(ns)) => {
            let scope = match ns {
                "all" | "-A" | "*" => Scope::All,
                ns => Scope::Namespace(ns.to_owned()),
            };
            reset_data(state);
            state.scope = scope.clone();
            fx.push(Effect::Rewatch(scope));
        }
        ("wave" | "waves" | "w", arg) => {
            let wave = arg.filter(|a| *a != "all" && *a != "*").map(str::to_owned);
            set_wave_scope(state, wave);
        }
        ("ctx" | "context", Some(ctx)) => fx.push(Effect::SwitchContext(ctx.to_owned())),
        ("", _) => {}
        _ => flash(state, strings::unknown_command(line), true),
    }
}

fn focused_target(state: &State) -> Option<Target> {
    if let Some(v) = state.view() {
        return match v {
            View::Details(k) => Some(Target {
                kind: TargetKind::Migration,
                key: k.clone(),
            }),
            View::Yaml(t) | View::Events(t) => Some(t.clone()),
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

/// What a mutation applies to: the wave under the strip cursor, the migration in details, the
/// marked migrations, else the selected one.
fn targets(state: &State) -> Vec<Target> {
    if state.views.is_empty() && state.focus == Focus::Board && !state.marks.is_empty() {
        let mut keys: Vec<&ObjKey> = state.marks.iter().collect();
        keys.sort();
        return keys
            .into_iter()
            .map(|k| Target {
                kind: TargetKind::Migration,
                key: k.clone(),
            })
            .collect();
    }
    focused_target(state).into_iter().collect()
}

fn is_paused(state: &State, t: &Target) -> bool {
    match t.kind {
        TargetKind::Migration => state.index.get(&t.key).is_some_and(|r| r.paused),
        TargetKind::Wave => state.waves.iter().any(|w| w.key == t.key && w.paused),
    }
}

/// Why `verb` does not apply to `t`, if it does not.
fn skip_reason(state: &State, verb: Verb, t: &Target) -> Option<&'static str> {
    match t.kind {
        TargetKind::Migration => {
            let Some(r) = state.index.get(&t.key) else {
                return Some("not on the board");
            };
            match verb {
                Verb::Cancel if r.phase.is_terminal() => Some("already finished"),
                Verb::Cancel if r.cancel => Some("already cancelling"),
                Verb::Retry if !matches!(r.phase, Phase::Failed | Phase::Cancelled) => {
                    Some("neither failed nor cancelled")
                }
                Verb::Pause if r.phase.is_terminal() => Some("already finished"),
                Verb::Pause if r.paused => Some("already paused"),
                Verb::Resume if !r.paused => Some("not paused"),
                Verb::Delete if r.deleting => Some("already being deleted"),
                _ => None,
            }
        }
        TargetKind::Wave => {
            let Some(w) = state.waves.iter().find(|w| w.key == t.key) else {
                return Some("not in the wave strip");
            };
            match verb {
                Verb::Cancel if w.cancel => Some("already cancelling"),
                Verb::Cancel if w.phase.is_terminal() => Some("already finished"),
                Verb::Retry
                    if w.counts.failed + w.counts.cancelled == 0
                        && w.phase != WavePhase::Failed =>
                {
                    Some("has nothing failed or cancelled")
                }
                Verb::Pause if w.paused => Some("already paused"),
                Verb::Resume if !w.paused => Some("not paused"),
                Verb::Delete if w.deleting => Some("already being deleted"),
                _ => None,
            }
        }
    }
}

/// Splits `all` into the targets `verb` applies to and the skipped ones, with why.
pub fn plan(state: &State, verb: Verb, all: Vec<Target>) -> Confirm {
    let mut targets = vec![];
    let mut skipped = vec![];
    for t in all {
        match skip_reason(state, verb, &t) {
            Some(why) => skipped.push((t, why)),
            None => targets.push(t),
        }
    }
    Confirm {
        verb,
        targets,
        skipped,
    }
}

fn request(state: &mut State, verb: Verb) {
    if state.readonly {
        flash(state, strings::readonly_refused(verb), true);
        return;
    }
    let all = targets(state);
    if all.is_empty() {
        flash(state, strings::NOTHING_SELECTED.to_owned(), true);
        return;
    }
    let Confirm {
        targets, skipped, ..
    } = plan(state, verb, all);
    if targets.is_empty() {
        let (t, why) = &skipped[0];
        let text = strings::nothing_to_do(verb, &t.key.name, why, skipped.len());
        flash(state, text, true);
        return;
    }
    state.popup = Some(Popup::Confirm(Confirm {
        verb,
        targets,
        skipped,
    }));
}

/// The merge patch and what the watch must show for `verb` on `t`, from its current state.
fn patch_for(state: &State, verb: Verb, t: &Target) -> (serde_json::Value, Expect) {
    match verb {
        Verb::Cancel => (json!({"spec": {"cancel": true}}), Expect::Cancel),
        Verb::Pause => (json!({"spec": {"paused": true}}), Expect::Paused(true)),
        Verb::Resume => (json!({"spec": {"paused": false}}), Expect::Paused(false)),
        Verb::Delete => (serde_json::Value::Null, Expect::Gone),
        Verb::Retry => {
            // The resourceVersion makes the raise conditional: two operators pressing `r` at
            // once raise it once, the second gets a conflict.
            let (retry, cancel, rv) = match t.kind {
                TargetKind::Migration => state.index.get(&t.key).map_or((0, false, None), |r| {
                    (r.retry, r.cancel, r.obj.metadata.resource_version.clone())
                }),
                TargetKind::Wave => state
                    .waves
                    .iter()
                    .find(|w| w.key == t.key)
                    .map_or((0, false, None), |w| {
                        (w.retry, w.cancel, w.obj.metadata.resource_version.clone())
                    }),
            };
            let mut spec = json!({"retry": retry + 1});
            if cancel {
                // A cancelled migration starts again only with cancel back to false.
                spec["cancel"] = json!(false);
            }
            let mut patch = json!({"spec": spec});
            if let Some(rv) = rv {
                patch["metadata"] = json!({"resourceVersion": rv});
            }
            (patch, Expect::RetryAtLeast(retry + 1))
        }
    }
}

/// The requests of a confirmed plan; marks its targets pending and starts a [`Report`].
pub fn execute(state: &mut State, c: Confirm) -> Vec<Effect> {
    let mut fx = vec![];
    confirm(state, c, &mut fx);
    fx
}

fn confirm(state: &mut State, c: Confirm, fx: &mut Vec<Effect>) {
    if state.readonly {
        flash(state, strings::readonly_refused(c.verb), true);
        return;
    }
    let id = state.next_id;
    state.next_id += 1;
    for t in &c.targets {
        let (patch, expect) = patch_for(state, c.verb, t);
        fx.push(match c.verb {
            Verb::Delete => Effect::Delete {
                id,
                target: t.clone(),
            },
            _ => Effect::Patch {
                id,
                target: t.clone(),
                patch,
            },
        });
        state.pending.insert(
            t.clone(),
            Pending {
                verb: c.verb,
                expect,
                since: state.now,
            },
        );
    }
    if c.targets.len() > 1 {
        state.popup = Some(Popup::Report);
    }
    state.report = Some(Report {
        id,
        verb: c.verb,
        entries: c.targets.into_iter().map(|t| (t, None)).collect(),
    });
    state.marks.clear();
}

fn on_outcome(state: &mut State, id: u64, target: Target, outcome: Outcome) {
    if !outcome.is_applied() {
        state.pending.remove(&target);
    }
    let Some(report) = state.report.as_mut().filter(|r| r.id == id) else {
        return;
    };
    let failed = !outcome.is_applied();
    if let Some(entry) = report.entries.iter_mut().find(|(t, _)| *t == target) {
        entry.1 = Some(outcome);
    }
    if report.is_complete() {
        let summary = report.summary();
        let any_failed = report
            .entries
            .iter()
            .any(|(_, o)| !o.as_ref().is_some_and(Outcome::is_applied));
        let text = if report.entries.len() == 1 {
            let (t, o) = &report.entries[0];
            strings::single_outcome(report.verb, &t.key.name, o.as_ref())
        } else {
            summary
        };
        flash(state, text, any_failed);
    }
    if failed && state.popup.is_none() {
        state.popup = Some(Popup::Report);
    }
}
