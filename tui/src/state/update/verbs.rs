//! Mutations: what a verb applies to, the confirm dialog, the requests (the shared intent
//! patches of `ferry_crds::intent`), pending markers and the per-object report.

use ferry_crds::{Phase, WavePhase, intent};

use super::{
    super::{
        Action, Check, Confirm, Effect, Expect, Focus, ObjKey, Outcome, Pending, Popup, Refusal,
        Report, State, Target, TargetKind, Verb, View,
    },
    navigation::focused_target,
    session::flash,
};
use crate::strings::{self, skip};

/// `p`: pause, or resume when everything targeted is paused.
pub(super) fn toggle_pause(state: &mut State) {
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

/// Opens the confirm dialog for `verb`, or says why there is nothing to confirm.
pub(super) fn request(state: &mut State, verb: Verb) {
    if state.readonly {
        flash(state, strings::readonly_refused(verb), true);
        return;
    }
    let all = targets(state);
    if all.is_empty() {
        flash(state, strings::NOTHING_SELECTED.to_owned(), true);
        return;
    }
    // What the API server already said it refuses is not offered for confirmation: every
    // target refused, the key says why and which role grants it; some refused, they are
    // skipped (and listed as such) and the rest confirmed. Unknown counts as allowed.
    let (refused, all): (Vec<Target>, Vec<Target>) = all
        .into_iter()
        .partition(|t| refused(state, Check::of(verb, t.kind), &t.key));
    if all.is_empty()
        && let Some(t) = refused.first()
    {
        let r = Refusal {
            what: verb.as_str(),
            check: Check::of(verb, t.kind),
            cluster: t.key.cluster,
            namespace: t.key.namespace.clone(),
        };
        flash(state, refusal_text(&r), true);
        return;
    }
    let Confirm {
        targets,
        mut skipped,
        ..
    } = plan(state, verb, all);
    skipped.extend(refused.into_iter().map(|t| (t, skip::REFUSED)));
    if let Some((t, why)) = skipped.first()
        && targets.is_empty()
    {
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

/// Whether the API server's answers refuse `check` in the namespace of `key` (unknown: no).
fn refused(state: &State, check: Check, key: &ObjKey) -> bool {
    state.access.allowed(key.cluster, &key.namespace, check) == Some(false)
}

/// The words of a refusal: `retry needs patch on virtualmachinemigrations in apps: grant
/// ferry-operate`.
pub fn refusal_text(r: &Refusal) -> String {
    strings::refused(
        r.what,
        r.check.verb(),
        &r.check.resource_path(),
        &r.namespace,
        r.check.role(),
    )
}

/// Why the key of `action` is refused for what it would act on now: every object it would
/// act on (at least one) is in a namespace whose answer refuses what it needs. `None` for an
/// action that needs nothing of the API, with nothing to act on, or with some object allowed
/// or not known. The footer and the help grey such a key out; pressing it says this.
pub fn refusal(state: &State, action: &Action) -> Option<Refusal> {
    let (what, verb) = match action {
        Action::Request(v) => (v.as_str(), Some(*v)),
        Action::TogglePause => (Verb::Pause.as_str(), Some(Verb::Pause)),
        Action::ShowPodLogs => (strings::hint::POD_LOGS, None),
        _ => return None,
    };
    let check = |kind| verb.map_or(Check::GetPodLogs, |v| Check::of(v, kind));
    let refusal_of = |t: &Target| Refusal {
        what,
        check: check(t.kind),
        cluster: t.key.cluster,
        namespace: t.key.namespace.clone(),
    };
    let Some(verb) = verb else {
        // The pod logs view is about the focused migration alone.
        let t = focused_target(state).filter(|t| t.kind == TargetKind::Migration)?;
        return refused(state, Check::GetPodLogs, &t.key).then(|| refusal_of(&t));
    };
    if on_marks(state) && !state.marks.is_empty() {
        // Drawn every frame: no copy of the marks, and the first allowed one ends it.
        let mut first: Option<&ObjKey> = None;
        for k in &state.marks {
            if !refused(state, Check::of(verb, TargetKind::Migration), k) {
                return None;
            }
            first = Some(first.map_or(k, |f| f.min(k)));
        }
        return first.map(|k| {
            refusal_of(&Target {
                kind: TargetKind::Migration,
                key: k.clone(),
            })
        });
    }
    let t = focused_target(state)?;
    refused(state, Check::of(verb, t.kind), &t.key).then(|| refusal_of(&t))
}

/// The operator said yes to the open confirm dialog.
pub(super) fn confirmed(state: &mut State, fx: &mut Vec<Effect>) {
    if let Some(Popup::Confirm(c)) = state.popup.take() {
        send(state, c, fx);
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

/// The requests of a confirmed plan; marks its targets pending and starts a [`Report`].
pub fn execute(state: &mut State, c: Confirm) -> Vec<Effect> {
    let mut fx = vec![];
    send(state, c, &mut fx);
    fx
}

/// What the API server said to one request.
pub(super) fn outcome(state: &mut State, id: u64, target: Target, outcome: Outcome) {
    if !outcome.is_applied() {
        state.pending.remove(&target);
    }
    let Some(verb) = state.report.as_ref().filter(|r| r.id == id).map(|r| r.verb) else {
        return;
    };
    if let Outcome::Forbidden(m) = &outcome
        && Check::of(verb, target.kind).refused_in(m)
    {
        // RBAC refused it after all (not known before, or changed since): the key is greyed
        // from now. A policy's 403 is about the request, and greys nothing.
        let key = &target.key;
        state
            .access
            .refused_by_server(key.cluster, &key.namespace, Check::of(verb, target.kind));
    }
    let Some(report) = state.report.as_mut().filter(|r| r.id == id) else {
        return;
    };
    let failed = !outcome.is_applied();
    if let Some(entry) = report.entries.iter_mut().find(|(t, _)| *t == target) {
        entry.1 = Some(outcome);
    }
    if report.is_complete() {
        let any_failed = report
            .entries
            .iter()
            .any(|(_, o)| !o.as_ref().is_some_and(Outcome::is_applied));
        let text = match report.entries.as_slice() {
            [(t, Some(Outcome::Forbidden(m)))] if Check::of(report.verb, t.kind).refused_in(m) => {
                let check = Check::of(report.verb, t.kind);
                strings::single_forbidden(
                    report.verb,
                    &t.key.name,
                    &strings::needs(
                        check.verb(),
                        &check.resource_path(),
                        &t.key.namespace,
                        check.role(),
                    ),
                )
            }
            [(t, o)] => strings::single_outcome(report.verb, &t.key.name, o.as_ref()),
            _ => report.summary(),
        };
        flash(state, text, any_failed);
    }
    if failed && state.popup.is_none() {
        state.popup = Some(Popup::Report);
    }
}

/// What a mutation applies to: the wave under the strip cursor, the migration in details, the
/// marked migrations (on the board, and in the problems view, whose Enter marks a group),
/// else the selected one.
fn targets(state: &State) -> Vec<Target> {
    if on_marks(state) && !state.marks.is_empty() {
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

/// Whether a verb here acts on the marked migrations (when there are any).
fn on_marks(state: &State) -> bool {
    match state.views.last() {
        None => state.focus == Focus::Board,
        Some(View::Problems(_)) => true,
        Some(
            View::Details(_)
            | View::Yaml(_)
            | View::Events(_)
            | View::PodLogs(_)
            | View::Timeline
            | View::Preflight(_)
            | View::PreflightGroup(_),
        ) => false,
    }
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
                return Some(skip::NOT_ON_THE_BOARD);
            };
            match verb {
                Verb::Cancel if r.phase.is_terminal() => Some(skip::FINISHED),
                Verb::Cancel if r.cancel => Some(skip::CANCELLING),
                Verb::Retry if !matches!(r.phase, Phase::Failed | Phase::Cancelled) => {
                    Some(skip::NEITHER_FAILED_NOR_CANCELLED)
                }
                Verb::Pause if r.phase.is_terminal() => Some(skip::FINISHED),
                Verb::Pause if r.paused => Some(skip::PAUSED),
                Verb::Resume if !r.paused => Some(skip::NOT_PAUSED),
                Verb::Delete if r.deleting => Some(skip::DELETING),
                Verb::Cutover if r.cutover.is_none() => Some(skip::NOT_WARM),
                Verb::Cutover if r.phase.is_terminal() => Some(skip::FINISHED),
                Verb::Cutover if r.cutover == Some(true) => Some(skip::CUTTING_OVER),
                _ => None,
            }
        }
        TargetKind::Wave => {
            let Some(w) = state.waves.iter().find(|w| w.key == t.key) else {
                return Some(skip::NOT_IN_THE_WAVE_STRIP);
            };
            match verb {
                Verb::Cancel if w.cancel => Some(skip::CANCELLING),
                Verb::Cancel if w.phase.is_terminal() => Some(skip::FINISHED),
                Verb::Retry
                    if w.counts.failed + w.counts.cancelled == 0
                        && w.phase != WavePhase::Failed =>
                {
                    Some(skip::NOTHING_FAILED_OR_CANCELLED)
                }
                Verb::Pause if w.paused => Some(skip::PAUSED),
                Verb::Resume if !w.paused => Some(skip::NOT_PAUSED),
                Verb::Delete if w.deleting => Some(skip::DELETING),
                Verb::Cutover if w.warm.is_none() => Some(skip::COLD_WAVE),
                Verb::Cutover if w.phase.is_terminal() => Some(skip::FINISHED),
                Verb::Cutover if w.cancel => Some(skip::CANCELLING),
                Verb::Cutover if w.warm.is_some_and(|warm| warm.asked) => {
                    Some(skip::WAVE_CUTOVER_ASKED)
                }
                _ => None,
            }
        }
    }
}

/// The request for `verb` on `t` and what the watch must show to end its pending marker.
fn request_for(state: &State, id: u64, verb: Verb, t: &Target) -> (Effect, Expect) {
    let patch = |patch| Effect::Patch {
        id,
        target: t.clone(),
        patch,
    };
    match verb {
        Verb::Cancel => (patch(intent::cancel()), Expect::Cancel),
        Verb::Pause => (patch(intent::pause(true)), Expect::Paused(true)),
        Verb::Resume => (patch(intent::pause(false)), Expect::Paused(false)),
        Verb::Cutover => (patch(intent::cutover()), Expect::Cutover),
        Verb::Delete => (
            Effect::Delete {
                id,
                target: t.clone(),
            },
            Expect::Gone,
        ),
        Verb::Retry => {
            // Raised from the token the board shows, conditional on the version it was read
            // at: two operators pressing `r` at once raise it once.
            let (retry, cancel, rv) = retry_intent(state, t);
            (
                patch(intent::retry(retry, cancel, rv)),
                Expect::RetryAtLeast(retry.saturating_add(1)),
            )
        }
    }
}

/// `spec.retry`, `spec.cancel` and the resourceVersion of `t` as the watch last showed them.
fn retry_intent<'s>(state: &'s State, t: &Target) -> (i64, bool, Option<&'s str>) {
    let found = match t.kind {
        TargetKind::Migration => state.index.get(&t.key).map(|r| {
            // A row made without one (never from the API) patches unconditionally, as before.
            let rv = Some(r.resource_version.as_str()).filter(|v| !v.is_empty());
            (r.retry, r.cancel, rv)
        }),
        TargetKind::Wave => state.waves.iter().find(|w| w.key == t.key).map(|w| {
            (
                w.retry,
                w.cancel,
                w.obj.metadata.resource_version.as_deref(),
            )
        }),
    };
    found.unwrap_or((0, false, None))
}

fn send(state: &mut State, c: Confirm, fx: &mut Vec<Effect>) {
    if state.readonly {
        flash(state, strings::readonly_refused(c.verb), true);
        return;
    }
    let id = state.next_id;
    state.next_id += 1;
    for t in &c.targets {
        let (request, expect) = request_for(state, id, c.verb, t);
        fx.push(request);
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
