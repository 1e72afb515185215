//! Transitions of the cockpit state, table-driven where the cases are alike.

use ferry_crds::{
    Phase, VirtualMachineMigration,
    fixtures::{migration, ts},
};
use serde_json::json;

use super::*;

const C0: ClusterId = ClusterId(0);

fn now() -> Timestamp {
    ts(3600).0
}

fn vmm(name: &str, phase: Phase) -> VirtualMachineMigration {
    let mut o = migration(name).with_phase(phase);
    o.metadata.resource_version = Some("7".into());
    o
}

fn in_wave(name: &str, wave: &str, phase: Phase) -> VirtualMachineMigration {
    let mut o = vmm(name, phase).in_wave(wave).released();
    o.metadata.resource_version = Some("7".into());
    o
}

fn key(name: &str) -> ObjKey {
    ObjKey::new("default", name)
}

fn state_with(objs: Vec<VirtualMachineMigration>) -> State {
    let mut s = State::new("lab", Scope::Namespace("default".into()), false, now());
    update(&mut s, Action::migrations_listed(C0, objs));
    update(
        &mut s,
        Action::Connection(C0, Resource::Migrations, ConnState::Live),
    );
    s
}

fn visible_names(s: &State) -> Vec<String> {
    s.index
        .visible_range(0, s.index.visible_len())
        .map(|r| r.key.name.clone())
        .collect()
}

fn visible_keys(s: &State) -> Vec<ObjKey> {
    s.index
        .visible_range(0, s.index.visible_len())
        .map(|r| r.key.clone())
        .collect()
}

fn type_filter(s: &mut State, text: &str) {
    update(s, Action::StartFilter);
    update(s, Action::Edit(Edit::Clear));
    for c in text.chars() {
        update(s, Action::Edit(Edit::Char(c)));
    }
    update(s, Action::Submit);
}

#[test]
fn filter_tokens_and_words_select_rows() {
    let objs = vec![
        in_wave("web-1", "w1", Phase::Failed),
        in_wave("web-2", "w1", Phase::Importing),
        in_wave("db-1", "w3", Phase::Failed),
        vmm("lone", Phase::Pending),
    ];
    let cases: &[(&str, &[&str])] = &[
        ("", &["db-1", "lone", "web-1", "web-2"]),
        ("phase:Failed", &["db-1", "web-1"]),
        ("phase:failed,pending", &["db-1", "lone", "web-1"]),
        ("wave:w3", &["db-1"]),
        ("phase:Failed wave:w1", &["web-1"]),
        ("web", &["web-1", "web-2"]),
        ("WEB importing", &["web-2"]),
        ("ns:default lone", &["lone"]),
        ("ns:apps", &[]),
        ("w:w1 p:Importing", &["web-2"]),
    ];
    for (text, want) in cases {
        let mut s = state_with(objs.clone());
        type_filter(&mut s, text);
        assert_eq!(visible_names(&s), *want, "filter {text:?}");
    }
}

#[test]
fn unknown_phase_in_a_filter_is_reported_not_fatal() {
    let f = Filter::parse("phase:Running web");
    assert_eq!(f.errors, vec!["unknown phase \"Running\"".to_owned()]);
}

#[test]
fn sort_keys_order_rows_and_reverse_flips_them() {
    let mut a = vmm("a", Phase::Succeeded);
    a.status.as_mut().unwrap().attempts = 3;
    let mut b = vmm("b", Phase::Importing);
    b.status.as_mut().unwrap().progress = Some(ferry_crds::Progress {
        percent: 40.0,
        ..Default::default()
    });
    let c = vmm("c", Phase::Pending);
    let mut s = state_with(vec![c, a, b]);
    assert_eq!(visible_names(&s), ["a", "b", "c"]);
    let cases: &[(SortKey, &[&str])] = &[
        (SortKey::Wave, &["a", "b", "c"]),
        (SortKey::Phase, &["c", "b", "a"]),
        (SortKey::Progress, &["a", "c", "b"]),
        (SortKey::Attempt, &["b", "c", "a"]),
    ];
    for (k, want) in cases {
        while s.index.sort().key != *k {
            update(&mut s, Action::CycleSort);
        }
        assert_eq!(visible_names(&s), *want, "{k:?}");
    }
    update(&mut s, Action::ReverseSort);
    assert_eq!(visible_names(&s), ["a", "c", "b"]);
}

#[test]
fn the_cursor_follows_the_selected_row_when_an_update_moves_it() {
    let mut s = state_with(vec![
        vmm("a", Phase::Pending),
        vmm("b", Phase::Pending),
        vmm("c", Phase::Pending),
    ]);
    while s.index.sort().key != SortKey::Phase {
        update(&mut s, Action::CycleSort);
    }
    update(&mut s, Action::Nav(Nav::Bottom));
    assert_eq!(s.selected, Some(key("c")));
    update(
        &mut s,
        Action::MigrationApplied(C0, Box::new(vmm("c", Phase::Queued))),
    ); // still last
    update(
        &mut s,
        Action::MigrationApplied(C0, Box::new(vmm("a", Phase::Succeeded))),
    ); // a moves to the end
    assert_eq!(visible_names(&s), ["b", "c", "a"]);
    assert_eq!(s.cursor, 1, "cursor moved with c");
    assert_eq!(s.selected, Some(key("c")));
}

/// A deterministic pseudo-random walk of upserts and deletes over two clusters holding the same
/// names: the incrementally kept view must equal a full re-sort after every step.
#[test]
fn incremental_view_equals_a_full_rebuild_after_every_event() {
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for sort_key in SortKey::ALL {
        let mut s = State::with_clusters(
            vec![
                ClusterView::new("a", Scope::All),
                ClusterView::new("b", Scope::All),
            ],
            false,
            now(),
        );
        while s.index.sort().key != sort_key {
            update(&mut s, Action::CycleSort);
        }
        type_filter(&mut s, "wave:w1,w2");
        for _ in 0..400 {
            let name = format!("m{}", rnd(40));
            let c = ClusterId(rnd(2) as u16);
            if rnd(6) == 0 {
                update(
                    &mut s,
                    Action::MigrationDeleted(ObjKey::at(c, "default", &name)),
                );
            } else {
                let mut o = in_wave(
                    &name,
                    &format!("w{}", rnd(3)),
                    Phase::ALL[rnd(Phase::ALL.len() as u64) as usize],
                );
                let st = o.status.as_mut().unwrap();
                st.attempts = rnd(3) as i32;
                st.progress = Some(ferry_crds::Progress {
                    percent: rnd(100) as f64,
                    ..Default::default()
                });
                update(&mut s, Action::MigrationApplied(c, Box::new(o)));
            }
            let incremental = visible_keys(&s);
            let mut rebuilt = Index::default();
            rebuilt.set_sort(s.index.sort());
            rebuilt.set_filter(s.index.filter().clone());
            rebuilt.replace_all(s.index.iter().cloned().collect());
            let full: Vec<ObjKey> = rebuilt
                .visible_range(0, rebuilt.visible_len())
                .map(|r| r.key.clone())
                .collect();
            assert_eq!(incremental, full, "{sort_key:?}");
            let counted: u32 = s.index.counts().map(|(_, n)| n).sum();
            assert_eq!(counted as usize, s.index.len());
        }
    }
}

#[test]
fn space_marks_and_moves_down_and_a_marks_all_visible_then_none() {
    let mut s = state_with(vec![
        vmm("a", Phase::Pending),
        vmm("b", Phase::Pending),
        vmm("c", Phase::Failed),
    ]);
    update(&mut s, Action::ToggleMark);
    assert_eq!(s.selected, Some(key("b")));
    assert!(s.marks.contains(&key("a")));
    update(&mut s, Action::Nav(Nav::Up));
    update(&mut s, Action::ToggleMark);
    assert!(s.marks.is_empty(), "space again unmarks");
    type_filter(&mut s, "phase:Pending");
    update(&mut s, Action::MarkAllVisible);
    assert_eq!(s.marks.len(), 2);
    update(&mut s, Action::MarkAllVisible);
    assert!(s.marks.is_empty());
}

#[test]
fn cancel_on_marks_confirms_patches_and_keeps_a_pending_marker_until_the_watch_shows_it() {
    let mut s = state_with(vec![
        vmm("a", Phase::Importing),
        vmm("b", Phase::Succeeded),
        vmm("c", Phase::Converting),
    ]);
    update(&mut s, Action::MarkAllVisible);
    assert!(
        update(&mut s, Action::Request(Verb::Cancel)).is_empty(),
        "nothing before the yes"
    );
    let Some(Popup::Confirm(c)) = &s.popup else {
        panic!("confirm dialog expected")
    };
    assert_eq!(c.targets.len(), 2);
    assert_eq!(
        c.skipped,
        vec![(
            Target {
                kind: TargetKind::Migration,
                key: key("b")
            },
            "already finished"
        )]
    );
    let fx = update(&mut s, Action::Confirm);
    assert_eq!(fx.len(), 2);
    for e in &fx {
        let Effect::Patch { patch, .. } = e else {
            panic!("patch expected: {e:?}")
        };
        assert_eq!(*patch, json!({"spec": {"cancel": true}}));
    }
    assert!(s.pending_of(&key("a")).is_some());
    assert!(
        s.index.get(&key("a")).is_some_and(|r| !r.cancel),
        "the board never shows what the API lacks"
    );
    assert_eq!(s.popup, Some(Popup::Report));
    assert!(s.marks.is_empty());
    // The watch delivers the change: the marker goes.
    update(
        &mut s,
        Action::MigrationApplied(C0, Box::new(vmm("a", Phase::Importing).cancelled())),
    );
    assert!(s.pending_of(&key("a")).is_none());
    assert!(s.pending_of(&key("c")).is_some());
}

#[test]
fn failed_outcomes_clear_the_pending_marker_and_show_the_report() {
    let cases = [
        (Outcome::Forbidden("no".into()), "forbidden"),
        (Outcome::Conflict, "conflict"),
        (Outcome::NotFound, "not found"),
        (Outcome::Failed("boom".into()), "failed"),
    ];
    for (outcome, word) in cases {
        let mut s = state_with(vec![vmm("a", Phase::Importing)]);
        update(&mut s, Action::Request(Verb::Pause));
        let fx = update(&mut s, Action::Confirm);
        let Some(Effect::Patch { id, target, patch }) = fx.first().cloned() else {
            panic!()
        };
        assert_eq!(patch, json!({"spec": {"paused": true}}));
        assert_eq!(s.popup, None, "a single applied action needs no popup");
        update(
            &mut s,
            Action::Outcome {
                id,
                target,
                outcome,
            },
        );
        assert!(s.pending_of(&key("a")).is_none(), "{word}");
        assert_eq!(s.popup, Some(Popup::Report), "{word}");
        let flash = s.flash.clone().unwrap();
        assert!(
            flash.error && flash.text.contains(word),
            "{word}: {flash:?}"
        );
    }
}

#[test]
fn an_applied_outcome_keeps_the_marker_until_the_watch() {
    let mut s = state_with(vec![vmm("a", Phase::Importing)]);
    update(&mut s, Action::Request(Verb::Pause));
    let fx = update(&mut s, Action::Confirm);
    let Some(Effect::Patch { id, target, .. }) = fx.first().cloned() else {
        panic!()
    };
    update(
        &mut s,
        Action::Outcome {
            id,
            target,
            outcome: Outcome::Applied,
        },
    );
    assert!(s.pending_of(&key("a")).is_some());
    update(
        &mut s,
        Action::MigrationApplied(C0, Box::new(vmm("a", Phase::Importing).paused())),
    );
    assert!(s.pending_of(&key("a")).is_none());
}

#[test]
fn cutover_asks_the_warm_migrations_marked_and_skips_cold_finished_and_asked_ones() {
    let warm = |name: &str, phase: Phase, asked: bool| {
        let mut o = vmm(name, phase);
        o.spec.mode = ferry_crds::MigrationMode::Warm;
        o.spec.warm = Some(ferry_crds::WarmSpec {
            cutover: asked,
            ..Default::default()
        });
        o
    };
    let mut s = state_with(vec![
        warm("w", Phase::CuttingOver, false),
        warm("asked", Phase::CuttingOver, true),
        warm("done", Phase::Succeeded, false),
        vmm("cold", Phase::Importing),
    ]);
    update(&mut s, Action::MarkAllVisible);
    update(&mut s, Action::Request(Verb::Cutover));
    let Some(Popup::Confirm(c)) = &s.popup else {
        panic!("{:?}", s.popup)
    };
    let names: Vec<&str> = c.targets.iter().map(|t| t.key.name.as_str()).collect();
    assert_eq!(names, vec!["w"]);
    let mut why: Vec<(&str, &str)> = c
        .skipped
        .iter()
        .map(|(t, why)| (t.key.name.as_str(), *why))
        .collect();
    why.sort_unstable();
    assert_eq!(
        why,
        vec![
            ("asked", crate::strings::skip::CUTTING_OVER),
            ("cold", crate::strings::skip::NOT_WARM),
            ("done", crate::strings::skip::FINISHED),
        ]
    );
    let fx = update(&mut s, Action::Confirm);
    let Some(Effect::Patch { patch, .. }) = fx.first() else {
        panic!("{fx:?}")
    };
    assert_eq!(patch, &json!({"spec": {"warm": {"cutover": true}}}));
    assert!(s.pending_of(&key("w")).is_some());
    update(
        &mut s,
        Action::MigrationApplied(C0, Box::new(warm("w", Phase::CuttingOver, true))),
    );
    assert!(
        s.pending_of(&key("w")).is_none(),
        "the watch showing spec.warm.cutover ends the marker"
    );
}

#[test]
fn retry_raises_the_token_conditionally_and_clears_cancel_of_a_cancelled_one() {
    let mut failed = vmm("f", Phase::Failed).with_retry(2);
    failed.metadata.resource_version = Some("41".into());
    let mut cancelled = vmm("x", Phase::Cancelled).cancelled();
    cancelled.metadata.resource_version = Some("42".into());
    let mut s = state_with(vec![failed, cancelled, vmm("ok", Phase::Importing)]);
    update(&mut s, Action::MarkAllVisible);
    update(&mut s, Action::Request(Verb::Retry));
    let fx = update(&mut s, Action::Confirm);
    let patches: Vec<_> = fx
        .iter()
        .map(|e| match e {
            Effect::Patch { target, patch, .. } => (target.key.name.clone(), patch.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        patches,
        vec![
            (
                "f".into(),
                json!({"spec": {"retry": 3}, "metadata": {"resourceVersion": "41"}})
            ),
            (
                "x".into(),
                json!({"spec": {"retry": 1, "cancel": false}, "metadata": {"resourceVersion": "42"}})
            ),
        ]
    );
}

#[test]
fn p_pauses_and_resumes_when_everything_targeted_is_paused() {
    let mut s = state_with(vec![vmm("a", Phase::Importing).paused()]);
    update(&mut s, Action::TogglePause);
    assert!(matches!(&s.popup, Some(Popup::Confirm(c)) if c.verb == Verb::Resume));
    let mut s = state_with(vec![vmm("a", Phase::Importing)]);
    update(&mut s, Action::TogglePause);
    assert!(matches!(&s.popup, Some(Popup::Confirm(c)) if c.verb == Verb::Pause));
}

#[test]
fn delete_sends_a_delete_and_the_marker_goes_with_the_object() {
    let mut s = state_with(vec![vmm("a", Phase::Importing)]);
    update(&mut s, Action::Request(Verb::Delete));
    let fx = update(&mut s, Action::Confirm);
    assert!(matches!(fx.as_slice(), [Effect::Delete { target, .. }] if target.key == key("a")));
    assert!(s.pending_of(&key("a")).is_some());
    update(&mut s, Action::MigrationDeleted(key("a")));
    assert!(s.pending.is_empty());
    assert_eq!(s.index.len(), 0);
    assert_eq!(s.selected, None);
}

#[test]
fn readonly_refuses_every_mutation_without_effects() {
    for verb in [
        Verb::Cancel,
        Verb::Retry,
        Verb::Pause,
        Verb::Resume,
        Verb::Delete,
    ] {
        let mut s = state_with(vec![vmm("a", Phase::Failed).paused()]);
        s.readonly = true;
        assert!(update(&mut s, Action::Request(verb)).is_empty());
        assert!(s.popup.is_none());
        assert!(
            s.flash
                .as_ref()
                .is_some_and(|f| f.text.contains("read-only")),
            "{verb:?}"
        );
        assert!(update(&mut s, Action::Confirm).is_empty());
    }
}

#[test]
fn nothing_applicable_flashes_why_instead_of_asking() {
    let mut s = state_with(vec![vmm("a", Phase::Succeeded)]);
    update(&mut s, Action::Request(Verb::Cancel));
    assert!(s.popup.is_none());
    assert_eq!(
        s.flash.unwrap().text,
        "nothing to cancel: a is already finished"
    );
}

#[test]
fn connection_states_mark_the_board_stale_and_live_again() {
    let mut s = state_with(vec![vmm("a", Phase::Importing)]);
    assert!(!s.is_stale());
    let retry_at = ts(3605).0;
    let steps = [
        (
            ConnState::Reconnecting {
                retry_at,
                attempt: 1,
                error: "refused".into(),
            },
            true,
        ),
        (ConnState::Connecting, true),
        (ConnState::Listing, true),
        (ConnState::Live, false),
        (ConnState::Forbidden("no".into()), true),
        (ConnState::Live, false),
        (ConnState::CrdMissing, true),
    ];
    for (st, stale) in steps {
        update(
            &mut s,
            Action::Connection(C0, Resource::Migrations, st.clone()),
        );
        assert_eq!(s.is_stale(), stale, "{st:?}");
        assert_eq!(s.index.len(), 1, "the last board stays");
    }
    // Events failing do not make the board stale, but show in the header's worst state.
    let mut s = state_with(vec![]);
    update(
        &mut s,
        Action::Connection(C0, Resource::Events, ConnState::Forbidden("no".into())),
    );
    assert!(!s.is_stale());
    assert_eq!(s.clusters[0].conn.worst().0, Resource::Events);
}

#[test]
fn nothing_is_stale_before_the_first_list() {
    let mut s = State::new("lab", Scope::All, false, now());
    update(
        &mut s,
        Action::Connection(C0, Resource::Migrations, ConnState::CrdMissing),
    );
    assert!(!s.is_stale());
}

#[test]
fn a_relist_replaces_rows_and_forgets_marks_of_vanished_ones() {
    let mut s = state_with(vec![vmm("a", Phase::Pending), vmm("b", Phase::Pending)]);
    update(&mut s, Action::MarkAllVisible);
    update(
        &mut s,
        Action::migrations_listed(C0, vec![vmm("b", Phase::Queued), vmm("c", Phase::Pending)]),
    );
    assert_eq!(visible_names(&s), ["b", "c"]);
    assert_eq!(s.marks.len(), 1);
    assert!(s.marks.contains(&key("b")));
    assert_eq!(s.index.count(Phase::Queued), 1);
}

#[test]
fn commands_switch_namespace_wave_context_and_quit() {
    let mut s = state_with(vec![
        in_wave("a", "w1", Phase::Pending),
        in_wave("b", "w2", Phase::Pending),
    ]);
    let fx = update(&mut s, Action::Command("wave w2".into()));
    assert!(fx.is_empty());
    assert_eq!(visible_names(&s), ["b"]);
    update(&mut s, Action::Command("wave all".into()));
    assert_eq!(visible_names(&s), ["a", "b"]);
    let fx = update(&mut s, Action::Command("ns apps".into()));
    assert_eq!(fx, vec![Effect::Rewatch(Scope::Namespace("apps".into()))]);
    assert_eq!(
        s.index.len(),
        0,
        "the old namespace's rows are not shown under the new scope"
    );
    assert_eq!(s.clusters[0].scope, Scope::Namespace("apps".into()));
    assert_eq!(
        update(&mut s, Action::Command("ns all".into())),
        vec![Effect::Rewatch(Scope::All)]
    );
    assert_eq!(
        update(&mut s, Action::Command("ctx prod".into())),
        vec![Effect::SwitchContexts(vec!["prod".into()])]
    );
    update(&mut s, Action::Command("frobnicate".into()));
    assert!(s.flash.as_ref().is_some_and(|f| f.error));
    assert_eq!(
        update(&mut s, Action::Command("q".into())),
        vec![Effect::Quit]
    );
    assert!(s.quit);
}

#[test]
fn the_wave_strip_takes_actions_for_the_wave() {
    let mut s = state_with(vec![in_wave("a", "w1", Phase::Pending)]);
    let mut w = ferry_crds::fixtures::wave("w1", 3);
    w.metadata.resource_version = Some("9".into());
    update(&mut s, Action::WavesListed(C0, vec![w.clone()]));
    update(&mut s, Action::FocusNext);
    assert_eq!(s.focus, Focus::Waves);
    update(&mut s, Action::Request(Verb::Pause));
    let fx = update(&mut s, Action::Confirm);
    assert!(
        matches!(fx.as_slice(), [Effect::Patch { target, .. }] if target.kind == TargetKind::Wave && target.key == key("w1"))
    );
    update(&mut s, Action::WaveApplied(C0, Box::new(w.paused())));
    assert!(s.pending.is_empty());
    update(&mut s, Action::Enter);
    assert_eq!(s.focus, Focus::Board);
    assert_eq!(s.index.wave_scope(), Some(&WaveScope::exactly(&key("w1"))));
}

#[test]
fn x_on_a_warm_wave_asks_then_sets_its_cutover_and_a_cold_one_is_refused_unpatched() {
    let mut s = state_with(vec![in_wave("a", "warm", Phase::CuttingOver)]);
    let mut warm = ferry_crds::fixtures::wave("warm", 2);
    warm.spec.template.mode = ferry_crds::MigrationMode::Warm;
    warm.metadata.resource_version = Some("9".into());
    let cold = ferry_crds::fixtures::wave("cold", 2);
    update(&mut s, Action::WavesListed(C0, vec![cold, warm.clone()]));
    update(&mut s, Action::FocusNext);
    assert_eq!(s.focus, Focus::Waves);
    assert_eq!(s.selected_wave().map(|w| w.key.name.as_str()), Some("cold"));
    // A cold wave: refused in the footer, nothing asked, nothing sent.
    assert!(update(&mut s, Action::Request(Verb::Cutover)).is_empty());
    assert_eq!(s.popup, None);
    let flash = s.flash.clone().unwrap();
    assert!(flash.error, "{flash:?}");
    assert_eq!(
        flash.text,
        crate::strings::nothing_to_do(Verb::Cutover, "cold", crate::strings::skip::COLD_WAVE, 1)
    );
    assert!(update(&mut s, Action::Confirm).is_empty());
    assert!(s.pending.is_empty());
    // The warm one: asked, then the wave's own spec.warm.cutover patched.
    update(&mut s, Action::Nav(Nav::Down));
    assert_eq!(s.selected_wave().map(|w| w.key.name.as_str()), Some("warm"));
    update(&mut s, Action::Request(Verb::Cutover));
    let Some(Popup::Confirm(c)) = &s.popup else {
        panic!("{:?}", s.popup)
    };
    assert_eq!(c.verb, Verb::Cutover);
    assert_eq!(
        c.targets,
        vec![Target {
            kind: TargetKind::Wave,
            key: key("warm")
        }]
    );
    let fx = update(&mut s, Action::Confirm);
    let [Effect::Patch { target, patch, .. }] = fx.as_slice() else {
        panic!("{fx:?}")
    };
    assert_eq!(target.kind, TargetKind::Wave);
    assert_eq!(target.key, key("warm"));
    assert_eq!(patch, &json!({"spec": {"warm": {"cutover": true}}}));
    assert!(s.pending.values().any(|p| p.verb == Verb::Cutover));
    // The watch showing the wave's spec.warm.cutover ends the marker; X again has nothing to do.
    warm.spec.warm = Some(ferry_crds::WarmSpec {
        cutover: true,
        ..Default::default()
    });
    update(&mut s, Action::WaveApplied(C0, Box::new(warm.clone())));
    assert!(s.pending.is_empty());
    // Asked already, or being cancelled (the wave then cuts nothing over): nothing to do.
    let refused = |s: &mut State, why: &str| {
        assert!(update(s, Action::Request(Verb::Cutover)).is_empty());
        assert_eq!(s.popup, None);
        assert!(
            s.flash.as_ref().is_some_and(|f| f.text.contains(why)),
            "{:?}",
            s.flash
        );
    };
    refused(&mut s, crate::strings::skip::WAVE_CUTOVER_ASKED);
    warm.spec.warm = None;
    update(&mut s, Action::WaveApplied(C0, Box::new(warm.cancelled())));
    refused(&mut s, crate::strings::skip::CANCELLING);
}

#[test]
fn esc_backs_out_of_input_popup_view_then_filter_marks_and_wave() {
    let mut s = state_with(vec![
        in_wave("a", "w1", Phase::Pending),
        in_wave("b", "w1", Phase::Pending),
    ]);
    update(&mut s, Action::Command("wave w1".into()));
    update(&mut s, Action::ToggleMark);
    type_filter(&mut s, "a");
    update(&mut s, Action::Enter);
    update(&mut s, Action::ToggleHelp);
    update(&mut s, Action::StartCommand);
    let steps: [fn(&State) -> bool; 6] = [
        |s| s.input.is_none() && s.popup.is_some(),
        |s| s.popup.is_none() && !s.views.is_empty(),
        |s| s.views.is_empty() && !s.index.filter().is_empty(),
        |s| s.index.filter().is_empty() && !s.marks.is_empty(),
        |s| s.marks.is_empty() && s.index.wave_scope().is_some(),
        |s| s.index.wave_scope().is_none(),
    ];
    for (i, check) in steps.iter().enumerate() {
        update(&mut s, Action::Back);
        assert!(check(&s), "after Esc #{}", i + 1);
    }
}

/// The phase of the details view's copy of `name`.
fn opened_phase(s: &State, name: &str) -> Option<Phase> {
    s.opened(&key(name)).map(VirtualMachineMigration::phase)
}

#[test]
fn details_read_their_migration_then_its_children_and_then_follow_the_watch() {
    let mut s = state_with(vec![vmm("a", Phase::Importing)]);
    let fx = update(&mut s, Action::Enter);
    // Rows keep no object: the details ask for theirs, and nothing else yet.
    assert_eq!(fx, vec![Effect::FetchMigration { key: key("a") }]);
    assert_eq!(s.view(), Some(&View::Details(key("a"))));
    assert_eq!(s.opened(&key("a")), None, "not read yet");
    // The answer: the copy the view draws, and its children are asked for from it.
    let fx = update(
        &mut s,
        Action::MigrationRead {
            key: key("a"),
            result: Ok(Box::new(vmm("a", Phase::Importing))),
        },
    );
    assert!(
        matches!(fx.as_slice(), [Effect::FetchChildren { obj: o, .. }] if o.metadata.name.as_deref() == Some("a")),
        "{fx:?}"
    );
    assert_eq!(opened_phase(&s, "a"), Some(Phase::Importing));
    // A change within two seconds of the children's read: the copy follows, children wait.
    let mut changed = vmm("a", Phase::Importing);
    changed.status.as_mut().unwrap().message = Some("disk 1 of 2".into());
    let fx = update(&mut s, Action::MigrationApplied(C0, Box::new(changed)));
    assert!(fx.is_empty(), "{fx:?}");
    let message = |s: &State| {
        s.opened(&key("a"))
            .and_then(|o| o.status.as_ref()?.message.clone())
    };
    assert_eq!(message(&s).as_deref(), Some("disk 1 of 2"));
    update(&mut s, Action::Tick(ts(3602).0));
    let fx = update(
        &mut s,
        Action::MigrationApplied(C0, Box::new(vmm("a", Phase::CreatingVM))),
    );
    assert_eq!(fx.len(), 1);
    assert_eq!(
        opened_phase(&s, "a"),
        Some(Phase::CreatingVM),
        "the watch's copy"
    );
    update(
        &mut s,
        Action::Children {
            key: key("a"),
            result: Ok(vec![]),
        },
    );
    assert_eq!(
        s.children.as_ref().and_then(|c| c.result.clone()),
        Some(Ok(vec![]))
    );
    // Another migration's change keeps no object.
    update(
        &mut s,
        Action::MigrationApplied(C0, Box::new(vmm("b", Phase::Importing))),
    );
    assert_eq!(s.opened(&key("b")), None);
    assert_eq!(opened_phase(&s, "a"), Some(Phase::CreatingVM));
    update(&mut s, Action::Back);
    assert_eq!(s.opened, None, "nothing kept once the view is closed");
    assert_eq!(s.children, None);
}

#[test]
fn a_read_the_watch_overtook_is_dropped_and_a_re_list_reads_again_keeping_the_copy_shown() {
    let mut s = state_with(vec![vmm("a", Phase::Importing), vmm("b", Phase::Queued)]);
    update(&mut s, Action::Enter);
    // The watch's copy arrives before the read's answer: the answer is older news.
    update(
        &mut s,
        Action::MigrationApplied(C0, Box::new(vmm("a", Phase::CreatingVM))),
    );
    let fx = update(
        &mut s,
        Action::MigrationRead {
            key: key("a"),
            result: Ok(Box::new(vmm("a", Phase::Importing))),
        },
    );
    assert!(fx.is_empty(), "{fx:?}");
    assert_eq!(opened_phase(&s, "a"), Some(Phase::CreatingVM));
    // A re-list keeps no object and caught up without events: the copy is read again, and
    // stays shown meanwhile (and the namespace's permissions are asked again, as after every
    // re-list).
    let fx = update(
        &mut s,
        Action::migrations_listed(C0, vec![vmm("a", Phase::Starting), vmm("b", Phase::Queued)]),
    );
    assert_eq!(
        fx,
        vec![
            Effect::ReviewAccess {
                cluster: C0,
                namespace: "default".into(),
                generation: 0
            },
            Effect::FetchMigration { key: key("a") }
        ]
    );
    assert_eq!(opened_phase(&s, "a"), Some(Phase::CreatingVM));
    // The re-read fails (the cluster went away): the copy stays, no panic, no exit.
    update(
        &mut s,
        Action::MigrationRead {
            key: key("a"),
            result: Err("connection refused".into()),
        },
    );
    assert_eq!(opened_phase(&s, "a"), Some(Phase::CreatingVM));
    // An answer about a migration not shown is dropped.
    update(
        &mut s,
        Action::MigrationRead {
            key: key("b"),
            result: Ok(Box::new(vmm("b", Phase::Queued))),
        },
    );
    assert_eq!(s.opened(&key("b")), None);
    // A re-list of another cluster reads nothing.
    assert!(
        update(&mut s, Action::MigrationsListed(ClusterId(1), vec![])).is_empty(),
        "no such cluster: dropped"
    );
}

#[test]
fn details_that_cannot_read_their_migration_say_why_and_have_no_message_to_copy() {
    let mut s = state_with(vec![vmm("a", Phase::Importing)]);
    update(&mut s, Action::Enter);
    // While it is read: nothing to copy or select, and no panic.
    assert!(update(&mut s, Action::CopyMessage).is_empty());
    update(&mut s, Action::NextMessage);
    assert_eq!(s.message, None);
    update(
        &mut s,
        Action::MigrationRead {
            key: key("a"),
            result: Err("virtualmachinemigrations \"a\" is forbidden".into()),
        },
    );
    assert!(matches!(
        s.opened.as_ref().and_then(|o| o.result.clone()),
        Some(Err(e)) if e.contains("forbidden")
    ));
    assert!(update(&mut s, Action::CopyMessage).is_empty());
    assert!(s.flash.as_ref().is_some_and(|f| f.error));
    // The children are never asked for without the object that names them.
    assert_eq!(s.children, None);
}

#[test]
fn the_yaml_view_reads_the_migration_whole_and_again_on_its_changes_at_most_every_two_seconds() {
    let mut s = state_with(vec![vmm("a", Phase::Importing)]);
    let fx = update(&mut s, Action::ShowYaml);
    assert_eq!(fx, vec![Effect::FetchWhole { key: key("a") }]);
    assert_eq!(s.whole.as_ref().map(|w| w.result.clone()), Some(None));
    update(
        &mut s,
        Action::Whole {
            key: key("a"),
            result: Ok("kind: VirtualMachineMigration\n".into()),
        },
    );
    // A change within two seconds of the read: not read again.
    let fx = update(
        &mut s,
        Action::MigrationApplied(C0, Box::new(vmm("a", Phase::Importing))),
    );
    assert!(fx.is_empty(), "{fx:?}");
    update(&mut s, Action::Tick(ts(3602).0));
    let fx = update(
        &mut s,
        Action::MigrationApplied(C0, Box::new(vmm("a", Phase::CreatingVM))),
    );
    assert_eq!(fx, vec![Effect::FetchWhole { key: key("a") }]);
    assert_eq!(
        s.whole.as_ref().and_then(|w| w.result.clone()),
        Some(Ok("kind: VirtualMachineMigration\n".into())),
        "the last answer stays shown while the next is read"
    );
    // An answer about another migration is not this view's.
    update(
        &mut s,
        Action::Whole {
            key: key("b"),
            result: Err("gone".into()),
        },
    );
    assert!(matches!(
        s.whole.as_ref().and_then(|w| w.result.clone()),
        Some(Ok(_))
    ));
    update(&mut s, Action::Back);
    assert_eq!(s.whole, None, "nothing kept once the view is closed");
}

#[test]
fn paging_moves_by_the_viewport_and_keeps_the_cursor_on_screen() {
    let objs: Vec<_> = (0..50)
        .map(|i| vmm(&format!("m{i:02}"), Phase::Pending))
        .collect();
    let mut s = state_with(objs);
    // 15 rows: header 2, footer 1 and the board's rule and column header 2 leave 10 rows
    // (smaller than the cockpit draws in, which does not change the arithmetic).
    update(
        &mut s,
        Action::Resize(Screen {
            width: 80,
            height: 15,
        }),
    );
    assert_eq!(s.page, 10);
    update(&mut s, Action::Nav(Nav::PageDown));
    assert_eq!((s.cursor, s.offset), (10, 1));
    update(&mut s, Action::Nav(Nav::Bottom));
    assert_eq!((s.cursor, s.offset), (49, 40));
    update(&mut s, Action::Nav(Nav::PageUp));
    assert_eq!((s.cursor, s.offset), (39, 39));
    update(&mut s, Action::Nav(Nav::Top));
    assert_eq!((s.cursor, s.offset), (0, 0));
}

#[test]
fn the_page_follows_what_is_on_screen_and_the_cursor_stays_on_it() {
    let objs: Vec<_> = (0..50)
        .map(|i| vmm(&format!("m{i:02}"), Phase::Pending))
        .collect();
    let mut s = state_with(objs);
    assert_eq!(s.page, 20, "no screen reported yet: the page is left alone");
    update(
        &mut s,
        Action::Resize(Screen {
            width: 80,
            height: 24,
        }),
    );
    // 24 rows: header 2, footer 1, the board's rule and column header 2.
    assert_eq!(s.page, 19);
    for _ in 0..18 {
        update(&mut s, Action::Nav(Nav::Down));
    }
    assert_eq!((s.cursor, s.offset), (18, 0));
    update(&mut s, Action::ToggleLogs);
    assert_eq!(s.page, 11, "the log pane takes 8 rows");
    assert_eq!(
        (s.cursor, s.offset),
        (18, 8),
        "the cursor stays on the last row shown"
    );
    update(
        &mut s,
        Action::WavesListed(C0, vec![ferry_crds::fixtures::wave("w1", 1)]),
    );
    assert_eq!(s.page, 10, "a wave line takes one");
    update(&mut s, Action::Enter);
    assert_eq!(s.page, 11, "a view has no column header");
    update(&mut s, Action::Back);
    update(&mut s, Action::ToggleLogs);
    update(
        &mut s,
        Action::Resize(Screen {
            width: 160,
            height: 48,
        }),
    );
    assert_eq!(s.page, 42);
    assert_eq!(s.cursor, 18);
}

#[test]
fn events_are_kept_per_object_newest_last_and_bounded() {
    let mut st = EventStore::default();
    for i in 0..(events::PER_OBJECT as i64 + 5) {
        st.upsert(EventRow {
            uid: format!("e{i}"),
            kind: EventKind::Migration,
            regarding: key("a"),
            time: Some(ts(100 - i).0),
            type_: "Normal".into(),
            reason: "R".into(),
            note: String::new(),
            count: 1,
        });
    }
    let times: Vec<_> = st
        .of(EventKind::Migration, &key("a"))
        .map(|e| e.time)
        .collect();
    assert_eq!(times.len(), events::PER_OBJECT);
    assert!(times.windows(2).all(|w| w[0] <= w[1]));
}

#[test]
fn row_message_prefers_the_last_failure_then_the_status_message() {
    let mut o = vmm("a", Phase::Failed);
    let st = o.status.as_mut().unwrap();
    st.message = Some("importing disk 1".into());
    st.last_failure = Some(ferry_crds::LastFailure {
        phase: Phase::Importing,
        reason: ferry_crds::Reason::ImportFailed,
        message: "dv\nfailed".into(),
        retriable: true,
        time: ts(1),
        cause: None,
    });
    assert_eq!(
        Row::from_object(C0, o.clone()).message,
        "ImportFailed: dv failed"
    );
    o.status.as_mut().unwrap().phase = Phase::Importing;
    assert_eq!(Row::from_object(C0, o).message, "importing disk 1");
}

#[test]
fn a_deletion_stuck_on_its_cleanup_says_so_before_the_failure() {
    let mut o = vmm("a", Phase::Failed);
    let st = o.status.as_mut().unwrap();
    st.last_failure = Some(ferry_crds::LastFailure {
        phase: Phase::Importing,
        reason: ferry_crds::Reason::ImportFailed,
        message: "dv failed".into(),
        retriable: true,
        time: ts(1),
        cause: None,
    });
    ferry_crds::condition::set_condition(
        &mut st.conditions,
        ferry_crds::ConditionType::Ready,
        ferry_crds::ConditionStatus::False,
        ferry_crds::Reason::CleanupBlocked,
        "deleting: staging cannot be cleaned (unreachable)",
        None,
        &ts(2),
    );
    assert_eq!(
        Row::from_object(C0, o.clone()).message,
        "ImportFailed: dv failed",
        "not deleting: the failure"
    );
    o.metadata.deletion_timestamp = Some(ts(3));
    assert_eq!(
        Row::from_object(C0, o).message,
        "CleanupBlocked: deleting: staging cannot be cleaned (unreachable)"
    );
}

#[test]
fn pips_tell_a_failure_from_a_migration_that_is_only_under_way() {
    use ferry_crds::{ConditionStatus::*, ConditionType::Ready, Reason};
    let cases = [
        (Phase::Importing, False, Reason::InProgress, Pip::Waiting),
        (Phase::Queued, False, Reason::HeldByWave, Pip::Waiting),
        (Phase::Converting, False, Reason::Paused, Pip::Waiting),
        (
            Phase::Converting,
            False,
            Reason::TransientError,
            Pip::Retrying,
        ),
        (
            Phase::Validating,
            False,
            Reason::GuestAgentTimeout,
            Pip::Failed,
        ),
        (Phase::Failed, False, Reason::Failed, Pip::Failed),
        (Phase::Cancelled, False, Reason::Cancelled, Pip::Failed),
        (Phase::Succeeded, True, Reason::Succeeded, Pip::Done),
        (Phase::Importing, Unknown, Reason::NotStarted, Pip::Waiting),
    ];
    for (phase, status, reason, want) in cases {
        let o = vmm("a", phase).with_condition(Ready, status, reason);
        let row = Row::from_object(C0, o);
        assert_eq!(row.pips[7], want, "{phase:?} {status:?} {reason:?}");
        assert_eq!(row.conditions[7], status, "the status itself is kept");
    }
}

#[test]
fn two_clusters_hold_the_same_names_apart_and_actions_go_to_the_right_one() {
    let mut s = State::with_clusters(
        vec![
            ClusterView::new("a", Scope::Namespace("default".into())),
            ClusterView::new("b", Scope::Namespace("default".into())),
        ],
        false,
        now(),
    );
    let b = ClusterId(1);
    update(
        &mut s,
        Action::migrations_listed(C0, vec![vmm("x", Phase::Importing)]),
    );
    update(
        &mut s,
        Action::migrations_listed(
            b,
            vec![vmm("x", Phase::Converting), vmm("y", Phase::Failed)],
        ),
    );
    assert_eq!(s.index.len(), 3);
    // A re-list of one cluster leaves the other's rows alone.
    update(
        &mut s,
        Action::migrations_listed(b, vec![vmm("x", Phase::Converting)]),
    );
    assert_eq!(
        visible_keys(&s),
        [
            ObjKey::at(C0, "default", "x"),
            ObjKey::at(b, "default", "x")
        ]
    );
    // Cancel on the second x patches it in cluster b.
    update(&mut s, Action::Nav(Nav::Down));
    update(&mut s, Action::Request(Verb::Cancel));
    let fx = update(&mut s, Action::Confirm);
    assert!(
        matches!(fx.as_slice(), [Effect::Patch { target, .. }] if target.key.cluster == b),
        "{fx:?}"
    );
    // Cluster b lost: only its board is stale.
    update(
        &mut s,
        Action::Connection(b, Resource::Migrations, ConnState::Live),
    );
    update(
        &mut s,
        Action::Connection(b, Resource::Migrations, ConnState::Forbidden("no".into())),
    );
    update(
        &mut s,
        Action::Connection(C0, Resource::Migrations, ConnState::Live),
    );
    assert!(s.is_stale());
    assert!(!s.clusters[0].conn.is_stale() && s.clusters[1].conn.is_stale());
    // An action from a cluster the board no longer has is dropped.
    update(
        &mut s,
        Action::migrations_listed(ClusterId(7), vec![vmm("z", Phase::Pending)]),
    );
    assert_eq!(s.index.len(), 2);
    // :ctx a,b asks for both contexts.
    assert_eq!(
        update(&mut s, Action::Command("ctx a, b".into())),
        vec![Effect::SwitchContexts(vec!["a".into(), "b".into()])]
    );
}

#[test]
fn w_opens_the_picker_and_enter_shows_one_wave_or_every_wave() {
    let mut s = state_with(vec![
        in_wave("a", "w1", Phase::Pending),
        in_wave("b", "w2", Phase::Pending),
    ]);
    update(
        &mut s,
        Action::WavesListed(
            C0,
            vec![
                ferry_crds::fixtures::wave("w1", 1),
                ferry_crds::fixtures::wave("w2", 1),
            ],
        ),
    );
    update(&mut s, Action::PickWave);
    assert_eq!(s.popup, Some(Popup::WavePicker { cursor: 0 }));
    update(&mut s, Action::Nav(Nav::Bottom));
    update(&mut s, Action::Enter);
    assert_eq!(s.popup, None);
    assert_eq!(visible_names(&s), ["b"]);
    update(&mut s, Action::PickWave);
    assert_eq!(
        s.popup,
        Some(Popup::WavePicker { cursor: 2 }),
        "opens on the wave shown"
    );
    update(&mut s, Action::Nav(Nav::Top));
    update(&mut s, Action::Enter);
    assert_eq!(visible_names(&s), ["a", "b"]);
}

/// `o` with preflight's `concerns` (code, severity) recorded, `accepted` accepted; held in
/// Pending as the controller writes it when a Critical one nobody accepted is among them.
fn preflighted(
    mut o: VirtualMachineMigration,
    concerns: &[(ferry_crds::ConcernCode, ferry_crds::Severity)],
    accepted: &[ferry_crds::ConcernCode],
) -> VirtualMachineMigration {
    let name = o.metadata.name.clone().unwrap_or_default();
    let st = o.status.get_or_insert_with(Default::default);
    st.message = Some(format!(
        "preflight holds {name} (nothing touched): …; see status.preflight"
    ));
    st.preflight = Some(ferry_crds::PreflightStatus {
        concerns: concerns
            .iter()
            .map(|(c, s)| ferry_crds::Concern::new(*c, *s, format!("{c} of {name}")))
            .collect(),
        accepted: accepted.to_vec(),
        ..Default::default()
    });
    o
}

#[test]
fn a_migration_preflight_holds_names_its_first_blocking_concern_and_no_other_row_does() {
    use ferry_crds::{ConcernCode::*, Severity::*};
    let held = preflighted(
        vmm("held", Phase::Pending),
        &[
            (SharedDisk, Critical),
            (SnapshotPresent, Critical),
            (RawDeviceMapping, Critical),
            (ToolsNotRunning, Warning),
        ],
        &[SharedDisk],
    );
    let r = Row::from_object(C0, held);
    assert_eq!(
        r.held_by,
        Some(SnapshotPresent),
        "the accepted one holds nothing"
    );
    assert_eq!(r.message, "SnapshotPresent (+1): SnapshotPresent of held");
    // Queued (a paused wave's child) or past Pending: not held, the message as it was.
    for phase in [Phase::Queued, Phase::Preparing] {
        let o = preflighted(vmm("q", phase), &[(SnapshotPresent, Critical)], &[]);
        let r = Row::from_object(C0, o);
        assert_eq!(r.held_by, None, "{phase:?}");
        assert!(r.message.starts_with("preflight holds q"), "{phase:?}");
    }
    let accepted = preflighted(
        vmm("ok", Phase::Pending),
        &[(SharedDisk, Critical)],
        &[SharedDisk],
    );
    assert_eq!(Row::from_object(C0, accepted).held_by, None);
}

#[test]
fn p_opens_the_concerns_of_the_rows_shown_enter_lists_a_group_and_esc_goes_back() {
    use ferry_crds::{ConcernCode::*, Severity::*};
    let mut s = state_with(vec![
        preflighted(
            vmm("a", Phase::Pending),
            &[(SnapshotPresent, Critical)],
            &[],
        ),
        preflighted(
            vmm("b", Phase::Queued),
            &[(ToolsNotRunning, Warning), (PoweredOn, Info)],
            &[],
        ),
        preflighted(vmm("c", Phase::Pending), &[(PoweredOn, Info)], &[]),
        vmm("d", Phase::Succeeded),
    ]);
    update(&mut s, Action::ShowPreflight);
    assert_eq!(s.view(), Some(&View::Preflight(None)));
    let key = |severity, code| GroupKey { severity, code };
    update(&mut s, Action::Nav(Nav::Down));
    assert_eq!(
        s.view(),
        Some(&View::Preflight(Some(key(Warning, ToolsNotRunning))))
    );
    update(&mut s, Action::Nav(Nav::Bottom));
    assert_eq!(s.view(), Some(&View::Preflight(Some(key(Info, PoweredOn)))));
    update(&mut s, Action::Nav(Nav::Down));
    assert_eq!(
        s.view(),
        Some(&View::Preflight(Some(key(Info, PoweredOn)))),
        "stays on the last group"
    );
    update(&mut s, Action::Enter);
    assert_eq!(s.view(), Some(&View::PreflightGroup(key(Info, PoweredOn))));
    // Verbs act on no migration here: the group is many, none selected.
    update(&mut s, Action::Request(Verb::Cancel));
    assert_eq!(s.popup, None);
    update(&mut s, Action::Back);
    assert_eq!(
        s.view(),
        Some(&View::Preflight(Some(key(Info, PoweredOn)))),
        "back on the group it opened"
    );
    update(&mut s, Action::Back);
    assert_eq!(s.view(), None);
}

#[test]
fn the_preflight_groups_follow_the_filter_of_the_board() {
    use ferry_crds::{ConcernCode::*, Severity::*};
    let mut s = state_with(vec![
        preflighted(
            vmm("web", Phase::Pending),
            &[(SnapshotPresent, Critical)],
            &[],
        ),
        preflighted(
            vmm("db", Phase::Pending),
            &[(ToolsNotRunning, Warning)],
            &[],
        ),
    ]);
    type_filter(&mut s, "db");
    update(&mut s, Action::ShowPreflight);
    let groups = preflight::groups(s.index.visible_range(0, s.index.visible_len()));
    assert_eq!(
        groups.iter().map(|g| g.key.code).collect::<Vec<_>>(),
        [ToolsNotRunning]
    );
    // Enter opens the one group there is, whichever was never chosen.
    update(&mut s, Action::Enter);
    assert_eq!(
        s.view(),
        Some(&View::PreflightGroup(GroupKey {
            severity: Warning,
            code: ToolsNotRunning
        }))
    );
}

#[test]
fn the_copy_key_takes_the_selected_rows_message_on_the_board_and_nothing_in_the_timeline() {
    let mut failed = vmm("a", Phase::Failed);
    failed.status.as_mut().unwrap().last_failure = Some(ferry_crds::LastFailure {
        phase: Phase::Converting,
        reason: ferry_crds::Reason::ConversionFailed,
        message: "qemu-img convert exited 1:\n  write failed: No space left on device".into(),
        retriable: true,
        time: ts(10),
        cause: None,
    });
    let mut s = state_with(vec![failed.clone()]);
    let fx = update(&mut s, Action::CopyMessage);
    assert_eq!(
        fx,
        [Effect::Copy(
            "ConversionFailed: qemu-img convert exited 1: write failed: No space left on device"
                .into()
        )],
        "the board's message, whole"
    );
    // In details, once read, the failure with its own line breaks.
    update(&mut s, Action::Enter);
    update(
        &mut s,
        Action::MigrationRead {
            key: key("a"),
            result: Ok(Box::new(failed)),
        },
    );
    let fx = update(&mut s, Action::CopyMessage);
    let [Effect::Copy(text)] = fx.as_slice() else {
        panic!("{fx:?}");
    };
    assert!(text.contains("exited 1:\n  write failed"), "{text}");
    update(&mut s, Action::Back);
    update(&mut s, Action::ShowTimeline);
    assert!(update(&mut s, Action::CopyMessage).is_empty());
    assert!(s.flash.as_ref().is_some_and(|f| f.error));
}

fn failed_with(name: &str, reason: ferry_crds::Reason, message: &str) -> VirtualMachineMigration {
    let mut o = vmm(name, Phase::Failed);
    o.status.as_mut().unwrap().last_failure = Some(ferry_crds::LastFailure {
        phase: Phase::Importing,
        reason,
        message: message.into(),
        retriable: true,
        time: ts(10),
        cause: None,
    });
    o
}

#[test]
fn enter_on_a_problem_group_marks_its_migrations_and_one_confirmation_retries_just_those() {
    use ferry_crds::Reason::{ImportFailed, SourcePoweredOn};
    let mut s = state_with(vec![
        failed_with(
            "a",
            ImportFailed,
            "DataVolume a-disk-0 failed: Unable to process",
        ),
        failed_with("b", SourcePoweredOn, "the source VM was powered on"),
        failed_with(
            "c",
            ImportFailed,
            "DataVolume c-disk-0 failed: Unable to process",
        ),
        vmm("d", Phase::Succeeded),
    ]);
    update(&mut s, Action::ShowProblems);
    assert_eq!(s.view(), Some(&View::Problems(None)));
    // The biggest group first: a and c.
    update(&mut s, Action::Enter);
    let mut marked: Vec<&str> = s.marks.iter().map(|k| k.name.as_str()).collect();
    marked.sort();
    assert_eq!(marked, ["a", "c"]);
    update(&mut s, Action::Request(Verb::Retry));
    let Some(Popup::Confirm(c)) = &s.popup else {
        panic!("one confirmation: {:?}", s.popup);
    };
    let names: Vec<&str> = c.targets.iter().map(|t| t.key.name.as_str()).collect();
    assert_eq!(names, ["a", "c"]);
    let fx = update(&mut s, Action::Confirm);
    let patched: Vec<&str> = fx
        .iter()
        .filter_map(|e| match e {
            Effect::Patch { target, .. } => Some(target.key.name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(patched, ["a", "c"]);
    assert!(
        s.marks.is_empty(),
        "the marks go with the request, as on the board"
    );
    // The report of the two requests closes; the view stays.
    update(&mut s, Action::Back);
    assert!(matches!(s.view(), Some(View::Problems(_))));
    // The next group; Enter twice marks and unmarks it.
    update(&mut s, Action::Nav(Nav::Down));
    update(&mut s, Action::Enter);
    assert_eq!(
        s.marks.iter().map(|k| k.name.as_str()).collect::<Vec<_>>(),
        ["b"]
    );
    update(&mut s, Action::Enter);
    assert!(s.marks.is_empty());
}

#[test]
fn the_watch_remembers_when_a_migrations_bytes_last_moved() {
    let mut o = vmm("a", Phase::Converting);
    let st = o.status.as_mut().unwrap();
    st.attempts = 1;
    st.history = vec![ferry_crds::PhaseTransition {
        phase: Phase::Converting,
        attempt: 1,
        entered_at: ts(100),
        left_at: None,
    }];
    st.progress = Some(ferry_crds::Progress {
        percent: 1.0,
        bytes_done: 10,
        bytes_total: 1000,
        rate_bytes_per_second: None,
        eta_seconds: None,
    });
    let mut s = state_with(vec![o.clone()]);
    assert_eq!(
        s.moved[&key("a")].at,
        ts(100).0,
        "first seen: the phase entry"
    );
    update(&mut s, Action::Tick(ts(5000).0));
    o.status
        .as_mut()
        .unwrap()
        .progress
        .as_mut()
        .unwrap()
        .bytes_done = 20;
    update(&mut s, Action::MigrationApplied(C0, Box::new(o.clone())));
    assert_eq!(s.moved[&key("a")].at, ts(5000).0);
    update(&mut s, Action::Tick(ts(6000).0));
    update(&mut s, Action::migrations_listed(C0, vec![o]));
    assert_eq!(
        s.moved[&key("a")].at,
        ts(5000).0,
        "a relist of the same bytes"
    );
    update(&mut s, Action::MigrationDeleted(key("a")));
    assert!(s.moved.is_empty());
}

// --- the pod logs view ---

fn job(name: &str, uid: &str) -> podlogs::JobRef {
    podlogs::JobRef {
        name: name.into(),
        uid: uid.into(),
    }
}

fn pod(name: &str, owner: &str, uid: Option<&str>, at: i64, phase: &str) -> podlogs::PodInfo {
    podlogs::PodInfo {
        name: name.into(),
        owner: owner.into(),
        job_uid: uid.map(str::to_owned),
        containers: vec!["convert".into()],
        phase: phase.into(),
        created: Some(ts(at).0),
    }
}

fn follows(fx: &[Effect]) -> Vec<(u64, &str, &str)> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::FollowLog {
                session,
                pod,
                container,
                ..
            } => Some((*session, pod.as_str(), container.as_str())),
            _ => None,
        })
        .collect()
}

/// The board with `web-1` selected and its pod logs view open on `pods` (the state filters).
fn pod_logs_of(jobs: Vec<podlogs::JobRef>, pods: Vec<podlogs::PodInfo>) -> (State, Vec<Effect>) {
    let mut s = state_with(vec![
        vmm("web-1", Phase::Failed),
        vmm("web-10", Phase::Failed),
    ]);
    let fx = update(&mut s, Action::ShowPodLogs);
    assert_eq!(fx, vec![Effect::FetchPods { key: key("web-1") }]);
    assert_eq!(s.view(), Some(&View::PodLogs(key("web-1"))));
    let fx = update(
        &mut s,
        Action::PodsFound {
            key: key("web-1"),
            result: Ok((jobs, pods)),
        },
    );
    (s, fx)
}

#[test]
fn the_pod_logs_view_lists_the_pods_of_the_migrations_own_jobs_by_uid_and_follows_the_newest() {
    let (s, fx) = pod_logs_of(
        vec![job("web-1-convert", "uid-a"), job("web-1-verify", "uid-v")],
        vec![
            pod(
                "web-1-convert-aaaaa-sim1",
                "web-1-convert",
                Some("uid-a"),
                10,
                "Failed",
            ),
            pod(
                "web-1-convert-aaaaa-sim2",
                "web-1-convert",
                Some("uid-a"),
                20,
                "Failed",
            ),
            // Another migration's Job of a similar name (web-10's), and an earlier Job of the
            // very same name whose pod waits for the garbage collector: other uids.
            pod(
                "web-10-convert-bbbbb-sim1",
                "web-10-convert",
                Some("uid-b"),
                30,
                "Running",
            ),
            pod(
                "web-1-convert-old00-sim1",
                "web-1-convert",
                Some("uid-old"),
                40,
                "Failed",
            ),
            pod("importer-web-1-disk-0", "web-1-disk-0", None, 5, "Running"),
        ],
    );
    let logs = s.podlogs.as_ref().unwrap();
    let names: Vec<&str> = logs
        .pods
        .as_ref()
        .unwrap()
        .as_ref()
        .unwrap()
        .iter()
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(
        names,
        [
            "web-1-convert-aaaaa-sim1",
            "web-1-convert-aaaaa-sim2",
            "importer-web-1-disk-0"
        ]
    );
    // The newest of the Job's pods: the last attempt, where the failure shows.
    assert_eq!(logs.pod().unwrap().name, "web-1-convert-aaaaa-sim2");
    assert_eq!(
        follows(&fx),
        [(logs.session, "web-1-convert-aaaaa-sim2", "convert")]
    );
    assert_eq!(logs.stream, podlogs::Stream::Opening);
}

#[test]
fn a_migration_without_pods_says_so_and_follows_nothing() {
    let (s, fx) = pod_logs_of(vec![], vec![]);
    assert!(follows(&fx).is_empty());
    assert_eq!(s.podlogs.as_ref().unwrap().pod(), None);
}

#[test]
fn log_lines_are_bounded_cleaned_and_those_of_an_earlier_stream_dropped() {
    let (mut s, _) = pod_logs_of(
        vec![job("web-1-convert", "uid-a")],
        vec![
            pod("p1", "web-1-convert", Some("uid-a"), 10, "Failed"),
            pod("p2", "web-1-convert", Some("uid-a"), 20, "Running"),
        ],
    );
    let first = s.podlogs.as_ref().unwrap().session;
    let lines = (0..6_000).map(|i| format!("line {i}")).collect();
    update(
        &mut s,
        Action::LogLines {
            session: first,
            lines,
        },
    );
    let logs = s.podlogs.as_ref().unwrap();
    assert_eq!(logs.stream, podlogs::Stream::Following);
    assert_eq!(logs.lines.len(), podlogs::KEEP_LINES);
    assert_eq!(logs.dropped, 1_000);
    assert_eq!(logs.lines.front().unwrap(), "line 1000");
    assert_eq!(logs.lines.back().unwrap(), "line 5999");

    // Another pod: a new stream; a late line of the first is not mixed in.
    let fx = update(&mut s, Action::NextPod);
    let second = s.podlogs.as_ref().unwrap().session;
    assert_ne!(first, second);
    assert_eq!(follows(&fx), [(second, "p1", "convert")]);
    update(
        &mut s,
        Action::LogLines {
            session: first,
            lines: vec!["late".into()],
        },
    );
    // A terminal escape, a bell and a progress bar's carriage return never reach a cell.
    update(
        &mut s,
        Action::LogLines {
            session: second,
            lines: vec!["\u{1b}[31mred\u{7}\r".into(), "a\tb".into()],
        },
    );
    let logs = s.podlogs.as_ref().unwrap();
    assert_eq!(
        logs.lines.iter().collect::<Vec<_>>(),
        ["\u{FFFD}[31mred\u{FFFD}", "a    b"]
    );
    assert_eq!(logs.dropped, 0);
}

#[test]
fn a_log_that_cannot_be_read_says_why_and_f_lists_and_follows_again() {
    let (mut s, _) = pod_logs_of(
        vec![job("web-1-convert", "uid-a")],
        vec![pod("p1", "web-1-convert", Some("uid-a"), 10, "Pending")],
    );
    let session = s.podlogs.as_ref().unwrap().session;
    let why = "container \"convert\" in pod \"p1\" is waiting to start: ContainerCreating";
    update(
        &mut s,
        Action::LogEnded {
            session,
            result: Err(why.into()),
        },
    );
    assert_eq!(
        s.podlogs.as_ref().unwrap().stream,
        podlogs::Stream::Failed(why.into())
    );
    let fx = update(&mut s, Action::FollowAgain);
    assert_eq!(fx, vec![Effect::FetchPods { key: key("web-1") }]);
    let fx = update(
        &mut s,
        Action::PodsFound {
            key: key("web-1"),
            result: Ok((
                vec![job("web-1-convert", "uid-a")],
                vec![pod("p1", "web-1-convert", Some("uid-a"), 10, "Running")],
            )),
        },
    );
    let again = s.podlogs.as_ref().unwrap().session;
    assert_ne!(again, session);
    assert_eq!(follows(&fx), [(again, "p1", "convert")]);
    // A stream that simply ends (the container stopped) is told apart from a failure.
    update(
        &mut s,
        Action::LogEnded {
            session: again,
            result: Ok(()),
        },
    );
    assert_eq!(s.podlogs.as_ref().unwrap().stream, podlogs::Stream::Ended);
}

#[test]
fn esc_leaves_the_pod_logs_view_and_stops_its_stream() {
    let (mut s, _) = pod_logs_of(
        vec![job("web-1-convert", "uid-a")],
        vec![pod("p1", "web-1-convert", Some("uid-a"), 10, "Failed")],
    );
    // A popup over it closes first; the stream goes on.
    update(&mut s, Action::ToggleHelp);
    assert!(update(&mut s, Action::Back).is_empty());
    assert!(s.podlogs.is_some());
    let fx = update(&mut s, Action::Back);
    assert_eq!(fx, vec![Effect::StopLog]);
    assert_eq!(s.view(), None);
    assert!(s.podlogs.is_none());
    // An answer of the closed view's list is dropped.
    let fx = update(
        &mut s,
        Action::PodsFound {
            key: key("web-1"),
            result: Ok((vec![], vec![])),
        },
    );
    assert!(fx.is_empty() && s.podlogs.is_none());
}

#[test]
fn scrolling_up_leaves_the_tail_and_the_end_key_sticks_to_it_again() {
    let (mut s, _) = pod_logs_of(
        vec![job("web-1-convert", "uid-a")],
        vec![pod("p1", "web-1-convert", Some("uid-a"), 10, "Running")],
    );
    update(
        &mut s,
        Action::Resize(layout::Screen {
            width: 80,
            height: 24,
        }),
    );
    let session = s.podlogs.as_ref().unwrap().session;
    let lines = (0..100).map(|i| format!("line {i}")).collect();
    update(&mut s, Action::LogLines { session, lines });
    let last = 100 - s.page;
    update(&mut s, Action::Nav(Nav::Up));
    assert!(!s.podlogs.as_ref().unwrap().tail);
    assert_eq!(s.scroll, last - 1);
    update(&mut s, Action::Nav(Nav::Top));
    assert_eq!(s.scroll, 0);
    update(&mut s, Action::Nav(Nav::Bottom));
    assert!(s.podlogs.as_ref().unwrap().tail);
}

#[test]
fn the_first_rows_of_a_list_under_way_are_shown_and_the_finished_list_replaces_them() {
    let mut s = State::new("lab", Scope::Namespace("default".into()), false, now());
    update(
        &mut s,
        Action::Connection(C0, Resource::Migrations, ConnState::Listing),
    );
    let rows = |names: &[&str]| -> Vec<Row> {
        names
            .iter()
            .map(|n| Row::from_object(C0, vmm(n, Phase::Importing)))
            .collect()
    };
    update(&mut s, Action::MigrationsArriving(C0, rows(&["a", "b"])));
    assert_eq!(
        visible_names(&s),
        ["a", "b"],
        "on the board before the list ends"
    );
    // The list ends: b went meanwhile, c came.
    update(&mut s, Action::MigrationsListed(C0, rows(&["a", "c"])));
    assert_eq!(visible_names(&s), ["a", "c"]);
    // Rows of a cluster the board does not have are dropped.
    update(
        &mut s,
        Action::MigrationsArriving(ClusterId(1), rows(&["z"])),
    );
    assert_eq!(visible_names(&s), ["a", "c"]);
}

// --- permissions known up front (issue #49) ---

/// The API server's answer for `namespace`: `allowed` for every check but those in `refused`.
fn answer(s: &mut State, namespace: &str, refused: &[Check]) {
    let answers = Check::ALL
        .into_iter()
        .map(|c| (c, Ok(!refused.contains(&c))))
        .collect();
    update(
        s,
        Action::AccessReviewed {
            cluster: C0,
            namespace: namespace.into(),
            generation: 0,
            answers,
        },
    );
}

/// What only `ferry-view` grants: no patch, no delete; the logs.
const VIEW_ONLY: &[Check] = &[
    Check::PatchMigrations,
    Check::PatchWaves,
    Check::DeleteMigrations,
    Check::DeleteWaves,
];

#[test]
fn a_verb_the_api_refuses_opens_no_confirm_and_says_which_role_grants_it() {
    let mut s = state_with(vec![vmm("web-1", Phase::Failed)]);
    answer(&mut s, "default", VIEW_ONLY);
    let cases = [
        (
            Action::Request(Verb::Retry),
            "retry needs patch on virtualmachinemigrations in default: grant ferry-operate",
        ),
        (
            Action::Request(Verb::Cancel),
            "cancel needs patch on virtualmachinemigrations in default: grant ferry-operate",
        ),
        (
            Action::TogglePause,
            "pause needs patch on virtualmachinemigrations in default: grant ferry-operate",
        ),
        (
            Action::Request(Verb::Delete),
            "delete needs delete on virtualmachinemigrations in default: grant ferry-operate",
        ),
        (
            Action::Request(Verb::Cutover),
            "cutover needs patch on virtualmachinemigrations in default: grant ferry-operate",
        ),
    ];
    for (action, want) in cases {
        assert!(refusal(&s, &action).is_some(), "{action:?} is greyed");
        let fx = update(&mut s, action.clone());
        assert!(fx.is_empty(), "{action:?}: {fx:?}");
        assert_eq!(s.popup, None, "{action:?} asks for no confirmation");
        let flash = s.flash.take().expect("a message");
        assert!(flash.error);
        assert_eq!(flash.text, want);
    }
    // The logs are ferry-view's: allowed here, refused elsewhere with that role named.
    assert_eq!(refusal(&s, &Action::ShowPodLogs), None);
    answer(&mut s, "default", &[Check::GetPodLogs]);
    let fx = update(&mut s, Action::ShowPodLogs);
    assert!(fx.is_empty());
    assert!(s.views.is_empty(), "the view does not open");
    assert_eq!(
        s.flash.as_ref().map(|f| f.text.as_str()),
        Some("pod logs needs get on pods/log in default: grant ferry-view")
    );
}

#[test]
fn a_verb_allowed_or_not_known_asks_to_confirm_as_before() {
    // Not answered yet.
    let mut s = state_with(vec![vmm("web-1", Phase::Failed)]);
    assert_eq!(refusal(&s, &Action::Request(Verb::Retry)), None);
    update(&mut s, Action::Request(Verb::Retry));
    assert!(matches!(s.popup, Some(Popup::Confirm(ref c)) if c.verb == Verb::Retry));
    // Allowed.
    let mut s = state_with(vec![vmm("web-1", Phase::Failed)]);
    answer(&mut s, "default", &[]);
    update(&mut s, Action::Request(Verb::Retry));
    assert!(matches!(s.popup, Some(Popup::Confirm(ref c)) if c.verb == Verb::Retry));
    let fx = update(&mut s, Action::Confirm);
    assert!(matches!(fx.as_slice(), [Effect::Patch { .. }]), "{fx:?}");
    // The review failed: unknown, the API server decides.
    let mut s = state_with(vec![vmm("web-1", Phase::Failed)]);
    answer(&mut s, "default", VIEW_ONLY);
    update(
        &mut s,
        Action::AccessReviewed {
            cluster: C0,
            namespace: "default".into(),
            generation: 0,
            answers: vec![(Check::PatchMigrations, Err("connection reset".into()))],
        },
    );
    assert_eq!(refusal(&s, &Action::Request(Verb::Retry)), None);
    update(&mut s, Action::Request(Verb::Retry));
    assert!(matches!(s.popup, Some(Popup::Confirm(_))));
    // Delete is still known refused.
    assert!(refusal(&s, &Action::Request(Verb::Delete)).is_some());
}

#[test]
fn a_refusal_wraps_whole_at_80_columns_and_the_board_gives_it_the_lines() {
    let ns = "migrations-of-the-finance-department-eu-west";
    let mut o = vmm("web-1", Phase::Failed);
    o.metadata.namespace = Some(ns.into());
    let mut s = State::new("lab", Scope::All, false, now());
    update(&mut s, Action::migrations_listed(C0, vec![o]));
    update(
        &mut s,
        Action::Resize(layout::Screen {
            width: 80,
            height: 24,
        }),
    );
    let page_before = s.page;
    answer(&mut s, ns, VIEW_ONLY);
    update(&mut s, Action::Request(Verb::Retry));
    let text = s.flash.as_ref().unwrap().text.clone();
    assert_eq!(
        text,
        format!("retry needs patch on virtualmachinemigrations in {ns}: grant ferry-operate")
    );
    assert!(
        text.chars().count() > 78,
        "the case needs a message longer than a line"
    );
    let lines = layout::footer_lines(&s, 80);
    assert!(lines.len() >= 2, "{lines:?}");
    // The footer keeps a column of margin on each side.
    assert!(lines.iter().all(|l| l.chars().count() <= 78), "{lines:?}");
    assert_eq!(lines.join(" "), text, "every word, in order, none cut");
    let screen = s.screen.unwrap();
    let bands = layout::Bands::of(screen, &s);
    assert_eq!(usize::from(bands.footer), lines.len());
    assert_eq!(
        bands.header + bands.strip + bands.body + bands.logs + bands.footer,
        24
    );
    assert_eq!(
        s.page,
        page_before - (lines.len() - 1),
        "the board gives up the lines"
    );
}

#[test]
fn marked_rows_in_a_refused_namespace_are_skipped_and_the_others_confirmed() {
    let mut a = vmm("a", Phase::Importing);
    a.metadata.namespace = Some("apps".into());
    let mut b = vmm("b", Phase::Importing);
    b.metadata.namespace = Some("finance".into());
    let mut s = State::new("lab", Scope::All, false, now());
    update(&mut s, Action::migrations_listed(C0, vec![a, b]));
    answer(&mut s, "finance", VIEW_ONLY);
    answer(&mut s, "apps", &[]);
    update(&mut s, Action::MarkAllVisible);
    // Not every marked row is refused: the key is not greyed.
    assert_eq!(refusal(&s, &Action::Request(Verb::Cancel)), None);
    update(&mut s, Action::Request(Verb::Cancel));
    let Some(Popup::Confirm(c)) = &s.popup else {
        panic!("a confirmation: {:?}", s.popup);
    };
    assert_eq!(c.targets.len(), 1);
    assert_eq!(c.targets[0].key.namespace, "apps");
    assert_eq!(c.skipped.len(), 1);
    assert_eq!(c.skipped[0].0.key.namespace, "finance");
    assert_eq!(c.skipped[0].1, crate::strings::skip::REFUSED);
    // Every marked row refused: greyed, named by the first.
    update(&mut s, Action::Back);
    answer(&mut s, "apps", VIEW_ONLY);
    let r = refusal(&s, &Action::Request(Verb::Cancel)).unwrap();
    assert_eq!(r.namespace, "apps");
    assert_eq!(r.check.role(), "ferry-operate");
}

#[test]
fn each_namespace_is_reviewed_when_it_first_appears_and_again_after_a_relist() {
    let reviews = |fx: &[Effect]| -> Vec<String> {
        let mut v: Vec<String> = fx
            .iter()
            .filter_map(|e| match e {
                Effect::ReviewAccess { namespace, .. } => Some(namespace.clone()),
                _ => None,
            })
            .collect();
        v.sort();
        v
    };
    let in_ns = |name: &str, ns: &str| {
        let mut o = vmm(name, Phase::Pending);
        o.metadata.namespace = Some(ns.into());
        o
    };
    let mut s = State::new("lab", Scope::All, false, now());
    let fx = update(
        &mut s,
        Action::migrations_listed(
            C0,
            vec![in_ns("a", "apps"), in_ns("b", "apps"), in_ns("c", "db")],
        ),
    );
    assert_eq!(reviews(&fx), ["apps", "db"]);
    let fx = update(
        &mut s,
        Action::MigrationApplied(C0, Box::new(in_ns("d", "apps"))),
    );
    assert_eq!(reviews(&fx), Vec::<String>::new(), "asked once");
    let fx = update(
        &mut s,
        Action::MigrationApplied(C0, Box::new(in_ns("e", "web"))),
    );
    assert_eq!(reviews(&fx), ["web"], "a new namespace");
    // A reconnect re-lists: every namespace again.
    let fx = update(
        &mut s,
        Action::migrations_listed(C0, vec![in_ns("a", "apps"), in_ns("e", "web")]),
    );
    assert_eq!(reviews(&fx), ["apps", "web"]);
    // A wave's namespace too.
    let mut w = ferry_crds::fixtures::wave("w1", 1);
    w.metadata.namespace = Some("waves".into());
    let fx = update(&mut s, Action::WaveApplied(C0, Box::new(w)));
    assert_eq!(reviews(&fx), ["waves"]);
    // After `:ns`, an answer to a question asked before is dropped.
    update(&mut s, Action::Command("ns apps".into()));
    answer(&mut s, "apps", VIEW_ONLY);
    assert_eq!(s.access.allowed(C0, "apps", Check::PatchMigrations), None);
}

#[test]
fn a_403_after_a_confirm_names_the_role_and_greys_the_verb_from_then_on() {
    let mut s = state_with(vec![vmm("charlie", Phase::Importing)]);
    update(&mut s, Action::Request(Verb::Cancel));
    let fx = update(&mut s, Action::Confirm);
    let [Effect::Patch { id, target, .. }] = fx.as_slice() else {
        panic!("{fx:?}");
    };
    let message = "virtualmachinemigrations.migration.platform.example \"charlie\" is forbidden: User \"viewer\" cannot patch resource \"virtualmachinemigrations\" in API group \"migration.platform.example\" in the namespace \"default\"";
    update(
        &mut s,
        Action::Outcome {
            id: *id,
            target: target.clone(),
            outcome: Outcome::Forbidden(message.into()),
        },
    );
    assert_eq!(s.popup, Some(Popup::Report));
    assert_eq!(
        s.flash.as_ref().map(|f| f.text.as_str()),
        Some(
            "cancel charlie: forbidden, needs patch on virtualmachinemigrations in default: grant ferry-operate"
        )
    );
    assert!(refusal(&s, &Action::Request(Verb::Cancel)).is_some());
    update(&mut s, Action::Back);
    update(&mut s, Action::Request(Verb::Cancel));
    assert_eq!(s.popup, None, "no second confirmation of what was refused");
    // An admission policy's 403 is about the request, not the role: nothing is greyed.
    let mut s = state_with(vec![vmm("delta", Phase::Importing)]);
    update(&mut s, Action::Request(Verb::Pause));
    let fx = update(&mut s, Action::Confirm);
    let [Effect::Patch { id, target, .. }] = fx.as_slice() else {
        panic!("{fx:?}");
    };
    let policy = "virtualmachinemigrations.migration.platform.example \"delta\" is forbidden: ValidatingAdmissionPolicy 'ferry-authoring' with binding 'ferry-authoring' denied request";
    update(
        &mut s,
        Action::Outcome {
            id: *id,
            target: target.clone(),
            outcome: Outcome::Forbidden(policy.into()),
        },
    );
    assert_eq!(refusal(&s, &Action::Request(Verb::Pause)), None);
    assert!(!s.flash.as_ref().unwrap().text.contains("ferry-operate"));
}
