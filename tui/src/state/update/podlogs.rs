//! The pod logs view: opening it, the pods listed, choosing one, the lines of its log and how
//! its stream ended, leaving it.

use super::super::{
    Effect, State, View,
    podlogs::{self, JobRef, PodInfo, PodLogs, Stream},
};
use super::{
    navigation::focused_target,
    session::flash,
    verbs::{refusal, refusal_text},
};
use crate::{state::TargetKind, strings};

/// `L`: the logs of the focused migration's pods; their list is asked for first.
pub(super) fn show(state: &mut State, fx: &mut Vec<Effect>) {
    if state.views.iter().any(|v| matches!(v, View::PodLogs(_))) || state.popup.is_some() {
        return;
    }
    // The API server said it refuses the logs there: say so and which role grants them,
    // rather than open a view that can only say forbidden.
    if let Some(r) = refusal(state, &super::super::Action::ShowPodLogs) {
        flash(state, refusal_text(&r), true);
        return;
    }
    let Some(t) = focused_target(state).filter(|t| t.kind == TargetKind::Migration) else {
        return;
    };
    fx.push(Effect::FetchPods { key: t.key.clone() });
    state.podlogs = Some(PodLogs::new(t.key.clone()));
    state.views.push(View::PodLogs(t.key));
    state.scroll = 0;
}

/// The pods were listed: keep the migration's own, choose the newest Job pod and follow it.
pub(super) fn found(
    state: &mut State,
    key: &crate::state::ObjKey,
    result: Result<(Vec<JobRef>, Vec<PodInfo>), String>,
    fx: &mut Vec<Effect>,
) {
    let Some(logs) = state.podlogs.as_mut().filter(|l| l.key == *key) else {
        return;
    };
    // After `f` the list is read again: the pod followed stays chosen if it is still there.
    let was = logs.pod().map(|p| p.name.clone());
    let result = result.map(|(jobs, pods)| podlogs::pods_of(&jobs, pods));
    if let Ok(pods) = &result {
        logs.selected = was
            .and_then(|n| pods.iter().position(|p| p.name == n))
            .unwrap_or_else(|| podlogs::first_choice(pods));
    }
    logs.pods = Some(result);
    follow(state, fx);
}

/// Starts a new stream of the chosen pod's log (its first container), or says there is none.
fn follow(state: &mut State, fx: &mut Vec<Effect>) {
    let session = state.next_id;
    state.next_id += 1;
    let Some(logs) = state.podlogs.as_mut() else {
        return;
    };
    logs.restart(session);
    let Some(pod) = logs.pod() else {
        logs.stream = Stream::Idle;
        fx.push(Effect::StopLog);
        return;
    };
    let Some(container) = pod.containers.first().cloned() else {
        logs.stream = Stream::Failed(strings::podlogs::NO_CONTAINER.to_owned());
        return;
    };
    fx.push(Effect::FollowLog {
        key: logs.key.clone(),
        session,
        pod: pod.name.clone(),
        container,
    });
    state.scroll = 0;
}

/// Tab / → (`by` 1), BackTab / ← (`by` -1): the next or previous pod, followed at once.
pub(super) fn choose(state: &mut State, by: isize, fx: &mut Vec<Effect>) {
    let Some(logs) = state.podlogs.as_mut() else {
        return;
    };
    let n = match &logs.pods {
        Some(Ok(p)) if p.len() > 1 => p.len(),
        _ => return,
    };
    logs.selected = (logs.selected + n).wrapping_add_signed(by) % n;
    follow(state, fx);
}

/// `f`: list the pods again (a retried Job has new ones) and follow the chosen one afresh.
pub(super) fn again(state: &mut State, fx: &mut Vec<Effect>) {
    let Some(logs) = state.podlogs.as_mut() else {
        return;
    };
    logs.stream = Stream::Opening;
    fx.push(Effect::FetchPods {
        key: logs.key.clone(),
    });
}

/// Lines of stream `session`; those of an earlier stream are dropped.
pub(super) fn lines(state: &mut State, session: u64, lines: Vec<String>) {
    if let Some(logs) = state.podlogs.as_mut().filter(|l| l.session == session) {
        if logs.stream == Stream::Opening {
            logs.stream = Stream::Following;
        }
        logs.append(lines);
    }
}

/// Stream `session` ended or failed.
pub(super) fn ended(state: &mut State, session: u64, result: Result<(), String>) {
    if let Some(logs) = state.podlogs.as_mut().filter(|l| l.session == session) {
        logs.stream = match result {
            Ok(()) => Stream::Ended,
            Err(why) => Stream::Failed(why),
        };
    }
}

/// Leaving the view: its lines go and its stream stops.
pub(super) fn left(state: &mut State, fx: &mut Vec<Effect>) {
    if state.podlogs.take().is_some() {
        fx.push(Effect::StopLog);
    }
}
